"""The naive evaluator the trivial benchmarks compare against: one `python3 -I -S -c PROGRAM`
process per program (`subprocess.run`, output captured and compared with `i\n`), no isolation at
all, on a pool of threads. Exits non-zero unless every program printed its index.

    python3 bench/naive.py [--threads 2] PYTHON PROGRAMS_TXT
"""

import argparse
import subprocess
from concurrent.futures import ThreadPoolExecutor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("python")
    ap.add_argument("programs")
    args = ap.parse_args()
    programs = open(args.programs).read().splitlines()

    def run(i):
        out = subprocess.run([args.python, "-I", "-S", "-c", programs[i]], capture_output=True, text=True).stdout
        return out == f"{i}\n"

    with ThreadPoolExecutor(args.threads) as pool:
        passed = sum(pool.map(run, range(len(programs))))
    assert passed == len(programs), f"{passed} of {len(programs)} passed"


if __name__ == "__main__":
    main()
