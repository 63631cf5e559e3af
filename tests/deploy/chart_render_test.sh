#!/usr/bin/env bash
# Renders the helm/specdec chart with the template engine Helm uses (Go text/template + sprig,
# through tests/deploy/helm_render, built offline against Debian's Go packages) and checks the
# manifests (tests/deploy/check_chart.py): the default values, the GPU overlay
# (values-gpu.yaml), every optional feature on (chart_values/features.yaml), a minimal
# target + router release (chart_values/minimal.yaml), and TLS with a cert-manager Certificate
# (chart_values/tls.yaml) or a Secret of yours (chart_values/tls-secret.yaml). Also checks that
# bad values fail the render with a clear message (required model path, unknown volume type,
# drafter without a draft model, API keys without a data key, TLS without a certificate source or
# without a cert-manager issuer).
#
#   tests/deploy/chart_render_test.sh
#
# Environment: BUILD_DIR (the renderer and Go's build cache go to $BUILD_DIR/helm_render, else a
# temporary directory), PYTHON (default /usr/bin/python3).
# Exit status: 0 pass, 1 failure, 77 skipped (no Go toolchain or sprig sources).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
PYTHON=${PYTHON:-/usr/bin/python3}
GOPATH_DEBIAN=/usr/share/gocode
if ! command -v go >/dev/null || [ ! -d "$GOPATH_DEBIAN/src/github.com/Masterminds/sprig" ]; then
  echo "chart_render_test: SKIP: needs golang-go and golang-github-masterminds-sprig-dev" \
       "(scripts/install_deps.sh installs them)" >&2
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/specdec-chart.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=${BUILD_DIR:+$BUILD_DIR/helm_render}
out=${out:-$work/bin}
mkdir -p "$out"
render="$out/helm_render"
GO111MODULE=off GOPATH="$GOPATH_DEBIAN" GOCACHE="$out/go-cache" GOFLAGS= \
  go build -o "$render" tests/deploy/helm_render/main.go

chart=helm/specdec
values=tests/deploy/chart_values
run() {  # scenario, then helm_render arguments
  local name=$1; shift
  "$render" -name demo -namespace inference "$@" "$chart" >"$work/$name.yaml"
  "$render" -name demo -namespace inference -notes "$@" "$chart" >"$work/$name.notes.txt"
}
run default
run gpu -f "$chart/values-gpu.yaml"
run features -f "$values/features.yaml"
run minimal -f "$values/minimal.yaml"
run tls -f "$values/tls.yaml"
run tls-secret -f "$values/tls-secret.yaml"
"$PYTHON" tests/deploy/check_chart.py "$work"

# Bad values must fail the render and say why.
expect_error() {  # message, values YAML
  printf '%s\n' "$2" >"$work/bad.yaml"
  if "$render" -f "$work/bad.yaml" "$chart" >/dev/null 2>"$work/err"; then
    echo "chart_render_test: FAIL: rendering with [$2] succeeded" >&2
    exit 1
  fi
  if ! grep -qF "$1" "$work/err"; then
    echo "chart_render_test: FAIL: rendering with [$2] failed without '$1':" >&2
    cat "$work/err" >&2
    exit 1
  fi
}
expect_error "models.target is required" 'models: {target: ""}'
expect_error "models.volume.type must be pvc, hostPath or emptyDir" 'models: {volume: {type: nfs}}'
expect_error "drafter.enabled needs models.dflash or models.draftLm" 'models: {dflash: "", draftLm: ""}'
expect_error "router.apiKeys.key is required with router.apiKeys.existingSecret" \
  'router: {apiKeys: {existingSecret: keys, key: ""}}'
expect_error "router.apiKeys.key must be a data key of the Secret, not a path" \
  'router: {apiKeys: {existingSecret: keys, key: a/keys.json}}'
expect_error "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt) or tls.certManager.enabled" \
  'tls: {enabled: true}'
expect_error "tls.enabled needs tls.secretName" \
  'tls: {enabled: true, secretName: "", certManager: {enabled: false, issuerRef: {name: ca}}}'
expect_error "tls.certManager.issuerRef.name is required with tls.certManager.enabled" \
  'tls: {enabled: true, certManager: {enabled: true}}'
expect_error "tls.certManager.issuerRef.name is required with tls.certManager.enabled" \
  'tls: {enabled: true, secretName: mine, certManager: {enabled: true, issuerRef: {name: ""}}}'
echo "chart_render_test: PASS"
