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
    harness    the unit-test harness (env-coding/src/reward/*.py, precompiled as the server does)
               on HumanEval's first problem (`--humaneval FILE`: its JSONL or .jsonl.gz), its
               canonical solution as the candidate; split into the tests' process and the
               candidate's (the harness's own child, reaped here as their subreaper)
    harness-warm  the same with the tests compiled (what the host hands a later run of the suite)

No namespaces, uid, Landlock or seccomp (the native set-up, fork_loop.c): only the Python. Faults
and CPU are the children's (`getrusage(RUSAGE_CHILDREN)`), per child.

    python3 -S bench/child_steps.py [--forks 1000] [--humaneval HumanEval.jsonl.gz]
    # -S: no `site`, as the fork server
"""

import argparse
import ctypes
import gzip
import importlib.util
import json
import marshal
import os
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SANDBOX = os.path.join(HERE, "..", "sandbox", "src")
STAGES = ("exit", "signals", "request", "run", "run-io")
REWARD = os.path.join(HERE, "..", "env-coding", "src", "reward")
# The order of `HARNESS_SOURCE` (env-coding/src/reward/harness.rs).
HARNESS_PARTS = ("plain_codec.py", "candidate.py", "names.py", "harness.py")


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


def child(server, stage, request, buf, channel, devnull, stdin=None):
    """One child's path up to `stage` (it exits after)."""
    os.dup2(devnull, 1)
    if stdin is not None:
        os.dup2(stdin, 0)
        # fork_loop.c makes every run non-dumpable in C: the harness then skips its own `prctl`.
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
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


def harness_run(server, problem):
    """The harness stage's work dir and stdin: main.py is the harness (precompiled in the
    server's table, as `init["precompiled"]` does), solution.py the canonical solution."""
    source = ""
    for name in HARNESS_PARTS:
        with open(os.path.join(REWARD, name)) as f:
            source += f.read()
    server["_PRECOMPILED"] = {source.encode(): compile(source, "main.py", "exec")}
    work = tempfile.mkdtemp(prefix="codegym-child-steps-harness-")
    with open(os.path.join(work, "main.py"), "w") as f:
        f.write(source)
    with open(os.path.join(work, "solution.py"), "w") as f:
        f.write(problem["prompt"] + problem["canonical_solution"])
    config = {"style": "check", "code": problem["test"], "entry_point": problem["entry_point"],
              "prelude": problem["prompt"], "candidate_names": None, "per_test_timeout": 3.0}
    cold = b"0" * 32 + b"\n" + json.dumps(config).encode()
    # A later run of the same suite: the tests compiled, as the host hands back a first run's.
    harness = {"__name__": "harness"}
    exec(compile(source.rstrip()[: -len("_cg_main()")], "main.py", "exec"), harness)  # noqa: S102
    magic = importlib.util.MAGIC_NUMBER
    config["compiled"] = (magic + marshal.dumps(harness["_cg_compile_tests"](config, str))).hex()
    warm = b"0" * 32 + b"\n" + json.dumps(config).encode()
    return work, cold, warm


def stdin_pipe(data):
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return r


def reap(pid):
    """The child's own rusage (wait4), then its orphans' (reparented here: the subreaper)."""
    _, _, own = os.wait4(pid, 0)
    orphans = []
    while True:
        try:
            _, _, usage = os.wait4(-1, 0)
        except ChildProcessError:
            return own, orphans
        orphans.append(usage)


def per_child(usages, forks):
    faults = sum(u.ru_minflt for u in usages) / forks
    cpu = sum(u.ru_utime + u.ru_stime for u in usages) / forks * 1000
    return faults, cpu


def main():
    parser = argparse.ArgumentParser(description="faults and CPU of a warm run's child, by stage")
    parser.add_argument("--forks", type=int, default=1000)
    parser.add_argument("--humaneval", help="HumanEval's JSONL (or .jsonl.gz): adds the harness stage")
    args = parser.parse_args()
    forks = args.forks
    server = load_server()
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the harness's candidates
    work = tempfile.mkdtemp(prefix="codegym-child-steps-")
    with open(os.path.join(work, "main.py"), "w") as f:
        f.write("print(7)\n")
    spec = {"vars": {}, "variables": False, "max_variables": 4, "max_variables_bytes": 256,
            "max_return_bytes": 64, "max_repr": 64}
    devnull = os.open(os.devnull, os.O_WRONLY)
    report_r, report_w = os.pipe()
    os.set_blocking(report_r, False)
    buf = ctypes.create_string_buffer(1 << 16)
    stages = list(STAGES)
    if args.humaneval:
        opener = gzip.open if args.humaneval.endswith(".gz") else open
        with opener(args.humaneval, "rt") as f:
            problem = json.loads(f.readline())
        harness_dir, cold, warm = harness_run(server, problem)
        harness_stdin = {"harness": cold, "harness-warm": warm}
        stages += harness_stdin
    print(f"{'stage':<10} {'faults':>7} {'ms CPU':>7}   per child, {forks} children")
    for stage in stages:
        with_report = stage in ("run", "request", "signals", "exit")
        request = {"dir": harness_dir if stage.startswith("harness") else work, "argv": [], "python_path": None}
        if with_report:
            request["spec"] = spec
        request = json.dumps(request).encode()
        channel = report_w if with_report else -1
        own, orphans = [], []
        for _ in range(forks):
            stdin = stdin_pipe(harness_stdin[stage]) if stage.startswith("harness") else None
            pid = os.fork()
            if pid == 0:
                child(server, stage, request, buf, channel, devnull, stdin)
                os._exit(0)
            if stdin is not None:
                os.close(stdin)
            usage, more = reap(pid)
            own.append(usage)
            orphans.extend(more)
            try:
                while os.read(report_r, 1 << 16):
                    pass
            except BlockingIOError:
                pass
        faults, cpu = per_child(own, forks)
        print(f"{stage:<10} {faults:7.1f} {cpu:7.3f}")
        if orphans:
            faults, cpu = per_child(orphans, forks)
            print(f"{'+ its child':<10} {faults:7.1f} {cpu:7.3f}   ({len(orphans)} of them)")
    print(f"(Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
