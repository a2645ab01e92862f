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

# --- Issue 14: toolchains of every language the sandbox runs (env-coding/src/lang/). -----------
# The language tests need them all; they come from Debian packages, installed only when missing
# (about 40 s on a fresh Debian 12 machine with a package mirror; nothing when present).
declare -A TOOLCHAIN_PACKAGES=(
    [/usr/bin/g++]=g++ [/usr/bin/gcc]=gcc [/usr/bin/rustc]=rustc [/usr/bin/go]=golang-go
    [/usr/bin/javac]=default-jdk-headless [/usr/bin/node]=nodejs
    [/usr/share/nodejs/typescript/lib/typescript.js]=node-typescript
    [/usr/bin/ruby]=ruby [/usr/bin/php]=php-cli [/usr/bin/lua5.4]=lua5.4 [/usr/bin/perl]=perl
)
MISSING_PACKAGES=()
for tool in "${!TOOLCHAIN_PACKAGES[@]}"; do
    [ -e "$tool" ] || MISSING_PACKAGES+=("${TOOLCHAIN_PACKAGES[$tool]}")
done
if [ ${#MISSING_PACKAGES[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${MISSING_PACKAGES[@]}"
fi
# --- end of issue 14's block -----------------------------------------------------------------

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --locked
cargo test --workspace --locked

CODEGYM_BIN="$PWD/target/debug/codegym" .venv/bin/python -m pytest trainer-bridge/python/tests -q
