#!/usr/bin/env bash
# Builds the codegym image from deploy/Containerfile with the given binary.
#   deploy/build-image.sh BINARY [TAG] [BASE]
set -euo pipefail
bin=$1
tag=${2:-localhost/codegym:dev}
base=${3:-localhost/codegym-base:bookworm}
here=$(cd "$(dirname "$0")" && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$here/Containerfile" "$ctx/"
cp "$bin" "$ctx/codegym"
podman build --quiet --network none --build-arg "BASE=$base" -t "$tag" "$ctx"
