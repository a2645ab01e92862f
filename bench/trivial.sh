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
# shellcheck source=bench/trivial_data.sh
source bench/trivial_data.sh

evaluate() {
    CODEGYM_PYTHON="$python" seconds "$1" evaluate --tasks "$work/tasks.jsonl" --samples "$work/samples.jsonl" \
        --out "$work/results.jsonl" --metrics "$work/pass_at_k.json"
}
baseline() { seconds "$python" bench/naive.py --threads 2 "$python" "$work/programs.txt"; }
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
ma=$(median "${ours[@]}"); mb=$(median "${base[@]}")
printf 'median of %d rounds: codegym evaluate %.0f runs/s, baseline %.0f runs/s, ratio %.2f' \
    "$rounds" "$(rate "$ma")" "$(rate "$mb")" "$(echo "$mb / $ma" | bc -l)"
if [ -n "$other" ]; then
    mc=$(median "${others[@]}")
    printf ', %s %.0f runs/s (ratio %.2f)' "$other" "$(rate "$mc")" "$(echo "$mb / $mc" | bc -l)"
fi
printf ' (load average now: %s)\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
