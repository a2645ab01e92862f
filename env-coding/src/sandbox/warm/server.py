# The fork server of the warm-fork backend (see server.rs): one pre-started interpreter that
# forks a fresh, fully isolated child per script execution, ~4x cheaper than starting Python.
#
# It runs as PID 1 of its own PID, mount, network, IPC and UTS namespaces, with host dirs hidden and
# no_new_privs set, and is trusted: it never runs untrusted code and never holds tests or expected
# output (the pitfall of warm interpreters: children can find the parent's objects through `gc`).
# Per run it only receives a work dir, ids, limits and fds. Each run is one child, forked straight
# into a new PID namespace whose init it is (when its exit is reaped, its whole tree is gone: the
# kernel kills the rest first). The child then sets up in two parts: `_namespaces` (new mount and
# IPC namespaces, a fresh /proc: nothing of the run needed) and `_sandboxed` (setsid, fds, work
# dir, rlimits, uid drop, Landlock, close fds, seccomp last), then runs the program as
# `__main__`, finalised like `python`. While the server is nearly idle it keeps children forked
# ahead that have done the first part and wait for a run (`_waiting`; issue 17: ~1 ms off a run's
# latency).
# Protocol (fd 3, SOCK_SEQPACKET, JSON): first an init message (filters, namespaces, trusted sources
# to precompile), then "run" (+ fds stdin, stdout,
# stderr, setup-error pipe[, report channel when "report" is true][, Landlock ruleset]) and
# "kill"; the reply per run is its wait status.
# Issue 12: with a report channel the program runs through `_codegym_report` (report.py, prepended
# to this file by server.rs), which reads the spec (injected vars) on it and answers with the
# return value, error and variables.
import builtins, ctypes, json, os, resource, signal, select, socket, sys, types

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_CLONE_NEWPID = 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_PROC_FLAGS = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
# Children forked ahead, each waiting in its own namespaces for a run (see `_serve`): a run then
# skips the fork and the namespace setup (~1 ms) on its critical path. Only while the server is
# nearly idle: under load, runs fork on demand as before.
_POOL = 2


class _FProg(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _PathBeneath(ctypes.Structure):
    """`struct landlock_path_beneath_attr` (packed): built once by the server, each run only sets
    the descriptor of its own `/proc`."""
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _check(ret, what):
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _fail(fd, stage, err):
    try:
        os.write(fd, (f"{stage}: {err}" if err != "" else stage).encode()[:4000])
    finally:
        os._exit(127)


def _exit_code(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _finalize(status):
    # What Py_FinalizeEx does that a program can observe: wait for threads, atexit, flush.
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
    except BaseException:
        pass
    try:
        __import__("atexit")._run_exitfuncs()
    except BaseException:
        pass
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None and not f.closed:
                f.flush()
        except BaseException:
            if status == 0:
                status = 120
    os._exit(status)


_MAIN = None


def _new_main():
    main = types.ModuleType("__main__")
    main.__file__ = "main.py"
    main.__builtins__ = builtins
    return main


def _run_main(workdir, argv, python_path, report_fd):
    main = _MAIN if _MAIN is not None else _new_main()
    sys.modules["__main__"] = main
    sys.argv[:] = ["main.py", *argv]  # argv: a data task's `--name value` inputs (issue 13)
    # `os.environ` and the C environment, without `_Environ.__setitem__`'s Python-level
    # encoding (~40 us of a run's critical path); the same bytes `os.environ` would store.
    environ, putenv, home = os.environ._data, os.putenv, os.fsencode(workdir)
    for key, value in ((b"HOME", home), (b"TMPDIR", home), (b"CODEGYM_OUTPUTS", home + b"/outputs")):
        putenv(key, value)
        environ[key] = value
    if python_path:  # a task's package site dir (issue 13); this server never imports from it
        sys.path.insert(1, python_path)
    # The finders cached by the server are for the interpreter's own dirs only (`_prewarm` drops
    # any relative entry's): they stay valid (a finder re-lists a directory whose mtime changed),
    # and clearing them here cost ~0.14 ms of page faults per run.
    if "random" in sys.modules:
        sys.modules["random"].seed()
    spec, report = None, {}
    if report_fd is not None:
        try:
            spec = _codegym_report.read_frame(report_fd)
            os.set_inheritable(report_fd, False)
            _codegym_report.install_tools(report_fd, main.__dict__, spec)
        except BaseException:
            spec = None  # the host gave up on the run already
    try:
        with open("main.py", "rb") as f:
            source = f.read()
        if spec is None:
            code = _PRECOMPILED.get(source)  # the unit-test harness: compiled by the server
            exec(code if code is not None else compile(source, "main.py", "exec"), main.__dict__)
        else:
            _codegym_report.execute(source, "main.py", main.__dict__, spec, report)
        status = 0
    except SystemExit as e:
        status = _exit_code(e)
    except BaseException:
        t, v, tb = sys.exc_info()
        # Cut this server's own frames: the traceback starts in main.py, as under `python main.py`.
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        try:
            sys.excepthook(t, v.with_traceback(tb), tb)
        except BaseException:
            pass
        status = 1
    if spec is not None:
        try:
            _codegym_report.send(report_fd, _codegym_report.finish(main.__dict__, spec, report))
        except OSError:
            pass
    _finalize(status)


def _namespaces(init):
    """The part of a run's setup that needs nothing of the run: its own mount and IPC namespaces
    and a fresh `/proc` (the child is already PID 1 of a new PID namespace). Returns the failed
    stage and why, or None."""
    stage = "start"
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        stage = "unshare"
        _check(_libc.unshare(init["unshare"]), stage)
        if init["mount_proc"]:
            stage = "mount /proc"
            _check(_libc.mount(b"proc", b"/proc", b"proc", _PROC_FLAGS, None), stage)
    except BaseException as e:
        return f"{stage}: {e}"
    return None


def _waiting(init, sock):
    """A pre-forked child: namespaces set up ahead, then waits for a run. Never returns."""
    if _namespaces(init) is not None:
        os._exit(126)  # the server stops pre-forking; runs fork on demand and report the error
    global _MAIN
    _MAIN = _new_main()  # the program's module, made before the run arrives
    keep = sock.fileno()
    os.closerange(3, keep)  # the server's own descriptors (its socket to the host included)
    os.closerange(keep + 1, 1 << 20)
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
    except BaseException:
        os._exit(0)
    if not msg:
        os._exit(0)  # the server went away or shut the pool
    sock.close()
    _sandboxed(init, json.loads(msg), fds, prepared=True)


def _sandboxed(init, req, fds, prepared=False):
    """PID 1 of the run's new PID namespace. Never returns."""
    setup = fds[3]
    stage = "start"
    if not prepared:
        failed = _namespaces(init)
        if failed is not None:
            _fail(setup, failed, "")
    try:
        stage = "setsid"
        os.setsid()
        stage = "dup2"
        for i in range(3):
            os.dup2(fds[i], i)
        stage = "chdir"
        os.chdir(req["dir"])
        stage = "setrlimit"
        for res, soft, hard in req["rlimits"]:
            resource.setrlimit(res, (soft, hard))
        if req["uid"] is not None:
            stage = "setuid"
            os.setgroups([])
            os.setresgid(req["gid"], req["gid"], req["gid"])
            os.setresuid(req["uid"], req["uid"], req["uid"])
        report_fd = fds[4] if req.get("report") else None
        ruleset_at = 5 if report_fd is not None else 4
        if len(fds) > ruleset_at:
            stage = "landlock"
            ruleset = fds[ruleset_at]
            if init["mount_proc"]:
                proc = os.open("/proc", os.O_PATH | os.O_CLOEXEC)
                _PROC_RULE.parent_fd = proc
                _check(_libc.syscall(init["sys_landlock_add_rule"], ruleset, 1, ctypes.byref(_PROC_RULE), 0), stage)
                os.close(proc)
            _check(_libc.syscall(init["sys_landlock_restrict_self"], ruleset, 0), stage)
        stage = "close fds"
        low = 3
        for keep in sorted(fd for fd in (setup, report_fd) if fd is not None):
            os.closerange(low, keep)
            low = keep + 1
        os.closerange(low, 1 << 20)
        # Last, as on the fresh backend. (Installing the filters ahead in a pre-forked child, in
        # `_namespaces`, measured ~10% slower at 1 caller: not done.)
        stage = "seccomp"
        for prog in _PROGRAMS:
            _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog[0]), 0, 0), stage)
    except BaseException as e:
        _fail(setup, stage, e)
    os.write(setup, b"+")  # set up; the program starts now
    os.close(setup)
    _run_main(req["dir"], req.get("argv", ()), req.get("python_path"), report_fd)


def _fork_run(own_pid_ns):
    """Forks a child that is PID 1 of a new PID namespace; returns its pid (0 in the child)."""
    _check(_libc.unshare(_CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    pid = -1
    try:
        pid = os.fork()
    finally:
        if pid != 0:  # the server: back to its own namespace for the next child
            if _libc.setns(own_pid_ns, _CLONE_NEWPID) < 0:
                os._exit(70)  # cannot fork any further: the supervisor starts a new server
    return pid


def _serve():
    ctl = socket.socket(fileno=3)
    init = json.loads(ctl.recv(1 << 20))
    global _PROGRAMS
    _PROGRAMS = []
    for hexed in init["seccomp"]:
        raw = bytes.fromhex(hexed)
        buf = ctypes.create_string_buffer(raw, len(raw))
        _PROGRAMS.append((_FProg(len(raw) // 8, ctypes.cast(buf, ctypes.c_void_p)), buf))
    global _PROC_RULE, _PRECOMPILED
    _PROC_RULE = _PathBeneath(init["proc_access"], -1)
    # Trusted `main.py` sources the host runs often (the unit-test harness, ~1.4 ms to compile),
    # compiled once here, exactly as a child would; a child whose `main.py` is byte-identical uses
    # the code object. These sources hold no tests: those arrive on each run's stdin.
    _PRECOMPILED = {src.encode(): compile(src, "main.py", "exec") for src in init["precompiled"]}
    own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    runs, pids = {}, {}
    idle, idle_pids, prefork = [], set(), _POOL
    while True:
        # Refill the pool only when at most one run is in flight and nothing is waiting: a request
        # never waits for a pre-fork, and under load (where a pre-fork saves no CPU, it only moves
        # it) runs fork on demand.
        timeout = None
        if len(idle) < prefork and len(runs) <= 1:
            if select.select([ctl], [], [], 0)[0]:
                timeout = 0
            else:
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    pid = _fork_run(own_pid_ns)
                except OSError:
                    pid = -1
                if pid == 0:
                    ours.close()
                    _waiting(init, theirs)
                theirs.close()
                if pid > 0:
                    idle.append((pid, ours))
                    idle_pids.add(pid)
                else:
                    ours.close()
                    prefork = 0
                timeout = 0
        ready = select.select([ctl, wake_r], [], [], timeout)[0]
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
        if ctl in ready:
            try:
                msg, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 8)
            except InterruptedError:
                msg, fds = None, []
            if msg == b"":
                return
            if msg:
                req = json.loads(msg)
                if req["op"] == "run":
                    pid = -1
                    while idle and pid < 0:
                        waiting, sock = idle.pop()
                        idle_pids.discard(waiting)
                        try:
                            socket.send_fds(sock, [msg], fds)
                            pid = waiting
                        except OSError:
                            pass  # it died meanwhile; its exit is reaped below
                        sock.close()
                    if pid < 0:
                        try:
                            pid = _fork_run(own_pid_ns)
                        except OSError as e:
                            ctl.send(json.dumps({"id": req["id"], "error": f"fork: {e}"}).encode())
                    if pid == 0:
                        _sandboxed(init, req, fds)
                    for fd in fds:
                        os.close(fd)
                    if pid > 0:
                        runs[pid], pids[req["id"]] = req["id"], pid
                elif req["op"] == "kill" and req["id"] in pids:
                    os.kill(pids[req["id"]], signal.SIGKILL)  # the init: its namespace goes with it
        while True:
            try:
                pid, status, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            rid = runs.pop(pid, None)
            if rid is None:
                if pid in idle_pids:  # a pre-forked child failed its setup: fork on demand now
                    idle_pids.discard(pid)
                    for i, (waiting, sock) in enumerate(idle):
                        if waiting == pid:
                            sock.close()
                            del idle[i]
                            break
                    prefork = 0
                    print(f"pre-forked child exited ({status}); forking on demand", file=sys.stderr)
                continue
            del pids[rid]
            cpu_ms = int((ru.ru_utime + ru.ru_stime) * 1000)
            reply = {"id": rid, "status": status, "cpu_ms": cpu_ms, "max_rss": ru.ru_maxrss * 1024}
            ctl.send(json.dumps(reply).encode())


def _prewarm():
    """Does once, here, what every child would otherwise do first: imports (`ast` alone is ~100
    classes, most of a trivial run's CPU when imported per run), ctypes' lookups of the libc
    functions, and one run of the reporter on a constant program (the interpreter's type-attribute
    cache and interned names are then filled). A child that finds them ready writes fewer pages:
    every page it writes is a copy-on-write fault of ~4 us. Runs only trusted, constant code."""
    import ast, atexit  # noqa: F401
    # What the test harnesses import (`copy`: the differential runner) and what programs import
    # most (HumanEval's prompts all start with `from typing import ...`): a module imported here
    # costs a child nothing, one imported there costs it the module's whole start-up. Standard
    # library only; the server never imports anything of a task's.
    import bisect, copy, heapq, itertools, math, string, typing  # noqa: F401
    for name in ("unshare", "mount", "setns", "syscall", "prctl"):
        getattr(_libc, name)
    spec = {"vars": {"v": [1]}, "max_repr": 64, "max_return_bytes": 64, "max_variables": 4,
            "max_variables_bytes": 256, "variables": True}
    g = {"__builtins__": builtins, "__name__": "__main__"}
    report = {}
    _codegym_report.execute(b"x = {'a': v}\nprint(end='')\nx", "main.py", g, spec, report)
    _codegym_report.finish(g, spec, report)
    sys.stdout.flush()
    # Runs keep the finders cached so far (see `_run_main`): only valid for absolute entries.
    for entry in list(sys.path_importer_cache):
        if not os.path.isabs(entry):
            del sys.path_importer_cache[entry]


if sys.flags.no_site:
    __import__("site").setquit()
    __import__("site").sethelper()
    __import__("site").setcopyright()
# Everything allocated so far goes to the permanent generation: children's collections then never
# touch (and copy-on-write) the server's pages.
_prewarm()
__import__("gc").freeze()
_serve()
