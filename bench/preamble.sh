# Sourced by the bench/*.sh scripts after they set `work`: the real interpreter both sides of a
# comparison get (a pyenv `python3` shim costs ~0.1 s to resolve), the build under test
# (CODEGYM, default the release build), the work dir, and the timing helpers.
python=$(command -v python3.11 || command -v python3)
python=$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))')
codegym=${CODEGYM:-target/release/codegym}
[ -x "$codegym" ] || { echo "build it first: cargo build --release -p codegym" >&2; exit 1; }
mkdir -p "$work"

# Wall seconds of one command; its output goes to $work/last.log (shown, and the script stops, if
# it fails).
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >"$work/last.log" 2>&1 || { cat "$work/last.log" >&2; exit 1; }; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
