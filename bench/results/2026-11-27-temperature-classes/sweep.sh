#!/usr/bin/env bash
# The load tester's sweep through a fresh local cluster on the pack (load awareness on, the
# default), at T = 1 and at T = 0: AR, NGRAM and DFLASH_ADAPTIVE, 1 to 16 requests, 3 rounds.
#   bash bench/results/2026-11-27-temperature-classes/sweep.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: sweep.sh OUT}
mkdir -p "$out"
P=models/specdec-pycode
export TARGET_MODEL=$P/target DRAFT_LM=$P/draft DFLASH_MODEL=$P/dflash POLICY_MODEL=$P/policy
bash deploy/local/cluster.sh start
trap 'bash deploy/local/cluster.sh stop' EXIT
for t in 1 0; do
  /usr/bin/python3 loadtest/specdec_loadtest --router 127.0.0.1:50050 \
    --concurrency 1,2,4,8,16 --methods AR,NGRAM,DFLASH_ADAPTIVE --prompts humaneval \
    --max-new-tokens 64 --ignore-eos --temperature "$t" --duration 8 --warmup 2 --repeat 3 \
    --versus DFLASH_ADAPTIVE --out "$out/t$t" --no-plots
done
