#!/usr/bin/env python3
"""Writes vectors.json: envelopes encoded by an implementation of the wire
format written from DocC.docc/WireFormat.md alone, independent of the Swift
code. EnvelopeGoldenTests checks that Swift encodes these inputs to exactly
these bytes and decodes these bytes to exactly these fields.

Also writes log-vectors.json: log segments of format 2, framed the same way
from WireFormat.md; LogFormatGoldenTests checks that the Swift writer frames
these envelopes to exactly these bytes and its reader reads them back."""
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


# Log segments, format 2: 32 KiB blocks of fragments with 24-byte headers.
BLOCK = 32 * 1024
HEADER = 24
FULL, FIRST, MIDDLE, LAST, START, ROLLOVER = 1, 2, 3, 4, 5, 6


def fragment(kind, index, data):
    rest = struct.pack("<BBHIIQ", 2, kind, 0, len(data), crc32c(data), index)
    return struct.pack("<I", crc32c(rest)) + rest + data


def pad(segment, needed):
    left = BLOCK - len(segment) % BLOCK
    return segment + bytes(left) if left < needed else segment


def record(segment, index, wire):
    segment = pad(segment, HEADER + 1)
    first = True
    while wire:
        room = BLOCK - len(segment) % BLOCK - HEADER
        piece, wire = wire[:room], wire[room:]
        kind = (FULL if not wire else FIRST) if first else (LAST if not wire else MIDDLE)
        segment += fragment(kind, index, piece)
        first = False
    return segment


def rollover(segment, index, next_segment):
    return pad(segment, HEADER + 8) + fragment(ROLLOVER, index, struct.pack("<Q", next_segment))


smallest = envelope("a", "b", 1, 0, 1, 1, 0, 0, b"")
large = envelope("a", "b", 1, 0, 1, 2, 0, 0, bytes(i % 251 for i in range(40_000)))
def start(index, log):
    return fragment(START, index, struct.pack("<Q", log))


small_log, large_log = 0x0123456789ABCDEF, 0xFEDCBA9876543210
small_segment = rollover(record(start(7, small_log), 7, smallest), 8, 2)
large_segment = record(record(start(0, large_log), 0, smallest), 1, large)
log_vectors = [
    dict(label="start mark, the smallest envelope, rollover mark", firstIndex=7, log=small_log, next=2,
         envelopesHex=[smallest.hex()], segmentHex=small_segment.hex(),
         length=len(small_segment), crc32c=crc32c(small_segment)),
    dict(label="an envelope of 40,062 bytes in first and last pieces across a block boundary", firstIndex=0, log=large_log,
         envelopesHex=[smallest.hex(), large.hex()],
         headHex=large_segment[:120].hex(), boundaryHex=large_segment[BLOCK - 8:BLOCK + 40].hex(),
         length=len(large_segment), crc32c=crc32c(large_segment)),
]
with open("log-vectors.json", "w") as f:
    json.dump(log_vectors, f, indent=2)
    f.write("\n")


# Formats.md: what surrounds the envelope on each transport.
def resp(*arguments):
    out = b"*%d\r\n" % len(arguments)
    for argument in arguments:
        data = argument if isinstance(argument, bytes) else str(argument).encode()
        out += b"$%d\r\n%s\r\n" % (len(data), data)
    return out


endpoint_id, poster_id = "00c0ffee12345678", "0123456789abcdef"
ready = envelope("com.example.ready", "widget", 4242, 1000, 0x0123456789ABCDEF, 5, 1_763_800_000_000_000_000,
                 123_456_789, b'"hello"')
marker = envelope("com.example.ready", "widget", 4242, 1000, 0x0123456789ABCDEF, 9, 1_763_800_000_500_000_000,
                  623_456_789, b"")
dropped = 3
drop_head = b"D" + struct.pack("<Q", dropped)
spool_file = b"TNSPOOL1" + b"E" + ready + drop_head + struct.pack("<I", crc32c(drop_head)) + marker
cursor = dict(committedSegment=3, committedOffset=4096, deliveredSegment=3, deliveredOffset=8192,
              nextIndex=17, log=0x0123456789ABCDEF)
formats = dict(
    registration=dict(id=endpoint_id, pid=4242, uid=1000, endpoint="widget", text="4242 1000 widget\n",
                      socket="sockets/%s.sock" % endpoint_id,
                      file="spool/%s/.registration" % endpoint_id,
                      nameEntry="names/com.example.ready/%s" % endpoint_id,
                      namespaceEntry="namespaces/com.example/%s" % endpoint_id),
    spool=dict(poster=poster_id, generation=26, fileName="%s-%08x.spool" % (poster_id, 26),
               envelopeHex=ready.hex(), dropped=dropped, markerHex=marker.hex(), fileHex=spool_file.hex()),
    cursor=dict(cursor, text="%d %d %d %d %d %d\n" % tuple(cursor[k] for k in (
        "committedSegment", "committedOffset", "deliveredSegment", "deliveredOffset", "nextIndex", "log")),
        namespaceMarker="1 0 1 0 0\n"),
    lock=dict(newestSegment=7, hex=struct.pack("<Q", 7).hex()),
    redis=dict(prefix="tn", name="com.example.ready", maximumLength=100000, envelopeHex=ready.hex(),
               key="tn:{com.example.ready}",
               postHex=resp("XADD", "tn:{com.example.ready}", "MAXLEN", "~", 100000, "*", "e", ready).hex(),
               announcements=[dict(namespace=ns, names="tn:names:{%s}" % ns, stream="tn:new:{%s}" % ns,
                                   commands=[["SISMEMBER", "tn:names:{%s}" % ns, "com.example.ready"],
                                             ["XADD", "tn:new:{%s}" % ns, "*", "n", "com.example.ready"],
                                             ["SADD", "tn:names:{%s}" % ns, "com.example.ready"]])
                              for ns in ("com", "com.example")]),
)
with open("formats-vectors.json", "w") as f:
    json.dump(formats, f, indent=2)
    f.write("\n")
