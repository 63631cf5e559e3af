#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz) with clang, ASan and UBSan in their own build
# directory and runs each for a given time on a copy of its seed corpus; prints executions per
# second, total executions and new corpus entries per harness, and writes any crashing input.
#   scripts/fuzz.sh [SECONDS_PER_HARNESS (default 600)] [HARNESS...]
# Environment: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_OUT (default $FUZZ_BUILD_DIR/runs);
# FUZZ_SEED and FUZZ_RUNS (both unset by default) fix libFuzzer's seed and stop each harness after
# that many inputs (the time still bounds it), so that a run repeats: CI's smoke is such a run.
# Exit status: 0 no crash, 1 a harness crashed (its input is in FUZZ_OUT/<harness>/).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=${1:-600}
shift || true
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
OUT=${FUZZ_OUT:-$BUILD/runs}
mkdir -p "$OUT"
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache} CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (apt-get install clang)" >&2; exit 1; }
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSPECDEC_FUZZ=ON >/dev/null
ninja -C "$BUILD" specdec_fuzzers
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  harnesses=(safetensors_fuzzer gguf_fuzzer model_config_fuzzer tokenizer_json_fuzzer
             tokenizer_encode_fuzzer generate_request_fuzzer openai_request_fuzzer
             jinja_parse_fuzzer)
fi
status=0
printf '| harness | seconds | executions | exec/s | corpus (seeds -> end) | result |\n| --- | --- | --- | --- | --- | --- |\n' > "$OUT/fuzz_table.md"
for h in "${harnesses[@]}"; do
  work="$OUT/$h"
  rm -rf "$work" && mkdir -p "$work/corpus"
  seeds=tests/fuzz/corpus/$h
  [ -d "$seeds" ] && cp "$seeds"/* "$work/corpus/" 2>/dev/null || true
  n0=$(ls "$work/corpus" | wc -l)
  set +e
  repeat=()
  [ -n "${FUZZ_SEED:-}" ] && repeat+=(-seed="$FUZZ_SEED")
  [ -n "${FUZZ_RUNS:-}" ] && repeat+=(-runs="$FUZZ_RUNS")
  ASAN_OPTIONS=detect_leaks=1 "$BUILD/tests/fuzz/$h" "$work/corpus" -max_total_time="$SECONDS_PER" \
    "${repeat[@]}" \
    -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$work/" >"$work/log.txt" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log.txt" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$work/log.txt" | grep -o '[0-9]*$' || echo 0)
  n1=$(ls "$work/corpus" | wc -l)
  result=ok
  if [ $rc -ne 0 ]; then
    result="CRASH (rc $rc): $(ls "$work" | grep -E '^(crash|leak|timeout|oom)-' | head -n 1)"
    status=1
    tail -n 30 "$work/log.txt" >&2
  fi
  printf '| %s | %s | %s | %s | %s -> %s | %s |\n' "$h" "$SECONDS_PER" "$execs" "$rate" "$n0" "$n1" \
    "$result" | tee -a "$OUT/fuzz_table.md"
done
echo "fuzz: table in $OUT/fuzz_table.md"
exit $status
