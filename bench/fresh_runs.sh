#!/usr/bin/env bash
# Fresh sandboxed processes at the machine's limit: N tasks in C scored by `codegym evaluate`, all
# with the same program (one sandboxed compile, then N sandboxed runs of the cached binary, each a
# fresh process with every layer). Rounds alternate with a second build when CODEGYM_B is set;
# prints runs per second and the CPU per run of the whole command (the host and every process it
# reaped).
#
#   cargo build --release -p codegym && bash bench/fresh_runs.sh            # ROUNDS=5, N=500
#   CODEGYM_B=/path/to/other/codegym bash bench/fresh_runs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
n=${N:-500}
work=${WORK:-target/bench-fresh-runs}
other=${CODEGYM_B:-}
# shellcheck source=bench/preamble.sh
source bench/preamble.sh
"$python" - "$n" "$work" <<'PY'
import json, sys
n, work = int(sys.argv[1]), sys.argv[2]
program = '#include <stdio.h>\nint main(void){printf("7\\n");return 0;}\n'
with open(f"{work}/tasks.jsonl", "w") as t, open(f"{work}/samples.jsonl", "w") as s:
    t.write(json.dumps({"schema_version": 1, "name": "fresh", "description": "print 7 in C"}) + "\n")
    for i in range(n):
        t.write(json.dumps({"id": f"t{i}", "prompt": "Print 7.", "language": "c",
                            "reward": {"version": 1, "components": [{"type": "stdout", "expected": "7\n"}]}}) + "\n")
        s.write(json.dumps({"task_id": f"t{i}", "completion": program}) + "\n")
PY
one() {
    CODEGYM_PYTHON="$python" /usr/bin/time -o "$work/time" -f "%e %U %S" "$1" evaluate \
        --tasks "$work/tasks.jsonl" --samples "$work/samples.jsonl" --out "$work/results.jsonl" \
        --metrics "$work/pass_at_k.json" >"$work/last.log" 2>&1 || { cat "$work/last.log" >&2; exit 1; }
    grep -q "$n of $n samples passed" "$work/last.log" || { cat "$work/last.log" >&2; exit 1; }
    read -r wall user sys <"$work/time"
    echo "$wall $(echo "($user + $sys) * 1000 / $n" | bc -l)"
}
builds=("$codegym")
[ -n "$other" ] && builds+=("$other")
declare -A rates cpus
for r in $(seq 1 "$rounds"); do
    line="round $r:"
    for b in "${!builds[@]}"; do
        read -r wall cpu <<<"$(one "${builds[$b]}")"
        rate=$(echo "$n / $wall" | bc -l)
        rates[$b]+="$rate "
        cpus[$b]+="$cpu "
        line+=$(printf ' [%s] %.0f runs/s, %.2f ms CPU/run;' "${builds[$b]}" "$rate" "$cpu")
    done
    echo "$line"
done
for b in "${!builds[@]}"; do
    # shellcheck disable=SC2086
    printf 'median of %d rounds, %s: %.0f runs/s, %.2f ms CPU per run\n' "$rounds" "${builds[$b]}" \
        "$(median ${rates[$b]})" "$(median ${cpus[$b]})"
done
echo "(load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
