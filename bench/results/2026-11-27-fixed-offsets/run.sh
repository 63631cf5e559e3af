#!/usr/bin/env bash
# The bf16 kernel's 1-row blocks reading packed chunks at fixed offsets, loads in written order
# (common/model/linear_kernel.cc), against the build before (BEFORE: a specdec-model-bench built
# from the commit before), processes alternating:
# 1. the 1-token step against the triad's floor: 100M shape, bf16 (changed) and f32 (unchanged,
#    the control), 1 and 2 threads, ROUNDS rounds (default 4), each process 3 floor rounds;
# 2. forwards of 1-17 rows: the 7M (the pack's shape) and 100M shapes, bf16, 1 and 2 threads.
# 3. and 4.: see below. Run 1 of the log: ROUNDS=4, parts 1-2 (with PAIRS=0); run 2: ROUNDS=0
#    BEFORE_LINEAR=... (parts 2-4).
# The in-process step comparison (ab.txt) is a scratch build: ab.patch on the commit before.
#   [ROUNDS=4] [PAIRS=10] [BEFORE_LINEAR=BIN] bash bench/results/2026-11-27-fixed-offsets/run.sh OUT BEFORE
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE}
before=${2:?usage: run.sh OUT BEFORE}
mkdir -p "$out"
for round in $(seq "${ROUNDS:-4}"); do
  for t in 2 1; do
    for build in before after; do
      bin=build/bench/specdec-model-bench
      [ "$build" = before ] && bin=$before
      "$bin" --sizes 100M --dtypes bf16,f32 --ks 1 --reps 40 --threads "$t" --floor 3 \
        --json "$out/floor_t${t}_${build}_r$round.json" >"$out/floor_t${t}_${build}_r$round.txt" 2>&1
    done
  done
done
for round in 1 2; do
  for t in 1 2; do
    for build in before after; do
      bin=build/bench/specdec-model-bench
      [ "$build" = before ] && bin=$before
      "$bin" --sizes 7M,100M --dtypes bf16 --ks 1,2,4,8,17 --reps 40 --threads "$t" \
        --json "$out/rows_t${t}_${build}_r$round.json" >"$out/rows_t${t}_${build}_r$round.txt" 2>&1
    done
  done
done
# 3. the products alone against a plain read of their bytes, in one process (specdec-linear-bench;
#    BEFORE_LINEAR: the same program built with the commit before's kernel), 100M and 7M shapes,
#    1 and 2 threads, 1 and 17 rows;
# 4. the 100M bf16 1-token step, PAIRS pairs of processes (default 10) alternating, 1 and 2 threads.
if [ -n "${BEFORE_LINEAR:-}" ]; then
  for round in 1 2; do
    for shape in 100M 7M; do
      for t in 2 1; do
        for rows in 1 17; do
          for build in before after; do
            bin=build/bench/specdec-linear-bench
            [ "$build" = before ] && bin=$BEFORE_LINEAR
            "$bin" --shape "$shape" --threads "$t" --rows "$rows" --rounds 8 \
              --json "$out/linear_${shape}_t${t}_rows${rows}_${build}_r$round.json" \
              >"$out/linear_${shape}_t${t}_rows${rows}_${build}_r$round.txt" 2>&1
          done
        done
      done
    done
  done
fi
for pair in $(seq "${PAIRS:-10}"); do
  for t in 2 1; do
    for build in before after; do
      bin=build/bench/specdec-model-bench
      [ "$build" = before ] && bin=$before
      "$bin" --sizes 100M --dtypes bf16 --ks 1 --reps 60 --threads "$t" \
        --json "$out/step_t${t}_${build}_p$pair.json" >"$out/step_t${t}_${build}_p$pair.txt" 2>&1
    done
  done
done
