#!/usr/bin/env bash
# One task scored end to end by `codegym evaluate`, the way a user checks one solution: the whole
# command (the sandbox's start-up: interpreter, probes, fork server; then the run) for a Python
# task, and for a C task (a sandboxed compile, then a sandboxed run: two fresh processes that come
# alone, each placed in its own cgroups). Rounds alternate with a second build when CODEGYM_B is
# set; prints every round's wall times and the medians in milliseconds.
#
#   cargo build --release -p codegym && bash bench/one_task.sh              # ROUNDS=10
#   CODEGYM_B=/path/to/other/codegym bash bench/one_task.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-10}
work=${WORK:-target/bench-one-task}
other=${CODEGYM_B:-}
# shellcheck source=bench/preamble.sh
source bench/preamble.sh
header='{"schema_version": 1, "name": "one", "description": "one task"}'
stdout7='{"version": 1, "components": [{"type": "stdout", "expected": "7\n"}]}'
printf '%s\n{"id": "py", "prompt": "Print 7.", "reward": %s}\n' "$header" "$stdout7" >"$work/py-tasks.jsonl"
printf '%s\n' '{"task_id": "py", "completion": "print(7)\n"}' >"$work/py-samples.jsonl"
printf '%s\n{"id": "c", "prompt": "Print 7.", "language": "c", "reward": %s}\n' "$header" "$stdout7" >"$work/c-tasks.jsonl"
# A new source each round (its comment): the compile cache never answers.
c_sample() { printf '{"task_id": "c", "completion": "#include <stdio.h>\\n/* %s */\\nint main(void){printf(\\"7\\\\n\\");return 0;}\\n"}\n' "$1" >"$work/c-samples.jsonl"; }

ms() {
    local t0 t1
    t0=$(date +%s%N)
    CODEGYM_PYTHON="$python" "$@" >"$work/last.log" 2>&1 || { cat "$work/last.log" >&2; exit 1; }
    grep -q "1 of 1 samples passed" "$work/last.log" || { cat "$work/last.log" >&2; exit 1; }
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000000))
}
one() {
    local bin=$1 kind=$2
    ms "$bin" evaluate --tasks "$work/$kind-tasks.jsonl" --samples "$work/$kind-samples.jsonl" \
        --out "$work/results.jsonl" --metrics "$work/pass_at_k.json"
}
declare -A times
builds=("$codegym")
[ -n "$other" ] && builds+=("$other")
for r in $(seq 1 "$rounds"); do
    line="round $r:"
    for b in "${!builds[@]}"; do
        c_sample "$r-$b-$$"
        p=$(one "${builds[$b]}" py)
        c=$(one "${builds[$b]}" c)
        times[$b,py]+="$p "
        times[$b,c]+="$c "
        line+=" [${builds[$b]}] python ${p} ms, c ${c} ms;"
    done
    echo "$line"
done
for b in "${!builds[@]}"; do
    # shellcheck disable=SC2086
    echo "median of $rounds rounds, ${builds[$b]}: python task $(median ${times[$b,py]}) ms, c task $(median ${times[$b,c]}) ms"
done
echo "(load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
