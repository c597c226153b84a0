#!/usr/bin/env python3
"""Runs a test command and turns a hang into a failure that says where.

    python3 .ci/watchdog.py STALL_SECONDS -- COMMAND...

The command's output (standard output and error together) is printed as it
comes. If it prints nothing for STALL_SECONDS, the watchdog prints the
Swift Testing tests that started and never ended, a backtrace of every
thread of every process the command started (gdb, when installed), kills
them all, and exits with 124. A CI job with a time limit of its own
otherwise ends with nothing to say about which test hung.
"""

import os
import re
import selectors
import signal
import subprocess
import sys
import time

STARTED = re.compile(r'^\S+ Test "(.*)" started\.$')
ENDED = re.compile(r'^\S+ Test "(.*?)" (?:passed|failed|recorded|skipped|with \d+ test cases? (?:passed|failed))')


def descendants(root):
    """The processes below `root`, from /proc, children first found first."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    found, queue = [], [root]
    while queue:
        pid = queue.pop(0)
        for child in children.get(pid, []):
            found.append(child)
            queue.append(child)
    return found


def command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def report_hang(process, in_flight, stall):
    print(f"\nwatchdog: no output for {stall} s; the command is taken as hung.", flush=True)
    print(f"watchdog: {len(in_flight)} test(s) started and never ended:", flush=True)
    for name in in_flight:
        print(f"watchdog:   {name}", flush=True)
    pids = [process.pid] + descendants(process.pid)
    for pid in pids:
        print(f"\nwatchdog: process {pid}: {command_line(pid)}", flush=True)
        try:
            traces = subprocess.run(
                ["gdb", "-batch", "-nx", "-p", str(pid), "-ex", "thread apply all bt 40"],
                capture_output=True, text=True, timeout=120)
            lines = [l for l in traces.stdout.splitlines() if l.startswith(("#", "Thread "))]
            print("\n".join(lines), flush=True)
        except (OSError, subprocess.TimeoutExpired) as error:
            print(f"watchdog: no backtrace ({error})", flush=True)
    for pid in reversed(pids):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: watchdog.py STALL_SECONDS -- COMMAND...")
    stall = int(sys.argv[1])
    process = subprocess.Popen(
        sys.argv[3:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    in_flight, pending, last = [], b"", time.monotonic()
    while True:
        if not selector.select(timeout=5):
            if time.monotonic() - last >= stall:
                report_hang(process, in_flight, stall)
                process.wait()
                sys.exit(124)
            continue
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            break
        last = time.monotonic()
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace")
            if started := STARTED.match(line):
                in_flight.append(started.group(1))
            elif ended := ENDED.match(line):
                if ended.group(1) in in_flight:
                    in_flight.remove(ended.group(1))
    sys.exit(process.wait())


if __name__ == "__main__":
    main()
