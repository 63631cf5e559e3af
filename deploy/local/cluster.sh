#!/usr/bin/env bash
# Starts, checks or stops the four specdec services on loopback.
#
#   deploy/local/cluster.sh start    # needs TARGET_MODEL; optional DRAFT_LM, DFLASH_MODEL, POLICY_MODEL
#   deploy/local/cluster.sh status
#   deploy/local/cluster.sh stop
#
# Environment: BUILD_DIR (default build), SPECDEC_RUN_DIR (pids and logs, default
# $BUILD_DIR/cluster), TARGET_MODEL (target checkpoint; also the tokenizer), DRAFT_LM (small AR
# draft model), DFLASH_MODEL (DFlash drafter), POLICY_MODEL (BlockPilot), SPECDEC_PORT_BASE
# (default 50050: router +0, target +1, drafter +2, policy +3), SPECDEC_METRICS_BASE (/metrics
# ports, same offsets; default 9090 shifted by SPECDEC_PORT_BASE - 50050), SPECDEC_DTYPE (compute dtype of target and drafter: auto, f32, bf16;
# default auto = the checkpoint's), SPECDEC_THREADS (compute threads of target and drafter; default
# half the cores: co-located services that each spin all cores stall each other's parallel loops).
# SPECDEC_HTTP_PORT: the router's OpenAI-compatible HTTP API (default 8000 with the default port
# base, else the port base + 4). CHAT_TEMPLATE: a Jinja chat template file for
# /v1/chat/completions (default: the target's tokenizer_config.json chat_template, if any).
# TARGET_DRAFTING (default 1): with DFLASH_MODEL, the target hosts the DFlash drafter too and
# DFLASH* requests draft there in server-side speculative runs (no round trip per step); 0 = they
# draft on the drafter service.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
RUN=${SPECDEC_RUN_DIR:-$BUILD_DIR/cluster}
BASE=${SPECDEC_PORT_BASE:-50050}
MBASE=${SPECDEC_METRICS_BASE:-$((9090 + BASE - 50050))}
THREADS=${SPECDEC_THREADS:-$(($(nproc) / 2 > 0 ? $(nproc) / 2 : 1))}
ROUTER=127.0.0.1:$BASE TARGET=127.0.0.1:$((BASE + 1)) DRAFTER=127.0.0.1:$((BASE + 2))
POLICY=127.0.0.1:$((BASE + 3))
HTTP_PORT=${SPECDEC_HTTP_PORT:-$([ "$BASE" = 50050 ] && echo 8000 || echo $((BASE + 4)))}

wait_port() {  # host:port timeout_s
  local host=${1%:*} port=${1##*:} deadline=$((SECONDS + $2))
  while ! (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

launch() {  # name address args...
  local name=$1 addr=$2; shift 2
  nohup "$@" >"$RUN/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
  if ! wait_port "$addr" 60; then
    echo "cluster: $name did not come up on $addr; its log:" >&2
    tail -n 20 "$RUN/$name.log" >&2
    exit 1
  fi
}

stop() {
  for name in router drafter policy target; do
    [ -f "$RUN/$name.pid" ] || continue
    pid=$(cat "$RUN/$name.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$RUN/$name.pid"
  done
}

case "${1:-start}" in
  start)
    : "${TARGET_MODEL:?set TARGET_MODEL to the target checkpoint directory}"
    mkdir -p "$RUN"
    stop
    target_args=()
    if [ -n "${DFLASH_MODEL:-}" ] && [ "${TARGET_DRAFTING:-1}" = 1 ]; then
      target_args=(--dflash "$DFLASH_MODEL")
    fi
    launch target "$TARGET" "$BUILD_DIR/services/target/specdec-target" --model "$TARGET_MODEL" \
      --address "$TARGET" --metrics-address "127.0.0.1:$((MBASE + 1))" \
      --dtype "${SPECDEC_DTYPE:-auto}" --threads "$THREADS" "${target_args[@]}"
    router_args=(--target "$TARGET" --tokenizer "$TARGET_MODEL"
                 --http-address "127.0.0.1:$HTTP_PORT")
    [ -n "${CHAT_TEMPLATE:-}" ] && router_args+=(--chat-template "$CHAT_TEMPLATE")
    if [ -n "${DRAFT_LM:-}${DFLASH_MODEL:-}" ]; then
      drafter_args=(--address "$DRAFTER" --metrics-address "127.0.0.1:$((MBASE + 2))"
                    --target "$TARGET_MODEL" --dtype "${SPECDEC_DTYPE:-auto}"
                    --threads "$THREADS")
      [ -n "${DRAFT_LM:-}" ] && drafter_args+=(--draft-lm "$DRAFT_LM")
      [ -n "${DFLASH_MODEL:-}" ] && drafter_args+=(--dflash "$DFLASH_MODEL")
      launch drafter "$DRAFTER" "$BUILD_DIR/services/drafter/specdec-drafter" "${drafter_args[@]}"
      router_args+=(--drafter "$DRAFTER")
    fi
    if [ -n "${POLICY_MODEL:-}" ]; then
      launch policy "$POLICY" "$BUILD_DIR/services/policy/specdec-policy" --policy "$POLICY_MODEL" \
        --address "$POLICY" --metrics-address "127.0.0.1:$((MBASE + 3))"
      router_args+=(--policy "$POLICY")
    fi
    launch router "$ROUTER" "$BUILD_DIR/services/router/specdec-router" --address "$ROUTER" \
      --metrics-address "127.0.0.1:$MBASE" "${router_args[@]}"
    echo "cluster: router $ROUTER (metrics http://127.0.0.1:$MBASE/metrics," \
         "OpenAI API http://127.0.0.1:$HTTP_PORT/v1)"
    echo "cluster: target $TARGET (metrics :$((MBASE + 1)))${DRAFT_LM:+, drafter $DRAFTER (metrics :$((MBASE + 2)))}${POLICY_MODEL:+, policy $POLICY (metrics :$((MBASE + 3)))}"
    echo "cluster: logs and pids in $RUN"
    ;;
  status)
    for name in target drafter policy router; do
      if [ -f "$RUN/$name.pid" ] && kill -0 "$(cat "$RUN/$name.pid")" 2>/dev/null; then
        echo "$name: running (pid $(cat "$RUN/$name.pid"))"
      else
        echo "$name: stopped"
      fi
    done
    ;;
  stop) stop; echo "cluster: stopped" ;;
  *) echo "usage: $0 start|status|stop" >&2; exit 2 ;;
esac
