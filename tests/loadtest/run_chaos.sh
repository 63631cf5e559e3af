#!/usr/bin/env bash
# Chaos test (label `slow`): loadtest/specdec_loadtest/chaos.py on the embedded pack, short
# scenarios: the target paused, the target killed and restarted, the router killed and restarted,
# the drafter flapping. Exit 0 when every scenario passed (no completion differs from AR, every
# failure has an expected status, nothing fails after recovery, KV handles back to 0, recovered
# within the bound), 1 otherwise, 77 skipped (no grpc Python or no binaries).
#
# Environment: BUILD_DIR (default <repo>/build), SPECDEC_PACK (default models/specdec-pycode),
# PYTHON (default /usr/bin/python3 if it imports grpc, else python3).
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
BUILD_DIR="${BUILD_DIR:-$repo/build}"
PACK="${SPECDEC_PACK:-models/specdec-pycode}"
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  /usr/bin/python3 -c 'import grpc, grpc_tools, google.protobuf' 2>/dev/null && PYTHON=/usr/bin/python3
fi
if ! "$PYTHON" -c 'import grpc, grpc_tools, google.protobuf' 2>/dev/null; then
  echo "run_chaos: SKIP: $PYTHON lacks grpc/grpc_tools/protobuf" >&2
  exit 77
fi
for f in "$BUILD_DIR/services/target/specdec-target" "$BUILD_DIR/services/router/specdec-router" \
         "$PACK/target/config.json"; do
  [ -e "$f" ] || { echo "run_chaos: SKIP: $f is missing" >&2; exit 77; }
done
humaneval="$(PYTHONPATH=loadtest "$PYTHON" -c 'from specdec_loadtest import prompts; print(prompts.resolve("humaneval"))')"
[ -f "$humaneval" ] || { echo "run_chaos: SKIP: $humaneval is missing (../shared)" >&2; exit 77; }
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
base=
for b in $(seq 23650 10 23950); do  # services on b..b+4, /metrics on b+100..b+103
  ok=1
  for off in 0 1 2 3 4 100 101 102 103; do port_free $((b + off)) || ok=0; done
  if [ "$ok" = 1 ]; then base=$b; break; fi
done
[ -n "$base" ] || { echo "run_chaos: no free port base in 23650..23950" >&2; exit 1; }
out="$(mktemp -d "${TMPDIR:-/tmp}/specdec-chaos.XXXXXX")"
trap 'rm -rf "$out"' EXIT
bash clients/python/generate_protos.sh >/dev/null || { echo "run_chaos: proto generation failed" >&2; exit 1; }
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=loadtest "$PYTHON" -m specdec_loadtest.chaos --out "$out" \
  --build-dir "$BUILD_DIR" --pack "$PACK" --port-base "$base" \
  --faults target-pause,target-kill,router-kill,drafter-flap --max-new-tokens 32 \
  --fault-at 2 --after-s 3 --pause-s 2 --flaps 2 --watchdog-s 240
rc=$?
if [ "$rc" -ne 0 ]; then
  for log in "$out"/run/*.log; do
    [ -f "$log" ] && { echo "---- $(basename "$log") (last 15 lines)" >&2; tail -n 15 "$log" >&2; }
  done
  # A run the watchdog ended left its cluster up.
  SPECDEC_RUN_DIR="$out/run" bash deploy/local/cluster.sh stop >/dev/null 2>&1
fi
exit "$rc"
