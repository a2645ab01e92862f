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

# Issue 13 (task packages): the sandbox's interpreter runs pip (as a host tool) to build the task
# package cache; Debian's system python3 has no pip module until python3-pip is installed.
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-pip
fi

# Issue 13 (AutoCoder mode): the model's tests run pytest==8.3.5 from PyPI through that same package
# cache (rollout/tests/autocoder.rs, tests/autocoder_cli.rs; cache in $TMPDIR, reused across runs):
# nothing more to install; a cold cache fetches pytest and its 3 dependencies (~2 MB installed).

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --locked
cargo test --workspace --locked

CODEGYM_BIN="$PWD/target/debug/codegym" .venv/bin/python -m pytest trainer-bridge/python/tests -q
