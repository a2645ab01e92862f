"""Where a batch's page faults land: every user page fault of the sandboxed runs while a command
runs, by the fork server's mapping it hit and by kind, per process.

    python3 -S bench/fault_map.py -- target/release/codegym evaluate --tasks ... --samples ...

Runs the command under `perf record -a` (the `exceptions:page_fault_user` tracepoint, plus the
fork events that give each process its role), snapshots the fork server's `/proc/<pid>/maps`
while it lives (its children inherit that layout), then counts the faults of its children (a run,
or a unit-test task's tests) and of their children (the candidate's process):

- kind: copy-on-write (a write to a present page: the page is shared with the server), a write to
  a new page, a read, an instruction fetch (code paged in: file-backed, shared);
- mapping: `[heap]`, `[anon]` (pymalloc's arenas and other anonymous memory), a library's
  segment (`libpython3.11.so.1.0 rw-p`: its data, relocated and written at start-up), ...

Each fault costs ~1.5-2 us of CPU on the 2-core VM of BENCHMARKS.md. Needs `perf` (Debian:
linux-perf) and root.
"""

import argparse
import bisect
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

from anatomy import FORK, command_line, perf_script  # the same events give the same roles

FAULT = re.compile(r"^\s*(\S+)\s+(\d+)\s+.*address=(0x[0-9a-f]+) ip=\S+ error_code=(0x[0-9a-f]+)")
# The fork server's source starts with the run reporter's header (sandbox/src/report.py); the
# isolated floor's forking process (`fork_floor.py --isolated-only`) stands in for it, so that the
# floor's children and codegym's runs are mapped the same way.
SERVER_MARK = b"# codegym's run reporter"


def is_server(cmdline):
    """The fork server, or the floor's interpreter (`python3 -S fork_floor.py ...`, not `perf` or
    this script, whose command lines name it too)."""
    argv = cmdline.split(b"\0")
    floor = os.path.basename(argv[0]).startswith(b"python") and any(
        os.path.basename(a) == b"fork_floor.py" for a in argv[1:3])
    return SERVER_MARK in cmdline or (floor and not any(b"fault_map.py" in a for a in argv))


def find_server():
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if is_server(f.read(4096)):
                        return int(pid)
            except OSError:
                pass
    return None


def snapshot_maps(proc):
    """The fork server's last readable mappings while `proc` runs: [(start, end, name)]."""
    maps, server = [], None
    while proc.poll() is None:
        server = server or find_server()
        if server is not None:
            try:
                with open(f"/proc/{server}/maps") as f:
                    text = f.read()
            except OSError:
                server = None  # gone (a second server may follow)
            else:
                maps = []
                for line in text.splitlines():
                    p = line.split()
                    start, end = (int(x, 16) for x in p[0].split("-"))
                    name = os.path.basename(p[5]) if len(p) > 5 else "[anon]"
                    maps.append((start, end, f"{name} {p[1]}"))
        time.sleep(0.05)
    return sorted(maps)


def kind(error_code):
    # x86 page fault error code: bit 0 present, bit 1 write, bit 4 instruction fetch.
    if error_code & 3 == 3:
        return "copy-on-write"
    if error_code & 2:
        return "write, new page"
    return "instruction fetch" if error_code & 0x10 else "read"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=12, help="rows per role")
    args, cmd = command_line(ap)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        perf = ["perf", "record", "-q", "-a", "-e", "exceptions:page_fault_user"]
        perf += ["-e", "sched:sched_process_fork", "-o", data, "--"]
        proc = subprocess.Popen(perf + cmd, stdout=subprocess.DEVNULL)
        maps = snapshot_maps(proc)
        if proc.returncode != 0:
            sys.exit(f"the command (or perf) failed with exit status {proc.returncode}")
        text = perf_script(data, "comm,pid,event,trace")
    if not maps:
        sys.exit("no fork server was seen (is the warm backend in use?)")
    parent, faults = {}, []
    for line in text.splitlines():
        fork = FORK.search(line)
        if fork:
            parent[int(fork.group(2))] = int(fork.group(1))
            continue
        m = FAULT.match(line)
        if m and m.group(1).startswith("python"):
            faults.append((int(m.group(2)), int(m.group(3), 16), int(m.group(4), 16)))
    children = collections.Counter(parent.values())
    server = max((p for p in children if any(pid == p for pid, _, _ in faults)), key=children.get)
    starts = [s for s, _, _ in maps]

    def mapping(address):
        i = bisect.bisect_right(starts, address) - 1
        return maps[i][2] if i >= 0 and address < maps[i][1] else "(not the server's)"

    roles = {"run": collections.Counter(), "run's child": collections.Counter()}
    pids = {"run": set(), "run's child": set()}
    for pid, address, error in faults:
        role = (
            "run"
            if parent.get(pid) == server
            else "run's child"
            if parent.get(parent.get(pid)) == server
            else None
        )
        if role:
            roles[role][(kind(error), mapping(address))] += 1
            pids[role].add(pid)
    for role, table in roles.items():
        n = len(pids[role])
        if not n:
            continue
        print(f"{role}: {n} processes, {sum(table.values()) / n:.0f} user page faults each")
        for (k, name), count in table.most_common(args.top):
            print(f"  {count / n:7.1f}  {k:18s} {name}")


if __name__ == "__main__":
    main()
