#!/usr/bin/env python3
"""Runs tn_interop.py (a Python implementation written from the articles)
against `tnotify` in every direction on every transport, with real
processes, sockets, files and a real redis-server on a free loopback port:

    run_interop.py --tnotify PATH/TO/tnotify

Each case starts the observer, waits for the line it prints once it is
registered or reading (never a sleep), posts from the other side, and checks
that every notification arrives whole and in order. Exits 1 naming the
first case that failed."""

import argparse
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = [sys.executable, os.path.join(HERE, "tn_interop.py")]
TIMEOUT = 60


class Failure(Exception):
    pass


class Process:
    """A child whose output lines arrive on queues, read by threads."""

    def __init__(self, arguments, env=None):
        self.arguments = arguments
        self.child = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=env)
        self.out, self.err = queue.Queue(), queue.Queue()
        self.errors = []
        threading.Thread(target=self.pump, args=(self.child.stdout, self.out), daemon=True).start()
        threading.Thread(target=self.pump, args=(self.child.stderr, self.err), daemon=True).start()

    @staticmethod
    def pump(stream, lines):
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def line(self, lines, what):
        try:
            line = lines.get(timeout=TIMEOUT)
        except queue.Empty:
            raise Failure("%s: no %s within %d s" % (shown(self.arguments), what, TIMEOUT))
        if line is None:
            raise Failure("%s: ended before %s (exit %s)" % (shown(self.arguments), what, self.child.wait()))
        return line

    def wait_for(self, lines, prefix, what):
        while True:
            line = self.line(lines, what)
            if line.startswith(prefix):
                return line
            self.errors.append(line)

    def stop(self):
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
            try:
                self.child.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()


def shown(arguments):
    return " ".join(a if len(a) < 80 else a[:20] + "...(%d bytes)" % len(a) for a in arguments)


def run(arguments, env=None):
    done = subprocess.run(arguments, capture_output=True, text=True, env=env, timeout=TIMEOUT)
    if done.returncode != 0:
        raise Failure("%s exited %d: %s%s" % (shown(arguments), done.returncode, done.stdout, done.stderr))
    return done.stdout


def texts_of_tnotify(watcher, count, missed=None):
    """The first `count` notifications tnotify printed; each reported none
    missed, or as many as `missed` says, one per notification."""
    import json
    got = []
    while len(got) < count:
        line = watcher.line(watcher.out, "notification %d of %d" % (len(got) + 1, count))
        message = json.loads(line)
        wanted = missed[len(got)] if missed else 0
        if message.get("missed", 0) != wanted:
            raise Failure("tnotify watch reported %s missed, not %d: %s" % (message.get("missed"), wanted, line))
        got.append((message["name"], message.get("payloadText"), message["sender"]["endpoint"]))
    return got


def texts_of_python(watcher, count):
    import json
    got = []
    while len(got) < count:
        message = json.loads(watcher.line(watcher.out, "notification %d of %d" % (len(got) + 1, count)))
        got.append((message["name"], message["text"], message["endpoint"], message["sequence"]))
    return got


def expect(case, got, wanted):
    if got != wanted:
        raise Failure("%s: got %s, wanted %s" % (case, shown([repr(got)]), shown([repr(wanted)])))
    print("ok   %s" % case, flush=True)


def tnotify_watch(tnotify, names, transport_flags):
    watcher = Process([tnotify, "watch", *names, "--json", *transport_flags])
    # The line comes on standard output, before the first notification.
    watcher.wait_for(watcher.out, "watching", "its 'watching' line")
    return watcher


def python_watch(name, count, transport_flags):
    watcher = Process(PROGRAM + ["watch", name, "--count", str(count), *transport_flags])
    watcher.wait_for(watcher.out, "ready", "its 'ready' line")
    return watcher


def both_ways(tnotify, label, name, flags):
    """Python posts and tnotify watches `name`; then tnotify posts and Python watches `name.back`."""
    texts = ["one", "two", "three"]
    watcher = tnotify_watch(tnotify, [name], flags)
    try:
        run(PROGRAM + ["post", name, *texts, *flags])
        expect("%s: Python posts, tnotify watches" % label, texts_of_tnotify(watcher, len(texts)),
               [(name, text, "python") for text in texts])
    finally:
        watcher.stop()

    other = name + ".back"
    watcher = python_watch(other, len(texts), flags)
    try:
        for text in texts:
            run([tnotify, "post", other, "--text", text, *flags])
        expect("%s: tnotify posts, Python watches" % label, [g[:3] for g in texts_of_python(watcher, len(texts))],
               [(other, text, "tnotify") for text in texts])
    finally:
        watcher.stop()


def spool_files(directory):
    spool = os.path.join(directory, "spool")
    return [f for folder in os.listdir(spool) for f in os.listdir(os.path.join(spool, folder)) if f.endswith(".spool")]


def local_cases(tnotify, root):
    for transport in ("socket", "file"):
        flags = ["--transport", transport, "--dir", os.path.join(root, transport)]
        both_ways(tnotify, transport, "org.interop.%s" % transport, flags)

    # One log written by both, record after record: each appends after the other.
    directory = os.path.join(root, "file")
    flags = ["--transport", "file", "--dir", directory]
    name = "org.interop.mixed"
    python = python_watch(name, 4, flags)
    swift = tnotify_watch(tnotify, [name], flags)
    try:
        run([tnotify, "post", name, "--text", "s1", *flags])
        run(PROGRAM + ["post", name, "p1", *flags])
        run([tnotify, "post", name, "--text", "s2", *flags])
        run(PROGRAM + ["post", name, "p2", *flags])
        wanted = [(name, "s1", "tnotify"), (name, "p1", "python"), (name, "s2", "tnotify"), (name, "p2", "python")]
        expect("file: one log appended by both, read by tnotify", texts_of_tnotify(swift, 4), wanted)
        expect("file: one log appended by both, read by Python", [g[:3] for g in texts_of_python(python, 4)], wanted)
    finally:
        swift.stop()
        python.stop()

    # A long record: first, middle and last pieces across blocks, both ways.
    big = "".join(chr(ord("a") + i % 26) for i in range(60_000))
    name = "org.interop.big"
    swift = tnotify_watch(tnotify, [name], flags)
    python = python_watch(name, 2, flags)
    try:
        run(PROGRAM + ["post", name, big, *flags])
        run([tnotify, "post", name, "--text", big, *flags])
        wanted = [(name, big, "python"), (name, big, "tnotify")]
        expect("file: a 60,000-byte record across blocks, read by tnotify",
               texts_of_tnotify(swift, 2), wanted)
        expect("file: a 60,000-byte record across blocks, read by Python",
               [g[:3] for g in texts_of_python(python, 2)], wanted)
    finally:
        swift.stop()
        python.stop()

    # A damaged last record (a byte of its data flipped): the Python writer
    # leaves it and goes on after it; tnotify reports it missed.
    name = "org.interop.damaged"
    for text in ("d1", "d2", "d3"):
        run([tnotify, "post", name, "--text", text, *flags])
    segment = os.path.join(directory, "logs", name, "%020d.log" % 1)
    with open(segment, "r+b") as file:
        data = file.read()
        at = data.rindex(b"d3")
        file.seek(at)
        file.write(b"X")
    run(PROGRAM + ["post", name, "after", *flags])
    swift = tnotify_watch(tnotify, [name], flags + ["--from", "beginning"])
    try:
        expect("file: Python appends after a damaged last record, which tnotify then reports missed",
               texts_of_tnotify(swift, 3, missed=[0, 0, 1]),
               [(name, "d1", "tnotify"), (name, "d2", "tnotify"), (name, "after", "python")])
    finally:
        swift.stop()

    # An envelope of another name in a log: skipped by both readers, and reported missed by tnotify.
    name = "org.interop.forged"
    run(PROGRAM + ["post", name, "one", *flags])
    run(PROGRAM + ["post", name, "forged", "--forge-name", "org.interop.elsewhere", *flags])
    run(PROGRAM + ["post", name, "two", *flags])
    swift = tnotify_watch(tnotify, [name], flags + ["--from", "beginning"])
    python = python_watch(name, 2, flags)
    try:
        wanted = [(name, "one", "python"), (name, "two", "python")]
        expect("file: an envelope of another name in a log is skipped by tnotify, and reported missed",
               texts_of_tnotify(swift, 2, missed=[0, 1]), wanted)
        expect("file: an envelope of another name in a log is skipped by Python",
               [g[:3] for g in texts_of_python(python, 2)], wanted)
    finally:
        swift.stop()
        python.stop()

    # Spooling: a stopped tnotify watch, more posts than its socket queues.
    directory = os.path.join(root, "socket")
    flags = ["--transport", "socket", "--dir", directory]
    name = "org.interop.spooled"
    count = 60
    texts = ["spooled-%02d" % i for i in range(count)]
    watcher = tnotify_watch(tnotify, [name], flags)
    try:
        watcher.child.send_signal(signal.SIGSTOP)
        run(PROGRAM + ["post", name, *texts, *flags])
        spooled = spool_files(directory)
        if not spooled:
            raise Failure("socket: no spool file was written for the stopped watcher")
        watcher.child.send_signal(signal.SIGCONT)
        expect("socket: Python spools for a stopped tnotify watch, which gets all %d in order (%d spool file(s))"
               % (count, len(spooled)), texts_of_tnotify(watcher, count), [(name, t, "python") for t in texts])
    finally:
        watcher.child.send_signal(signal.SIGCONT)
        watcher.stop()

    # And back: tnotify posts spool for a stopped Python watcher.
    name = "org.interop.spooled.back"
    count = 24
    texts = ["back-%02d" % i for i in range(count)]
    watcher = python_watch(name, count, flags)
    try:
        watcher.child.send_signal(signal.SIGSTOP)
        for text in texts:
            run([tnotify, "post", name, "--text", text, *flags])
        if not spool_files(directory):
            raise Failure("socket: no tnotify post spooled for the stopped Python watcher")
        watcher.child.send_signal(signal.SIGCONT)
        got = texts_of_python(watcher, count)
        # Each tnotify post is a sender of its own: no order between them.
        expect("socket: tnotify spools for a stopped Python watcher, which takes every spool file",
               sorted(g[:3] for g in got), [(name, t, "tnotify") for t in texts])
    finally:
        watcher.child.send_signal(signal.SIGCONT)
        watcher.stop()

    # A namespace: Python observes org.interop.ns.*, tnotify posts a name under it.
    name = "org.interop.ns.first"
    watcher = python_watch("org.interop.ns.*", 1, flags)
    try:
        run([tnotify, "post", name, "--text", "hello", *flags])
        expect("socket: Python observes a namespace, tnotify posts under it",
               [g[:3] for g in texts_of_python(watcher, 1)], [(name, "hello", "tnotify")])
    finally:
        watcher.stop()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def redis_cases(tnotify, root):
    server_binary = shutil.which("redis-server")
    if server_binary is None:
        raise Failure("redis-server is not installed (.ci/run installs it)")
    port = free_port()
    server = Process([server_binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", "--dir", root])
    try:
        server.wait_for(server.out, "", "its first line")
        while "Ready to accept connections" not in server.line(server.out, "'Ready to accept connections'"):
            pass
        url = "redis://127.0.0.1:%d" % port
        flags = ["--transport", "redis", "--url", url]
        both_ways(tnotify, "redis", "org.interop.redis", flags)

        # A namespace observer hears a name Python announced and posted.
        fresh = "org.interop.space.fresh"
        watcher = tnotify_watch(tnotify, ["org.interop.space.*"], flags)
        try:
            run(PROGRAM + ["post", fresh, "announced", *flags])
            expect("redis: Python announces a new name, a tnotify namespace observer hears it",
                   texts_of_tnotify(watcher, 1), [(fresh, "announced", "python")])
        finally:
            watcher.stop()
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tnotify", required=True)
    options = parser.parse_args()
    root = tempfile.mkdtemp(prefix="tn-interop-")
    os.chmod(root, 0o700)
    started = time.monotonic()
    try:
        local_cases(options.tnotify, root)
        redis_cases(options.tnotify, root)
    except Failure as failure:
        print("FAIL %s" % failure, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("interop: every direction passed in %.1f s" % (time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
