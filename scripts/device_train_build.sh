#!/usr/bin/env bash
# Builds `specdec-train` against the CUDA-enabled libtorch of a PyTorch installation, on a GPU
# machine that has a compiler, CMake and PyTorch but neither gRPC nor Debian's -dev packages.
#   scripts/device_train_build.sh --fetch   (on a Debian machine) downloads the header/library
#                                           packages the build needs into .devdeps/
#   scripts/device_train_build.sh           (on the GPU machine) unpacks them and builds into
#                                           build-dev/; prints the LD_LIBRARY_PATH to use
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs="libabsl-dev libabsl20220623 nlohmann-json3-dev libcli11-dev libpcre2-dev libpcre2-8-0"
if [ "${1:-}" = --fetch ]; then
  mkdir -p .devdeps
  (cd .devdeps && apt-get download $pkgs)
  exit 0
fi
root=${SPECDEC_DEVROOT:-/tmp/specdec-devroot}
mkdir -p "$root"
for f in .devdeps/*.deb; do dpkg -x "$f" "$root"; done
lib="$root/usr/lib/x86_64-linux-gnu"
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-dev -G Ninja -DSPECDEC_TRAIN_ONLY=ON -DSPECDEC_USE_CCACHE=OFF \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$root/usr;$lib/cmake;$torch_prefix" \
  -DPCRE2_INCLUDE_DIR="$root/usr/include" -DPCRE2_LIBRARY="$lib/libpcre2-8.so" \
  -DCMAKE_CUDA_ARCHITECTURES=90 ${SPECDEC_CMAKE_ARGS:-} >build-dev.log 2>&1 || {
  tail -40 build-dev.log
  exit 1
}
cmake --build build-dev --target ${SPECDEC_TARGETS:-specdec-train} 2>&1 | tail -${SPECDEC_LOG_LINES:-60}
echo "export LD_LIBRARY_PATH=$lib:\${LD_LIBRARY_PATH:-}"
