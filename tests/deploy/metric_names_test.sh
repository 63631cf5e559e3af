#!/usr/bin/env bash
# Fast check (no cluster) that every metric name used by the Grafana dashboards, the Prometheus
# rules and the Helm chart's HPAs is a series some service defines in services/**/*.cc
# (histograms as _bucket/_sum/_count), with counter/gauge/histogram use that fits its type, and
# that the dashboards are well-formed. Details: tests/deploy/check_metric_names.py. The same
# names are checked against live /metrics output by prometheus_e2e_test.sh.
#
#   tests/deploy/metric_names_test.sh          PYTHON overrides /usr/bin/python3
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-/usr/bin/python3}" tests/deploy/check_metric_names.py
