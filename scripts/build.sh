#!/usr/bin/env bash
# Configures and builds specdec (Release-with-line-tables, Ninja, ccache) into ./build.
#   scripts/build.sh [extra cmake args...]     BUILD_DIR and JOBS override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
# Torch headers carry __DATE__-free content; these let ccache hit across clean clones.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=1
# ccache hashes the locale variables (they change the compiler's messages): one fixed locale lets
# this machine, CI and the images' build stage (deploy/docker) share one cache.
export LANG=C.UTF-8
unset LC_ALL LC_CTYPE LC_MESSAGES
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
ninja -C "$BUILD_DIR" -j "$JOBS"
