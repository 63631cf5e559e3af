#!/usr/bin/env bash
# Brings llama.cpp and builds it CPU-only, with bench/llama_cpp/probe.cpp against its library:
# the peer of the benchmark (peer_bench.py) and of the reference fixtures
# (tests/data/llama_cpp_reference/make_fixtures.sh). Prints the probe's path on its last line.
#
#   bench/llama_cpp/fetch_build.sh [WORK]      (default WORK: /tmp/specdec-llama-cpp)
#
# llama.cpp: release v0.4.0 (commit 80fb11ac73e6), from the git bundle that the npm package
# node-llama-cpp@3.21.1 ships (the npm registry is reachable where no git host is). Release build,
# native CPU flags, no CURL/OpenSSL: the llama library and llama-speculative-simple.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
WORK=${1:-${WORK:-/tmp/specdec-llama-cpp}}
mkdir -p "$WORK"
llama="$WORK/llama.cpp"
if [ ! -f "$llama/build/bin/libllama.so" ]; then
  (cd "$WORK" && npm pack --silent node-llama-cpp@3.21.1 >/dev/null &&
   tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle &&
   rm -rf llama.cpp && git clone -q package/llama/gitRelease.bundle llama.cpp)
  cmake -S "$llama" -B "$llama/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF >&2
  ninja -C "$llama/build" llama >&2
fi
# Draft-model speculative decoding, for the peer benchmark's speculative rows.
if [ ! -x "$llama/build/bin/llama-speculative-simple" ]; then
  ninja -C "$llama/build" llama-speculative-simple >&2
fi
g++ -O2 -std=c++17 "$here/probe.cpp" -I "$llama/include" -I "$llama/ggml/include" \
  -L "$llama/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$llama/build/bin" -o "$WORK/probe"
echo "llama.cpp $(git -C "$llama" rev-parse --short=12 HEAD)" >&2
echo "$WORK/probe"
