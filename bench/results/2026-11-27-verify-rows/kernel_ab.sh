#!/usr/bin/env bash
# The products alone, in one process: linear_kernel.cc of REV (default 8b8351c) against the
# working tree's, 1-128 rows, the 100M and 7M shapes (kernel_ab.cc).
#   bash bench/results/2026-11-27-verify-rows/kernel_ab.sh OUT [REV]
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: kernel_ab.sh OUT [REV]}
rev=${2:-8b8351c}
mkdir -p "$out"
here=bench/results/2026-11-27-verify-rows
flags=(-O3 -std=c++20 -I"$PWD" -fopenmp -Wno-psabi)
git show "$rev:common/model/linear_kernel.cc" >"$out/linear_kernel_before.cc"
g++ "${flags[@]}" -Dspecdec=specdec_before -c "$out/linear_kernel_before.cc" -o "$out/before.o"
g++ "${flags[@]}" -Dspecdec=specdec_after -c common/model/linear_kernel.cc -o "$out/after.o"
g++ "${flags[@]}" "$here/kernel_ab.cc" "$here/kernel_ab_shim.cc" "$out/before.o" "$out/after.o" \
  -o "$out/kernel_ab"
for rows in 1 2 3 4 8 17 32 128; do "$out/kernel_ab" "$rows" 41; done | tee "$out/kernel_ab.txt"
for rows in 1 2 3 4 8 17 32 128; do SMALL=1 "$out/kernel_ab" "$rows" 201; done | tee -a "$out/kernel_ab.txt"
