#!/usr/bin/env bash
# The wheel as users get it: build trainer-bridge/python with its PEP 517 backend (maturin: the
# Python package and the `codegym` binary in one platform wheel), install it alone into a fresh venv,
# and run the Python quick start (tests/wheel/smoke.py: `codegym --version`, a CartPole episode and a
# coding Evaluate through `codegym.LocalServer`) with a PATH that has no cargo.
#
# Usage: tests/wheel/check.sh PYTHON OUT_DIR
# MATURIN_PEP517_ARGS passes through (CI: "--profile dev", the binary its tests built already).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=$1
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
rm -rf "$OUT/dist" "$OUT/venv"
"$PYTHON" -m venv "$OUT/build-venv"
"$OUT/build-venv/bin/python" -m pip install --quiet --upgrade pip "build>=1.2,<2"
"$OUT/build-venv/bin/python" -m build --wheel --outdir "$OUT/dist" trainer-bridge/python >"$OUT/build.log" 2>&1 \
    || { tail -n 40 "$OUT/build.log"; exit 1; }
wheels=("$OUT"/dist/codegym-*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "expected one wheel, got: ${wheels[*]}"; exit 1; }
echo "wheel: $(basename "${wheels[0]}") ($(du -h "${wheels[0]}" | cut -f1))"
"$PYTHON" -m venv "$OUT/venv"
"$OUT/venv/bin/python" -m pip install --quiet "${wheels[0]}"
# Nothing from the build: no cargo, no CODEGYM_BIN, only the venv and the system's own bin dirs.
env -i HOME="$HOME" PATH="$OUT/venv/bin:/usr/local/bin:/usr/bin:/bin" \
    "$OUT/venv/bin/python" tests/wheel/smoke.py
