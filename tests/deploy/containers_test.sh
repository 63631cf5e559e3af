#!/usr/bin/env bash
# The container images for real: builds the CPU images of deploy/docker with podman (the Debian
# base made with debootstrap once per machine, the compiler cache shared with the host build), runs
# the four services as containers and checks them (tests/deploy/check_containers.py), then runs the
# Helm chart's rendered manifests with `podman kube play` (deploy/podman/kube_play.py) and serves
# requests through the chart's router pod.
#
#   tests/deploy/containers_test.sh            (ctest: deploy_containers_test, label slow)
#
# Environment: OUT (results, default a temporary directory), PYTHON (default /usr/bin/python3).
# Exit status: 0 pass, 1 failure, 77 skipped (no podman: scripts/install_deps.sh installs it).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
PYTHON=${PYTHON:-/usr/bin/python3}
if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; then
  echo "containers_test: SKIP: needs podman and debootstrap (scripts/install_deps.sh)" >&2
  exit 77
fi
CONTAINERS_CONF=$(realpath "${CONTAINERS_CONF:-$repo/deploy/podman/containers.conf}")
export CONTAINERS_CONF  # absolute: podman's helper processes run in other directories
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/specdec-containers.XXXXXX")}
mkdir -p "$OUT"
tag=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' helm/specdec/Chart.yaml)

echo "== images (build log: $OUT/build.log)"
if ! SIZES_JSON="$OUT/images.json" deploy/docker/build_images.sh router target drafter policy \
    >"$OUT/build.log" 2>&1; then
  tail -n 60 "$OUT/build.log"
  echo "containers_test: FAIL: building the images (log: $OUT/build.log)" >&2
  exit 1
fi
cat "$OUT/images.json"

echo "== the four services as containers"
"$PYTHON" tests/deploy/check_containers.py --tag "$tag" --out "$OUT/containers"

echo "== the chart's manifests under podman kube play"
kube="$OUT/kube"
trap '"$PYTHON" deploy/podman/kube_play.py down --work "$kube" --network specdec-kube-test >/dev/null 2>&1 || true' EXIT
"$PYTHON" deploy/podman/kube_play.py up --work "$kube" --network specdec-kube-test
"$PYTHON" tests/deploy/check_kube_play.py "$kube/state.json"
"$PYTHON" deploy/podman/kube_play.py down --work "$kube" --network specdec-kube-test
trap - EXIT
podman network rm -f specdec-kube-test >/dev/null
echo "containers_test: PASS ($OUT)"
