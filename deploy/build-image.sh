#!/usr/bin/env bash
# Builds the codegym image from deploy/Containerfile with the given binary, offline (--network none)
# on the local base from deploy/build-base.sh (run that first; it prints the base's tag).
#   deploy/build-image.sh BINARY [TAG] [BASE]
# PODMAN_BUILD_OPTS adds options to `podman build` (e.g. `--runtime runc` on hybrid-cgroup hosts).
set -euo pipefail
bin=$1
tag=${2:-localhost/codegym:dev}
here=$(cd "$(dirname "$0")" && pwd)
base=${3:-$("$here/build-base.sh" --tag)}
if ! podman image exists "$base"; then
  echo "no base image $base: build it with deploy/build-base.sh" >&2
  exit 1
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$here/Containerfile" "$ctx/"
cp "$bin" "$ctx/codegym"
# shellcheck disable=SC2086 # options are words
podman build ${PODMAN_BUILD_OPTS:-} --quiet --network none --build-arg "BASE=$base" -t "$tag" "$ctx"
