"""What the deployment assets use and what the services export, for the deploy tests.

- every PromQL expression of the Grafana dashboards (deploy/grafana/dashboards/*.json: panel
  targets and query variables) and of the Prometheus rules (deploy/prometheus/*.rules.yml,
  *.alerts.yml), and the Pods metrics of the Helm chart's HPAs (helm/specdec/values*.yaml);
- the metric series the services define (services/**/*.cc: prometheus-cpp builders, with the
  _bucket/_sum/_count series of histograms);
- small PromQL helpers: the metric names and label matchers of an expression, Grafana variable
  substitution, and the "alert signal" variant of an alert expression.
"""
import glob
import json
import os
import re

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Grafana variables as the deploy tests substitute them: rate windows wide enough to hold every
# sample of a short test run, and every method.
GRAFANA_VARS = {
    "$__rate_interval": "2m",
    "$__interval": "15s",
    "$__range": "5m",
    "${method}": ".*",
    "$method": ".*",
}

PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "Inf", "NaN", "inf", "nan", "atan2",
    # Aggregation operators, which may be followed by a by/without clause instead of "(".
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile",
}
# Prometheus' own series that the assets may use besides the services' metrics.
PROMETHEUS_SERIES = {"up"}

_THRESHOLD = re.compile(r"(==|!=|>=|<=|>|<)\s*(?:bool\s+)?-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")


def dashboards(repo=REPO):
    """[(file, dashboard json)] of deploy/grafana/dashboards."""
    out = []
    for path in sorted(glob.glob(os.path.join(repo, "deploy/grafana/dashboards/*.json"))):
        with open(path) as f:
            out.append((os.path.relpath(path, repo), json.load(f)))
    return out


def _panels(panels):
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


def dashboard_exprs(repo=REPO):
    """[(where, expr)] of every panel target, in the dashboards' own syntax (Grafana variables)."""
    out = []
    for path, dash in dashboards(repo):
        for p in _panels(dash.get("panels", [])):
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"{path}: {p.get('title')} [{t.get('refId')}]", t["expr"]))
    return out


def dashboard_variable_metrics(repo=REPO):
    """[(where, metric)] used by label_values(metric, label) query variables."""
    out = []
    for path, dash in dashboards(repo):
        for v in dash.get("templating", {}).get("list", []):
            q = v.get("query")
            if isinstance(q, dict):
                q = q.get("query")
            if v.get("type") == "query" and isinstance(q, str):
                m = re.match(r"\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,", q)
                if m:
                    out.append((f"{path}: variable {v.get('name')}", m.group(1)))
    return out


def rule_files(repo=REPO):
    return sorted(glob.glob(os.path.join(repo, "deploy/prometheus/*.rules.yml")) +
                  glob.glob(os.path.join(repo, "deploy/prometheus/*.alerts.yml")))


def rules(repo=REPO):
    """[(where, kind, name, expr)] with kind "record" or "alert"."""
    out = []
    for path in rule_files(repo):
        with open(path) as f:
            doc = yaml.safe_load(f)
        for g in doc.get("groups", []):
            for r in g.get("rules", []):
                kind = "record" if "record" in r else "alert"
                name = r.get("record") or r.get("alert")
                out.append((f"{os.path.relpath(path, repo)}: {g['name']}/{name}", kind, name,
                            r["expr"]))
    return out


def hpa_metrics(repo=REPO):
    """[(where, metric)] of the chart's autoscaling.metric.name values (default and overlays)."""
    out = []
    for path in sorted(glob.glob(os.path.join(repo, "helm/specdec/values*.yaml"))):
        with open(path) as f:
            values = yaml.safe_load(f) or {}
        for component, v in values.items():
            if isinstance(v, dict) and isinstance(v.get("autoscaling"), dict):
                name = (v["autoscaling"].get("metric") or {}).get("name")
                if name:
                    out.append((f"{os.path.relpath(path, repo)}: {component}.autoscaling", name))
    return out


def grafana_substitute(expr):
    for k in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace(k, GRAFANA_VARS[k])
    if "$" in expr:
        raise ValueError(f"unknown Grafana variable in: {expr}")
    return expr


def alert_signal(expr):
    """The alert expression with every `<op> <number>` threshold made always true (`> -Inf`):
    returns every series whose signal is a finite number."""
    return _THRESHOLD.sub("> -Inf", expr)


def thresholds(expr):
    return _THRESHOLD.findall(expr)


def _strip(expr):
    """The expression without strings, label matchers, range/subquery brackets and label lists
    of by/without/on/ignoring/group_left/group_right."""
    e = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    e = re.sub(r"'(?:\\.|[^'\\])*'", "''", e)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r" \1 ", e)
    return e


def metric_names(expr):
    """Metric (and recording rule) names an expression selects."""
    e = _strip(expr)
    names = set()
    for m in re.finditer(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        name, call = m.group(1), m.group(2)
        if call or name in PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def label_matchers(expr):
    """[(metric, [label names])] of every `metric{...}` selector."""
    e = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    out = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", e):
        labels = re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(2))
        out.append((m.group(1), labels))
    return out


def grouping_labels(expr):
    """Label names in by/without/on/ignoring/group_left/group_right lists."""
    out = set()
    for m in re.finditer(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        out.update(x.strip() for x in m.group(1).split(",") if x.strip())
    return out


def rate_targets(expr):
    """Metric names passed to rate/irate/increase."""
    return re.findall(r"\b(?:rate|irate|increase)\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", expr)


def defined_metrics(repo=REPO):
    """{series name: (family, type)} of every metric family a service registers."""
    series = {}
    pat = re.compile(r"Build(Counter|Gauge|Histogram|Summary)\(\)\s*\.Name\(\s*\"([a-zA-Z_:][a-zA-Z0-9_:]*)\"")
    # services/router/router_metrics.cc registers through one-line builders:
    # Counters(r, "name", ...), Gauges(...), Histograms(...) and Latency(...) (a histogram).
    helper = re.compile(r"\b(Counters|Gauges|Histograms|Latency)\(\s*\w+,\s*\"([a-zA-Z_:][a-zA-Z0-9_:]*)\"")
    helper_kind = {"Counters": "Counter", "Gauges": "Gauge", "Histograms": "Histogram",
                   "Latency": "Histogram"}
    for path in sorted(glob.glob(os.path.join(repo, "services/**/*.cc"), recursive=True)):
        with open(path) as f:
            text = f.read()
        found = pat.findall(text) + [(helper_kind[f], n) for f, n in helper.findall(text)]
        for kind, name in found:
            kind = kind.lower()
            if kind == "histogram":
                for suffix in ("_bucket", "_sum", "_count"):
                    series[name + suffix] = (name, kind)
            elif kind == "summary":
                for suffix in ("", "_sum", "_count"):
                    series[name + suffix] = (name, kind)
            else:
                series[name] = (name, kind)
    return series


def every_expr(repo=REPO):
    """[(where, expr as Prometheus evaluates it)] of the dashboards and rules."""
    out = [(w, grafana_substitute(e)) for w, e in dashboard_exprs(repo)]
    out += [(w, e) for w, _, _, e in rules(repo)]
    return out
