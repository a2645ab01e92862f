#!/usr/bin/env bash
# The Kubernetes Deployment (deploy/k8s/deployment.yaml) run for real with `podman kube play`: the
# pod starts from the locally built image with the manifest's args (`--isolation strict`), its
# securityContext (the documented capabilities, read-only root, no privilege escalation,
# RuntimeDefault seccomp) and its in-memory volumes; the two gRPC health probes the manifest defines
# (readiness: codegym.v1.EnvService, liveness: the server as a whole) answer SERVING; a short
# `codegym rollout --env-server` against the pod solves C++, Go, Java and Python tasks (a scripted
# OpenAI-compatible endpoint answers with their reference solutions); the pod leases its runs' uids
# in the host's /run/codegym/uids.lock (the manifest's hostPath volume), as a second pod on the node
# would, and the leases end with the pod; SIGTERM with the manifest's
# grace period drains the pod (readiness NOT_SERVING at once, a clean exit after --drain-secs and
# before the grace period ends); `podman kube down` tears the pod down, and it is gone.
#
# One override, for kube play only: `hostNetwork: true`, and so no `ports` list (podman turns
# containerPorts into port mappings, which the host's network cannot have; they only name ports)
# and one replica (podman plays every replica, and on one host network they would share a port).
# podman gives a played pod its own network namespace and publishes only `hostPort`s; the manifest
# has none (a Service fronts the pods on a cluster), and this machine reaches nothing but loopback.
# With the host's network the pod's ports (50051, 9464) are on 127.0.0.1. Everything else is the
# manifest as it is (checked below).
#
# Usage: tests/kube_play.sh CODEGYM_BINARY PYTHON [REPORT_DIR]
#   PYTHON: an interpreter with grpcio and grpcio-health-checking (the repo's .venv has both).
#   Root; needs podman, runc, mmdebstrap (tests/all.sh's heavy block installs them).
set -euo pipefail
bin=$(realpath "$1")
python=$2
out=${3:-$(mktemp -d)}
mkdir -p "$out"
out=$(realpath "$out")
root=$(cd "$(dirname "$0")/.." && pwd)
manifest=$root/deploy/k8s/deployment.yaml
image=$(sed -n 's/^ *image: *//p' "$manifest")
[ -n "$image" ] || { echo "no image in $manifest"; exit 1; }
start=$SECONDS

# This host's quirks (deploy/README.md), as podman's own configuration since kube play has no
# per-container options for them: runc (crun refuses hybrid cgroups) and rlimits no higher than the
# session's (no CAP_SYS_RESOURCE here).
conf="$out/containers.conf"
cat >"$conf" <<'EOF'
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$conf"

"$root/deploy/build-base.sh" >/dev/null
PODMAN_BUILD_OPTS="--runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096" \
  "$root/deploy/build-image.sh" "$bin" "$image" >/dev/null

play="$out/deployment.kube-play.yaml"
sed -e 's/^\( *\)terminationGracePeriodSeconds:.*/&\n\1hostNetwork: true/' \
  -e '/^ *ports:$/,/containerPort: 9464}$/d' -e 's/^  replicas: [0-9]*$/  replicas: 1/' "$manifest" >"$play"
# The override is exactly that, nothing else.
diff "$manifest" "$play" >"$out/override.diff" || true
if [ "$(grep -c '^>' "$out/override.diff")" != 2 ] || [ "$(grep -c '^<' "$out/override.diff")" != 4 ] \
    || ! grep -q '^>       hostNetwork: true$' "$out/override.diff" \
    || ! grep -q '^>   replicas: 1$' "$out/override.diff" \
    || [ "$(grep '^<' "$out/override.diff" | grep -c 'replicas: \|ports:$\|containerPort: ')" != 4 ]; then
  echo "FAILED: the kube-play override is not exactly: hostNetwork, no ports, one replica"
  cat "$out/override.diff"; exit 1
fi
for port in 50051 9464; do
  if ss -Hltn "sport = :$port" | grep -q .; then
    echo "FAILED: port $port is taken on this machine; the played pod needs it"; exit 1
  fi
done

# The runs' uids are leased in the node's lease file (the manifest's hostPath volume), so that two
# pods on one node, which share its uids, never give one uid to two live runs. Seen from this host:
# the locks on the byte range of the server's uid range (the default, 1,500,000 + 65,536) in
# /run/codegym/uids.lock; prints `held` or `none`.
leases() {
  "$python" - <<'PY'
import fcntl, os, struct
try:
    fd = os.open("/run/codegym/uids.lock", os.O_RDONLY)
except FileNotFoundError:
    print("none")
    raise SystemExit
# struct flock: l_type, l_whence, l_start, l_len, l_pid (a read lock conflicts with any write lock).
query = struct.pack("@hhqqi4x", fcntl.F_RDLCK, os.SEEK_SET, 1_500_000, 65_536, 0)
l_type = struct.unpack("@hhqqi4x", fcntl.fcntl(fd, fcntl.F_OFD_GETLK, query))[0]
print("none" if l_type == fcntl.F_UNLCK else "held")
PY
}
[ "$(leases)" = none ] || { echo "FAILED: uids of the pod's range are leased before the pod starts"; exit 1; }

down() { podman kube down "$play" >"$out/kube-down.txt" 2>&1; }
trap 'down || true' EXIT
podman kube play "$play" | tee "$out/kube-play.txt"
pods=$(podman pod ps --filter label=app.kubernetes.io/name=codegym --format '{{.Name}}' 2>/dev/null || true)
if [ -z "$pods" ]; then
  pods=$(podman pod ps --format '{{.Name}}' | grep '^codegym' || true)
fi
echo "pods: $pods"
[ "$(echo "$pods" | grep -c .)" = 1 ] || { echo "FAILED: expected one codegym pod, got: $pods"; exit 1; }
pod=$pods
container="$pod-codegym"
podman container exists "$container" || { echo "FAILED: no container $container"; podman ps -a; exit 1; }

# The pod's securityContext reached the container.
podman inspect "$container" --format '{{.HostConfig.ReadonlyRootfs}} {{.EffectiveCaps}} {{.HostConfig.SecurityOpt}}' \
  | tee "$out/security.txt"
grep -q '^true ' "$out/security.txt" || { echo "FAILED: the root file system is not read-only"; exit 1; }
grep -q ' \[CAP_CHOWN CAP_DAC_OVERRIDE CAP_KILL CAP_SETGID CAP_SETUID CAP_SYS_ADMIN\] ' "$out/security.txt" \
  || { echo "FAILED: the capabilities are not exactly the documented ones"; exit 1; }
grep -q 'no-new-privileges' "$out/security.txt" || { echo "FAILED: privilege escalation is not off"; exit 1; }

# The manifest's probes: gRPC health of codegym.v1.EnvService (readiness) and of the server (liveness).
probe() { # probe WANTED_STATUS SECONDS SERVICE...: waits until each service answers WANTED_STATUS
  "$python" - "$@" <<'PY'
import sys, time
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

want = health_pb2.HealthCheckResponse.ServingStatus.Value(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[2])
for service in sys.argv[3:]:
    while True:
        try:
            with grpc.insecure_channel("127.0.0.1:50051") as ch:
                status = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=2).status
        except grpc.RpcError as e:
            status = e.code()
        if status == want:
            print(f"health {service or '(server)'}: {sys.argv[1]}")
            break
        if time.monotonic() > deadline:
            sys.exit(f"health {service or '(server)'}: {status} after the deadline")
        time.sleep(0.2)
PY
}
if ! probe SERVING 90 codegym.v1.EnvService ""; then
  echo "FAILED: the pod's health probes do not pass"; podman logs "$container" | tail -20; exit 1
fi
echo "pod ready after $((SECONDS - start)) s"
podman logs "$container" >"$out/pod-start.log" 2>&1
grep -q '"message":"sandbox ready","level":"strict"' "$out/pod-start.log" \
  || { echo "FAILED: the pod's log does not show strict isolation"; tail -5 "$out/pod-start.log"; exit 1; }
curl -sS --max-time 5 http://127.0.0.1:9464/metrics >"$out/metrics.txt"
grep -q '^codegym_sandbox_isolation_level' "$out/metrics.txt" \
  || { echo "FAILED: no isolation gauge on the pod's /metrics"; exit 1; }

# A short rollout against the pod: four tasks in four languages, each solved through its sandbox.
tasks=$root/tests/container/languages.jsonl
coproc FAKE { exec python3 "$root/tests/container/fake_openai.py" "$tasks"; }
read -r line <&"${FAKE[0]}"
url=${line#listening on }
rollout_rc=0
RUST_LOG=warn "$bin" rollout --model fake --base-url "$url" --api-key-env CODEGYM_TEST_UNSET_KEY \
  --tasks "$tasks" --task-ids sum-cpp,sum-go,sum-java,sum-python --samples 1 --max-turns 2 \
  --progress log --out "$out/rollout.jsonl" --env-server http://127.0.0.1:50051 \
  >"$out/rollout.txt" 2>&1 || rollout_rc=$?
exec {FAKE[1]}>&-
wait "$FAKE_PID" || true
tail -4 "$out/rollout.txt"
[ "$rollout_rc" = 0 ] || { echo "FAILED: the rollout exited $rollout_rc"; cat "$out/rollout.txt"; exit 1; }
python3 - "$out/rollout.jsonl" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
got = sorted((r["task_id"], r["stop_reason"], r["solved"]) for r in records)
want = sorted((f"sum-{l}", "solved", True) for l in ("cpp", "go", "java", "python"))
assert got == want, got
print("rollout against the pod:", ", ".join(f"{t} {s}" for t, s, _ in got))
PY
[ "$(leases)" = held ] || { echo "FAILED: the pod's runs leased no uid in the node's /run/codegym/uids.lock"; exit 1; }
echo "the pod leases its runs' uids in the node's /run/codegym/uids.lock"

# Draining, as on a cluster: SIGTERM with the manifest's grace period (podman pod stop -t). The
# readiness check turns NOT_SERVING at once (the pod leaves the Service), the server keeps running
# for --drain-secs, then stops by itself well within the grace period.
grace=$(sed -n 's/^ *terminationGracePeriodSeconds: *//p' "$manifest")
drain=$(grep -o '"--drain-secs", "[0-9]*"' "$manifest" | grep -o '[0-9][0-9]*')
[[ "$grace" =~ ^[0-9]+$ && "$drain" =~ ^[0-9]+$ ]] \
  || { echo "FAILED: no grace period ($grace) or --drain-secs ($drain) in $manifest"; exit 1; }
stop_start=$SECONDS
podman pod stop -t "$grace" "$pod" >/dev/null &
stop_pid=$!
if ! probe NOT_SERVING 5 codegym.v1.EnvService; then
  echo "FAILED: readiness does not turn NOT_SERVING on SIGTERM"; exit 1
fi
wait "$stop_pid"
stopped_after=$((SECONDS - stop_start))
echo "the pod drained and stopped after $stopped_after s (--drain-secs $drain, grace period $grace s)"
if [ "$stopped_after" -lt "$drain" ] || [ "$stopped_after" -ge "$grace" ]; then
  echo "FAILED: expected a stop after the drain and before the grace period ran out"; exit 1
fi
podman logs "$container" >"$out/pod.log" 2>&1
exit_code=$(podman inspect "$container" --format '{{.State.ExitCode}}')
[ "$exit_code" = 0 ] || { echo "FAILED: the server exited $exit_code"; tail -5 "$out/pod.log"; exit 1; }

# Teardown: the pod and its container are gone, the port is free.
trap - EXIT
down_start=$SECONDS
down
echo "kube down took $((SECONDS - down_start)) s"
if podman pod exists "$pod" || podman container exists "$container"; then
  echo "FAILED: the pod is still there after kube down"; exit 1
fi
if ss -Hltn "sport = :50051" | grep -q .; then
  echo "FAILED: port 50051 still listening after kube down"; exit 1
fi
[ "$(leases)" = none ] || { echo "FAILED: the pod's uid leases outlived it"; exit 1; }
echo "kube play suite took $((SECONDS - start)) s; reports in $out"
echo "kube play suite: 1 passed, 0 failed"
