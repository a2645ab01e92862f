#!/usr/bin/env bash
# Runs every test of the project, from a clean clone on a fresh machine:
#   1. a Python venv (.venv) with the `codegym` package and its test extras from PyPI,
#   2. formatting and clippy (warnings are errors),
#   3. all Rust tests (unit, integration, end to end against real servers and real Python),
#   4. the Python tests against a real `codegym serve`.
set -euo pipefail
cd "$(dirname "$0")/.."

# `python3` on PATH may be a pyenv shim; ask it once for the real interpreter.
PYTHON=$(python3 -c 'import sys; print(sys.executable)')
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "./trainer-bridge/python[test]"

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --locked
cargo test --workspace --locked

CODEGYM_BIN="$PWD/target/debug/codegym" .venv/bin/python -m pytest trainer-bridge/python/tests -q

# --- Heavy suites: multi-process tests kept in one clearly named step (issue 16). ---
# Pool / Ray (branch pool): a local multi-node Ray cluster (ray from PyPI, the package's `ray`
# extra) with one `codegym serve` per node, a rollout over it with a server killed mid-rollout.
# Cost measured on the 2-core machine: ~30 s for the suite, plus installing ray (one wheel).
.venv/bin/python -m pip install --quiet "./trainer-bridge/python[ray]"
CODEGYM_HEAVY=1 CODEGYM_BIN="$PWD/target/debug/codegym" .venv/bin/python -m pytest trainer-bridge/python/tests/heavy -q -m heavy
