#!/bin/bash
# DFLASH_ADAPTIVE's lookups weighed per match length, as whole builds, with `specdec bench` on
# the pack in process (all of HumanEval and the held-out prompts, T = 0 and T = 1, 128 tokens,
# 2 threads). Arms, alternating within each round:
#   head   the build before (BEFORE_SPECDEC, e.g. build/cli/specdec of a worktree at that commit)
#   match  this build (build/cli/specdec)
#   EXTRA  this build with the environment in EXTRA_ENV (e.g. "SPECDEC_X=1"; skipped when unset)
# Usage: bash run.sh OUT BEFORE_SPECDEC [ROUNDS]; then python3 summarize.py OUT
set -euo pipefail
out=$1; before=$2; rounds=${3:-5}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
shared=${SPECDEC_SHARED:-$root/../shared}
pack=$root/models/specdec-pycode
mkdir -p "$out"
common=(--target "$pack/target" --draft "$pack/draft" --dflash "$pack/dflash" --policy "$pack/policy"
        --methods AR,NGRAM,DFLASH_ADAPTIVE -n 128 --threads 2 --max-prompts 0
        --prompts "$shared/datasets/humaneval/HumanEval.jsonl.gz" "$pack/eval/heldout_prompts.txt")
arms=(head match)
if [ -n "${EXTRA_ENV:-}" ]; then arms+=(extra); fi
for r in $(seq 1 "$rounds"); do
  for t in 0 1; do
    for a in "${arms[@]}"; do
      case $a in
        head) cmd=("$before") ;;
        match) cmd=("$root/build/cli/specdec") ;;
        extra) cmd=(env $EXTRA_ENV "$root/build/cli/specdec") ;;
      esac
      "${cmd[@]}" bench "${common[@]}" -t "$t" --json "$out/r${r}_t${t}_$a.json" \
        > "$out/r${r}_t${t}_$a.txt" 2>&1
    done
  done
done
