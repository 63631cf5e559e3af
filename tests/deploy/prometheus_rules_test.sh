#!/usr/bin/env bash
# Validates deploy/prometheus with Prometheus' own promtool (Debian package `prometheus`):
#   - the recording and alerting rules parse, and their PromQL is valid (promtool check rules);
#   - prometheus-local.yml is a valid configuration with its rule files (promtool check config);
#   - the alerts fire on synthetic series past their thresholds and stay silent below them
#     (promtool test rules deploy/prometheus/tests/*.yml);
#   - prometheus-k8s.yml parses as YAML with the expected job relabeling (Debian's Prometheus is
#     built without Kubernetes service discovery, so promtool cannot load that file).
#
#   tests/deploy/prometheus_rules_test.sh
# Exit status: 0 pass, 1 failure, 77 skipped (no promtool).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v promtool >/dev/null; then
  echo "prometheus_rules_test: SKIP: promtool not found (apt-get install prometheus)" >&2
  exit 77
fi
promtool check rules deploy/prometheus/specdec.rules.yml deploy/prometheus/specdec.alerts.yml
promtool check config deploy/prometheus/prometheus-local.yml
promtool test rules deploy/prometheus/tests/*.yml
"${PYTHON:-/usr/bin/python3}" - <<'PY'
import yaml
c = yaml.safe_load(open("deploy/prometheus/prometheus-k8s.yml"))
job = c["scrape_configs"][0]
assert job["kubernetes_sd_configs"][0]["role"] == "endpoints", job
relabel = {r.get("target_label"): r for r in job["relabel_configs"] if r.get("target_label")}
assert relabel["job"]["replacement"] == "specdec-$1", relabel
assert {"namespace", "pod"} <= set(relabel), relabel
assert c["rule_files"] == ["specdec.rules.yml", "specdec.alerts.yml"], c["rule_files"]
print("prometheus-k8s.yml: structure OK")
PY
echo "prometheus_rules_test: PASS"
