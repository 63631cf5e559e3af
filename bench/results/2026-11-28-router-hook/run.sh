#!/usr/bin/env bash
# The router's two planning hooks for DFLASH_ADAPTIVE on one build, through the local cluster
# (1 request at a time, T = 0, 128 tokens, 16 prompts per set of which the first 2 warm up):
#   load  the default, load awareness on (LoadAwareHook)
#   cost  SPECDEC_LOAD_AWARE=false (CostAwareHook, the in-process engine's)
# alternating for ROUNDS rounds (default 5), each with AR, NGRAM, DFLASH and DFLASH_ADAPTIVE
# (METHODS) on SETS (default: humaneval, heldout). WARMUP (default 2): the leading prompts of the
# first set that warm the cluster up uncounted (each later set warms up with 2).
#   bash bench/results/2026-11-28-router-hook/run.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT}
mkdir -p "$out"
. bench/pack_cluster_env.sh
for round in $(seq "${ROUNDS:-5}"); do
  for arm in load cost; do
    aware=true
    [ "$arm" = cost ] && aware=false
    SPECDEC_LOAD_AWARE=$aware SPECDEC_RUN_DIR=/tmp/router-hook-cluster \
      bash deploy/local/cluster.sh start >/dev/null
    warmup=${WARMUP:-2}
    for set in ${SETS:-humaneval heldout}; do
      case $set in
        humaneval) prompts=../shared/datasets/humaneval/HumanEval.jsonl.gz ;;
        heldout) prompts=$P/eval/heldout_prompts.txt ;;
      esac
      build/bench/specdec-cluster-bench --router 127.0.0.1:53050 --target $P/target \
        --draft $P/draft --dflash $P/dflash --policy $P/policy --prompts "$prompts" \
        --methods "${METHODS:-AR,NGRAM,DFLASH,DFLASH_ADAPTIVE}" -n 128 --max-prompts 16 \
        --warmup "$warmup" --json "$out/${set}_round${round}_${arm}.json" \
        >"$out/${set}_round${round}_${arm}.txt"
      warmup=2
    done
    SPECDEC_RUN_DIR=/tmp/router-hook-cluster bash deploy/local/cluster.sh stop >/dev/null
  done
done
