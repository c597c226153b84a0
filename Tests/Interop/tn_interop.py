#!/usr/bin/env python3
"""A second implementation of TypedNotifications' formats, in Python's
standard library alone, written from DocC.docc/Formats.md and
DocC.docc/WireFormat.md (never from the Swift sources).

    tn_interop.py post NAME TEXT... --transport socket|file|redis --dir DIR | --url URL
    tn_interop.py watch NAME --count N --transport socket|file|redis --dir DIR | --url URL
    tn_interop.py announce NAME --url URL      (Redis: announce NAME to its namespaces)

`post` posts each TEXT (UTF-8) as one notification; `watch` prints one JSON
line per notification ({"name", "text", "sequence", "pid", "uid",
"endpoint"}) until it has N, after a line "ready" once it is registered or
reading. run_interop.py runs it against `tnotify` in every direction.

Every constant this program uses is in SPEC below, spelled as the articles
spell it; check_spec.py fails CI when one of them is not in the articles, or
when a number or bytes literal appears outside SPEC.
"""

import argparse
import errno
import fcntl
import json
import os
import select
import socket
import stat
import struct
import sys
import time

SPEC = {
    # WireFormat.md: the envelope.
    "magic": b"TNOT",
    "version": 1,
    "header": 32,
    "trailer": 28,
    "overhead": 60,
    "crc_poly": 0x82F63B78,
    "crc_init": 0xFFFFFFFF,
    "max_name": 200,
    "max_endpoint": 64,
    "max_payload": 16_777_216,
    # WireFormat.md: log segments, format 2.
    "block": 32_768,
    "fragment_header": 24,
    "log_version": 2,
    "full": 1, "first": 2, "middle": 3, "last": 4, "start": 5, "rollover": 6,
    "record_room": 25,
    "mark_room": 32,
    "segment_digits": 20,
    "segment_suffix": ".log",
    "segment_limit": 67_108_864,
    "lock": "lock",
    "logs": "logs",
    "segment_temporary": ".new.",
    # Formats.md: directories and the socket registry.
    "runtime_variable": "XDG_RUNTIME_DIR",
    "fallback_parent": "/tmp",
    "socket_default": "typed-notifications",
    "file_default": "typed-notifications-files",
    "sockets": "sockets",
    "socket_suffix": ".sock",
    "spool": "spool",
    "names": "names",
    "namespaces": "namespaces",
    "registration": ".registration",
    "generation": ".generation",
    "generation_size": 4_096,
    "id_digits": 16,
    "folder_mode": 0o700,
    "file_mode": 0o600,
    "full_wait": 0.001,
    "queue_length": "net.unix.max_dgram_qlen",
    "namespace_suffix": ".*",
    # Formats.md: the spool.
    "spool_magic": b"TNSPOOL1",
    "spool_suffix": ".spool",
    "spool_envelope": b"E",
    "spool_drop": b"D",
    "spool_digits": 8,
    # Formats.md: Redis.
    "prefix": "tn",
    "stream_key": "tn:{NAME}",
    "names_key": "tn:names:{NS}",
    "new_key": "tn:new:{NS}",
    "field": b"e",
    "announce_field": b"n",
    "maximum_length": "100000",
    "first_id": b"0-0",
}

U64 = "<Q"
U32 = "<I"


def crc32c(data: bytes, crc: int = 0) -> int:
    crc ^= SPEC["crc_init"]
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ SPEC["crc_poly"] if crc & 1 else crc >> 1
    return crc ^ SPEC["crc_init"]


class Malformed(Exception):
    """Bytes that are not what the articles say."""


# -- The envelope (WireFormat.md) ---------------------------------------------

def valid_name(text: str, limit: int) -> bool:
    allowed = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
    return 0 < len(text) <= limit and set(text) <= allowed and not text.startswith(".") and ".." not in text


def encode(name: str, endpoint: str, instance: int, sequence: int, payload: bytes) -> bytes:
    n, e = name.encode(), endpoint.encode()
    total = SPEC["overhead"] + len(n) + len(e) + len(payload)
    header = SPEC["magic"] + struct.pack("<BBBBIiIQI", SPEC["version"], len(n), len(e), 0, len(payload),
                                         os.getpid(), os.getuid(), instance, total)
    body = header + n + e + payload + struct.pack("<QqQ", sequence, time.time_ns(), time.monotonic_ns())
    return body + struct.pack(U32, crc32c(body))


def decode(data: bytes) -> dict:
    """One whole envelope, checked in the article's order."""
    if data[:len(SPEC["magic"])] != SPEC["magic"][:len(data)] or (len(data) > 4 and data[4] != SPEC["version"]):
        raise Malformed("bad magic or version")
    if len(data) < SPEC["header"]:
        raise Malformed("truncated")
    _, _, n, e, reserved, p, pid, uid, instance, total = struct.unpack_from("<4sBBBBIiIQI", data)
    if not (n and n <= SPEC["max_name"] and e and e <= SPEC["max_endpoint"]):
        raise Malformed("length out of bounds")
    if reserved or p > SPEC["max_payload"] or total != SPEC["overhead"] + n + e + p or len(data) != total:
        raise Malformed("bad lengths")
    if crc32c(data[:-4]) != struct.unpack_from(U32, data, total - 4)[0]:
        raise Malformed("checksum mismatch")
    name = data[SPEC["header"]:SPEC["header"] + n].decode("ascii", "replace")
    endpoint = data[SPEC["header"] + n:SPEC["header"] + n + e].decode("ascii", "replace")
    if not valid_name(name, SPEC["max_name"]) or not valid_name(endpoint, SPEC["max_endpoint"]):
        raise Malformed("invalid name")
    sequence = struct.unpack_from(U64, data, total - SPEC["trailer"])[0]
    if sequence < 1:
        raise Malformed("sequence 0")
    payload = data[SPEC["header"] + n + e:total - SPEC["trailer"]]
    return dict(name=name, text=payload.decode("utf-8", "replace"), sequence=sequence, pid=pid, uid=uid,
                endpoint=endpoint)


def namespaces_of(name: str) -> list:
    """Every namespace that contains `name`: each prefix ending before a `.`, and the name."""
    parts = name.split(".")
    return [".".join(parts[:count]) for count in range(1, len(parts) + 1)]


def random_id() -> str:
    while True:
        value = int.from_bytes(os.urandom(8), "little")
        if value:
            return format(value, "0%dx" % SPEC["id_digits"])


def default_directory(kind: str) -> str:
    runtime = os.environ.get(SPEC["runtime_variable"], "")
    if os.path.isabs(runtime):
        return os.path.join(runtime, kind)
    return os.path.join(SPEC["fallback_parent"], "%s-%d" % (kind, os.getuid()))


def make_folder(path: str) -> None:
    try:
        os.mkdir(path, SPEC["folder_mode"])
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & ~SPEC["folder_mode"]:
        raise Malformed("%s is not an owner-only folder of this user" % path)


def emit(message: dict) -> None:
    print(json.dumps(message), flush=True)


# -- The socket transport (Formats.md) ----------------------------------------

def bump_generation(directory: str) -> None:
    """Writes a fresh random value: this program has no atomic add on a mapping."""
    path = os.path.join(directory, SPEC["names"], SPEC["generation"])
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and \
                stat.S_IMODE(info.st_mode) == SPEC["file_mode"] and info.st_size >= SPEC["generation_size"]:
            os.pwrite(fd, os.urandom(struct.calcsize(U64)), 0)
    finally:
        os.close(fd)


class SocketPoster:
    def __init__(self, directory: str):
        self.directory = directory
        self.id = random_id()
        self.instance = int(self.id, 16)
        self.sequences = {}
        self.spools = {}  # endpoint id -> [generation, open file or None]

    def endpoints(self, name: str) -> list:
        found = []
        folders = [os.path.join(self.directory, SPEC["names"], name)] + \
            [os.path.join(self.directory, SPEC["namespaces"], ns) for ns in namespaces_of(name)]
        for folder in folders:
            try:
                entries = os.listdir(folder)
            except FileNotFoundError:
                continue
            for entry in entries:
                if len(entry) != SPEC["id_digits"] or entry.strip("0123456789abcdef") or entry in found:
                    continue
                info = os.lstat(os.path.join(folder, entry))
                if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid():
                    found.append((entry, folder))
        return found

    def post(self, name: str, payload: bytes) -> None:
        sequence = self.sequences.get(name, 0) + 1
        self.sequences[name] = sequence
        envelope = encode(name, "python", self.instance, sequence, payload)
        for endpoint, folder in self.endpoints(name):
            self.deliver(endpoint, folder, envelope)

    def deliver(self, endpoint: str, folder: str, envelope: bytes) -> None:
        path = os.path.join(self.directory, SPEC["sockets"], endpoint + SPEC["socket_suffix"])
        try:
            info = os.lstat(path)
            if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
                return
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            self.reap(endpoint, folder)
            return
        with sock:
            if self.spooling(endpoint):
                if self.spool(endpoint, envelope, sock):
                    return
            try:
                sock.send(envelope)
                return
            except BlockingIOError:
                pass
            # Full: wait a moment for room, try once more, then spool.
            select.select([], [sock], [], SPEC["full_wait"])
            try:
                sock.send(envelope)
            except BlockingIOError:
                self.spool(endpoint, envelope, sock)

    def spooling(self, endpoint: str) -> bool:
        state = self.spools.get(endpoint)
        return bool(state and state[1] is not None)

    def spool(self, endpoint: str, envelope: bytes, sock) -> bool:
        """Appends to this poster's spool file for `endpoint`, starting one
        when it has none; returns False when the file was taken (send again)."""
        folder = os.path.join(self.directory, SPEC["spool"], endpoint)
        record = SPEC["spool_envelope"] + envelope
        state = self.spools.setdefault(endpoint, [0, None])
        if state[1] is not None:
            fd = state[1]
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                state[0] += 1
                state[1] = None
            else:
                try:
                    if os.fstat(fd).st_nlink == 0:
                        os.close(fd)
                        state[1] = None
                        state[0] += 1
                        return False
                    os.lseek(fd, 0, os.SEEK_END)
                    os.write(fd, record)
                    return True
                finally:
                    if state[1] is not None:
                        fcntl.flock(fd, fcntl.LOCK_UN)
        final = "%s-%0*x%s" % (self.id, SPEC["spool_digits"], state[0], SPEC["spool_suffix"])
        temporary = os.path.join(folder, "." + final)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, SPEC["file_mode"])
        os.write(fd, SPEC["spool_magic"] + record)
        os.rename(temporary, os.path.join(folder, final))
        state[1] = fd
        try:
            sock.send(b"")  # the nudge
        except BlockingIOError:
            pass  # a full queue is itself the sign the endpoint looks for
        return True

    def reap(self, endpoint: str, folder: str) -> None:
        try:
            os.unlink(os.path.join(folder, endpoint))
        except FileNotFoundError:
            return
        bump_generation(self.directory)


class SocketWatcher:
    def __init__(self, directory: str, names: list):
        self.directory = directory
        for folder in [directory, *(os.path.join(directory, part) for part in
                                    (SPEC["sockets"], SPEC["names"], SPEC["spool"]))]:
            make_folder(folder)
        self.id = random_id()
        self.socket_path = os.path.join(directory, SPEC["sockets"], self.id + SPEC["socket_suffix"])
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.socket_path)
        os.chmod(self.socket_path, SPEC["file_mode"])
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.spool = os.path.join(directory, SPEC["spool"], self.id)
        make_folder(self.spool)
        self.registration = os.path.join(self.spool, SPEC["registration"])
        fd = os.open(self.registration, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, SPEC["file_mode"])
        os.write(fd, ("%d %d python\n" % (os.getpid(), os.getuid())).encode())
        os.close(fd)
        self.entries = []
        self.names = names
        for name in names:
            if name.endswith(SPEC["namespace_suffix"]):
                parent = os.path.join(directory, SPEC["namespaces"])
                folder = os.path.join(parent, name[:-len(SPEC["namespace_suffix"])])
            else:
                parent = os.path.join(directory, SPEC["names"])
                folder = os.path.join(parent, name)
            make_folder(parent)
            make_folder(folder)
            entry = os.path.join(folder, self.id)
            os.link(self.registration, entry)
            self.entries.append(entry)
        bump_generation(directory)

    def close(self) -> None:
        for entry in self.entries:
            os.unlink(entry)
        bump_generation(self.directory)
        os.unlink(self.socket_path)
        for file in os.listdir(self.spool):
            os.unlink(os.path.join(self.spool, file))
        os.rmdir(self.spool)

    def observes(self, name: str) -> bool:
        suffix = SPEC["namespace_suffix"]
        return any(name == pattern or (pattern.endswith(suffix) and (
            name == pattern[:-len(suffix)] or name.startswith(pattern[:-len(suffix) + 1])))
            for pattern in self.names)

    def messages(self):
        """Every notification, in order: each wait's datagrams until the
        queue is empty, then the spool when a poster nudged or the queue was
        found full (a poster's nudge may have found no room)."""
        size = SPEC["max_payload"] + SPEC["overhead"] + SPEC["max_name"] + SPEC["max_endpoint"]
        credentials = struct.calcsize("3i")
        try:
            with open(os.path.join("/proc/sys", *SPEC["queue_length"].split("."))) as file:
                queue_length = int(file.read())
        except (OSError, ValueError):
            queue_length = 1
        while True:
            self.sock.setblocking(True)
            received, nudged = 0, False
            while True:
                try:
                    data, ancillary, _, _ = self.sock.recvmsg(size, socket.CMSG_SPACE(credentials))
                except BlockingIOError:
                    break
                self.sock.setblocking(False)
                received += 1
                if not data:
                    nudged = True
                    continue
                sender = None
                for level, kind, value in ancillary:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                        sender = struct.unpack("3i", value[:credentials])
                try:
                    message = decode(data)
                except Malformed:
                    continue
                if sender is None or (message["pid"], message["uid"]) != (sender[0], sender[1]):
                    continue  # another sender than the envelope claims
                if self.observes(message["name"]):
                    yield message
            if nudged or received >= queue_length:
                yield from self.take_spool()

    def take_spool(self):
        """Each poster's files in generation order."""
        files = sorted((f for f in os.listdir(self.spool) if not f.startswith(".") and f.endswith(SPEC["spool_suffix"])),
                       key=lambda f: (f[:SPEC["id_digits"]], int(f[SPEC["id_digits"] + 1:-len(SPEC["spool_suffix"])], 16)))
        for file in files:
            path = os.path.join(self.spool, file)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            info = os.fstat(fd)
            data = os.pread(fd, info.st_size, 0)
            os.unlink(path)
            os.close(fd)
            if info.st_uid != os.getuid() or not data.startswith(SPEC["spool_magic"]):
                continue
            offset = len(SPEC["spool_magic"])
            while offset < len(data):
                kind = data[offset:offset + 1]
                offset += 1
                if kind == SPEC["spool_drop"]:
                    offset += struct.calcsize(U64) + struct.calcsize(U32)  # the count and its checksum
                elif kind != SPEC["spool_envelope"]:
                    break  # not a record: the rest of the file cannot be framed
                if offset + SPEC["header"] > len(data):
                    break
                total = struct.unpack_from(U32, data, offset + SPEC["header"] - 4)[0]
                try:
                    message = decode(data[offset:offset + total])
                except Malformed:
                    break  # the rest of the file cannot be framed
                offset += total
                if kind == SPEC["spool_envelope"] and message["uid"] == info.st_uid and self.observes(message["name"]):
                    yield message


# -- The file transport (WireFormat.md, Formats.md) -------------------------------

def fragment(kind: int, index: int, data: bytes) -> bytes:
    rest = struct.pack("<BBHIIQ", SPEC["log_version"], kind, 0, len(data), crc32c(data), index)
    return struct.pack(U32, crc32c(rest)) + rest + data


def parse_header(data: bytes, at: int):
    """A fragment header at `at` whose own checksum holds, or None."""
    if at + SPEC["fragment_header"] > len(data):
        return None
    checksum, version, kind, reserved, length, data_checksum, index = struct.unpack_from("<IBBHIIQ", data, at)
    if crc32c(data[at + 4:at + SPEC["fragment_header"]]) != checksum or version != SPEC["log_version"]:
        return None
    return kind, length, data_checksum, index


def segment_name(number: int) -> str:
    return "%0*d%s" % (SPEC["segment_digits"], number, SPEC["segment_suffix"])


def segments(folder: str) -> list:
    found = []
    for file in os.listdir(folder):
        digits = file[:-len(SPEC["segment_suffix"])]
        if file.endswith(SPEC["segment_suffix"]) and len(digits) == SPEC["segment_digits"] and digits.isdigit():
            found.append(int(digits))
    return sorted(found)


class Walk:
    """Reads a segment's fragments from `position`, as WireFormat.md says:
    whole records, the rollover mark, records lost to damage, and where the
    last whole fragment ends (`end`), with what lies after it (`tail`):
    nothing, a tear (a write cut short) or damage at the log's end."""

    def __init__(self, data: bytes, position: int):
        self.records, self.rollover, self.next_index, self.lost = [], None, None, 0
        self.tail = None
        block, header = SPEC["block"], SPEC["fragment_header"]
        pieces = b""
        while position < len(data):
            left = block - position % block
            if left < header:
                position += left
                continue
            found = parse_header(data, position)
            if found is not None:
                kind, length, data_checksum, index = found
                end = position + header + length
                if end > position + left:
                    found = None  # a length past its block is never believed
            if found is None:
                if not any(data[position:position + header]):
                    position += left  # zero padding to the block's end
                    continue
                if position + header > len(data):
                    self.tail = "tear"  # a header cut short
                    break
                # Search this block for the next header whose checksum holds.
                following = next((at for at in range(position + 1, position + left - header + 1)
                                  if parse_header(data, at) is not None), None)
                if following is None and position + left >= len(data):
                    self.tail = "damage"  # a whole header that does not check, at the log's end
                    break
                position = following if following is not None else position + left
                continue
            if end > len(data):
                self.tail = "tear"  # a record being written, or cut short
                break
            body = data[position + header:end]
            position = end
            if crc32c(body) != data_checksum:
                # Damaged: its record is lost and counted, as the one expected here.
                self.lost += 1
                self.next_index = (self.next_index if self.next_index is not None else index) + 1
                pieces = b""
                continue
            if kind == SPEC["start"]:
                self.next_index = index
            elif kind == SPEC["rollover"]:
                self.rollover = struct.unpack(U64, body)[0]
            elif kind in (SPEC["full"], SPEC["first"]):
                pieces = body
            elif kind in (SPEC["middle"], SPEC["last"]):
                pieces += body
            if kind in (SPEC["full"], SPEC["last"]):
                self.records.append(pieces)
                self.next_index = index + 1
        self.end = position


class FilePoster:
    def __init__(self, directory: str, forged_name: str = None):
        self.directory = directory
        self.instance = int(random_id(), 16)
        self.sequences = {}
        self.forged_name = forged_name  # tests only: envelopes that name another name than their log

    def post(self, name: str, payload: bytes) -> None:
        sequence = self.sequences.get(name, 0) + 1
        self.sequences[name] = sequence
        envelope = encode(self.forged_name or name, "python", self.instance, sequence, payload)
        logs = os.path.join(self.directory, SPEC["logs"])
        folder = os.path.join(logs, name)
        for path in (self.directory, logs, folder):
            make_folder(path)
        lock = os.open(os.path.join(folder, SPEC["lock"]), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, SPEC["file_mode"])
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.append(folder, lock, envelope)
        finally:
            os.close(lock)

    def new_segment(self, folder: str, lock: int, number: int, index: int, log: int) -> None:
        path = os.path.join(folder, segment_name(number))
        temporary = path + SPEC["segment_temporary"] + str(os.getpid())
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, SPEC["file_mode"])
        os.write(fd, fragment(SPEC["start"], index, struct.pack(U64, log)))
        os.close(fd)
        os.rename(temporary, path)
        os.pwrite(lock, struct.pack(U64, number), 0)

    def append(self, folder: str, lock: int, envelope: bytes) -> None:
        numbers = segments(folder)
        if not numbers:
            newest = os.pread(lock, struct.calcsize(U64), 0)
            number = struct.unpack(U64, newest)[0] + 1 if len(newest) == struct.calcsize(U64) else 1
            self.new_segment(folder, lock, number, 0, int(random_id(), 16))
            numbers = [number]
        number = numbers[-1]
        path = os.path.join(folder, segment_name(number))
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            start = parse_header(data, 0)
            if start is None or start[0] != SPEC["start"]:
                raise Malformed("%s does not start with a start mark" % path)
            walk = Walk(data, 0)
            position, index = walk.end, walk.next_index
            block = SPEC["block"]
            if walk.tail == "tear":
                # Zero it, so the hole can never complete it; go on at the next block.
                os.pwrite(fd, bytes(len(data) - position), position)
                position += block - position % block
            elif walk.tail == "damage":
                # Left as it is: the record it began is lost, its index not used again.
                index += 1
                position += block - position % block
            if position >= SPEC["segment_limit"]:
                log = struct.unpack(U64, data[SPEC["fragment_header"]:SPEC["fragment_header"] + 8])[0]
                if block - position % block < SPEC["mark_room"]:
                    position += block - position % block
                os.pwrite(fd, fragment(SPEC["rollover"], index, struct.pack(U64, number + 1)), position)
                self.new_segment(folder, lock, number + 1, index, log)
                os.close(fd)
                fd = os.open(os.path.join(folder, segment_name(number + 1)), os.O_RDWR | os.O_NOFOLLOW)
                position = os.fstat(fd).st_size
            if block - position % block < SPEC["record_room"]:
                position += block - position % block
            framed, first = b"", True
            while envelope:
                room = block - (position + len(framed)) % block - SPEC["fragment_header"]
                piece, envelope = envelope[:room], envelope[room:]
                kind = (SPEC["full"] if not envelope else SPEC["first"]) if first else \
                    (SPEC["last"] if not envelope else SPEC["middle"])
                framed += fragment(kind, index, piece)
                first = False
            os.pwrite(fd, framed, position)
        finally:
            os.close(fd)


def watch_file(directory: str, name: str, count: int) -> None:
    folder = os.path.join(directory, SPEC["logs"], name)
    emit_ready()
    number, position, seen = None, 0, 0
    while seen < count:
        try:
            numbers = segments(folder)
        except FileNotFoundError:
            numbers = []
        if number is None and numbers:
            number = numbers[0]
        if number is None:
            time.sleep(SPEC["full_wait"] * 10)  # polling: the standard library has no inotify
            continue
        try:
            with open(os.path.join(folder, segment_name(number)), "rb") as file:
                data = file.read()
        except FileNotFoundError:
            number, position = None, 0
            continue
        walk = Walk(data, position)
        for record in walk.records:
            try:
                message = decode(record)
            except Malformed:
                continue  # counted as missed by a reader that reports
            if message["name"] != name:
                continue  # not this log's record, whoever wrote it here
            emit(message)
            seen += 1
        position = walk.end
        if walk.rollover is not None:
            number, position = walk.rollover, 0
        elif not walk.records:
            time.sleep(SPEC["full_wait"] * 10)


# -- Redis (Formats.md) ----------------------------------------------------------

class Redis:
    def __init__(self, url: str):
        rest = url.split("://", 1)[1].rstrip("/")
        host, _, port = rest.partition(":")
        self.sock = socket.create_connection((host, int(port or "6379")))
        self.buffer = b""

    def command(self, *arguments):
        parts = [b"*%d\r\n" % len(arguments)]
        for argument in arguments:
            data = argument if isinstance(argument, bytes) else str(argument).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(parts))
        return self.reply()

    def line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(SPEC["block"])
            if not chunk:
                raise ConnectionError("Redis closed the connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            length = int(rest)
            if length < 0:
                return None
            while len(self.buffer) < length + 2:
                chunk = self.sock.recv(SPEC["block"])
                if not chunk:
                    raise ConnectionError("Redis closed the connection")
                self.buffer += chunk
            data, self.buffer = self.buffer[:length], self.buffer[length + 2:]
            return data
        if kind == b"*":
            length = int(rest)
            return None if length < 0 else [self.reply() for _ in range(length)]
        raise RuntimeError("unexpected reply %r" % line)


def redis_key(template: str, name: str) -> str:
    """A key as the article spells it, with the default prefix and a name or namespace."""
    head, _, tail = template.partition("{")
    return head + "{" + name + "}"


def stream_key(name: str) -> str:
    return redis_key(SPEC["stream_key"], name)


def announce(redis: Redis, name: str) -> None:
    for namespace in namespaces_of(name):
        if namespace == name:
            continue
        names = redis_key(SPEC["names_key"], namespace)
        if redis.command("SISMEMBER", names, name) == 1:
            continue
        redis.command("XADD", redis_key(SPEC["new_key"], namespace), "*", SPEC["announce_field"], name)
        redis.command("SADD", names, name)


class RedisPoster:
    def __init__(self, url: str):
        self.redis = Redis(url)
        self.instance = int(random_id(), 16)
        self.sequences = {}
        self.announced = set()

    def post(self, name: str, payload: bytes) -> None:
        if name not in self.announced:
            announce(self.redis, name)
            self.announced.add(name)
        sequence = self.sequences.get(name, 0) + 1
        self.sequences[name] = sequence
        envelope = encode(name, "python", self.instance, sequence, payload)
        self.redis.command("XADD", stream_key(name), "MAXLEN", "~", SPEC["maximum_length"], "*",
                           SPEC["field"], envelope)


def watch_redis(url: str, name: str, count: int) -> None:
    redis = Redis(url)
    key = stream_key(name)
    newest = redis.command("XREVRANGE", key, "+", "-", "COUNT", 1)
    after = newest[0][0] if newest else SPEC["first_id"]
    emit_ready()
    seen = 0
    while seen < count:
        reply = redis.command("XREAD", "BLOCK", 0, "STREAMS", key, after)
        for _, entries in reply or []:
            for entry_id, fields in entries:
                after = entry_id
                if len(fields) != 2 or fields[0] != SPEC["field"]:
                    continue  # not an entry of this format: skipped
                try:
                    message = decode(fields[1])
                except Malformed:
                    continue
                if message["name"] != name:
                    continue
                emit(message)
                seen += 1


# -- The command line ---------------------------------------------------------

def emit_ready() -> None:
    print("ready", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["post", "watch", "announce"])
    parser.add_argument("name")
    parser.add_argument("texts", nargs="*")
    parser.add_argument("--transport", choices=["socket", "file", "redis"], default="socket")
    parser.add_argument("--dir")
    parser.add_argument("--url")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--forge-name", help="file post: write envelopes naming this name into NAME's log (a test's adversary)")
    options = parser.parse_args()
    names = options.name.split(",")
    suffix = SPEC["namespace_suffix"]
    if not all(valid_name(n[:-len(suffix)] if n.endswith(suffix) else n, SPEC["max_name"]) for n in names):
        print("invalid name: %s" % options.name, file=sys.stderr)
        return 2
    if options.command == "announce":
        announce(Redis(options.url), options.name)
        return 0
    transport = options.transport
    directory = options.dir or default_directory(
        SPEC["socket_default"] if transport == "socket" else SPEC["file_default"])
    if options.command == "post":
        poster = SocketPoster(directory) if transport == "socket" else \
            FilePoster(directory, options.forge_name) if transport == "file" else RedisPoster(options.url)
        for text in options.texts:
            poster.post(options.name, text.encode())
        return 0
    if transport == "socket":
        watcher = SocketWatcher(directory, names)
        emit_ready()
        try:
            seen = 0
            for message in watcher.messages():
                emit(message)
                seen += 1
                if seen == options.count:
                    break
        finally:
            watcher.close()
    elif transport == "file":
        watch_file(directory, options.name, options.count)
    else:
        watch_redis(options.url, options.name, options.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
