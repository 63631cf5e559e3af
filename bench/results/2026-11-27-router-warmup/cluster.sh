#!/usr/bin/env bash
# DFLASH_ADAPTIVE against the fixed methods through the cluster at 1 request, this build with the
# router's defaults (warm-up on, load awareness on; as the lookup-runs log's cluster runs): a fresh cluster per
# round, ROUNDS rounds (default 3), specdec-cluster-bench (T = 0, 128 tokens, 16 prompts of which
# the first 2 warm up) with AR, NGRAM, DFLASH and DFLASH_ADAPTIVE on the repeat prompts
# (bench/ngram_prompts.py), HumanEval and the pack's held-out corpus prompts.
#   bash bench/results/2026-11-27-router-warmup/cluster.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: cluster.sh OUT}
mkdir -p "$out"
P=models/specdec-pycode
/usr/bin/python3 bench/ngram_prompts.py "$out/ngram" --count 16 >/dev/null
export SPECDEC_PORT_BASE=53050 SPECDEC_METRICS_BASE=12090 TARGET_MODEL=$P/target DRAFT_LM=$P/draft \
  DFLASH_MODEL=$P/dflash POLICY_MODEL=$P/policy \
  SPECDEC_RUN_DIR=/tmp/warmup-cluster-runs
trap 'bash deploy/local/cluster.sh stop >/dev/null 2>&1 || true' EXIT
for round in $(seq "${ROUNDS:-3}"); do
  bash deploy/local/cluster.sh start >/dev/null
  for set in ngram humaneval heldout; do
    case $set in
      ngram) prompts=$out/ngram/prompts.jsonl ;;
      humaneval) prompts=../shared/datasets/humaneval/HumanEval.jsonl.gz ;;
      heldout) prompts=$P/eval/heldout_prompts.txt ;;
    esac
    build/bench/specdec-cluster-bench --router 127.0.0.1:53050 --target $P/target \
      --draft $P/draft --dflash $P/dflash --policy $P/policy --prompts "$prompts" \
      --methods AR,NGRAM,DFLASH,DFLASH_ADAPTIVE -n 128 --max-prompts 16 --warmup 2 \
      --json "$out/${set}_round${round}.json" >"$out/${set}_round${round}.txt"
  done
  bash deploy/local/cluster.sh stop >/dev/null
done
