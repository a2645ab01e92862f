#!/usr/bin/env bash
# Cross-checks of rewarded programs: what `codegym rollout --cross-check 1` costs a run against
# the same fake model with it off, interleaved round by round (off/on, then on/off). Every
# episode earns a reward (the fake policy answers each task with its reference plus a comment),
# so with `--cross-check 1` every episode's step is compared with the reference on the task's
# derived inputs. Two shapes of 200 episodes at concurrency 32, one model turn each:
#   distinct: 200 tasks x 1 sample (every check derives its task's inputs first: the worst case
#             for the checker, whose derivation is kept per task)
#   repeated: 25 tasks x 8 samples (8 checks per derivation; the 8 identical programs of a task
#             share one scoring verdict, while each check runs)
# Prints each run's wall time, episodes/s, the CPU time of `codegym` and its sandboxed runs
# (user + system, from /usr/bin/time) and the cross-checks the run recorded.
#
#   cargo build --release -p codegym -p codegym-bench && bash bench/cross_check.sh   # ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
concurrency=${CONCURRENCY:-32}
latency=${LATENCY_MS:-50}
bench=${BENCH:-target/release/codegym-bench}
work=${WORK:-target/bench-cross-check}
rm -rf "$work"
# shellcheck source=bench/preamble.sh
source bench/preamble.sh
[ -x "$bench" ] || { echo "build it first: cargo build --release -p codegym-bench" >&2; exit 1; }

# A task file and the fake model's script for `tasks` tasks: task k is `f(x) = x * x + k`,
# HumanEval-style (three asserts), with its reference; the policy answers with the reference.
make_shape() {
    "$python" - "$work/$1" "$2" <<'EOF'
import json, sys
base, n = sys.argv[1], int(sys.argv[2])
rules = []
with open(base + ".tasks.jsonl", "w") as f:
    for k in range(n):
        prompt = f'def f(x):\n    """Return x squared plus {k} (task {k})."""\n'
        check = "def check(candidate):\n" + "".join(
            f"    assert candidate({x}) == {x * x + k}\n" for x in (2, 0, -3))
        ref = f"{prompt}    return x * x + {k}\n"
        f.write(json.dumps({"schema_version": 1, "id": f"t{k}", "prompt": prompt,
                            "completion_prefix": prompt, "reference_solution": ref,
                            "reward": {"version": 1, "components": [
                                {"type": "check_function", "entry_point": "f", "code": check}]}}) + "\n")
        program = f"def f(x):\n    # the policy's answer to task {k}\n    return x * x + {k}\n"
        rules.append({"prompt_contains": f"(task {k})", "reply": {"code": program}})
json.dump({"rules": rules, "default_reply": {"text": "no idea"}}, open(base + ".script.json", "w"))
EOF
}

# One rollout: prints `arm wall_s episodes_per_s cpu_s checks`.
run() {
    local shape=$1 samples=$2 arm=$3 url=$4 seed=$5 fraction=0
    [ "$arm" = on ] && fraction=1
    local out="$work/$shape.$arm.$seed.jsonl"
    /usr/bin/time -f "%e %U %S" -o "$work/time" env CODEGYM_PYTHON="$python" RUST_LOG=warn \
        "$codegym" rollout --model bench/fake --base-url "$url" --api-key-env CODEGYM_BENCH_NO_KEY \
        --tasks "$work/$shape.tasks.jsonl" --samples "$samples" --concurrency "$concurrency" \
        --max-turns 1 --seed "$seed" --progress off --cross-check "$fraction" --out "$out" \
        >"$work/last.log" 2>&1 || { cat "$work/last.log" >&2; exit 1; }
    read -r wall user sys <"$work/time"
    "$python" - "$out" "$arm" "$wall" "$user" "$sys" <<'EOF'
import json, sys
out, arm, wall, user, sys_ = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
s = json.load(open(out + ".summary.json"))
assert s["episodes"] == 200 and s["solved"] == 200, s
checks = s.get("cross_checks", {})
print(f"  {arm:3}  wall {wall:6.2f} s  {200 / wall:5.1f} episodes/s  CPU {user + sys_:6.2f} s  "
      f"cross-checks {json.dumps(checks)}")
EOF
}

echo "host: $(nproc) cores, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for spec in distinct:200:1 repeated:25:8; do
    IFS=: read -r shape tasks samples <<<"$spec"
    make_shape "$shape" "$tasks"
    mkfifo "$work/$shape.hold"
    "$bench" fake-llm --latency-ms "$latency" --script "$work/$shape.script.json" \
        <"$work/$shape.hold" >"$work/$shape.fake" &
    fake=$!
    exec 7>"$work/$shape.hold"   # the fake model serves while this stays open
    until grep -q "listening on" "$work/$shape.fake" 2>/dev/null; do sleep 0.05; done
    url=$(sed -n 's/^listening on //p' "$work/$shape.fake")
    echo "$shape: $tasks tasks x $samples samples, concurrency $concurrency, model latency $latency ms"
    for round in $(seq 1 "$rounds"); do
        echo " round $round"
        if [ $((round % 2)) = 1 ]; then arms="off on"; else arms="on off"; fi
        for arm in $arms; do run "$shape" "$samples" "$arm" "$url" "$round"; done
    done
    exec 7>&-
    wait "$fake"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
