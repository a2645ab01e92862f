# The fork server of the warm-fork backend (see server.rs): one pre-started interpreter that
# forks a fresh, fully isolated child per script execution, ~4x cheaper than starting Python.
#
# It runs as PID 1 of its own PID, mount, network, IPC and UTS namespaces, with host dirs hidden and
# no_new_privs set, and is trusted: it never runs untrusted code and never holds tests or expected
# output (the pitfall of warm interpreters: children can find the parent's objects through `gc`).
# Per run it only receives a work dir, ids, limits and fds. Each run is one child, forked straight
# into a new PID namespace whose init it is (when its exit is reaped, its whole tree is gone: the
# kernel kills the rest first).
# Issue 17: the request loop and each child's sandbox setup are native (fork_loop.c, built by
# build.rs and handed over by the host on fd 4): every page the server writes between forks, and
# every page a child writes, is a copy-on-write fault, and Python wrote hundreds per run. The child
# sets up its own mount and IPC namespaces and a fresh /proc, then (setsid, fds, work dir, rlimits,
# uid drop, Landlock, close fds, seccomp last) in C, and only then returns here, to run the program
# as `__main__`, finalised like `python`. While the server is nearly idle it keeps children forked
# ahead that have set up their namespaces and wait for a run (~1 ms off a run's latency).
# Protocol (fd 3, SOCK_SEQPACKET): first an init message (JSON: filters, namespaces, trusted sources
# to precompile), then `run <id>\n` + the run's setup (a fixed struct and the work dir; see
# fork_loop.c) + JSON for this file (argv, package path, report) (+ fds stdin, stdout, stderr,
# setup-error pipe[, report channel when "report" is true][, Landlock ruleset]) and `kill <id>`;
# the reply per run is its wait status (JSON).
# Issue 12: with a report channel the program runs through `_codegym_report` (report.py, prepended
# to this file by server.rs), which reads the spec (injected vars) on it and answers with the
# return value, error and variables.
import _signal, builtins, ctypes, json, os, signal, sys, types
os.environ.pop("LD_BIND_NOW", None)  # for the loader only (server.rs): no program sees it

# Children forked ahead, each waiting in its own namespaces for a run (see fork_loop.c): a run then
# skips the fork and the namespace setup (~1 ms) on its critical path. Only while the server is
# nearly idle: under load, runs fork on demand as before.
_POOL = 2


class _FProg(ctypes.Structure):
    """`struct sock_fprog`."""
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _ForkConfig(ctypes.Structure):
    """`struct fork_config` of fork_loop.c."""
    _fields_ = [(name, ctypes.c_int) for name in
                ("ctl", "wake_r", "own_pid_ns", "pool", "unshare_flags", "mount_proc")] + [
        ("proc_access", ctypes.c_uint64),
        ("sys_landlock_add_rule", ctypes.c_long),
        ("sys_landlock_restrict_self", ctypes.c_long),
        ("seccomp", ctypes.POINTER(_FProg)),
        ("nseccomp", ctypes.c_int),
    ] + [(name, ctypes.c_void_p) for name in ("before_fork", "after_fork_parent", "after_fork_child")] + [
        ("server_seccomp", ctypes.POINTER(_FProg)),
        ("nserver_seccomp", ctypes.c_int),
    ]


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


def _finalize(status, dry=False):
    # What Py_FinalizeEx does that a program can observe: wait for threads, atexit, flush.
    # (`dry`: the server's rehearsal, see `_rehearse`; it must not stop its threading or atexit.)
    try:
        threading = sys.modules.get("threading")
        if threading is not None and not dry:
            threading._shutdown()
    except BaseException:
        pass
    try:
        run_exitfuncs = __import__("atexit")._run_exitfuncs
        if not dry:
            run_exitfuncs()
    except BaseException:
        pass
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None and not f.closed:
                f.flush()
        except BaseException:
            if status == 0:
                status = 120
    if dry:
        return
    os._exit(status)


_MAIN = None


def _new_main():
    main = types.ModuleType("__main__")
    main.__file__ = "main.py"
    main.__builtins__ = builtins
    return main


def _run_main(workdir, argv, python_path, report_fd, spec=None, source_path="main.py", dry=False):
    main = _MAIN if _MAIN is not None and not dry else _new_main()
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
    report = {}
    if report_fd is None:
        spec = None
    else:
        try:
            if spec is None:  # too large for the request: the first frame on the channel
                spec = _codegym_report.read_frame(report_fd)
            # (Already close-on-exec: fork_loop.c receives descriptors with MSG_CMSG_CLOEXEC.)
            _codegym_report.install_tools(report_fd, main.__dict__, spec)
        except BaseException:
            spec = None  # the host gave up on the run already
    try:
        with open(source_path, "rb") as f:
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
    _finalize(status, dry)


def _child_signals():
    """A child's first Python: the server's signal set-up is not the program's. Returns the
    server's SIGCHLD handler (for `_rehearse`). `_signal`'s own functions, not `signal`'s wrappers:
    those convert the old handler (here a function) to a `Handlers` member, through `enum`'s Python
    code and a `ValueError` it raises and catches, which wrote ~45-55 of the server's pages in
    every child (copy-on-write faults, bench/child_steps.py). The program's view is the same: SIGCHLD is
    `SIG_DFL`, and `signal.getsignal` converts it when asked."""
    _signal.set_wakeup_fd(-1)
    return _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)


def _rehearse(wake_w):
    """A child's own path (`_child_signals`, `_request`, `_run_main`, `_finalize`, the reporter)
    on an empty program, without its exit and with nothing changed: the server's signal set-up is
    put back, HOME is the server's, stdout and stderr stay empty. Issue 17: each attribute lookup a
    child makes first fills a slot of the interpreter's type cache, and each function it runs first
    is specialised in place: both are page writes, so copy-on-write faults in every child unless
    the server did them first (16 times: past 3.11's warm-up). The last thing before the loop:
    lookups made after it could evict its type-cache slots (~10 misses per run when it ran earlier)."""
    for _ in range(16):
        handler = _child_signals()
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, handler)
    _exercise()
    saved_main, saved_argv = sys.modules.get("__main__"), sys.argv[:]
    # The server's own HOME (prepare.rs): putting it, TMPDIR and CODEGYM_OUTPUTS back changes nothing
    # here, and every child sets all three for itself.
    home = os.environ.get("HOME", "/")
    # Both kinds of run: with a report (any Python program; the report goes into a pipe here) and
    # without (the test harnesses).
    spec = {"vars": {}, "variables": False, "max_variables": 4, "max_variables_bytes": 256,
            "max_return_bytes": 64, "max_repr": 64}
    report_r, report_w = os.pipe()
    try:
        for request, channel in (({"dir": home, "argv": [], "python_path": None, "spec": spec}, report_w),
                                 ({"dir": home, "argv": [], "python_path": None}, -1)):
            request = json.dumps(request).encode()
            buf, fd = ctypes.create_string_buffer(request), ctypes.c_int(channel)
            for _ in range(16):
                ctypes.memmove(buf, request, len(request))  # `_request` clears it
                req, report_fd = _request(buf, len(request), fd)
                _run_main(req["dir"], req.get("argv", ()), req.get("python_path"), report_fd,
                          req.get("spec"), source_path=os.devnull, dry=True)
    finally:
        os.close(report_r)
        os.close(report_w)
        sys.modules["__main__"] = saved_main
        sys.argv[:] = saved_argv


# `json.loads` minus its Python layers (type checks, encoding detection, two regular expression
# matches): what a run's child parses is the host's own JSON (warm/run.rs), and every Python frame
# a child runs writes pages it shared with the server (~15-30 per run, bench/child_steps.py).
_scan = json.JSONDecoder().scan_once


def _parse(raw):
    return _scan(raw.decode(), 0)[0]


def _request(buf, n, fd):
    """A run's request (JSON after the native header) and its report channel, if any. The buffer
    is cleared once parsed: it then holds nothing at all (fork_loop.c cleared the rest)."""
    req = _parse(ctypes.string_at(buf, n))
    ctypes.memset(buf, 0, n)
    return req, (fd.value if fd.value >= 0 else None)


def _filters(hexed):
    """Seccomp programs (hex from the host) as a `struct sock_fprog` array, its length, and the
    buffers it points into (to keep alive)."""
    raws = [bytes.fromhex(h) for h in hexed]
    buffers = [ctypes.create_string_buffer(raw, len(raw)) for raw in raws]
    array = (_FProg * max(len(raws), 1))(
        *(_FProg(len(raw) // 8, ctypes.cast(b, ctypes.c_void_p)) for raw, b in zip(raws, buffers)))
    return array, len(raws), buffers


def _serve():
    # A plain read of the SOCK_SEQPACKET message: `socket` (its enums alone ~370 KB) is not imported,
    # so no fork copies it and no exit tears it down (~27 us of CPU per MB of the server's memory).
    init = json.loads(os.read(3, 1 << 20))
    programs, n_programs, keep = _filters(init["seccomp"])  # each child's (see fork_loop.c)
    server_programs, n_server_programs, server_keep = _filters(init["server_seccomp"])  # the server's
    global _PRECOMPILED
    # Trusted `main.py` sources the host runs often (the unit-test harness, ~1.4 ms to compile),
    # compiled once here, exactly as a child would; a child whose `main.py` is byte-identical uses
    # the code object. These sources hold no tests: those arrive on each run's stdin.
    _PRECOMPILED = {src.encode(): compile(src, "main.py", "exec") for src in init["precompiled"]}
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    # `PyDLL`: the GIL stays held, as CPython's fork hooks (passed in, run as `os.fork()` does)
    # require. The server stays in the loop until the host goes away; it returns in each child.
    lib = ctypes.PyDLL("/proc/self/fd/4", use_errno=True)
    os.close(4)
    loop = lib.codegym_fork_loop
    loop.restype = ctypes.c_int
    loop.argtypes = [ctypes.POINTER(_ForkConfig), ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    hooks = [ctypes.cast(getattr(ctypes.pythonapi, f"PyOS_{name}"), ctypes.c_void_p).value
             for name in ("BeforeFork", "AfterFork_Parent", "AfterFork_Child")]
    config = _ForkConfig(
        3, wake_r, os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC), _POOL,
        init["unshare"], 1 if init["mount_proc"] else 0, init["proc_access"],
        init["sys_landlock_add_rule"], init["sys_landlock_restrict_self"],
        programs, n_programs, *hooks, server_programs, n_server_programs)
    buf = ctypes.create_string_buffer(1 << 16)
    fd = ctypes.c_int(-1)
    _rehearse(wake_w)
    n = loop(ctypes.byref(config), buf, len(buf), ctypes.byref(fd))
    if n == 0:
        return  # the host closed its end
    if n == -1:
        e = ctypes.get_errno()
        raise OSError(e, f"fork server loop: {os.strerror(e)}")
    _child_signals()
    if n == -2:  # forked ahead: warm up, then wait for the run (and sandbox for it)
        global _MAIN
        _MAIN = _new_main()
        _exercise()
        wait_run = lib.codegym_wait_run
        wait_run.restype = ctypes.c_int
        wait_run.argtypes = [ctypes.POINTER(_ForkConfig), ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                             ctypes.POINTER(ctypes.c_int)]
        n = wait_run(ctypes.byref(config), fd.value, buf, len(buf), ctypes.byref(fd))
    req, report_fd = _request(buf, n, fd)
    _run_main(req["dir"], req.get("argv", ()), req.get("python_path"), report_fd, req.get("spec"))


def _exercise():
    """One run of the reporter on a constant program, and one request's parsing. In the server
    before forking, and again in each child forked ahead while it waits: the pages this writes are
    then its own, not copied on the run's critical path. Nothing of it reaches a program."""
    spec = {"vars": {"v": [1]}, "max_repr": 64, "max_return_bytes": 64, "max_variables": 4,
            "max_variables_bytes": 256, "variables": True}
    g = {"__builtins__": builtins, "__name__": "__main__"}
    report = {}
    _codegym_report.execute(b"x = {'a': v}\nprint(end='')\nx", "main.py", g, spec, report)
    _codegym_report.finish(g, spec, report)
    _parse(b'{"dir": "/", "argv": [], "python_path": null}')
    sys.stdout.flush()


def _prewarm():
    """Does once, here, what every child would otherwise do first: imports (`ast` alone is ~100
    classes, most of a trivial run's CPU when imported per run) and one run of the reporter on a
    constant program (the interpreter's type-attribute cache and interned names are then filled). A child that finds them ready writes fewer pages:
    every page it writes is a copy-on-write fault of ~4 us. Runs only trusted, constant code."""
    import ast, atexit  # noqa: F401
    # What the test harnesses import (`copy`: the differential runner; `select`: their candidate's
    # deadline, a shared library whose load cost every unit-test run ~1 ms of CPU) and what
    # programs import most (HumanEval's prompts all start with `from typing import ...`): a module
    # imported here costs a child nothing, one imported there costs it the module's whole
    # start-up. Standard library only; the server never imports anything of a task's.
    import bisect, copy, heapq, itertools, math, select, string, typing  # noqa: F401
    _exercise()
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
