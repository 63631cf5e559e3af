#!/usr/bin/env bash
# End-to-end test of the monitoring assets (deploy/prometheus, deploy/grafana, the Helm chart's
# HPA metrics) against a real Prometheus server scraping a real local cluster:
#   1. starts the four services on the embedded pack with deploy/local/cluster.sh (its own port
#      base and run directory; a 2 MiB KV-cache budget so that an oversized request is rejected
#      with RESOURCE_EXHAUSTED; the target also hosts the DFlash drafter) plus three more routers
#      on the same target: R1 without a policy (DFLASH_ADAPTIVE falls back to the default block
#      size), R2 without a drafter or tokenizer (speculative requests fall back to AR, text
#      prompts get FAILED_PRECONDITION) and R3 with the policy and load-aware speculation
#      (--load-aware, epochs of 10 ms, so that even warm requests of 10-40 ms span several and
#      epochs get measured), drafting on the target (--target-drafting); the main router,
#      R1 and R2 run without load awareness and draft on the drafter service;
#   2. starts Prometheus (Debian package `prometheus`) on 127.0.0.1 with its own storage, a 1 s
#      scrape and rule-evaluation interval, the shipped rule files, and
#      deploy/prometheus/prometheus-local.yml's jobs pointed at this cluster;
#   3. sends traffic twice with `specdec generate --router`: AR, DFLASH_ADAPTIVE, DFLASH,
#      DRAFT_CHAIN and DYSPEC_TREE through the main router, an invalid block size
#      (INVALID_ARGUMENT), an oversized request (RESOURCE_EXHAUSTED), an AR completion and a
#      streamed DFLASH_ADAPTIVE one through the main router's OpenAI-compatible HTTP API
#      (logged like the gRPC calls: HTTP requests feed the same metrics), the fallback cases on
#      R1 and R2, and 4 DFLASH_ADAPTIVE requests through R3 from parallel clients, so that its
#      load-aware epochs are measured and its per-level gauges are set (the first round creates
#      every series, the second makes the rates move);
#   4. runs check_prometheus_e2e.py: every dashboard and rule expression (alerts: their signal,
#      thresholds made always true) returns finite data through /api/v1/query, rules evaluate
#      cleanly, every metric name and label used exists in the live /metrics output, the gRPC
#      health service answers SERVING, and the acceptance length and counters in Prometheus
#      equal what the clients saw (also the routers' per-backend health and picks, and the
#      target's batch-size histogram against its verify operations; R3 asks the policy only for
#      requests that took a speculative step, those whose summary reports a block size).
# Every process it starts is stopped on exit.
#
#   tests/deploy/prometheus_e2e_test.sh
#
# Environment: BUILD_DIR (binaries, default <repo>/build), SPECDEC_PACK (default
# models/specdec-pycode), SPECDEC_PORT_BASE (default: first free of 21050, 21060, ...; /metrics
# ports from SPECDEC_METRICS_BASE, default the port base - 10000; Prometheus listens on the
# metrics base + 9 and the main router's HTTP API on the port base + 7; all below the kernel's
# ephemeral ports, 32768+, so that no client socket of a parallel test holds one of them; the
# extra routers' HTTP APIs take any free port), PROMETHEUS
# (default prometheus), PYTHON (default /usr/bin/python3), VERBOSE=1 prints every expression's
# result. Exit status: 0 pass, 1 failure, 77 skipped (no binaries, pack or prometheus).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
export BUILD_DIR="${BUILD_DIR:-$repo/build}"
PACK=${SPECDEC_PACK:-$repo/models/specdec-pycode}
PROMETHEUS=${PROMETHEUS:-prometheus}
PYTHON=${PYTHON:-/usr/bin/python3}
start_time=$SECONDS
cli="$BUILD_DIR/cli/specdec"
router_bin="$BUILD_DIR/services/router/specdec-router"
for f in "$BUILD_DIR"/services/{target/specdec-target,drafter/specdec-drafter,policy/specdec-policy} \
         "$router_bin" "$cli" "$PACK/target/config.json"; do
  [ -e "$f" ] || { echo "prometheus_e2e_test: SKIP: $f is missing" >&2; exit 77; }
done
if ! command -v "$PROMETHEUS" >/dev/null; then
  echo "prometheus_e2e_test: SKIP: $PROMETHEUS not found (apt-get install prometheus)" >&2
  exit 77
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ports_free() {  # base: router..policy and three extra routers, their /metrics, Prometheus, HTTP
  local b=$1 m=$(($1 - 10000)) o
  for o in 0 1 2 3 4 5 6; do port_free $((b + o)) && port_free $((m + o)) || return 1; done
  port_free $((m + 9)) && port_free $((b + 7))
}
if [ -z "${SPECDEC_PORT_BASE:-}" ]; then
  for base in $(seq 21050 10 21450); do
    if ports_free "$base"; then SPECDEC_PORT_BASE=$base; break; fi
  done
  : "${SPECDEC_PORT_BASE:?prometheus_e2e_test: no free port base in 21050..21450}"
fi
export SPECDEC_PORT_BASE
BASE=$SPECDEC_PORT_BASE
MBASE=${SPECDEC_METRICS_BASE:-$((BASE - 10000))}
export SPECDEC_METRICS_BASE=$MBASE
R0=127.0.0.1:$BASE R1=127.0.0.1:$((BASE + 4)) R2=127.0.0.1:$((BASE + 5)) R3=127.0.0.1:$((BASE + 6))
M0=127.0.0.1:$MBASE M1=127.0.0.1:$((MBASE + 4)) M2=127.0.0.1:$((MBASE + 5)) M3=127.0.0.1:$((MBASE + 6))
TARGET=127.0.0.1:$((BASE + 1)) DRAFTER=127.0.0.1:$((BASE + 2)) POLICY=127.0.0.1:$((BASE + 3))
PROM=127.0.0.1:$((MBASE + 9))
export SPECDEC_HTTP_PORT=$((BASE + 7))
H0=http://127.0.0.1:$SPECDEC_HTTP_PORT

export SPECDEC_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/specdec-prom-e2e.XXXXXX")"
# With load awareness a DFLASH_ADAPTIVE request asks the policy only if it takes a speculative
# step; the checks below count one policy call (or policy fallback) per adaptive request of the
# routers without it (R3 turns it on with its flag).
export SPECDEC_LOAD_AWARE=false
# The routers' warm-up request (services/router/warmup.h; tested in tests/services/router/
# warmup_test) would add its own replica picks and target passes to the exact counts below.
export SPECDEC_WARMUP_TOKENS=0
work=$SPECDEC_RUN_DIR
export TARGET_MODEL=$PACK/target DRAFT_LM=$PACK/draft DFLASH_MODEL=$PACK/dflash POLICY_MODEL=$PACK/policy
# The target hosts the DFlash drafter (TARGET_DRAFTING=1: R3's load-aware speculative runs draft
# there, with the block sizes of specdec_load_aware_block_size_total), but the main router, R1 and
# R2 send DFLASH requests through the drafter service (its faults, fallbacks and metrics are what
# this test checks).
export TARGET_DRAFTING=1 SPECDEC_TARGET_DRAFTING=false
pids=()
cleanup() {
  local rc=$? pid
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  bash deploy/local/cluster.sh stop >/dev/null 2>&1 || true
  if [ "$rc" -ne 0 ]; then
    for log in "$work"/*.log; do
      [ -f "$log" ] || continue
      echo "---- $(basename "$log") (last 15 lines)" >&2
      tail -n 15 "$log" >&2
    done
  fi
  rm -rf "$work"
  echo "prometheus_e2e_test: $( [ "$rc" -eq 0 ] && echo PASS || echo "FAIL ($rc)" ) in $((SECONDS - start_time)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_port() {  # host:port
  local deadline=$((SECONDS + 60))
  until ! port_free "${1##*:}"; do
    [ $SECONDS -lt $deadline ] || { echo "prometheus_e2e_test: nothing listens on $1" >&2; return 1; }
    sleep 0.2
  done
}

# 1. The cluster (2 MiB of KV cache: 512 tokens of the pack's target) and the extra routers.
SPECDEC_KV_BUDGET_BYTES=2097152 bash deploy/local/cluster.sh start
"$router_bin" --address "$R1" --metrics-address "$M1" --target "$TARGET" --drafter "$DRAFTER" \
  --tokenizer "$TARGET_MODEL" --http-address 127.0.0.1:0 >"$work/router-nopolicy.log" 2>&1 &
pids+=($!)
# R2 requires an API key (the dashboard's API keys row needs its series).
"$PYTHON" -c 'import hashlib, json, sys; json.dump({"keys": [{"id": "e2e", "sha256": hashlib.sha256(b"sk-e2e").hexdigest(), "max_concurrent": 4}]}, open(sys.argv[1], "w"))' "$work/api_keys.json"
"$router_bin" --address "$R2" --metrics-address "$M2" --target "$TARGET" \
  --api-keys "$work/api_keys.json" --http-address 127.0.0.1:0 >"$work/router-nodrafter.log" 2>&1 &
pids+=($!)
"$router_bin" --address "$R3" --metrics-address "$M3" --target "$TARGET" --policy "$POLICY" \
  --target-drafting true --load-aware true --load-aware-epoch-ms 10 --load-aware-max-epoch-ms 10 \
  --http-address 127.0.0.1:0 >"$work/router-loadaware.log" 2>&1 &
pids+=($!)
wait_port "$H0"
wait_port "$R1"
wait_port "$R2"
wait_port "$R3"

# 2. Prometheus.
"$PYTHON" tests/deploy/check_prometheus_e2e.py config --metrics-offset $((MBASE - 9090)) \
  --extra-router "$M1" --extra-router "$M2" --extra-router "$M3" --out "$work/prometheus.yml"
"$PROMETHEUS" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="$PROM" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
"$PYTHON" tests/deploy/check_prometheus_e2e.py ready --prometheus "$PROM"
echo "prometheus_e2e_test: cluster, routers and Prometheus ($PROM) up after $((SECONDS - start_time)) s"

# 3. Traffic. One line per call in $clients (clients.tsv): router, method, expected outcome,
# client stderr.
clients=$work/clients.tsv
call() {  # router method outcome generate-args...
  local router=$1 method=$2 outcome=$3 rc=0
  shift 3
  "$cli" generate --router "$router" --method "$method" "$@" >/dev/null 2>"$clients.err" || rc=$?
  if { [ "$outcome" = OK ] && [ $rc -ne 0 ]; } || { [ "$outcome" != OK ] && [ $rc -eq 0 ]; }; then
    echo "prometheus_e2e_test: $method via $router: exit $rc, expected $outcome:" >&2
    cat "$clients.err" >&2
    return 1
  fi
  printf '%s\t%s\t%s\t%s\n' "$router" "$method" "$outcome" "$(tail -n 1 "$clients.err")" >>"$clients"
}
# The same through the main router's HTTP API, logged as a call of the main router (its metrics
# count HTTP requests like gRPC ones).
http_call() {  # method outcome http-args...
  local method=$1 outcome=$2 rc=0
  shift 2
  "$PYTHON" tests/deploy/check_prometheus_e2e.py http --url "$H0" --method "$method" "$@" \
    2>"$clients.err" || rc=$?
  if { [ "$outcome" = OK ] && [ $rc -ne 0 ]; } || { [ "$outcome" != OK ] && [ $rc -eq 0 ]; }; then
    echo "prometheus_e2e_test: $method via $H0: exit $rc, expected $outcome:" >&2
    cat "$clients.err" >&2
    return 1
  fi
  printf '%s\t%s\t%s\t%s\n' "$R0" "$method" "$outcome" "$(tail -n 1 "$clients.err")" >>"$clients"
}
# One DFLASH_ADAPTIVE request through R3 from each of 4 parallel clients (each with its own
# clients-*.tsv, appended to clients.tsv). 5-token prompts and 64 tokens: together 4 x 69 tokens
# x 5 KiB (target + hosted drafter) of the target's 2 MiB KV budget.
load_aware_burst() {  # round
  local c failed=0 workers=()
  for c in 1 2 3 4; do
    ( clients=$work/clients-r3-$1-$c.tsv
      call "$R3" DFLASH_ADAPTIVE OK --prompt-ids $((c * 7 + $1)),$((c * 7 + 100)),$((c * 7 + 200)),300,400 \
        -n 64 --ignore-eos ) &
    workers+=($!)
  done
  for c in "${workers[@]}"; do wait "$c" || failed=1; done
  cat "$work"/clients-r3-"$1"-*.tsv >>"$clients"
  return $failed
}
prompts=($'def is_palindrome(text: str) -> bool:\n    """Return True if text reads the same backwards."""\n'
         $'def fibonacci(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n')
for round in 0 1; do
  p=${prompts[$round]}
  for method in AR DFLASH_ADAPTIVE DFLASH DRAFT_CHAIN DYSPEC_TREE; do
    call "$R0" "$method" OK -p "$p" -n 24 --ignore-eos
  done
  call "$R0" DFLASH INVALID_ARGUMENT -p "$p" -n 8 --block-size 1
  call "$R0" DFLASH RESOURCE_EXHAUSTED -p "$p" -n 1500 --ignore-eos
  http_call AR OK --prompt "$p" --max-tokens 24 --ignore-eos
  http_call DFLASH_ADAPTIVE OK --prompt "$p" --max-tokens 24 --ignore-eos --stream
  call "$R1" DFLASH_ADAPTIVE OK -p "$p" -n 16 --ignore-eos
  call "$R2" DFLASH OK --prompt-ids 0,100,200,300,400 -n 16 --ignore-eos --api-key sk-e2e
  call "$R2" AR FAILED_PRECONDITION -p "$p" -n 8 --api-key sk-e2e
  # R3's requests. Let Prometheus scrape the first round (2.5 s from here, or until R3's requests
  # are done), so that the second one moves every counter.
  [ $round = 1 ] || sleep 2.5 &
  scrape_wait=$!
  load_aware_burst $round
  wait $scrape_wait
done
echo "prometheus_e2e_test: $(wc -l <"$clients") client calls ($(cut -f1 "$clients" | grep -cxF "$R3") through R3) done after $((SECONDS - start_time)) s"

# 4. The checks.
"$PYTHON" tests/deploy/check_prometheus_e2e.py check --prometheus "$PROM" --clients "$work/clients.tsv" \
  --router "$R0" --router-metrics "$M0" --router-nopolicy "$R1" --router-nodrafter "$R2" \
  --router-load-aware "$R3" \
  --router-grpc "$R0" "$R1" "$R2" "$R3" --router-metrics-all "$M0" "$M1" "$M2" "$M3" \
  --grpc "$R0" "$R1" "$R2" "$R3" "$TARGET" "$DRAFTER" "$POLICY" \
  --target-grpc "$TARGET" --drafter-grpc "$DRAFTER" --policy-grpc "$POLICY" \
  --metrics "$M0" "$M1" "$M2" "$M3" 127.0.0.1:$((MBASE + 1)) 127.0.0.1:$((MBASE + 2)) 127.0.0.1:$((MBASE + 3)) \
  ${VERBOSE:+-v}
