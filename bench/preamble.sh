# Sourced by the bench/*.sh scripts after they set `work`: the real interpreter both sides of a
# comparison get (a pyenv `python3` shim costs ~0.1 s to resolve), the build under test
# (CODEGYM, default the release build), and the work dir.
python=$(command -v python3.11 || command -v python3)
python=$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))')
codegym=${CODEGYM:-target/release/codegym}
[ -x "$codegym" ] || { echo "build it first: cargo build --release -p codegym" >&2; exit 1; }
mkdir -p "$work"
