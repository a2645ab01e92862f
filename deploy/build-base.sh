#!/usr/bin/env bash
# Builds the local Debian 12 base image for deploy/Containerfile with mmdebstrap from the host's apt
# sources and imports it into podman: no container registry needed, and the image build itself then
# installs nothing and needs no network.
#
# The base holds the Containerfile's TOOLCHAINS (every language the sandbox runs, as `codegym
# doctor` names their Debian packages, Test::Deep, pip for task packages). Its tag carries a hash of
# that list, so a base built from another list (an older Python-only one, say) is never reused.
#
#   deploy/build-base.sh          build the base unless it exists; prints its tag
#   deploy/build-base.sh --tag    only print the tag (deploy/build-image.sh's default base)
#   deploy/build-base.sh TAG      build under another tag
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
line=$(grep -m1 '^ARG TOOLCHAINS="' "$here/Containerfile")
line=${line#ARG TOOLCHAINS=\"}
read -r -a packages <<<"${line%\"}"
[ "${#packages[@]}" -ge 13 ] || { echo "no TOOLCHAINS in $here/Containerfile" >&2; exit 1; }
list=$(IFS=,; echo "${packages[*]}")
version=$(printf '%s' "$list" | sha256sum | cut -c1-12)
default_tag=localhost/codegym-base:bookworm-toolchains-$version
if [ "${1:-}" = --tag ]; then
  echo "$default_tag"
  exit 0
fi
tag=${1:-$default_tag}
if podman image exists "$tag"; then
  echo "base image $tag exists" >&2
  echo "$tag"
  exit 0
fi
# Without Recommends (mmdebstrap's default): the toolchains, not their documentation and extras.
# Tagged only once complete: a failed build leaves no base under the tag to be reused.
id=$(mmdebstrap --quiet --variant=minbase --include="$list" bookworm - \
  | podman import --quiet --change 'CMD ["/bin/bash"]' -)
podman tag "$id" "$tag"
echo "$tag"
