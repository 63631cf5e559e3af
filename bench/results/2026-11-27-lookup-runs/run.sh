#!/usr/bin/env bash
# NGRAM through the cluster before (BEFORE_BUILD: a build directory holding the four services
# from the commit before lookup runs) and after (build/): AR and NGRAM through the router and in
# process (specdec-cluster-bench), T = 0, 128 tokens, on the repeat prompts of
# bench/ngram_prompts.py and 16 HumanEval prompts, the two builds' clusters alternating for
# ROUNDS rounds (default 3).
#   bash bench/results/2026-11-27-lookup-runs/run.sh OUT BEFORE_BUILD
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE_BUILD}
before=${2:?usage: run.sh OUT BEFORE_BUILD}
mkdir -p "$out"
P=models/specdec-pycode
/usr/bin/python3 bench/ngram_prompts.py "$out/ngram" --count 8 >/dev/null
export SPECDEC_PORT_BASE=53050 SPECDEC_METRICS_BASE=12090 TARGET_MODEL=$P/target DRAFT_LM=$P/draft \
  DFLASH_MODEL=$P/dflash POLICY_MODEL=$P/policy
for round in $(seq "${ROUNDS:-3}"); do
  for build in before after; do
    dir=build
    [ "$build" = before ] && dir=$before
    BUILD_DIR=$dir SPECDEC_RUN_DIR=/tmp/lookup-runs-cluster bash deploy/local/cluster.sh start >/dev/null
    for set in ngram humaneval; do
      prompts=$out/ngram/prompts.jsonl
      [ "$set" = humaneval ] && prompts=../shared/datasets/humaneval/HumanEval.jsonl.gz
      build/bench/specdec-cluster-bench --router 127.0.0.1:53050 --target $P/target \
        --prompts "$prompts" --methods AR,NGRAM -n 128 --max-prompts 16 --warmup 2 \
        --json "$out/${set}_round${round}_${build}.json" >"$out/${set}_round${round}_${build}.txt"
    done
    BUILD_DIR=$dir SPECDEC_RUN_DIR=/tmp/lookup-runs-cluster bash deploy/local/cluster.sh stop >/dev/null
  done
done
