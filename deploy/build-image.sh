#!/usr/bin/env bash
# Builds the codegym image from deploy/Containerfile with the given binary.
#   deploy/build-image.sh BINARY [TAG] [BASE]
# PODMAN_BUILD_OPTS adds options to `podman build` (e.g. `--runtime runc` on hybrid-cgroup hosts).
set -euo pipefail
bin=$1
tag=${2:-localhost/codegym:dev}
base=${3:-localhost/codegym-base:bookworm}
here=$(cd "$(dirname "$0")" && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$here/Containerfile" "$ctx/"
cp "$bin" "$ctx/codegym"
# shellcheck disable=SC2086 # options are words
podman build ${PODMAN_BUILD_OPTS:-} --quiet --network none --build-arg "BASE=$base" -t "$tag" "$ctx"
