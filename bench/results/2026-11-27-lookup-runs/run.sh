#!/usr/bin/env bash
# Lookups inside the target's runs, through the cluster: before (BEFORE_BUILD: a build directory
# holding the four services from the commit before them) and after (build/), the two builds'
# clusters alternating for ROUNDS rounds (default 3). Each round runs specdec-cluster-bench
# (T = 0, 128 tokens, 16 prompts of which the first 2 warm up) with METHODS (default AR, NGRAM,
# DFLASH, DFLASH_ADAPTIVE) through the router and in process, on SETS (default: ngram, the repeat
# prompts of bench/ngram_prompts.py; humaneval; heldout, the pack's held-out corpus prompts).
#   bash bench/results/2026-11-27-lookup-runs/run.sh OUT BEFORE_BUILD
# NGRAM_COUNT (default 16): repeat prompts written. ngram-runs/ holds the first step's run (NGRAM
# only), made with
#   NGRAM_COUNT=8 METHODS=AR,NGRAM SETS="ngram humaneval" bash .../run.sh OUT BEFORE_BUILD
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE_BUILD}
before=${2:?usage: run.sh OUT BEFORE_BUILD}
mkdir -p "$out"
/usr/bin/python3 bench/ngram_prompts.py "$out/ngram" --count "${NGRAM_COUNT:-16}" >/dev/null
. bench/pack_cluster_env.sh
for round in $(seq "${ROUNDS:-3}"); do
  for build in before after; do
    dir=build
    [ "$build" = before ] && dir=$before
    BUILD_DIR=$dir SPECDEC_RUN_DIR=/tmp/lookup-runs-cluster bash deploy/local/cluster.sh start >/dev/null
    for set in ${SETS:-ngram humaneval heldout}; do
      case $set in
        ngram) prompts=$out/ngram/prompts.jsonl ;;
        humaneval) prompts=../shared/datasets/humaneval/HumanEval.jsonl.gz ;;
        heldout) prompts=$P/eval/heldout_prompts.txt ;;
      esac
      build/bench/specdec-cluster-bench --router 127.0.0.1:53050 --target $P/target \
        --draft $P/draft --dflash $P/dflash --policy $P/policy --prompts "$prompts" \
        --methods "${METHODS:-AR,NGRAM,DFLASH,DFLASH_ADAPTIVE}" -n 128 --max-prompts 16 --warmup 2 \
        --json "$out/${set}_round${round}_${build}.json" >"$out/${set}_round${round}_${build}.txt"
    done
    BUILD_DIR=$dir SPECDEC_RUN_DIR=/tmp/lookup-runs-cluster bash deploy/local/cluster.sh stop >/dev/null
  done
done
