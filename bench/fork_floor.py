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
  host;
- with `--layers`, the **layered floor** (as root, cgroup v1, Landlock): the isolated floor plus
  every isolation layer a codegym run promises, taken as a warm run's child takes them
  (`bench/layers_floor.c`, in C, on state made once): its own memory and pids groups, a session,
  codegym's rlimits, a uid and gid of its own, Landlock (the system and Python read-only, a work
  dir of its own writable), every other descriptor closed, a seccomp filter of codegym's length;
  and the host's share per run, also in C: the work dir made for the run's uid and removed, the
  run's Landlock ruleset, its group's peak reset and OOM count read. `--layers-each` adds the
  layered floor without each layer in turn (what each costs); `--layers-only` measures it alone.

CPU is the parent's and its reaped children's (`getrusage`), per fork. Kernel threads that free
a child's namespaces afterwards are not counted (nor are they in codegym's runs, by the
benchmarks that divide by this floor).

    python3 -S bench/fork_floor.py [--forks 2000] [--isolated-only] [--layers | --layers-each | --layers-only]
    # -S: no `site`, as the fork server

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


def isolated(forks, layers=None, label="isolated floor (PID/mount/IPC ns, /proc, print)"):
    """The isolated floor (see the module's doc), or None where namespaces cannot be made. With
    `layers` (a `Layers`), each run also takes every isolation layer a codegym run promises."""
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
        if layers:
            layers.before(i, w)
        if libc.unshare(CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                ok = libc.unshare(CLONE_NEWNS | CLONE_NEWIPC) == 0 and libc.mount(
                    b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0
                if ok:
                    # With layers, the C set-up makes the pipe stdout (and closes the rest).
                    ok = layers.child() == 0 if layers else os.dup2(w, 1) == 1
                if ok:
                    exec(compile(f"print({i})", "main.py", "exec"), {"__name__": "__main__"})  # noqa: S102 (the run itself)
                    sys.stdout.flush()
            finally:
                os._exit(0 if ok else 1)
        if libc.setns(own_pid_ns, CLONE_NEWPID) != 0:  # as the fork server: back, for the next unshare
            raise OSError(ctypes.get_errno(), "setns(CLONE_NEWPID)")
        os.read(r, 64)
        if os.waitpid(pid, 0)[1] != 0:
            raise OSError("an isolated floor's child failed its namespaces" + (" or layers" if layers else ""))
        if layers:
            layers.after()
    cpu1, f1 = cpu_and_faults()
    per = (cpu1 - cpu0) / forks * 1000
    print(f"{label:<44} {per:6.3f} ms CPU per run, {(f1 - f0) / forks:5.0f} page faults")
    return per


class Layers:
    """`layers_floor.c`'s state, made once as codegym's host makes it once: its Landlock base of
    path descriptors, its pooled memory and pids groups (cgroup v1, as this project's hosts:
    cgroup/pool.rs), its rlimits and a seccomp program of its filter's shape. `skip` leaves layers
    out (a mask of `LAYERS`' bits), to measure what each costs."""

    LAYERS = (("cgroups", 1), ("rlimits", 2), ("uid", 4), ("landlock", 8), ("seccomp", 16))
    SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/dev")
    DEV_WRITE = ("/dev/null", "/dev/zero", "/dev/full")
    READ, READ_FILE, WRITE_FILE = 1 | 4 | 8, 4, 2  # execute|read_file|read_dir; read_file; write_file

    def __init__(self, skip=0):
        # No `subprocess`, `tempfile` or `shutil`: they import `random` and `threading`, whose
        # at-fork hooks would run Python in every child (~90 page writes more per child).
        self.skip = skip
        here = os.path.dirname(os.path.abspath(__file__))
        self.tmp = f"/dev/shm/codegym-floor-{os.getpid()}"
        os.mkdir(self.tmp, 0o711)
        so = os.path.join(self.tmp, "layers_floor.so")
        cc = ["cc", "-O2", "-shared", "-fPIC", "-Wl,-z,now", "-o", so, os.path.join(here, "layers_floor.c")]
        if os.waitpid(os.posix_spawnp(cc[0], cc, os.environ), 0)[1] != 0:
            raise OSError(f"{' '.join(cc)} failed")
        self.lib = ctypes.CDLL(so, use_errno=True)
        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
        if abi < 1:
            raise OSError(ctypes.get_errno(), "Landlock is not available")
        st = FloorState()
        st.all_fs = {1: 0x1FFF, 2: 0x3FFF, 3: 0x7FFF, 4: 0x7FFF}.get(abi, 0xFFFF)
        st.handled = (ctypes.c_uint64 * 3)(st.all_fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
        st.attr_size = 8 if abi < 4 else 16 if abi < 6 else 24
        trees = {sys.prefix, sys.base_prefix, os.path.dirname(sys.executable)}
        base = [(p, self.READ) for p in self.SYSTEM_READ + tuple(sorted(trees))]
        base += [(p, self.READ_FILE | self.WRITE_FILE) for p in self.DEV_WRITE]
        self.fds = []
        for k, (path, access) in enumerate((p, a) for p, a in base if os.path.exists(p)):
            self.fds.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
            st.base_fds[k], st.base_access[k], st.nbase = self.fds[-1], access, k + 1
        st.proc_access = self.READ
        for k, ctl in enumerate(("memory", "pids")):
            d = f"/sys/fs/cgroup/{ctl}/codegym-floor"
            os.makedirs(d, exist_ok=True)
            limit, value = ("memory.limit_in_bytes", str(512 << 20)) if ctl == "memory" else ("pids.max", "64")
            with open(f"{d}/{limit}", "w") as f:
                f.write(value)
            self.fds.append(os.open(f"{d}/tasks", os.O_WRONLY | os.O_CLOEXEC))
            st.cgroup_fds[k], st.ncgroups = self.fds[-1], k + 1
        d = "/sys/fs/cgroup/memory/codegym-floor"
        st.peak_fd = os.open(f"{d}/memory.max_usage_in_bytes", os.O_WRONLY | os.O_CLOEXEC)
        st.oom_fd = os.open(f"{d}/memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
        self.fds += [st.peak_fd, st.oom_fd]
        # codegym's rlimits (prepare.rs): CPU, FSIZE, NOFILE, CORE, NPROC, MEMLOCK, MSGQUEUE, AS.
        rlimits = [(0, 10, 11), (1, 64 << 20, 64 << 20), (7, 256, 256), (4, 0, 0), (6, 64, 64),
                   (8, 0, 0), (12, 0, 0), (9, 4 << 30, 4 << 30)]
        for k, rl in enumerate(rlimits):
            st.rlimits[k] = FloorRlimit(*rl)
        st.nrlimits = len(rlimits)
        self.filter = seccomp_program(48)  # codegym's filter refuses 48 syscalls (seccomp/mod.rs)
        st.filter = ctypes.cast(ctypes.pointer(self.filter[0]), ctypes.c_void_p)
        st.dir = self.tmp.encode()
        if self.lib.floor_init(ctypes.byref(st)) != 0:
            raise OSError("floor_init")
        # Looked up here, once: a child that looked one up would make its function object anew.
        self._before, self._child, self._after = self.lib.floor_before, self.lib.floor_child, self.lib.floor_after

    def before(self, i, out):
        e = self._before(i, out)
        if e < 0:
            raise OSError(-e, "the host's share of a run")

    def child(self):
        return self._child(self.skip)

    def after(self):
        e = self._after()
        if e < 0:
            raise OSError(-e, "the host's share after a run")

    def close(self):
        for fd in self.fds:
            os.close(fd)
        for ctl in ("memory", "pids"):
            os.rmdir(f"/sys/fs/cgroup/{ctl}/codegym-floor")
        os.unlink(os.path.join(self.tmp, "layers_floor.so"))
        os.rmdir(self.tmp)


def seccomp_program(denied):
    """A filter of codegym's shape (x86_64): the architecture checked, `denied` syscalls refused
    with EPERM (300 and up: none of them called by the child once it has the filter; the cost is
    the walk), the rest allowed. Returns the
    `struct sock_fprog` and the instructions it points to."""
    ld, jeq, ret = 0x20, 0x15, 0x06
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, 0xC000003E), (ret, 0, 0, 0x80000000), (ld, 0, 0, 0)]
    prog += [(jeq, denied - k, 0, 300 + k) for k in range(denied)]
    prog += [(ret, 0, 0, 0x7FFF0000), (ret, 0, 0, 0x00050001)]
    insns = (SockFilter * len(prog))(*(SockFilter(*i) for i in prog))
    return SockFprog(len(prog), ctypes.cast(insns, ctypes.c_void_p)), insns


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.c_void_p)]


class FloorRlimit(ctypes.Structure):
    _fields_ = [("resource", ctypes.c_int64), ("soft", ctypes.c_uint64), ("hard", ctypes.c_uint64)]


class FloorState(ctypes.Structure):
    """`struct floor_state` of layers_floor.c."""

    _fields_ = [("handled", ctypes.c_uint64 * 3), ("attr_size", ctypes.c_int32), ("nbase", ctypes.c_int32),
                ("base_fds", ctypes.c_int32 * 32), ("base_access", ctypes.c_uint64 * 32),
                ("all_fs", ctypes.c_uint64), ("proc_access", ctypes.c_uint64), ("cgroup_fds", ctypes.c_int32 * 4),
                ("ncgroups", ctypes.c_int32), ("peak_fd", ctypes.c_int32), ("oom_fd", ctypes.c_int32),
                ("nrlimits", ctypes.c_int32), ("rlimits", FloorRlimit * 16), ("filter", ctypes.c_void_p),
                ("dir", ctypes.c_char * 256)]


def measure_layers(forks, each):
    """The isolated floor with every layer; with `each`, also without each layer in turn."""
    for name, bit in ((None, 0),) + (Layers.LAYERS if each else ()):
        layers = Layers(skip=bit)
        gc.freeze()  # what making it allocated, too: no child's collection walks it
        try:
            isolated(forks, layers, "isolated floor + every layer" + (f" but {name}" if name else ""))
        finally:
            layers.close()


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
    each = "--layers-each" in args
    layers_only = "--layers-only" in args
    with_layers = "--layers" in args or each
    args = [a for a in args if a not in ("--isolated-only", "--layers", "--layers-each", "--layers-only")]
    forks = int(args[1]) if args[:1] == ["--forks"] and len(args) == 2 else 2000
    gc.freeze()  # as the server does: no child's collection touches the parent's objects
    if layers_only:
        measure_layers(forks, False)
        return
    if isolated_only:
        isolated(forks)
        if with_layers:
            measure_layers(forks, each)
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
    if with_layers:
        measure_layers(forks, each)
    print(f"(Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
