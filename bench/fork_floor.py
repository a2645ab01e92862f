"""The floor under a warm-fork run on this machine: what a fork and exit of a Python interpreter
costs before any program runs, and what each copy-on-write fault adds.

A sandboxed run of the warm-fork backend is one fork of a pre-started interpreter, the program,
and the child's exit; a unit-test run is two such processes (the tests', the candidate's). This
measures, with nothing else in the way (no sandbox, no host):

- `fork+exit`: a child that exits at once, of an interpreter with the modules the fork server
  preloads (`sandbox/src/warm/server.py`), frozen as the server freezes them;
- `fork+exit, writes N pages`: the same child writing one byte into each of N pages of a buffer
  the parent filled (each write a copy-on-write fault), so the cost per fault is the difference;
- the **isolated floor** (as root): what one isolated trivial run cannot do without, with nothing
  of codegym in the way: a fork into a new PID namespace (the child its init), the child's own
  mount and IPC namespaces and a fresh `/proc`, then the program's source `print(i)` compiled and
  run in a fresh `__main__` namespace (its faults included), its output to a pipe the parent
  drains, and the child's exit and reaping. Not in it: the run's uid, rlimits, Landlock, seccomp,
  cgroups, work dir, and everything between a client and the fork server. The script first enters
  a mount namespace of its own (mounts private), so the children's `/proc` mounts never reach the
  host.

CPU is the parent's and its reaped children's (`getrusage`), per fork. Kernel threads that free
a child's namespaces afterwards are not counted (nor are they in codegym's runs, by the
benchmarks that divide by this floor).

    python3 -S bench/fork_floor.py [--forks 2000] [--isolated-only]    # -S: no `site`, as the fork server

`--isolated-only` measures the isolated floor alone, e.g. under bench/anatomy.py, which then splits
the floor's CPU by stage as it splits codegym's runs.
"""

# Only what the fork server imports before it forks (server.py's own imports and `_prewarm`), and
# small C modules: each module more is pages more to copy at every fork.
import ast  # noqa: F401
import atexit  # noqa: F401
import bisect  # noqa: F401
import copy  # noqa: F401
import ctypes
import gc
import heapq  # noqa: F401
import itertools  # noqa: F401
import json  # noqa: F401
import math  # noqa: F401
import mmap
import os
import resource
import signal  # noqa: F401
import string  # noqa: F401
import sys
import types  # noqa: F401
import typing  # noqa: F401


def cpu_and_faults():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime, s.ru_minflt + c.ru_minflt


def measure(label, forks, child):
    cpu0, f0 = cpu_and_faults()
    for _ in range(forks):
        pid = os.fork()
        if pid == 0:
            child()
            os._exit(0)
        os.waitpid(pid, 0)
    cpu1, f1 = cpu_and_faults()
    per = (cpu1 - cpu0) / forks * 1000
    print(f"{label:<44} {per:6.3f} ms CPU per fork, {(f1 - f0) / forks:5.0f} page faults")
    return per


CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x4000, 0x40000, 2, 4, 8


def isolated(forks):
    """The isolated floor (see the module's doc), or None where namespaces cannot be made."""
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() != 0 or libc.unshare(CLONE_NEWNS) != 0:
        print("isolated floor: needs root (namespaces and /proc mounts)")
        return None
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making / private in the floor's own mount namespace")
    own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY)
    r, w = os.pipe()
    cpu0, f0 = cpu_and_faults()
    for i in range(forks):
        if libc.unshare(CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")
        pid = os.fork()
        if pid == 0:
            ok = libc.unshare(CLONE_NEWNS | CLONE_NEWIPC) == 0 and libc.mount(
                b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0
            if ok:
                os.dup2(w, 1)
                exec(compile(f"print({i})", "main.py", "exec"), {"__name__": "__main__"})  # noqa: S102 (the run itself)
                sys.stdout.flush()
            os._exit(0 if ok else 1)
        if libc.setns(own_pid_ns, CLONE_NEWPID) != 0:  # as the fork server: back, for the next unshare
            raise OSError(ctypes.get_errno(), "setns(CLONE_NEWPID)")
        os.read(r, 64)
        if os.waitpid(pid, 0)[1] != 0:
            raise OSError("an isolated floor's child failed its namespaces")
    cpu1, f1 = cpu_and_faults()
    per = (cpu1 - cpu0) / forks * 1000
    print(f"{'isolated floor (PID/mount/IPC ns, /proc, print)':<44} {per:6.3f} ms CPU per run, "
          f"{(f1 - f0) / forks:5.0f} page faults")
    return per


def rss_anon_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def main():
    # No argparse: its imports would grow the image this measures.
    args = sys.argv[1:]
    isolated_only = "--isolated-only" in args
    args = [a for a in args if a != "--isolated-only"]
    forks = int(args[1]) if args[:1] == ["--forks"] and len(args) == 2 else 2000
    gc.freeze()  # as the server does: no child's collection touches the parent's objects
    if isolated_only:
        isolated(forks)
        return
    warm = rss_anon_kib()
    base = measure(f"warm interpreter ({warm} KiB anonymous)", forks, lambda: None)
    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, 512 * page)
    buf.write(b"\1" * len(buf))
    for n in (100, 300):

        def child(n=n):
            for i in range(n):
                buf[i * page] = 2

        cost = measure(f"warm interpreter, child writes {n} pages", forks, child)
        print(f"{'':<44} {(cost - base) / n * 1000:6.2f} us per copy-on-write fault")
    isolated(forks)
    print(f"(Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
