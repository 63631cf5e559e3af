#!/bin/sh
# Image entrypoint: runs the binary the image was built for (SPECDEC_SERVICE, set from the
# SERVICE build argument) with the container's arguments, as PID 1 so it receives SIGTERM and
# drains. Kubernetes manifests may set `command` instead; every binary is on PATH.
set -eu
case "${SPECDEC_SERVICE:-all}" in
  router|target|drafter|policy) exec "specdec-$SPECDEC_SERVICE" "$@" ;;
  *) exec specdec "$@" ;;
esac
