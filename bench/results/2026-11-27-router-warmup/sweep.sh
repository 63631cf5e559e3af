#!/usr/bin/env bash
# DFLASH_ADAPTIVE against the fixed methods under load on one cluster of this build with the
# router's defaults (warm-up on, load awareness on): the load tester on HumanEval, 64 tokens,
# --ignore-eos, CONC (default 1,16) requests, 20-second cells, the methods in rotation 5 times
# (--repeat 5 --versus DFLASH_ADAPTIVE: medians over the rounds).
#   bash bench/results/2026-11-27-router-warmup/sweep.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: sweep.sh OUT}
P=models/specdec-pycode
export TARGET_MODEL=$P/target DRAFT_LM=$P/draft DFLASH_MODEL=$P/dflash POLICY_MODEL=$P/policy
export SPECDEC_PORT_BASE=53050 SPECDEC_METRICS_BASE=12090 SPECDEC_RUN_DIR=/tmp/warmup-sweep-cluster
trap 'bash deploy/local/cluster.sh stop >/dev/null 2>&1 || true' EXIT
bash deploy/local/cluster.sh start >/dev/null
/usr/bin/python3 loadtest/specdec_loadtest --router 127.0.0.1:53050 --concurrency "${CONC:-1,16}" \
  --methods AR,NGRAM,DFLASH_ADAPTIVE --prompts humaneval --max-new-tokens 64 --ignore-eos \
  --duration 20 --warmup 1 --repeat 5 --versus DFLASH_ADAPTIVE --out "$out" --no-plots \
  --metrics-url 127.0.0.1:12090,127.0.0.1:12091,127.0.0.1:12092 | tee "$out.txt"
