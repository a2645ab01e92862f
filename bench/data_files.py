"""A data task's cost per submission: the same trivial program scored against a task with a large
input file and against one without, by `codegym evaluate` (BENCHMARKS.md, "Data tasks: a large
input file per submission").

    python3 bench/data_files.py DIR [--mib 4.6] [--samples 100]
    perf stat -e task-clock -- target/release/codegym evaluate --tasks DIR/tasks.jsonl \\
        --samples DIR/samples-big.jsonl --config DIR/config.json --out DIR/out.jsonl     # then samples-small

Writes DIR/data.csv (about MIB MiB of CSV rows), DIR/tasks.jsonl (task `big` reads nothing but
carries the file; task `small` is the same task without it), one sample file per task (SAMPLES
distinct `print(1)` programs, so that no verdict is shared) and DIR/config.json (`max_concurrent`
4; `--no-cache` turns the verdict cache off).
"""

import argparse
import json
import os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--mib", type=float, default=4.6)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--no-cache", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    with open(os.path.join(args.dir, "data.csv"), "w") as f:
        f.write("a,b,c\n")
        size, i = 6, 0
        while size < args.mib * (1 << 20):
            row = f"{i},{i * 3 % 17},{i * 7 % 101}\n"
            f.write(row)
            size, i = size + len(row), i + 1
    reward = {"version": 1, "components": [{"type": "stdout", "expected": "1\n"}]}
    with open(os.path.join(args.dir, "tasks.jsonl"), "w") as f:
        f.write(json.dumps({"schema_version": 1, "name": "data-files"}) + "\n")
        f.write(json.dumps({"id": "big", "prompt": "Print 1.", "files": {"data.csv": {"path": "data.csv"}},
                            "reward": reward}) + "\n")
        f.write(json.dumps({"id": "small", "prompt": "Print 1.", "reward": reward}) + "\n")
    for task in ("big", "small"):
        with open(os.path.join(args.dir, f"samples-{task}.jsonl"), "w") as f:
            for i in range(args.samples):
                f.write(json.dumps({"task_id": task, "completion": f"print(1)  # {i}\n"}) + "\n")
    coding = {"sandbox": {"max_concurrent": 4}}
    if args.no_cache:
        coding["verdict_cache_mib"] = 0
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump({"coding": coding}, f)


if __name__ == "__main__":
    main()
