#!/usr/bin/env bash
# Installs every Debian package specdec needs to build, test and run; with --build-only, only what
# compiling the product needs. Idempotent: packages that are already installed are left alone, and
# apt-get is only called when something is missing.
set -euo pipefail

# What compiling the product needs (the container images' build stage installs only these:
# scripts/install_deps.sh --build-only).
BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libopenblas0-openmp
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libgoogle-perftools-dev
  nlohmann-json3-dev libcli11-dev libpcre2-dev libcpp-httplib-dev libssl-dev
)
# What the tests, benchmarks, deploy checks and clients add.
DEV_PACKAGES=(
  git libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-grpcio python3-grpc-tools python3-protobuf gnuplot-nox
  prometheus golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v2-dev
  golang-gopkg-yaml.v3-dev python3-yaml
  podman runc catatonit netavark aardvark-dns iptables debootstrap
)
case "${1:-}" in
  "") PACKAGES=("${BUILD_PACKAGES[@]}" "${DEV_PACKAGES[@]}")
      # Node.js and npm run the OpenAI-client integration test (tests/openai); a machine that
      # already has them (from any source) keeps its own.
      if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        PACKAGES+=(nodejs npm)
      fi ;;
  --build-only) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  *) echo "usage: scripts/install_deps.sh [--build-only]" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
# The prometheus package (promtool and the server the deploy tests start themselves) enables a
# system Prometheus on :9090, the router's default /metrics port: keep that one stopped.
if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now prometheus.service || true
fi
