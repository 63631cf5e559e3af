#!/usr/bin/env bash
# Builds abseil and gRPC with ThreadSanitizer, from the Debian source packages of the versions
# the project builds against, into build-tsan-deps/prefix. scripts/sanitize.sh tsan with
# SPECDEC_TSAN_GRPC=1 links the serving suites against them, so that TSan sees gRPC's and
# abseil's synchronization (absl::Mutex, gRPC's completion queues and call combiners) instead of
# reporting races through it. Needs network access to Debian's source archive; the system's apt
# configuration is left alone (the source lists live in build-tsan-deps/apt).
#   scripts/build_tsan_deps.sh          build what is missing (about 40 min on 2 cores)
# Environment: JOBS (build jobs, default nproc). Exit status: the first failing step's.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/build-tsan-deps
prefix=$root/prefix
jobs=${JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache} CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
# -O1 keeps TSan's slowdown moderate; frame pointers give whole stacks in reports.
flags="-fsanitize=thread -O1 -g -fno-omit-frame-pointer"
absl_version=$(dpkg-query -W -f '${Version}' libabsl-dev)
grpc_version=$(dpkg-query -W -f '${Version}' libgrpc++-dev)

fetch_sources() {
  local apt=$root/apt
  mkdir -p "$apt/lists/partial" "$root/src"
  . /etc/os-release
  {
    echo "deb-src http://deb.debian.org/debian $VERSION_CODENAME main"
    echo "deb-src http://deb.debian.org/debian $VERSION_CODENAME-updates main"
    echo "deb-src http://deb.debian.org/debian-security $VERSION_CODENAME-security main"
  } >"$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
              -o "Dir::State::Lists=$apt/lists")
  apt-get "${opts[@]}" update >/dev/null
  # dpkg-source applies Debian's patches (options.h's ABI choices, system dependencies).
  (cd "$root/src" && apt-get "${opts[@]}" source "abseil=${absl_version%%+b*}" \
     "grpc=${grpc_version%%+b*}" >/dev/null 2>&1)
}

build_abseil() {
  local src
  src=$(ls -d "$root"/src/abseil-*/ | head -1)
  cmake -S "$src" -B "$root/abseil" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO= \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO= -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib >/dev/null
  ninja -C "$root/abseil" -j "$jobs" install >/dev/null
}

build_grpc() {
  local src
  src=$(ls -d "$root"/src/grpc-*/ | head -1)
  # The libraries and the C++ plugin (the project generates its gRPC code with the found plugin).
  cmake -S "$src" -B "$root/grpc" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON -DgRPC_BUILD_TESTS=OFF \
    -DgRPC_ABSL_PROVIDER=package -DgRPC_CARES_PROVIDER=package -DgRPC_PROTOBUF_PROVIDER=package \
    -DgRPC_RE2_PROVIDER=package -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package \
    -DgRPC_BENCHMARK_PROVIDER=none -DgRPC_BUILD_CODEGEN=ON -DgRPC_BUILD_GRPC_CPP_PLUGIN=ON \
    -DgRPC_BUILD_GRPC_CSHARP_PLUGIN=OFF -DgRPC_BUILD_GRPC_NODE_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_OBJECTIVE_C_PLUGIN=OFF -DgRPC_BUILD_GRPC_PHP_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_PYTHON_PLUGIN=OFF -DgRPC_BUILD_GRPC_RUBY_PLUGIN=OFF \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO= -DCMAKE_CXX_FLAGS_RELWITHDEBINFO= \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DgRPC_INSTALL_LIBDIR=lib >/dev/null
  ninja -C "$root/grpc" -j "$jobs" install >/dev/null
}

# The C++ plugin links protoc's library.
dpkg-query -W libprotoc-dev >/dev/null 2>&1 || apt-get install -y -q libprotoc-dev >/dev/null
[ -n "$(ls -d "$root"/src/grpc-*/ 2>/dev/null)" ] || fetch_sources
[ -f "$prefix/lib/cmake/absl/abslConfig.cmake" ] || build_abseil
[ -f "$prefix/lib/cmake/grpc/gRPCConfig.cmake" ] || build_grpc
echo "TSan-built abseil $absl_version and gRPC $grpc_version in $prefix"
