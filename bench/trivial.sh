#!/usr/bin/env bash
# 2,000 trivial stdout tasks scored by `codegym evaluate` (every isolation layer on every run: its
# own PID, mount and IPC namespaces, uid, rlimits, Landlock, seccomp) against the baseline of one
# `python3 -I -S -c CODE` process per sample on 2 threads (a naive evaluator: `subprocess.run` with
# the output captured and compared, no isolation at all), interleaved round by round on the same
# machine; prints each round and the medians as runs per second and their ratio. The target:
# codegym >= 6x the baseline's rate.
#
#   cargo build --release -p codegym && bash bench/trivial.sh       # ROUNDS=5, N=2000 by default
#   CODEGYM_B=/path/to/other/codegym bash bench/trivial.sh          # a second build, interleaved too
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
n=${N:-2000}
work=${WORK:-target/bench-trivial}
other=${CODEGYM_B:-}
# shellcheck source=bench/preamble.sh
source bench/preamble.sh
# Task i prints i; its sample is the program `print(i)` (a whole program: no completion prefix).
"$python" - "$n" "$work" <<'PY'
import json, sys
n, work = int(sys.argv[1]), sys.argv[2]
with open(f"{work}/tasks.jsonl", "w") as t, open(f"{work}/samples.jsonl", "w") as s, \
        open(f"{work}/programs.txt", "w") as p:
    t.write(json.dumps({"schema_version": 1, "name": "trivial", "description": "print(i)"}) + "\n")
    for i in range(n):
        t.write(json.dumps({"id": f"t{i}", "prompt": f"Print {i}.",
                            "reward": {"version": 1, "components": [{"type": "stdout", "expected": f"{i}\n"}]}}) + "\n")
        s.write(json.dumps({"task_id": f"t{i}", "completion": f"print({i})\n"}) + "\n")
        p.write(f"print({i})\n")
PY

seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >"$work/last.log" 2>&1 || { cat "$work/last.log" >&2; exit 1; }; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
evaluate() {
    CODEGYM_PYTHON="$python" seconds "$1" evaluate --tasks "$work/tasks.jsonl" --samples "$work/samples.jsonl" \
        --out "$work/results.jsonl" --metrics "$work/pass_at_k.json"
}
baseline() { seconds "$python" - "$python" "$work/programs.txt" <<'PY'
import subprocess, sys
from concurrent.futures import ThreadPoolExecutor
python, programs = sys.argv[1], open(sys.argv[2]).read().splitlines()
def run(i):
    out = subprocess.run([python, "-I", "-S", "-c", programs[i]], capture_output=True, text=True).stdout
    return out == f"{i}\n"
with ThreadPoolExecutor(2) as pool:
    passed = sum(pool.map(run, range(len(programs))))
assert passed == len(programs), f"{passed} of {len(programs)} passed"
PY
}
rate() { echo "$n / $1" | bc -l; }
ours=(); base=(); others=()
for r in $(seq 1 "$rounds"); do
    a=$(evaluate "$codegym")
    grep -q "$n of $n samples passed" "$work/last.log" || { cat "$work/last.log" >&2; exit 1; }
    b=$(baseline)
    ours+=("$a"); base+=("$b")
    line=$(printf 'round %d: codegym evaluate %.0f runs/s, python3 -I -S -c on 2 threads %.0f runs/s, ratio %.2f' \
        "$r" "$(rate "$a")" "$(rate "$b")" "$(echo "$b / $a" | bc -l)")
    if [ -n "$other" ]; then
        c=$(evaluate "$other")
        grep -q "$n of $n samples passed" "$work/last.log" || { cat "$work/last.log" >&2; exit 1; }
        others+=("$c")
        line+=$(printf ', %s %.0f runs/s (ratio %.2f)' "$other" "$(rate "$c")" "$(echo "$b / $c" | bc -l)")
    fi
    echo "$line"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
ma=$(median "${ours[@]}"); mb=$(median "${base[@]}")
printf 'median of %d rounds: codegym evaluate %.0f runs/s, baseline %.0f runs/s, ratio %.2f' \
    "$rounds" "$(rate "$ma")" "$(rate "$mb")" "$(echo "$mb / $ma" | bc -l)"
if [ -n "$other" ]; then
    mc=$(median "${others[@]}")
    printf ', %s %.0f runs/s (ratio %.2f)' "$other" "$(rate "$mc")" "$(echo "$mb / $mc" | bc -l)"
fi
printf ' (load average now: %s)\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
