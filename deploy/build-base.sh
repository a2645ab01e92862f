#!/usr/bin/env bash
# Builds the local Debian 12 base image `localhost/codegym-base:bookworm` (minbase + python3) with
# mmdebstrap from the host's apt sources and imports it into podman: no container registry needed.
set -euo pipefail
tag=${1:-localhost/codegym-base:bookworm}
if podman image exists "$tag"; then
  echo "base image $tag exists"
  exit 0
fi
mmdebstrap --quiet --variant=minbase --include=python3,ca-certificates bookworm - \
  | podman import --change 'CMD ["/bin/bash"]' - "$tag"
