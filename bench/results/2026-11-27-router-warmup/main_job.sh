#!/usr/bin/env bash
# The main job's cluster requests (scripts/run.sh: 16-token warm-up per method, then 128 tokens of
# AR and DFLASH_ADAPTIVE on its prompt) on fresh local clusters whose router warms up
# (SPECDEC_WARMUP_TOKENS=96, the default) or not (0), alternating ROUNDS times. Prints one line per
# cluster: warm-up tokens, AR tok/s, DFLASH_ADAPTIVE tok/s and their ratio.
#   bash bench/results/2026-11-27-router-warmup/main_job.sh OUT [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: main_job.sh OUT [ROUNDS]}
rounds=${2:-3}
mkdir -p "$out"
BUILD_DIR=${BUILD_DIR:-build}
PACK=models/specdec-pycode
export TARGET_MODEL=$PACK/target DRAFT_LM=$PACK/draft DFLASH_MODEL=$PACK/dflash
export POLICY_MODEL=$PACK/policy SPECDEC_LOAD_AWARE=false
ROUTER=127.0.0.1:${SPECDEC_PORT_BASE:-50050}
PROMPT=$'def is_palindrome(text: str) -> bool:\n    """Return True if text reads the same backwards."""\n'
methods="AR DFLASH_ADAPTIVE DFLASH DRAFT_CHAIN DYSPEC_TREE NGRAM"
rate() { sed -n 's/.*(\([0-9.]*\) tokens\/s).*/\1/p' "$1"; }
for round in $(seq "$rounds"); do
  for warmup in 0 96; do
    export SPECDEC_WARMUP_TOKENS=$warmup
    bash deploy/local/cluster.sh start >/dev/null
    for method in $methods; do
      "$BUILD_DIR/cli/specdec" generate --router "$ROUTER" --method "$method" -p "$PROMPT" \
        -n 16 --ignore-eos >/dev/null 2>&1
    done
    for method in AR DFLASH_ADAPTIVE; do
      "$BUILD_DIR/cli/specdec" generate --router "$ROUTER" --method "$method" -p "$PROMPT" \
        -n 128 --ignore-eos >/dev/null 2>"$out/r${round}_w${warmup}_$method.stats"
    done
    bash deploy/local/cluster.sh stop >/dev/null
    ar=$(rate "$out/r${round}_w${warmup}_AR.stats")
    ad=$(rate "$out/r${round}_w${warmup}_DFLASH_ADAPTIVE.stats")
    awk -v r="$round" -v w="$warmup" -v a="$ar" -v d="$ad" \
      'BEGIN { printf "round %s warmup %s: AR %.1f tok/s, DFLASH_ADAPTIVE %.1f tok/s, %.2fx\n", r, w, a, d, d / a }' |
      tee -a "$out/summary.txt"
  done
done
