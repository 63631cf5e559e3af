#!/usr/bin/env bash
# The load tester's closed-loop sweep (1-16 requests, T = 0, 128 tokens, HumanEval, 3 rounds) on
# the local cluster with the pack, once per planning hook of the router (HOOKS, default
# "cost load"): cost is SPECDEC_LOAD_AWARE=false (CostAwareHook), load the load-aware learner.
# Each hook gets a fresh cluster. LEVELS, METHODS, TEMPERATURE (default 0), DURATION and WARMUP
# (seconds per cell, default 10 and 2) and ROUNDS override the sweep's.
#   bash bench/results/2026-11-29-load-sweep/run.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT}
mkdir -p "$out"
. bench/pack_cluster_env.sh /tmp/load-sweep-cluster
for hook in ${HOOKS:-cost load}; do
  aware=true
  [ "$hook" = cost ] && aware=false
  SPECDEC_LOAD_AWARE=$aware bash deploy/local/cluster.sh start >/dev/null
  /usr/bin/python3 loadtest/specdec_loadtest --router 127.0.0.1:53050 \
    --concurrency "${LEVELS:-1,2,4,8,16}" --methods "${METHODS:-AR,NGRAM,DFLASH,DFLASH_ADAPTIVE}" \
    --prompts humaneval --max-new-tokens 128 --ignore-eos --temperature "${TEMPERATURE:-0}" \
    --duration "${DURATION:-10}" --warmup "${WARMUP:-2}" --repeat "${ROUNDS:-3}" --versus DFLASH_ADAPTIVE \
    --fail-on-error --metrics-url 127.0.0.1:12090 --out "$out/$hook" >"$out/$hook.txt" 2>&1 ||
    echo "$hook: load tester exit $?" >>"$out/$hook.txt"
  bash deploy/local/cluster.sh stop >/dev/null
done
