#!/bin/bash
# The T = 0 lookup arms of docs/results/2026-11-28-lookup-index.md, on a build of 7994524 with
# arms.diff applied (temporary switches, not part of the product). ARM is NAME or
# NAME:VAR=1,VAR2=1. Usage: bash run.sh OUT ROUNDS "TEMPS" "ARM ..."
out=$1; rounds=$2; temps=$3; arms=$4; shift 4
mkdir -p $out; cd "$(dirname "$0")/../../../.."
for r in $(seq 1 $rounds); do
 for t in $temps; do
 for a in $arms; do
  name=${a%%:*}; envs=${a#*:}; [ "$envs" = "$a" ] && envs=""
  env $(echo $envs | tr ',' ' ') build/cli/specdec bench --target models/specdec-pycode/target --draft models/specdec-pycode/draft --dflash models/specdec-pycode/dflash --policy models/specdec-pycode/policy --prompts ../shared/datasets/humaneval/HumanEval.jsonl.gz models/specdec-pycode/eval/heldout_prompts.txt --max-prompts 0 --methods AR,NGRAM,DFLASH_ADAPTIVE -n 128 --threads 2 -t $t "$@" > $out/r${r}_t${t}_$name.txt 2>&1
 done; done
done
echo done > $out/DONE
