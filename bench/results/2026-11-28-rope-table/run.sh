#!/usr/bin/env bash
# RoPE's cos/sin rows copied from a table made at load (RopeTable, common/model/ops.h) against
# RopeCosSin's operators in every pass (BEFORE: a specdec-model-bench built from the commit
# before), processes alternating, PAIRS pairs (default 8): forwards of 1 and 17 rows of the 100M
# and 7M (the pack's) shapes, bf16 and f32, 2 threads, 200 cached tokens.
#   [PAIRS=8] bash bench/results/2026-11-28-rope-table/run.sh OUT BEFORE
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE}
before=${2:?usage: run.sh OUT BEFORE}
mkdir -p "$out"
for pair in $(seq "${PAIRS:-8}"); do
  for build in before after; do
    bin=build/bench/specdec-model-bench
    [ "$build" = before ] && bin=$before
    "$bin" --sizes 100M,7M --dtypes bf16,f32 --ks 1,17 --reps 60 --threads 2 \
      --json "$out/${build}_p$pair.json" >"$out/${build}_p$pair.txt" 2>&1
  done
done
