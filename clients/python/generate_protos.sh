#!/usr/bin/env bash
# (Re)generates the Python protobuf/gRPC modules of the specdec SDK from the repository's protos:
#   proto/specdec/v1/{common,router}.proto -> clients/python/specdec/v1/*_pb2.py, *_pb2_grpc.py
# Needs the Debian packages python3-grpcio python3-grpc-tools python3-protobuf.
# Environment: PYTHON (default /usr/bin/python3 when it has grpc_tools, else python3),
# SPECDEC_PROTO_DIR (default <repo>/proto).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto_dir="${SPECDEC_PROTO_DIR:-$here/../../proto}"
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  if /usr/bin/python3 -c 'import grpc_tools' 2>/dev/null; then PYTHON=/usr/bin/python3; fi
fi
out="$here/specdec/v1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m grpc_tools.protoc -I"$proto_dir" --python_out="$tmp" --grpc_python_out="$tmp" \
  "$proto_dir/specdec/v1/common.proto" "$proto_dir/specdec/v1/router.proto"
for f in "$tmp"/specdec/v1/*.py; do
  cp "$f" "$out/.$(basename "$f").tmp"
  mv -f "$out/.$(basename "$f").tmp" "$out/$(basename "$f")"
done
echo "generate_protos: wrote $(cd "$tmp/specdec/v1" && ls *.py | tr '\n' ' ')into $out"
