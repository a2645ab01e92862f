#!/usr/bin/env bash
# The sandbox inside a container, for real (podman from Debian, the image from deploy/Containerfile
# on a locally built Debian 12 base: no registry needed). For each configuration it records
# `codegym doctor` (which isolation layers remain), runs every bundled reference solution through
# the sandbox (`codegym tasks check`), and in two of them sends hostile programs to the HTTP judge
# API (`/run_code`): a TCP connection to the server itself, a host file, signals to PID 1, and an
# endless loop that must be killed at its deadline.
#
# The image holds every language the sandbox runs: in each configuration `doctor` must tick all 13,
# and a native task file with one stdin/stdout-judged task per language (tests/container/
# languages.jsonl: C, C++, Rust, Go, Java, JavaScript, TypeScript, Bash, Ruby, PHP, Lua, Perl,
# Python reference solutions) must pass `tasks check`; a wrong Go answer must fail it. A typed-output
# data task with a task package (tests/container/data: a CSV file, a CLI input, `float`/`int`/`str`
# outputs, `tabulate` installed from a read-only wheelhouse with no network) runs through `codegym
# run` in the documented-capabilities and restricted configurations.
#
# Configurations (all with --network none except the HTTP checks, which need the host's loopback):
#   podman-default   podman's own default seccomp profile and capabilities
#   docker-default   Docker's / containerd's default seccomp profile (moby's default.json from
#                    Debian's golang-github-docker-docker-dev): clone3 answers ENOSYS, clone with
#                    namespace flags EPERM: the clone3-blocked path
#   restricted       the Kubernetes "restricted" Pod Security profile: non-root uid, every
#                    capability dropped, no-new-privileges, Docker's default seccomp profile
#   documented-caps  deploy/k8s's securityContext: every capability dropped but CHOWN,
#                    DAC_OVERRIDE, SETUID, SETGID, KILL and SYS_ADMIN, a read-only root file
#                    system (podman mounts tmpfs on /tmp, /var/tmp, /run), no-new-privileges,
#                    Docker's default seccomp
#
# Usage: tests/container.sh CODEGYM_BINARY [REPORT_DIR]   (root; needs podman, runc, mmdebstrap)
set -euo pipefail
bin=$(realpath "$1")
out=${2:-$(mktemp -d)}
mkdir -p "$out"
out=$(realpath "$out") # bind-mounted below: podman takes a relative source for a volume name
root=$(cd "$(dirname "$0")/.." && pwd)
image=localhost/codegym:container-test

# Docker's default profile, from Debian's package of the moby source (the .deb is only unpacked).
profile="$out/docker-default-seccomp.json"
if [ ! -s "$profile" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download golang-github-docker-docker-dev >/dev/null 2>&1 && dpkg-deb -x ./*.deb x)
  cp "$tmp/x/usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json" "$profile"
  rm -rf "$tmp"
fi

# This host has hybrid cgroups (crun refuses them: runc) and a session without CAP_SYS_RESOURCE
# (a container's rlimits may not exceed ours): both are properties of the machine, not the image.
runtime=(--runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
"$root/deploy/build-base.sh" >/dev/null
PODMAN_BUILD_OPTS="${runtime[*]}" "$root/deploy/build-image.sh" "$bin" "$image"

declare -A opts=(
  [podman-default]=""
  [docker-default]="--security-opt seccomp=$profile"
  [restricted]="--security-opt seccomp=$profile --user 65534:65534 --cap-drop ALL --security-opt no-new-privileges"
  [documented-caps]="--security-opt seccomp=$profile --cap-drop ALL --cap-add CHOWN,DAC_OVERRIDE,SETUID,SETGID,KILL,SYS_ADMIN --read-only --security-opt no-new-privileges"
)
declare -A want_level=(
  [podman-default]=basic [docker-default]=basic [restricted]=basic [documented-caps]=strict
)
fail=0
check() { if ! "$@"; then echo "FAILED: $*"; fail=1; fi; }

run() { # run CONFIG [podman options...] -- ARGS...
  local config=$1; shift
  local extra=()
  while [ "$1" != "--" ]; do extra+=("$1"); shift; done
  shift
  # shellcheck disable=SC2086 # the configuration's options are words
  podman "${runtime[@]:0:2}" run --rm "${runtime[@]:2}" -e RUST_LOG=error ${opts[$config]} "${extra[@]}" "$@"
}

for config in podman-default docker-default restricted documented-caps; do
  echo "=== $config: ${opts[$config]:-(no options)}"
  level=${want_level[$config]}
  # Below strict, every command refuses unless it is asked for less (`--isolation basic`).
  if [ "$level" != strict ]; then
    if run "$config" --network none -- "$image" doctor >"$out/doctor-refused-$config.txt" 2>&1; then
      echo "FAILED: doctor exits 0 at $level without --isolation $level"; fail=1
    fi
    # (`timeout`: a server that wrongly started must not hang the suite.)
    if run "$config" --network none --entrypoint timeout -- "$image" 60 /usr/local/bin/codegym \
        serve --addr 127.0.0.1:0 >"$out/serve-refused-$config.txt" 2>&1; then
      echo "FAILED: serve started at $level without --isolation $level"; fail=1
    fi
    check grep -q "below the required strict" "$out/serve-refused-$config.txt"
  fi
  run "$config" --network none -- "$image" doctor --isolation "$level" | tee "$out/doctor-$config.txt"
  check grep -q "isolation level: $level" "$out/doctor-$config.txt"
  # Every language's toolchain is in the image: 13 ticked, none missing.
  check test "$(grep -c '^  \[x\] ' <(sed -n '/^languages:/,$p' "$out/doctor-$config.txt"))" = 13
  check test "$(grep -c '^  \[ \] ' <(sed -n '/^languages:/,$p' "$out/doctor-$config.txt"))" = 0
  run "$config" --network none -- "$image" tasks check builtin:examples --isolation "$level" >"$out/tasks-$config.txt" 2>&1 || true
  tail -1 "$out/tasks-$config.txt"
  check grep -qE "^([0-9]+) of \1 reference solutions pass" "$out/tasks-$config.txt"
  # One judged task per language, each reference solution compiled (where it is) and run in the
  # sandbox: podman's /dev/shm is noexec, so this also checks the work dirs go where programs run.
  run "$config" --network none -v "$root/tests/container:/tests:ro" -- "$image" \
    tasks check /tests/languages.jsonl --isolation "$level" >"$out/languages-$config.txt" 2>&1 || true
  tail -1 "$out/languages-$config.txt"
  check grep -q "13 of 13 reference solutions pass" "$out/languages-$config.txt"
done

# The judge really judges in there: a wrong answer fails, with its verdict.
if run documented-caps --network none -v "$root/tests/container:/tests:ro" -- "$image" \
    tasks check /tests/wrong.jsonl >"$out/wrong.txt" 2>&1; then
  echo "FAILED: a wrong reference solution passed"; fail=1
fi
cat "$out/wrong.txt"
check grep -q '"verdicts":\["WA"' "$out/wrong.txt"

# A data task with a task package, offline: the wheel comes from a read-only wheelhouse (downloaded
# here on the host; the container has no network), pip installs it into the package cache, the
# program reads the task's CSV, takes its CLI input and writes typed outputs.
wheelhouse="$out/wheelhouse"
if ! ls "$wheelhouse"/tabulate-0.9.0-*.whl >/dev/null 2>&1; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheelhouse" tabulate==0.9.0
fi
for config in documented-caps restricted; do
  data_run() {
    run "$config" --network none -v "$root/tests/container/data:/data:ro" -v "$wheelhouse:/wheelhouse:ro" -- \
      "$image" run --task /data/tasks.jsonl --solution /data/solution.py --wheelhouse /wheelhouse \
      --package-cache /tmp/packages --isolation "${want_level[$config]}" "$@"
  }
  data_run >"$out/data-$config.txt" 2>&1 || { echo "FAILED: the data task in $config"; fail=1; }
  data_run -- --region east >"$out/data-east-$config.txt" 2>&1 || { echo "FAILED: the data task (east) in $config"; fail=1; }
  cat "$out/data-$config.txt" "$out/data-east-$config.txt"
  check grep -qx 'total_revenue = 48.5' "$out/data-$config.txt"
  check grep -qx 'rows = 2' "$out/data-$config.txt"
  check grep -qx 'table = "tabulate 0.9.0"' "$out/data-$config.txt"
  check grep -qx 'total_revenue = 40.0' "$out/data-east-$config.txt"
  check grep -qx 'rows = 1' "$out/data-east-$config.txt"
done

# The clone3-blocked path is really blocked under Docker's profile (and not under podman's).
clone3() {
  run "$1" --network none --entrypoint python3 -- "$image" -c \
    'import ctypes, os; l = ctypes.CDLL(None, use_errno=True); l.syscall(435, None, 0); print(os.strerror(ctypes.get_errno()))'
}
check test "$(clone3 docker-default)" = "Function not implemented"
check test "$(clone3 podman-default)" = "Invalid argument"

# Hostile programs through /run_code, in the clone3-blocked configurations.
port=18731
for config in docker-default documented-caps; do
  name="codegym-http-$config"
  run "$config" --network host --name "$name" -d -- "$image" \
    serve --addr 127.0.0.1:0 --http "127.0.0.1:$port" --isolation "${want_level[$config]}" >/dev/null
  for _ in $(seq 100); do curl -sS -o /dev/null "http://127.0.0.1:$port/run_code" -d '{}' 2>/dev/null && break; sleep 0.1; done
  post() { curl -sS -H 'content-type: application/json' "http://127.0.0.1:$port/run_code" -d "$1"; }
  hostile=$(python3 - "$port" <<'PY'
import json, sys
port = int(sys.argv[1])
code = f'''
import os, socket, signal
print("pid:", os.getpid())
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2); print("tcp: connected")
except Exception as e:
    print("tcp: blocked", type(e).__name__)
try:
    open("/etc/shadow").read(); print("shadow: read")
except Exception as e:
    print("shadow: blocked", type(e).__name__)
try:
    os.kill(1, signal.SIGKILL); print("kill 1: sent")
except Exception as e:
    print("kill 1: blocked", type(e).__name__)
'''
print(json.dumps({"code": code, "run_timeout": 10}))
PY
)
  post "$hostile" | tee "$out/hostile-$config.json"; echo
  check grep -q '"status":"Success"' "$out/hostile-$config.json"
  check grep -q 'tcp: blocked' "$out/hostile-$config.json"
  check grep -q 'shadow: blocked' "$out/hostile-$config.json"
  if [ "$config" = documented-caps ]; then
    # In its own PID namespace the program is PID 1 itself: the signal reaches no one else.
    check grep -q 'pid: 1\\n' "$out/hostile-$config.json"
  else
    check grep -q 'kill 1: blocked' "$out/hostile-$config.json"
  fi
  post '{"code": "while True: pass", "run_timeout": 1}' | tee "$out/loop-$config.json"; echo
  check grep -q '"status":"Failed"' "$out/loop-$config.json"
  check grep -q 'TimeLimitExceeded' "$out/loop-$config.json"
  # The server survived all of it and still runs programs.
  post '{"code": "print(6 * 7)"}' | tee "$out/after-$config.json"; echo
  check grep -q '"stdout":"42' "$out/after-$config.json"
  podman "${runtime[@]:0:2}" rm -f "$name" >/dev/null
done

echo "reports in $out"
[ "$fail" = 0 ] && echo "container suite: 1 passed, 0 failed" || { echo "container suite: 0 passed, 1 failed"; exit 1; }
