#!/usr/bin/env bash
# False timeouts: correct reference solutions of a judged task (CPU limit 1 s, each spinning to 50%
# of it on its own CPU clock) sent as 64 concurrent one-item `Evaluate` calls to two `codegym serve`
# processes that differ only in `coding.timeout_rerun.enabled`, interleaved round by round; prints
# per round and in total how many were judged TLE with the re-run off and on. Run once with every
# program of a batch running at once (`sandbox.max_concurrent` 64: 64 programs on the machine's
# cores) and once with the sandbox's default (4 x cores; the rest of the batch queues).
#
#   cargo build --release -p codegym -p codegym-bench && bash bench/false_timeouts.sh   # ROUNDS=5, ITEMS=64
#   CODEGYM=target/debug/codegym BENCH=target/debug/codegym-bench bash bench/false_timeouts.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
items=${ITEMS:-64}
codegym=${CODEGYM:-target/release/codegym}
bench=${BENCH:-target/release/codegym-bench}
cores=$(nproc)
for b in "$codegym" "$bench"; do
    [ -x "$b" ] || { echo "build it first: cargo build --release -p codegym -p codegym-bench" >&2; exit 1; }
done
echo "host: $cores cores, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for max in "$items" $((4 * cores)); do
    echo
    RUST_LOG=${RUST_LOG:-warn} "$bench" false-timeouts --codegym-bin "$codegym" --items "$items" \
        --rounds "$rounds" --max-concurrent "$max"
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
