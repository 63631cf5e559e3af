#!/usr/bin/env bash
# Builds the CPU images of deploy/docker/Dockerfile, one per service, with podman or docker, and
# prints their sizes. On a machine without a registry the Debian base is made first
# (deploy/docker/make_base_image.sh) when the local storage has none.
#
#   deploy/docker/build_images.sh [SERVICE...]    # default: router target drafter policy
#
# Environment:
#   ENGINE        podman or docker (default: podman if installed)
#   REPOSITORY    image name prefix: <REPOSITORY>-<service> (default specdec, what the chart expects)
#   TAG           image tag (default: the chart's appVersion)
#   DEBIAN_IMAGE  base image (default: the Dockerfile's pinned one; made locally when missing,
#                 unless PULL_BASE=1)
#   CCACHE_DIR    host compiler cache shared with the build stage through a bind mount (default
#                 ~/.cache/ccache, the one scripts/build.sh uses; empty: the build's own cache)
#   JOBS          parallel compile jobs; CMAKE_ARGS extra CMake cache entries
#   SIZES_JSON    also write {image: {bytes, build_seconds}} to this file
# With podman, CONTAINERS_CONF defaults to deploy/podman/containers.conf (settings the sandboxed
# development and CI machines need; harmless elsewhere).
set -euo pipefail
cd "$(dirname "$0")/../.."
services=("$@")
[ ${#services[@]} -gt 0 ] || services=(router target drafter policy)
ENGINE=${ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}
REPOSITORY=${REPOSITORY:-specdec}
TAG=${TAG:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' helm/specdec/Chart.yaml)}
CCACHE_DIR=${CCACHE_DIR-$HOME/.cache/ccache}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$ENGINE" = podman ]; then
  export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}
fi

pinned=$(sed -n 's/^ARG DEBIAN_IMAGE=//p' deploy/docker/Dockerfile)
DEBIAN_IMAGE=${DEBIAN_IMAGE:-$pinned}
if ! "$ENGINE" image inspect "$DEBIAN_IMAGE" >/dev/null 2>&1; then
  if [ "${PULL_BASE:-0}" = 1 ]; then
    "$ENGINE" pull "$DEBIAN_IMAGE"
  else
    echo "build_images: $DEBIAN_IMAGE is not in local storage; making it with debootstrap" >&2
    DEBIAN_IMAGE=$(ENGINE=$ENGINE deploy/docker/make_base_image.sh | tail -n 1)
  fi
fi

args=(-f deploy/docker/Dockerfile --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE"
      --build-arg "VERSION=$TAG" --build-arg "REVISION=$revision")
[ -z "${JOBS:-}" ] || args+=(--build-arg "JOBS=$JOBS")
[ -z "${CMAKE_ARGS:-}" ] || args+=(--build-arg "CMAKE_ARGS=$CMAKE_ARGS")
if [ "$ENGINE" = podman ]; then
  # podman reads .dockerignore from the context root only unless told.
  args+=(--ignorefile deploy/docker/Dockerfile.dockerignore)
  if [ -n "$CCACHE_DIR" ]; then
    mkdir -p "$CCACHE_DIR"
    args+=(-v "$CCACHE_DIR:/ccache:rw" --build-arg CCACHE_DIR=/ccache)
  fi
else
  export DOCKER_BUILDKIT=1
fi

declare -A seconds=()
for s in "${services[@]}"; do
  start=$SECONDS
  echo "build_images: building $REPOSITORY-$s:$TAG on $DEBIAN_IMAGE" >&2
  "$ENGINE" build "${args[@]}" --build-arg "SERVICE=$s" -t "$REPOSITORY-$s:$TAG" . >&2
  seconds[$s]=$((SECONDS - start))
done

printf '%-28s %10s %8s\n' image MB build_s
json="{"
for s in "${services[@]}"; do
  bytes=$("$ENGINE" image inspect --format '{{.Size}}' "$REPOSITORY-$s:$TAG")
  printf '%-28s %10.1f %8d\n' "$REPOSITORY-$s:$TAG" "$(awk -v b="$bytes" 'BEGIN { print b / 1e6 }')" "${seconds[$s]}"
  json+="\"$REPOSITORY-$s:$TAG\": {\"bytes\": $bytes, \"build_seconds\": ${seconds[$s]}},"
done
[ -z "${SIZES_JSON:-}" ] || echo "${json%,}}" >"$SIZES_JSON"
