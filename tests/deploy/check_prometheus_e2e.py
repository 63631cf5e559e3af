#!/usr/bin/env python3
"""The Python half of prometheus_e2e_test.sh (which starts the cluster, Prometheus and traffic).

  check_prometheus_e2e.py config --metrics-offset N --extra-router HOST:PORT... --out FILE
      writes the test's Prometheus configuration: deploy/prometheus/prometheus-local.yml with
      its /metrics ports shifted by N, the extra routers added to job specdec-router, a 1 s
      scrape and rule-evaluation interval and absolute paths to the shipped rule files.
  check_prometheus_e2e.py ready --prometheus HOST:PORT
      waits until Prometheus answers /-/ready.
  check_prometheus_e2e.py http --url http://HOST:PORT --method M --prompt TEXT --max-tokens N
          [--ignore-eos] [--stream]
      one completion through a router's OpenAI-compatible HTTP API (POST /v1/completions, whole
      or streamed with its usage chunk, through the load tester's HTTP client); prints on stderr
      the line `specdec generate --router` prints (tokens, tau, target steps, block size), or the
      error's gRPC status name and message, so that the traffic log records it like a gRPC call.
  check_prometheus_e2e.py check --prometheus HOST:PORT --clients FILE --router HOST:PORT
          --grpc HOST:PORT... --metrics HOST:PORT...
      the checks; FILE has one line per client call (see prometheus_e2e_test.sh). The routers:
      the main one, one without a policy, one without a drafter and one with load-aware
      speculation drafting on the target (--router-load-aware). It waits
      until Prometheus has scraped the final counters, then requires:
        - every scrape target up and every gRPC server SERVING on the standard health service
          (what the Helm chart's probes call);
        - every PromQL expression of the dashboards (Grafana variables substituted as in
          deploy_inventory.GRAFANA_VARS) and of the recording rules, every recorded series, and
          the signal of every alert (thresholds made always true, see
          deploy_inventory.alert_signal) to return at least one finite sample;
        - every rule group loaded and evaluating without error;
        - every metric name used by the dashboards, rules and HPAs present in the live /metrics
          output, and every label the expressions match on or group by present on the series
          they select;
        - the acceptance length that Prometheus recorded for each method on the main router
          (specdec_acceptance_length_step sum/count) to equal what the clients computed from
          their outputs (committed tokens / target steps), and the request, per-method,
          per-position, fallback and error counters to equal the clients' counts;
        - every router to report each backend address it was given healthy
          (specdec_replica_healthy 1) and to have sent each backend the requests that reached it
          (specdec_replica_picks_total; the load-aware router asks the policy only for the
          requests that took a speculative step, those whose summary reports a block size), and
          the target's batch-size histogram to account for every verify pass (sum = successful
          verify and run-step operations = the routers' verify passes).
"""
import argparse
import json
import math
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

import deploy_inventory as inv

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Prom:
    def __init__(self, addr):
        self.base = f"http://{addr}"

    def api(self, path, **params):
        url = f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            body = json.loads(http_get(url, timeout=10))
        except urllib.error.HTTPError as e:
            body = json.loads(e.read().decode())
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr):
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def value_by(self, expr, label):
        return {m.get(label, ""): v for m, v in self.query(expr)}


def cmd_config(args):
    with open(os.path.join(inv.REPO, "deploy/prometheus/prometheus-local.yml")) as f:
        cfg = yaml.safe_load(f)
    cfg["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    cfg["rule_files"] = [os.path.join(inv.REPO, "deploy/prometheus", r) for r in cfg["rule_files"]]
    for job in cfg["scrape_configs"]:
        for sc in job["static_configs"]:
            sc["targets"] = [f"{t.rsplit(':', 1)[0]}:{int(t.rsplit(':', 1)[1]) + args.metrics_offset}"
                             for t in sc["targets"]]
        if job["job_name"] == "specdec-router":
            job["static_configs"][0]["targets"] += args.extra_router
    with open(args.out, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)


def cmd_ready(args):
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            http_get(f"http://{args.prometheus}/-/ready", timeout=2)
            return 0
        except Exception:
            time.sleep(0.2)
    print(f"Prometheus on {args.prometheus} not ready after 60 s", file=sys.stderr)
    return 1


def cmd_http(args):
    sys.path.insert(0, os.path.join(inv.REPO, "loadtest"))
    from specdec_loadtest import http_client as hc
    client = hc.HttpClient(args.url)
    opts = hc.HttpOptions(method=args.method, max_new_tokens=args.max_tokens,
                          ignore_eos=args.ignore_eos)
    t0 = time.monotonic()
    try:
        client.model = client.models()[0]
        if args.stream:
            stream = client.generate_stream(args.prompt, opts, timeout=60)
            n = sum(len(c.token_ids) for c in stream)
            s = stream.summary
            if s is None:
                raise hc.HttpError("INTERNAL", "the stream had no usage chunk")
            method, tau, steps, block, note = s.method, s.tau or 0.0, s.verify_steps, s.block_size, ""
        else:
            body = hc.request_body(args.prompt, opts, client.model)
            body["stream"] = False
            del body["stream_options"]
            req = urllib.request.Request(f"{client.url}/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    doc = json.loads(r.read())
            except urllib.error.HTTPError as e:
                raise hc.error_from_response(e.code, e.read()) from None
            sd = doc["specdec"]
            n = len(sd["token_ids"])
            steps = sd.get("verify_steps")
            steps = int(steps) if steps is not None else int(sd["target_passes"]) - 1
            method, tau, note = sd["method"], float(sd["tau"]), sd.get("note", "")
            block = int(sd.get("block_size") or 0)
    except hc.HttpError as e:
        print(f"specdec http: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"specdec http: UNAVAILABLE: {e}", file=sys.stderr)
        return 1
    s = max(time.monotonic() - t0, 1e-9)
    print(f"[specdec] {method} via {args.url}: {n} tokens in {s:.3f} s ({n / s:.1f} tokens/s), "
          f"tau {tau:.2f}, {steps} target steps, block size {block}{'; ' + note if note else ''}",
          file=sys.stderr)
    return 0


def parse_clients(path):
    """[{router, method, outcome, tokens, steps, block, note}] from the client log (block: the
    block size the request's summary reports, 0 when it drafted nothing; note: its note)."""
    calls = []
    for line in open(path):
        router, method, outcome, rest = line.rstrip("\n").split("\t", 3)
        c = {"router": router, "method": method, "outcome": outcome, "tokens": None, "steps": None,
             "block": None, "note": ""}
        m = re.search(r"via \S+: (\d+) tokens in .*?, tau [0-9.]+, (\d+) target steps, "
                      r"block size (\d+)(?:; (.*))?$", rest)
        if outcome == "OK":
            if not m:
                fail(f"client output without stats: {rest}")
                continue
            c["tokens"], c["steps"], c["block"] = int(m.group(1)), int(m.group(2)), int(m.group(3))
            c["note"] = m.group(4) or ""
        elif outcome not in rest:
            fail(f"{router} {method}: expected {outcome}, client said: {rest}")
        calls.append(c)
    return calls


def scrape(addr):
    """{metric name: set of label names} of one /metrics endpoint."""
    out = {}
    for line in http_get(f"http://{addr}/metrics").splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
        if m:
            labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
            out.setdefault(m.group(1), set()).update(labels)
    return out


def grpc_health(addrs):
    try:
        import grpc
    except ImportError:
        print("check: python3-grpcio missing; gRPC health not checked")
        return
    for addr in addrs:
        ch = grpc.insecure_channel(addr)
        try:
            check = ch.unary_unary("/grpc.health.v1.Health/Check")
            # HealthCheckRequest{service=""} is empty; HealthCheckResponse{status=SERVING} is 08 01.
            resp = check(b"", timeout=5)
            if resp != b"\x08\x01":
                fail(f"gRPC health of {addr}: {resp!r}, not SERVING")
        except Exception as e:
            fail(f"gRPC health of {addr}: {e}")
        finally:
            ch.close()


def finite(samples):
    return [v for _, v in samples if not math.isnan(v) and not math.isinf(v)]


def cmd_check(args):
    prom = Prom(args.prometheus)
    calls = parse_clients(args.clients)
    mroute = args.router_metrics

    # 1. Wait until Prometheus has scraped every router's final request count.
    want = {}
    for c in calls:
        want[c["router"]] = want.get(c["router"], 0) + 1
    metrics_of = dict(zip(args.router_grpc, args.router_metrics_all))
    deadline = time.time() + 30
    while True:
        got = prom.value_by("sum by (instance) (specdec_requests_total)", "instance")
        have = {r: got.get(metrics_of[r], 0) for r in want}
        if all(have[r] == want[r] for r in want):
            break
        if time.time() > deadline:
            fail(f"Prometheus request counts {have} never reached the clients' {want}")
            break
        time.sleep(0.5)

    # 2. Targets and health.
    ups = prom.value_by('up{job=~"specdec-.*"}', "instance")
    if len(ups) != len(args.metrics) or any(v != 1 for v in ups.values()):
        fail(f"scrape targets up: {ups}, expected {len(args.metrics)} at 1")
    grpc_health(args.grpc)

    # 3. Every expression returns finite data (rules need a few evaluations: retry for a while).
    pending = [(w, inv.grafana_substitute(e)) for w, e in inv.dashboard_exprs()]
    for where, kind, name, expr in inv.rules():
        if kind == "record":
            pending.append((where, expr))
            pending.append((f"{where} (recorded series)", name))
        else:
            pending.append((f"{where} (signal)", inv.alert_signal(expr)))
    for where, metric in inv.dashboard_variable_metrics():
        pending.append((where, metric))
    total = len(pending)
    results = {}
    deadline = time.time() + 20
    while pending:
        retry = []
        for where, expr in pending:
            try:
                samples = prom.query(expr)
            except Exception as e:
                retry.append((where, expr))
                results[where] = f"error: {e}"
                continue
            good = finite(samples)
            if good:
                results[where] = f"{len(samples)} series, e.g. {good[0]:.4g}"
            else:
                retry.append((where, expr))
                results[where] = f"{len(samples)} series, none finite"
        pending = retry
        if pending and time.time() < deadline:
            time.sleep(1)
        else:
            break
    for where, expr in pending:
        fail(f"{where}: no finite data ({results[where]}): {' '.join(expr.split())}")
    print(f"check: {total - len(pending)}/{total} expressions returned finite data")
    if args.verbose:
        for where, r in results.items():
            print(f"  {where}: {r}")

    # 4. Rule groups load and evaluate cleanly.
    n = 0
    for g in prom.api("rules")["groups"]:
        for r in g["rules"]:
            n += 1
            if r.get("health") != "ok" or r.get("lastError"):
                fail(f"rule {g['name']}/{r.get('name')}: health {r.get('health')} {r.get('lastError')}")
    if n != len(inv.rules()):
        fail(f"Prometheus loaded {n} rules, the files hold {len(inv.rules())}")
    firing = sorted({(a["labels"]["alertname"], a["state"]) for a in prom.api("alerts")["alerts"]})
    print(f"check: {n} rules healthy; alerts pending/firing now: {firing or 'none'}")

    # 5. Names and labels against the live /metrics output.
    live = {}
    for addr in args.metrics:
        for name, labels in scrape(addr).items():
            live.setdefault(name, set()).update(labels)
    recorded = {name for _, kind, name, _ in inv.rules() if kind == "record"}
    series_labels = {}

    def labels_of(name):
        if name not in series_labels:
            found = set()
            for s in prom.api("series", **{"match[]": name}):
                found.update(k for k in s if k != "__name__")
            series_labels[name] = found
        return series_labels[name]

    used = [(w, n) for w, e in inv.every_expr() for n in inv.metric_names(e)]
    used += inv.dashboard_variable_metrics() + inv.hpa_metrics()
    for where, name in used:
        if name in recorded or name in inv.PROMETHEUS_SERIES:
            continue
        if name not in live:
            fail(f"{where}: {name} is not in any live /metrics output")
    for where, expr in inv.every_expr():
        for name, labels in inv.label_matchers(expr):
            have = labels_of(name) if (name in recorded or name in inv.PROMETHEUS_SERIES) else \
                live.get(name, set()) | {"job", "instance"}
            for label in labels:
                if label not in have:
                    fail(f"{where}: {name} has no label {label} (has {sorted(have)})")
        names = inv.metric_names(expr)
        have = {"job", "instance"}
        for name in names:
            have |= labels_of(name) if name in recorded else live.get(name, set())
        for label in inv.grouping_labels(expr):
            if label not in have:
                fail(f"{where}: groups by {label}, which none of {sorted(names)} has")

    # 6. What Prometheus recorded equals what the clients saw.
    ok = [c for c in calls if c["router"] == args.router and c["outcome"] == "OK"]
    sel = f'instance="{mroute}"'
    step_sum = prom.value_by(f"sum by (method) (specdec_acceptance_length_step_sum{{{sel}}})", "method")
    step_cnt = prom.value_by(f"sum by (method) (specdec_acceptance_length_step_count{{{sel}}})", "method")
    req_cnt = prom.value_by(f"sum by (method) (specdec_acceptance_length_request_count{{{sel}}})", "method")
    for method in sorted({c["method"] for c in ok}):
        mine = [c for c in ok if c["method"] == method]
        committed = sum(c["tokens"] - 1 for c in mine)  # the prefill's first token is not a step's
        steps = sum(c["steps"] for c in mine)
        tau_clients = committed / steps
        tau_prom = step_sum.get(method, 0) / step_cnt[method] if step_cnt.get(method) else float("nan")
        print(f"check: {method:16s} tau clients {tau_clients:.4f} ({committed}/{steps}), "
              f"Prometheus {tau_prom:.4f} ({step_sum.get(method, 0):.0f}/{step_cnt.get(method, 0):.0f})")
        if not abs(tau_prom - tau_clients) < 1e-9:
            fail(f"{method}: Prometheus acceptance length {tau_prom} != clients' {tau_clients}")
        if req_cnt.get(method) != len(mine):
            fail(f"{method}: {req_cnt.get(method)} requests in specdec_acceptance_length_request, clients made {len(mine)}")
    acc = prom.value_by(f"sum by (method) (specdec_spec_decode_num_accepted_tokens_total{{{sel}}})", "method")
    pos = prom.value_by(f"sum by (method) (specdec_spec_decode_num_accepted_tokens_per_pos_total{{{sel}}})", "method")
    drafted = prom.value_by(f"sum by (method) (specdec_spec_decode_num_draft_tokens_total{{{sel}}})", "method")
    for method, a in acc.items():
        if pos.get(method, 0) != a:
            fail(f"{method}: accepted {a} != sum over positions {pos.get(method)}")
        if a > drafted.get(method, 0):
            fail(f"{method}: accepted {a} > drafted {drafted.get(method)}")
    for router, maddr in zip(args.router_grpc, args.router_metrics_all):
        outcomes = {}
        for c in calls:
            if c["router"] == router:
                outcomes[c["outcome"]] = outcomes.get(c["outcome"], 0) + 1
        got = prom.value_by(f'sum by (code) (specdec_requests_total{{instance="{maddr}"}})', "code")
        got = {k: v for k, v in got.items() if v}
        if got != outcomes:
            fail(f"router {router}: Prometheus outcomes {got} != clients' {outcomes}")
    fb = prom.value_by("sum by (kind) (specdec_fallbacks_total)", "kind")
    # The load-aware router's requests run in parallel: a policy call past its deadline falls
    # back to the default block size, which the request's note reports.
    expect_fb = {"policy": sum(1 for c in calls if c["outcome"] == "OK" and (
                     c["router"] == args.router_nopolicy or
                     (c["router"] == args.router_load_aware and c["note"].startswith("policy unavailable")))),
                 "drafter": sum(1 for c in calls if c["router"] == args.router_nodrafter and c["outcome"] == "OK"
                                and c["method"] != "AR")}
    if {k: fb.get(k, 0) for k in expect_fb} != expect_fb:
        fail(f"fallbacks {fb} != expected {expect_fb}")
    # Backend replicas as the routers see them: each address healthy, picks = requests that
    # passed validation (INVALID_ARGUMENT and FAILED_PRECONDITION are refused before any pick;
    # the drafter is picked before the target's prefill, the policy after it).
    # The load-aware router drafts on the target (the drafter service is not given to it) and asks
    # the policy when a request's first speculative step starts drafting.
    backends = {args.router: {"target", "drafter", "policy"}, args.router_nopolicy: {"target", "drafter"},
                args.router_nodrafter: {"target"}, args.router_load_aware: {"target", "policy"}}
    address = {"target": args.target_grpc, "drafter": args.drafter_grpc, "policy": args.policy_grpc}
    refused = {"INVALID_ARGUMENT", "FAILED_PRECONDITION"}
    for router, maddr in zip(args.router_grpc, args.router_metrics_all):
        health = {(m.get("service"), m.get("address")): v
                  for m, v in prom.query(f'specdec_replica_healthy{{instance="{maddr}"}}')}
        want = {(svc, address[svc]): 1.0 for svc in backends[router]}
        if health != want:
            fail(f"router {router}: specdec_replica_healthy {health} != {want}")
        mine = [c for c in calls if c["router"] == router and c["outcome"] not in refused]
        want_picks = {
            "target": len(mine),
            "drafter": sum(1 for c in mine if c["method"] != "AR") if "drafter" in backends[router] else 0,
            "policy": sum(1 for c in mine if c["method"] == "DFLASH_ADAPTIVE" and c["outcome"] == "OK"
                          and (router != args.router_load_aware or c["block"] > 0))
                      if "policy" in backends[router] else 0,
        }
        got = {(m.get("service"), m.get("address")): v for m, v in
               prom.query(f'specdec_replica_picks_total{{instance="{maddr}"}}')}
        want = {(svc, address[svc]): float(n) for svc, n in want_picks.items() if n}
        if got != want:
            fail(f"router {router}: specdec_replica_picks_total {got} != {want}")
        print(f"check: router {router} picks {sorted((k[0], int(v)) for k, v in got.items())}, all backends healthy")

    # Continuous batching: every successful verify pass (a TargetVerify, or a step of a TargetRun)
    # is in exactly one batched pass.
    deadline = time.time() + 10
    while True:
        batched = prom.query("sum(specdec_target_batch_size_sum)")
        passes = prom.query("sum(specdec_target_batch_size_count)")
        verifies = prom.query(
            'sum(specdec_target_operations_total{op=~"verify|run",code="OK"})')
        steps = prom.query("sum(specdec_acceptance_length_step_count)")
        vals = [q[0][1] if q else None for q in (batched, passes, verifies, steps)]
        if None not in vals and vals[0] == vals[2] == vals[3] and 0 < vals[1] <= vals[0]:
            break
        if time.time() > deadline:
            fail(f"target batch size: sum {vals[0]} over {vals[1]} passes, successful verifies {vals[2]}, "
                 f"routers' verify passes {vals[3]}: expected sum = verifies = router passes")
            break
        time.sleep(0.5)
    print(f"check: target batch size: {vals[0]:.0f} sessions in {vals[1]:.0f} verify passes "
          f"(mean {vals[0] / vals[1] if vals[1] else float('nan'):.2f}), {vals[2]:.0f} successful verifies")

    exhausted = sum(1 for c in calls if c["outcome"] == "RESOURCE_EXHAUSTED")
    got = prom.query('sum(specdec_target_operations_total{code="RESOURCE_EXHAUSTED"})')
    if not got or got[0][1] != exhausted:
        fail(f"target RESOURCE_EXHAUSTED operations {got} != {exhausted} rejected requests")

    print(f"check: {len(calls)} client calls, {len(failures)} failures")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("config")
    c.add_argument("--metrics-offset", type=int, required=True)
    c.add_argument("--extra-router", action="append", default=[])
    c.add_argument("--out", required=True)
    r = sub.add_parser("ready")
    r.add_argument("--prometheus", required=True)
    h = sub.add_parser("http")
    h.add_argument("--url", required=True, help="the HTTP API, http://HOST:PORT")
    h.add_argument("--method", required=True)
    h.add_argument("--prompt", required=True)
    h.add_argument("--max-tokens", type=int, required=True)
    h.add_argument("--ignore-eos", action="store_true")
    h.add_argument("--stream", action="store_true")
    k = sub.add_parser("check")
    k.add_argument("--prometheus", required=True)
    k.add_argument("--clients", required=True)
    k.add_argument("--router", required=True, help="gRPC address of the main router")
    k.add_argument("--router-metrics", required=True, help="its /metrics address")
    k.add_argument("--router-nopolicy", required=True)
    k.add_argument("--router-nodrafter", required=True)
    k.add_argument("--router-load-aware", required=True,
                   help="the router with load-aware speculation, drafting on the target")
    k.add_argument("--router-grpc", nargs="+", required=True, help="every router, gRPC")
    k.add_argument("--router-metrics-all", nargs="+", required=True, help="every router, /metrics, same order")
    k.add_argument("--grpc", nargs="+", required=True, help="every gRPC server")
    k.add_argument("--metrics", nargs="+", required=True, help="every /metrics endpoint")
    k.add_argument("--target-grpc", required=True, help="the target address the routers were given")
    k.add_argument("--drafter-grpc", required=True, help="the drafter address the routers were given")
    k.add_argument("--policy-grpc", required=True, help="the policy address the routers were given")
    k.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    return {"config": cmd_config, "ready": cmd_ready, "http": cmd_http,
            "check": cmd_check}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
