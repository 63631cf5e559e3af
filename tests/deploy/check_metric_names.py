#!/usr/bin/env python3
"""Every metric the deployment assets use exists, with the right type (fast, no cluster).

Checks, against the metric families the services register in services/**/*.cc:
  - every metric name in the Grafana dashboards (panel queries and query variables), the
    Prometheus recording and alerting rules and the Helm chart's HPA metrics is an exported series
    (histograms as _bucket/_sum/_count), a recording rule defined in deploy/prometheus, or `up`;
  - rate()/irate()/increase() only take counters or histogram series, histogram_quantile() only
    _bucket series, and the HPA metrics are gauges (an HPA averages the current value per pod);
  - every alert expression compares its signal with a numeric threshold (the end-to-end test
    evaluates the signal with the threshold made always true);
  - the dashboards are well-formed: unique uids and panel ids, every panel has queries on the
    $datasource variable, panels fit the 24-column grid;
  - the scrape configurations name the jobs specdec-<service>, which the rules and dashboards
    assume.
Exit status 0 when all hold; otherwise every violation is printed.
"""
import os
import re
import sys

import yaml

import deploy_inventory as inv

errors = []


def fail(msg):
    errors.append(msg)


def inner_calls(expr, fn):
    """Argument text of every fn(...) call in expr."""
    out = []
    for m in re.finditer(r"\b" + fn + r"\(", expr):
        depth, i = 1, m.end()
        while i < len(expr) and depth:
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            i += 1
        out.append(expr[m.end():i - 1])
    return out


def main():
    defined = inv.defined_metrics()
    if not defined:
        fail("no metric families found in services/**/*.cc")
    rule_list = inv.rules()
    recorded = {name for _, kind, name, _ in rule_list if kind == "record"}

    used = []  # (where, name)
    exprs = inv.every_expr()
    for where, expr in exprs:
        for name in inv.metric_names(expr):
            used.append((where, name))
    used += inv.dashboard_variable_metrics()
    used += inv.hpa_metrics()

    for where, name in used:
        if name in defined or name in recorded or name in inv.PROMETHEUS_SERIES:
            continue
        family = re.sub(r"_(bucket|sum|count|total)$", "", name)
        hint = [s for s in defined if s.startswith(family)]
        fail(f"{where}: metric {name} is not exported by any service"
             + (f" (did you mean {', '.join(sorted(hint)[:3])}?)" if hint else ""))

    for where, expr in exprs:
        for name in inv.rate_targets(expr):
            kind = defined.get(name, (None, None))[1]
            if kind == "gauge":
                fail(f"{where}: rate/increase of the gauge {name}")
            if name in recorded:
                fail(f"{where}: rate/increase of the recording rule {name}")
        for arg in inner_calls(expr, "histogram_quantile"):
            for name in inv.metric_names(arg):
                if name in defined and not name.endswith("_bucket"):
                    fail(f"{where}: histogram_quantile over {name}, not a _bucket series")

    for where, name in inv.hpa_metrics():
        kind = defined.get(name, (None, None))[1]
        if kind != "gauge":
            fail(f"{where}: HPA metric {name} must be a gauge (is {kind})")

    n_alerts = 0
    for where, kind, name, expr in rule_list:
        if kind == "alert":
            n_alerts += 1
            if not inv.thresholds(expr):
                fail(f"{where}: alert expression has no `<op> <number>` threshold")

    uids = set()
    n_panels = 0
    for path, dash in inv.dashboards():
        if dash.get("uid") in uids:
            fail(f"{path}: duplicate dashboard uid {dash.get('uid')}")
        uids.add(dash.get("uid"))
        variables = {v.get("name") for v in dash.get("templating", {}).get("list", [])}
        if "datasource" not in variables:
            fail(f"{path}: no $datasource variable")
        ids = set()
        for p in inv._panels(dash.get("panels", [])):
            if p.get("id") in ids:
                fail(f"{path}: duplicate panel id {p.get('id')}")
            ids.add(p.get("id"))
            g = p.get("gridPos", {})
            if g.get("x", 0) + g.get("w", 0) > 24:
                fail(f"{path}: panel {p.get('title')!r} is wider than the grid")
            if p.get("type") == "row":
                continue
            n_panels += 1
            targets = p.get("targets") or []
            if not targets:
                fail(f"{path}: panel {p.get('title')!r} has no queries")
            for t in targets:
                if (t.get("datasource") or {}).get("uid") != "${datasource}":
                    fail(f"{path}: panel {p.get('title')!r} query {t.get('refId')} does not use $datasource")
                if not t.get("expr"):
                    fail(f"{path}: panel {p.get('title')!r} query {t.get('refId')} has no expr")

    services = {"router", "target", "drafter", "policy"}
    with open(os.path.join(inv.REPO, "deploy/prometheus/prometheus-local.yml")) as f:
        local = yaml.safe_load(f)
    jobs = {c["job_name"] for c in local.get("scrape_configs", [])}
    if jobs != {f"specdec-{s}" for s in services}:
        fail(f"prometheus-local.yml: jobs {sorted(jobs)} are not specdec-<service>")
    for path in ("deploy/prometheus/prometheus-k8s.yml", "helm/specdec/templates/servicemonitor.yaml"):
        with open(os.path.join(inv.REPO, path)) as f:
            if "replacement: specdec-$1" not in f.read():
                fail(f"{path}: does not set job to specdec-<component>")

    names = {n for _, n in used}
    print(f"check_metric_names: {len(exprs)} expressions ({n_panels} panels, {len(rule_list)} rules, "
          f"{n_alerts} alerts), {len(names)} distinct names, {len(defined)} exported series")
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
