#!/usr/bin/env bash
# DFLASH_ADAPTIVE against AR in process on the pack, before (BEFORE: a `specdec` binary built
# from the commit before AR steps kept the features without a verify) and after: the lookup
# prior's run (five rounds of the temperature classes' run).
#   bash bench/results/2026-11-27-ar-features/run.sh OUT BEFORE
set -euo pipefail
exec bash "$(dirname "$0")/../2026-11-27-lookup-prior/run.sh" "$@"
