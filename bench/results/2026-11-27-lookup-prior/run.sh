#!/usr/bin/env bash
# DFLASH_ADAPTIVE against AR in process on the pack, before (BEFORE: a `specdec` binary built
# from the commit before the machine's lookup prior) and after, alternating: the temperature
# classes' run (T = 1 and T = 0, 1 and 2 threads; 40 HumanEval prompts and the held-out corpus's
# 30, 128 tokens) over five rounds.
#   bash bench/results/2026-11-27-lookup-prior/run.sh OUT BEFORE
set -euo pipefail
ROUNDS=5 exec bash "$(dirname "$0")/../2026-11-27-temperature-classes/run.sh" "$@"
