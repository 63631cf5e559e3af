#!/usr/bin/env bash
# Chunked prefill on the target against the build before it (BEFORE: that build's directory),
# on the local cluster with the pack: ROUNDS (default 3) alternating rounds, each variant on a
# fresh cluster, the build before with the default --iteration-prefill-max-rows (256) and this
# build with each of BUDGETS (default 256; variant chunked<budget>), a closed loop of LEVEL
# (default 8) requests of 128 tokens, AR and DFLASH_ADAPTIVE, T = 0, over HumanEval prompts
# with a long prompt (about 1,500 tokens) after every 7th (make_prompts.py). Before, such a
# prompt ran whole in one pass, and every running request's next token waited for it. Writes
# OUT/<variant>-<round>/ (the load tester's results.json, the router's request log) and
# OUT/summary.md / summary.json (medians over the rounds; TTFT of short and long prompts from the
# router's request log, warm-up included). PROMPTS (a load tester --prompts value) replaces the
# mixed prompts.
#   bash bench/results/2026-11-29-chunked-prefill/run.sh OUT BEFORE_BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
out=${1:?usage: run.sh OUT BEFORE_BUILD_DIR}
before=${2:?usage: run.sh OUT BEFORE_BUILD_DIR}
mkdir -p "$out"
prompts=${PROMPTS:-$out/prompts.jsonl}
[ -n "${PROMPTS:-}" ] || /usr/bin/python3 "$here/make_prompts.py" "$prompts"
. bench/pack_cluster_env.sh /tmp/chunked-prefill-cluster
for round in $(seq 1 "${ROUNDS:-3}"); do
  variants=("before:$before:256")
  for budget in ${BUDGETS:-256}; do variants+=("chunked$budget:build:$budget"); done
  for variant in "${variants[@]}"; do
    IFS=: read -r name dir budget <<<"$variant"
    BUILD_DIR=$dir SPECDEC_ITERATION_PREFILL_MAX_ROWS=$budget bash deploy/local/cluster.sh start >/dev/null
    /usr/bin/python3 loadtest/specdec_loadtest --router 127.0.0.1:53050 --concurrency "${LEVEL:-8}" \
      --methods AR,DFLASH_ADAPTIVE --prompts "$prompts" --max-new-tokens 128 \
      --ignore-eos --temperature 0 --duration "${DURATION:-10}" --warmup 3 --fail-on-error \
      --no-plots --out "$out/$name-$round" >"$out/$name-$round.txt" 2>&1 ||
      echo "load tester exit $?" >>"$out/$name-$round.txt"
    cp "$SPECDEC_RUN_DIR/router.log" "$out/$name-$round/router.log"
    BUILD_DIR=$dir bash deploy/local/cluster.sh stop >/dev/null
  done
done
/usr/bin/python3 "$here/summarize.py" "$out"
