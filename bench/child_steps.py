"""Page faults and CPU of a warm-fork run's child, stage by stage, on the fork server's own code.

Every page a child writes is a copy-on-write fault (and a page freed at its exit), and what a
child writes depends on the Python it runs between its fork and the program: each object it
allocates, and each shared object whose reference count, type cache slot or specialisation counter
it changes. This loads the fork server's Python (`sandbox/src/report.py` + `sandbox/src/warm/server.py`,
everything but its request loop), warms it as the server does (`_prewarm`, `gc.freeze`,
`_rehearse`), then forks N children that each run the child's path up to one stage and exit:

    exit       nothing (the fork and the exit alone)
    signals    + `_child_signals` (the server's signal set-up undone)
    request    + `_request` (the run's JSON parsed, its buffer cleared)
    run        + `_run_main` of `print(7)` with a report channel (a Python run's whole path)
    run-io     + `_run_main` without a report channel (the test harnesses' runs)

No namespaces, uid, Landlock or seccomp (the native set-up, fork_loop.c): only the Python. Faults
and CPU are the children's (`getrusage(RUSAGE_CHILDREN)`), per child.

    python3 -S bench/child_steps.py [--forks 1000]      # -S: no `site`, as the fork server
"""

import ctypes
import json
import os
import resource
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SANDBOX = os.path.join(HERE, "..", "sandbox", "src")
STAGES = ("exit", "signals", "request", "run", "run-io")


def load_server():
    """The fork server's module namespace, warmed as the server warms itself before its loop."""
    with open(os.path.join(SANDBOX, "report.py")) as f:
        source = f.read()
    with open(os.path.join(SANDBOX, "warm", "server.py")) as f:
        source += f.read()
    loop = "\n_serve()"
    if not source.rstrip().endswith(loop.strip()):
        raise SystemExit("server.py no longer ends with `_serve()`: update this benchmark")
    source = source.rstrip()[: -len(loop.strip())]
    server = {"__name__": "__codegym_server__", "__builtins__": __builtins__}
    exec(compile(source, "<string>", "exec"), server)  # noqa: S102 (the server's own code)
    server["_PRECOMPILED"] = {}
    _, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    server["_rehearse"](wake_w)
    return server


def child(server, stage, request, buf, channel, devnull):
    """One child's path up to `stage` (it exits after)."""
    os.dup2(devnull, 1)
    if stage == "exit":
        return
    server["_child_signals"]()
    if stage == "signals":
        return
    ctypes.memmove(buf, request, len(request))
    req, report_fd = server["_request"](buf, len(request), ctypes.c_int(channel))
    if stage == "request":
        return
    os.chdir(req["dir"])  # fork_loop.c's, in C
    server["_run_main"](req["dir"], req.get("argv", ()), req.get("python_path"), report_fd, req.get("spec"))


def main():
    args = sys.argv[1:]
    forks = int(args[1]) if args[:1] == ["--forks"] and len(args) == 2 else 1000
    server = load_server()
    work = tempfile.mkdtemp(prefix="codegym-child-steps-")
    with open(os.path.join(work, "main.py"), "w") as f:
        f.write("print(7)\n")
    spec = {"vars": {}, "variables": False, "max_variables": 4, "max_variables_bytes": 256,
            "max_return_bytes": 64, "max_repr": 64}
    devnull = os.open(os.devnull, os.O_WRONLY)
    report_r, report_w = os.pipe()
    os.set_blocking(report_r, False)
    buf = ctypes.create_string_buffer(1 << 16)
    print(f"{'stage':<10} {'faults':>7} {'ms CPU':>7}   per child, {forks} children")
    for stage in STAGES:
        with_report = stage != "run-io"
        request = {"dir": work, "argv": [], "python_path": None}
        if with_report:
            request["spec"] = spec
        request = json.dumps(request).encode()
        channel = report_w if with_report else -1
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        for _ in range(forks):
            pid = os.fork()
            if pid == 0:
                child(server, stage, request, buf, channel, devnull)
                os._exit(0)
            os.waitpid(pid, 0)
            try:
                while os.read(report_r, 1 << 16):
                    pass
            except BlockingIOError:
                pass
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        faults = (after.ru_minflt - before.ru_minflt) / forks
        cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / forks * 1000
        print(f"{stage:<10} {faults:7.1f} {cpu:7.3f}")
    print(f"(Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
