#!/usr/bin/env python3
"""Writes vectors.json: envelopes encoded by an implementation of the wire
format written from DocC.docc/WireFormat.md alone, independent of the Swift
code. EnvelopeGoldenTests checks that Swift encodes these inputs to exactly
these bytes and decodes these bytes to exactly these fields."""
import json
import struct


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def envelope(name, endpoint, pid, uid, instance, sequence, wall, monotonic, payload):
    n, e = name.encode(), endpoint.encode()
    total = 32 + len(n) + len(e) + len(payload) + 28
    header = b"TNOT" + struct.pack("<BBBBIiIQI", 1, len(n), len(e), 0, len(payload), pid, uid, instance, total)
    body = header + n + e + payload + struct.pack("<QqQ", sequence, wall, monotonic)
    return body + struct.pack("<I", crc32c(body))


vectors = [
    dict(label="smallest", name="a", endpoint="b", pid=1, uid=0, instance=1,
         sequence=1, wall=0, monotonic=0, payload=b""),
    dict(label="typical JSON payload", name="com.example.broadcast.started", endpoint="app",
         pid=4242, uid=501, instance=0x0123456789ABCDEF, sequence=7,
         wall=1_763_800_000_123_456_789, monotonic=98_765_432_100,
         payload=b'{"sessionID":"9A1B2C3D-0000-4000-8000-000000000001"}'),
    dict(label="negative pid and wall clock, every byte value", name="x_y-z.0", endpoint="widget.ext-1",
         pid=-2, uid=4294967295, instance=18446744073709551615, sequence=18446744073709551615,
         wall=-1, monotonic=18446744073709551615, payload=bytes(range(256))),
]
out = []
for v in vectors:
    wire = envelope(v["name"], v["endpoint"], v["pid"], v["uid"], v["instance"], v["sequence"],
                    v["wall"], v["monotonic"], v["payload"])
    out.append({**{k: v[k] for k in v if k != "payload"},
                "instance": str(v["instance"]), "sequence": str(v["sequence"]),
                "monotonic": str(v["monotonic"]), "wall": str(v["wall"]),
                "payloadHex": v["payload"].hex(), "envelopeHex": wire.hex()})
with open("vectors.json", "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
