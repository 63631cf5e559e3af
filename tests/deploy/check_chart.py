#!/usr/bin/env python3
"""Checks renders of the helm/specdec chart (made by chart_render_test.sh with helm_render).

  check_chart.py RENDER_DIR

RENDER_DIR holds <scenario>.yaml (the manifests) and <scenario>.notes.txt (NOTES.txt) for the
scenarios below. For each: every document parses and has the expected kind, API version and
name; Deployment selectors, pod labels, Service and PodDisruptionBudget selectors agree;
containers run the service's binary with the gRPC and metrics ports (the router also its HTTP
port, from router.httpPort), and the startup, liveness and readiness probes are native gRPC
probes on the gRPC port, except the router's readiness probe: an HTTP GET of /health on its HTTP
port; Services target named ports that exist, the router's also the HTTP API (port "http", from
router.service.httpPort, on a public router Service too); the target and drafter have headless
Services (clusterIP None, same selector, gRPC port only) and no two Services with a "metrics"
port select the same pods (no pod is scraped twice); ConfigMap keys are environment variables
that the service's main.cc reads, addresses use the chart's ports (the router's
SPECDEC_ROUTER_HTTP_ADDRESS its HTTP port), model paths lie under the model mount, the router's
endpoints name the other Services (the target and drafter as dns:///<headless Service>.<namespace>.svc.<domain>:<port>
unless router.headlessBackends is off), the target's batch size and the router's health interval
come from the values; the API keys Secret (router.apiKeys, features only): a read-only secret
volume of that key, mounted as a directory in the router container only, readable by the pod's
fsGroup, and SPECDEC_API_KEYS naming the file in it (no secret volume, mount or
SPECDEC_API_KEYS anywhere in the other scenarios); TLS (tls.enabled, the tls and tls-secret
scenarios only): every container mounts the TLS Secret read-only as a directory at
/etc/specdec/tls with the files it reads (readable by the pod's fsGroup, or 0444 without one),
its ConfigMap points SPECDEC_<SERVICE>_TLS_CERT/KEY at them, _TLS_CLIENT_CA at ca.crt exactly
where mTLS is asked for (backends with tls.mutual, the router with tls.routerMutual), the router's
SPECDEC_BACKEND_TLS_CA at ca.crt and, with tls.mutual, SPECDEC_BACKEND_TLS_CERT/KEY at the same
certificate; the probes that are gRPC probes without TLS are tcpSocket probes on the port named
grpc (the router's readiness is GET /health over HTTPS, or a TCP connect to its http port with
tls.routerMutual); with cert-manager, one cert-manager.io/v1
Certificate into that Secret, from the configured issuer, for server and client auth, whose DNS
names hold every Service name of the release (headless ones too) in all four in-cluster forms,
the host of every address the router dials, and the extra names; in the other scenarios no TLS
volume, mount, variable or Certificate. Volumes, security contexts, GPU resources/tolerations/node
selectors (GPU overlay only), HPAs (autoscaling/v2 Pods metrics that the services export as
gauges), the ServiceMonitor and NOTES.txt (with TLS: the Secret, how to get ca.crt, --tls-ca).
It also lints values.yaml: every key has a comment and is read by a template.
"""
import glob
import os
import re
import sys

import yaml

import deploy_inventory as inv

CHART = os.path.join(inv.REPO, "helm/specdec")
API = {"Deployment": "apps/v1", "Service": "v1", "ConfigMap": "v1", "PersistentVolumeClaim": "v1",
       "PodDisruptionBudget": "policy/v1", "HorizontalPodAutoscaler": "autoscaling/v2",
       "ServiceMonitor": "monitoring.coreos.com/v1", "Certificate": "cert-manager.io/v1"}
SELECTOR_KEYS = {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}

# scenario: (release fullname, components, volume type, GPU, HPAs, ServiceMonitor, PDBs)
SCENARIOS = {
    "default": ("demo-specdec", ["target", "drafter", "policy", "router"], "pvc", False, False, False, True),
    "gpu": ("demo-specdec", ["target", "drafter", "policy", "router"], "pvc", True, False, False, True),
    "features": ("demo-specdec", ["target", "drafter", "policy", "router"], "emptyDir", False, True, True, True),
    "minimal": ("sd", ["target", "router"], "hostPath", False, False, False, False),
    "tls": ("demo-specdec", ["target", "drafter", "policy", "router"], "pvc", False, False, False, True),
    "tls-secret": ("demo-specdec", ["target", "policy", "router"], "pvc", False, False, False, True),
}
# scenario: (router.headlessBackends, clusterDomain, target.maxBatch, router.healthIntervalMs,
#            router.httpPort, router.service.httpPort)
OPTIONS = {
    "default": (True, "cluster.local", "32", "1000", 8000, 8000),
    "gpu": (True, "cluster.local", "32", "1000", 8000, 8000),
    "features": (True, "example.internal", "8", "250", 8080, 80),
    "minimal": (False, "cluster.local", "32", "1000", 8000, 8000),
    "tls": (True, "cluster.local", "32", "1000", 8000, 8000),
    "tls-secret": (False, "cluster.local", "32", "1000", 8000, 8000),
}
# scenario: (router.apiKeys.existingSecret, router.apiKeys.key), or None without API keys
API_KEYS = {
    "default": None,
    "gpu": None,
    "features": ("specdec-api-keys", "tokens.json"),
    "minimal": None,
    "tls": None,
    "tls-secret": None,
}
API_KEYS_DIR = "/etc/specdec/api-keys"
# scenario: (Secret, tls.mutual, tls.routerMutual, (issuer kind, issuer name) with cert-manager
# or None, tls.certManager.extraDnsNames), or None without TLS
TLS = {
    "default": None,
    "gpu": None,
    "features": None,
    "minimal": None,
    "tls": ("demo-specdec-tls", True, False, ("ClusterIssuer", "specdec-ca"), ["localhost", "specdec.example.com"]),
    "tls-secret": ("specdec-tls", False, True, None, []),
}
TLS_DIR = "/etc/specdec/tls"
NAMESPACE = "inference"  # chart_render_test.sh renders with -namespace inference

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)
    return cond


FLAG_HELPERS = ("services/common/server_flags.h", "services/common/tls_flags.h")


def flag_helpers():
    """{name: body} of the Add...Flags helpers that the service binaries share."""
    helpers = {}
    for path in FLAG_HELPERS:
        with open(os.path.join(inv.REPO, path)) as f:
            text = f.read()
        for m in re.finditer(r'void (Add\w+Flags)\(.*?\n}\n', text, re.S):
            helpers[m.group(1)] = m.group(0)
    return helpers


def helper_options(helpers, name, prefix):
    """(env var names, long flag names) that helper `name` adds with env prefix `prefix`, the
    helpers it calls included."""
    body = helpers.get(name)
    if not check(body is not None, f"{name}: no such flag helper in {FLAG_HELPERS}"):
        return set(), set()
    envs = set(re.findall(r'envname\("([A-Z0-9_]+)"\)', body))
    envs |= {prefix + sfx for sfx in re.findall(r'envname\(env_prefix \+ "([A-Z0-9_]+)"\)', body)}
    flags = set(re.findall(r'add_(?:option|flag)\(\s*"(--[a-z0-9-]+)', body))
    for nested in re.findall(r'(Add\w+Flags)\(\s*app\s*,[^;]*?env_prefix[^;]*\);', body):
        e, fl = helper_options(helpers, nested, prefix)
        envs |= e
        flags |= fl
    return envs, flags


def main_cc_options(component):
    """(env var names, long flag names) that services/<component>/main.cc accepts, including those
    the shared flag helpers (services/common/server_flags.h, tls_flags.h) add with its prefix."""
    with open(os.path.join(inv.REPO, f"services/{component}/main.cc")) as f:
        text = f.read()
    envs = set(re.findall(r'envname\("([A-Z0-9_]+)"\)', text))
    flags = set(re.findall(r'add_(?:option|flag)\(\s*"(--[a-z0-9-]+)', text))
    calls = re.findall(r'(Add\w+Flags)\(\s*app\s*,[^;]*?"([A-Z0-9_]+)"[^;]*\);', text)
    helpers = flag_helpers() if calls else {}
    for name, prefix in calls:
        e, fl = helper_options(helpers, name, prefix)
        envs |= e
        flags |= fl
    return envs, flags


def check_render(scenario, docs, notes):
    fullname, components, voltype, gpu, hpa, smon, pdb = SCENARIOS[scenario]
    headless_backends, domain, max_batch, health_ms, http_port, http_svc_port = OPTIONS[scenario]
    with_headless = [c for c in components if c in ("target", "drafter")]
    where = lambda d: f"{scenario}: {d.get('kind')}/{d.get('metadata', {}).get('name')}"
    by = {}
    for d in docs:
        if not check(isinstance(d, dict) and d.get("kind") and d.get("apiVersion")
                     and d.get("metadata", {}).get("name"), f"{scenario}: a document lacks kind/apiVersion/name: {d!r:.80}"):
            continue
        key = (d["kind"], d["metadata"]["name"])
        check(key not in by, f"{where(d)}: defined twice")
        by[key] = d
        check(API.get(d["kind"]) == d["apiVersion"], f"{where(d)}: apiVersion {d['apiVersion']}")
        labels = d["metadata"].get("labels", {})
        check(labels.get("app.kubernetes.io/managed-by") == "Helm", f"{where(d)}: labels {labels}")

    kinds = {}
    for k, _ in by:
        kinds[k] = kinds.get(k, 0) + 1
    expect = {"Deployment": len(components), "Service": len(components) + len(with_headless),
              "ConfigMap": len(components)}
    if pdb:
        expect["PodDisruptionBudget"] = len(components)
    if hpa:
        expect["HorizontalPodAutoscaler"] = 2
    if smon:
        expect["ServiceMonitor"] = 1
    public_router = scenario == "features"  # router Service type LoadBalancer
    if public_router:
        expect["Service"] += 1
    if voltype == "pvc":
        expect["PersistentVolumeClaim"] = 1
    tls = TLS[scenario]
    if tls and tls[3]:
        expect["Certificate"] = 1
    check(kinds == expect, f"{scenario}: kinds {kinds}, expected {expect}")

    exported = inv.defined_metrics()
    text = yaml.safe_dump_all(docs)
    check(("nvidia.com/gpu" in text) == gpu, f"{scenario}: nvidia.com/gpu present = {'nvidia.com/gpu' in text}")

    services = {}
    for c in components:
        name = f"{fullname}-{c}"
        dep = by.get(("Deployment", name))
        svc = by.get(("Service", name))
        cm = by.get(("ConfigMap", name))
        if not (check(dep, f"{scenario}: no Deployment {name}") and check(svc, f"{scenario}: no Service {name}")
                and check(cm, f"{scenario}: no ConfigMap {name}")):
            continue
        services[c] = svc
        spec = dep["spec"]
        match = spec["selector"]["matchLabels"]
        pod = spec["template"]
        pod_labels = pod["metadata"]["labels"]
        check(set(match) == SELECTOR_KEYS and match["app.kubernetes.io/component"] == c,
              f"{where(dep)}: selector {match}")
        check(all(pod_labels.get(k) == v for k, v in match.items()), f"{where(dep)}: pod labels do not match the selector")
        check(svc["spec"]["selector"] == match, f"{where(svc)}: selector {svc['spec']['selector']} != {match}")
        if pdb:
            p = by.get(("PodDisruptionBudget", name))
            if check(p, f"{scenario}: no PodDisruptionBudget {name}"):
                check(p["spec"]["selector"]["matchLabels"] == match, f"{where(p)}: selector mismatch")
                check("maxUnavailable" in p["spec"] or "minAvailable" in p["spec"], f"{where(p)}: no budget")
        autoscaled = hpa and c in ("router", "target")
        check(("replicas" in spec) != autoscaled, f"{where(dep)}: replicas set = {'replicas' in spec} with HPA = {autoscaled}")

        ps = pod["spec"]
        check(ps.get("automountServiceAccountToken") is False, f"{where(dep)}: service account token mounted")
        sc = ps.get("securityContext", {})
        check(sc.get("runAsNonRoot") is True and sc.get("runAsUser") == 10001, f"{where(dep)}: pod securityContext {sc}")
        check(re.fullmatch(r"[0-9a-f]{64}", str(pod["metadata"].get("annotations", {}).get("checksum/config", ""))),
              f"{where(dep)}: no checksum/config annotation")
        check(int(ps.get("terminationGracePeriodSeconds", 0)) > 5, f"{where(dep)}: grace period too short")
        cs = ps["containers"]
        if not check(len(cs) == 1, f"{where(dep)}: {len(cs)} containers"):
            continue
        ct = cs[0]
        check(ct["command"] == [f"/usr/local/bin/specdec-{c}"], f"{where(dep)}: command {ct.get('command')}")
        csc = ct.get("securityContext", {})
        check(csc.get("readOnlyRootFilesystem") is True and csc.get("allowPrivilegeEscalation") is False,
              f"{where(dep)}: container securityContext {csc}")
        ports = {p["name"]: p["containerPort"] for p in ct.get("ports", [])}
        want_ports = {"grpc": 50051, "metrics": 9090}
        if c == "router":
            want_ports["http"] = http_port
        check(ports == want_ports, f"{where(dep)}: ports {ports}, expected {want_ports}")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            pr = ct.get(probe)
            if check(pr, f"{where(dep)}: no {probe}"):
                handlers = {"grpc", "httpGet", "tcpSocket", "exec"} & set(pr)
                if c == "router" and probe == "readinessProbe" and tls and tls[2]:
                    # HTTPS requiring client certificates, which the kubelet cannot present.
                    check(handlers == {"tcpSocket"}, f"{where(dep)}: {probe} handlers {handlers}")
                    check(pr.get("tcpSocket") == {"port": "http"} and "http" in ports,
                          f"{where(dep)}: {probe} tcpSocket {pr.get('tcpSocket')}")
                    continue
                if c == "router" and probe == "readinessProbe":
                    # Ready while the HTTP API answers /health with 200 (a target is reachable),
                    # over HTTPS with TLS.
                    want = {"path": "/health", "port": "http"}
                    if tls:
                        want["scheme"] = "HTTPS"
                    check(handlers == {"httpGet"}, f"{where(dep)}: {probe} handlers {handlers}")
                    check(pr.get("httpGet") == want and "http" in ports,
                          f"{where(dep)}: {probe} httpGet {pr.get('httpGet')}, expected {want}")
                    continue
                if tls:
                    # The kubelet's gRPC probe cannot do TLS: a TCP connect to the gRPC port.
                    check(handlers == {"tcpSocket"}, f"{where(dep)}: {probe} handlers {handlers} with TLS")
                    check(pr.get("tcpSocket") == {"port": "grpc"} and "grpc" in ports,
                          f"{where(dep)}: {probe} tcpSocket {pr.get('tcpSocket')}")
                    continue
                check(handlers == {"grpc"}, f"{where(dep)}: {probe} handlers {handlers}")
                check(pr.get("grpc", {}).get("port") == ports.get("grpc") and isinstance(pr["grpc"]["port"], int),
                      f"{where(dep)}: {probe} grpc port {pr.get('grpc')}")
        sports = {p["name"]: p for p in svc["spec"]["ports"]}
        if c == "router":
            hp = sports.get("http", {})
            check(hp.get("port") == http_svc_port and hp.get("targetPort") == "http"
                  and hp.get("appProtocol") == "http", f"{where(svc)}: http port {hp}")
        if public_router and c == "router":
            # gRPC and HTTP on the public Service; /metrics on a ClusterIP twin.
            check(svc["spec"]["type"] == "LoadBalancer" and set(sports) == {"grpc", "http"},
                  f"{where(svc)}: public router Service {svc['spec']['type']} ports {set(sports)}")
            msvc = by.get(("Service", name + "-metrics"))
            if check(msvc, f"{scenario}: no Service {name}-metrics"):
                check(msvc["spec"]["type"] == "ClusterIP" and msvc["spec"]["selector"] == match,
                      f"{where(msvc)}: type or selector")
                services["router-metrics"] = msvc
                for p in msvc["spec"]["ports"]:
                    sports["metrics"] = p
        else:
            check(svc["spec"].get("type") == "ClusterIP" or c == "router", f"{where(svc)}: type")
            want = {"grpc", "metrics", "http"} if c == "router" else {"grpc", "metrics"}
            check(set(sports) == want, f"{where(svc)}: ports {set(sports)}")
        for p in sports.values():
            check(p["targetPort"] in ports, f"{where(svc)}: targetPort {p['targetPort']} is not a container port")
        check(sports.get("metrics", {}).get("port") == 9090, f"{where(svc)}: metrics port")

        # Headless Service of the target and drafter: every ready pod's IP in DNS, gRPC only.
        if c in with_headless:
            hsvc = by.get(("Service", name + "-headless"))
            if check(hsvc, f"{scenario}: no Service {name}-headless"):
                hs = hsvc["spec"]
                check(hs.get("clusterIP") == "None" and hs.get("type", "ClusterIP") == "ClusterIP",
                      f"{where(hsvc)}: not headless (type {hs.get('type')}, clusterIP {hs.get('clusterIP')})")
                check(hs["selector"] == match, f"{where(hsvc)}: selector {hs['selector']} != {match}")
                check(not hs.get("publishNotReadyAddresses"), f"{where(hsvc)}: publishes pods that are not ready")
                hports = {p["name"]: p for p in hs["ports"]}
                check(set(hports) == {"grpc"} and hports["grpc"]["port"] == 50051
                      and hports["grpc"]["targetPort"] == "grpc" and hports["grpc"].get("appProtocol") == "grpc",
                      f"{where(hsvc)}: ports {hs['ports']}")
                check(all(hsvc["metadata"]["labels"].get(k) == v for k, v in svc["metadata"]["labels"].items()),
                      f"{where(hsvc)}: labels differ from {name}")
                services[c + "-headless"] = hsvc

        # Options: ConfigMap keys are env vars the service reads; flags exist.
        envs, flags = main_cc_options(c)
        check(ct.get("envFrom") == [{"configMapRef": {"name": name}}], f"{where(dep)}: envFrom {ct.get('envFrom')}")
        data = cm.get("data", {})
        for k, v in data.items():
            check(k in envs, f"{where(cm)}: {k} is not an environment variable of specdec-{c} ({sorted(envs)})")
            check(isinstance(v, str), f"{where(cm)}: {k} is not a string")
        for e in ct.get("env", []):
            if e["name"].startswith("SPECDEC_"):
                check(e["name"] in envs, f"{where(dep)}: env {e['name']} is not read by specdec-{c}")
        for a in ct.get("args", []):
            check(a.split("=", 1)[0] in flags, f"{where(dep)}: argument {a} is not a flag of specdec-{c}")
        if c == "target":
            check(data.get("SPECDEC_MAX_BATCH") == max_batch, f"{where(cm)}: SPECDEC_MAX_BATCH={data.get('SPECDEC_MAX_BATCH')}")
            for key in ("SPECDEC_BATCH_PREFILL_MAX_ROWS", "SPECDEC_ITERATION_PREFILL_MAX_ROWS"):
                check(data.get(key) == "256", f"{where(cm)}: {key}={data.get(key)}")
        if c == "router":
            check(data.get("SPECDEC_HEALTH_INTERVAL_MS") == health_ms,
                  f"{where(cm)}: SPECDEC_HEALTH_INTERVAL_MS={data.get('SPECDEC_HEALTH_INTERVAL_MS')}")
            # The binary's default, 127.0.0.1:8000, would not be reachable from the kubelet.
            check(data.get("SPECDEC_ROUTER_HTTP_ADDRESS") == f"0.0.0.0:{http_port}",
                  f"{where(cm)}: SPECDEC_ROUTER_HTTP_ADDRESS={data.get('SPECDEC_ROUTER_HTTP_ADDRESS')}")
        for k, v in data.items():
            if k.endswith("_METRICS_ADDRESS"):
                check(v == "0.0.0.0:9090", f"{where(cm)}: {k}={v}")
            elif k.endswith("_HTTP_ADDRESS"):
                check(c == "router" and v == f"0.0.0.0:{http_port}", f"{where(cm)}: {k}={v}")
            elif k.endswith("_ADDRESS"):
                check(v == "0.0.0.0:50051", f"{where(cm)}: {k}={v}")
            if k == "SPECDEC_KV_BUDGET_BYTES":
                check(re.fullmatch(r"[1-9][0-9]*", v), f"{where(cm)}: {k}={v!r} is not a decimal byte count")
            if k.endswith("_MODEL") or k in ("SPECDEC_POLICY_DIR", "SPECDEC_TOKENIZER"):
                check(v.startswith("/models/") and "//" not in v, f"{where(cm)}: {k}={v}")
        check(c not in ("target", "drafter") or any(e["name"] == "SPECDEC_REPLICA" for e in ct.get("env", [])),
              f"{where(dep)}: no SPECDEC_REPLICA from the pod name")

        # Model volume.
        vols = {v["name"]: v for v in ps.get("volumes", [])}
        mounts = {m["name"]: m for m in ct.get("volumeMounts", [])}
        check(mounts.get("models", {}).get("mountPath") == "/models" and mounts["models"].get("readOnly") is True,
              f"{where(dep)}: models mount {mounts.get('models')}")
        mv = vols.get("models", {})
        check(set(mv) == {"name", {"pvc": "persistentVolumeClaim"}.get(voltype, voltype)},
              f"{where(dep)}: models volume {mv}")
        if voltype == "pvc":
            claim = mv.get("persistentVolumeClaim", {}).get("claimName")
            check(("PersistentVolumeClaim", claim) in by, f"{where(dep)}: claim {claim} is not rendered")

        # API keys: the router alone mounts the Secret, as a directory (a subPath mount would
        # never see an updated Secret), and reads the file through SPECDEC_API_KEYS.
        api_keys = API_KEYS[scenario] if c == "router" else None
        secret_vols = [v for v in ps.get("volumes", []) if "secret" in v and v["name"] != "tls"]
        keys_env = data.get("SPECDEC_API_KEYS")
        env_names = [e["name"] for e in ct.get("env", [])]
        check("SPECDEC_API_KEYS" not in env_names, f"{where(dep)}: SPECDEC_API_KEYS in env (the ConfigMap sets it)")
        if api_keys:
            secret, key = api_keys
            av = vols.get("api-keys", {})
            am = mounts.get("api-keys", {})
            check(len(secret_vols) == 1 and secret_vols[0] is av, f"{where(dep)}: secret volumes {secret_vols}")
            sv = av.get("secret", {})
            check(set(av) == {"name", "secret"} and sv.get("secretName") == secret
                  and sv.get("items") == [{"key": key, "path": key}] and not sv.get("optional"),
                  f"{where(dep)}: api-keys volume {av}")
            mode = sv.get("defaultMode")
            check(isinstance(mode, int) and mode & 0o222 == 0 and mode & 0o440 == 0o440
                  and (mode & 0o004 or isinstance(sc.get("fsGroup"), int)),
                  f"{where(dep)}: api-keys defaultMode {mode!r} (fsGroup {sc.get('fsGroup')}): "
                  f"read-only, and readable by uid {sc.get('runAsUser')}")
            check(am.get("mountPath") == API_KEYS_DIR and am.get("readOnly") is True and "subPath" not in am,
                  f"{where(dep)}: api-keys mount {am}")
            check(keys_env == f"{API_KEYS_DIR}/{key}"
                  and keys_env == f"{am.get('mountPath')}/{(sv.get('items') or [{}])[0].get('path')}",
                  f"{where(cm)}: SPECDEC_API_KEYS={keys_env}, not the file of the api-keys mount")
        else:
            check(not secret_vols and "api-keys" not in vols, f"{where(dep)}: secret volumes {secret_vols}")
            check("api-keys" not in mounts and not any(m["mountPath"].startswith(API_KEYS_DIR)
                                                       for m in ct.get("volumeMounts", [])),
                  f"{where(dep)}: api-keys mount {mounts.get('api-keys')}")
            check(keys_env is None, f"{where(cm)}: SPECDEC_API_KEYS={keys_env}")

        # TLS: the Secret as a read-only directory (renewals reach the pod), the files this
        # service reads, and the ConfigMap's variables naming them.
        tls_keys = {k: v for k, v in data.items() if "_TLS_" in k}
        tv = vols.get("tls", {})
        tm = mounts.get("tls", {})
        if tls:
            secret, mutual, router_mutual, _, _ = tls
            is_router = c == "router"
            files = ["tls.crt", "tls.key"] + (["ca.crt"] if is_router or mutual else [])
            sv = tv.get("secret", {})
            check(set(tv) == {"name", "secret"} and sv.get("secretName") == secret
                  and sv.get("items") == [{"key": f, "path": f} for f in files] and not sv.get("optional"),
                  f"{where(dep)}: tls volume {tv}, expected Secret {secret} with {files}")
            mode = sv.get("defaultMode")
            check(isinstance(mode, int) and mode & 0o222 == 0 and mode & 0o440 == 0o440
                  and (mode & 0o004 or isinstance(sc.get("fsGroup"), int)),
                  f"{where(dep)}: tls defaultMode {mode!r} (fsGroup {sc.get('fsGroup')}): "
                  f"read-only, and readable by uid {sc.get('runAsUser')}")
            check(tm.get("mountPath") == TLS_DIR and tm.get("readOnly") is True and "subPath" not in tm,
                  f"{where(dep)}: tls mount {tm}")
            prefix = f"SPECDEC_{c.upper()}"
            want = {f"{prefix}_TLS_CERT": f"{TLS_DIR}/tls.crt", f"{prefix}_TLS_KEY": f"{TLS_DIR}/tls.key"}
            if (router_mutual if is_router else mutual):
                want[f"{prefix}_TLS_CLIENT_CA"] = f"{TLS_DIR}/ca.crt"
            if is_router:
                want["SPECDEC_BACKEND_TLS_CA"] = f"{TLS_DIR}/ca.crt"
                if mutual:
                    want["SPECDEC_BACKEND_TLS_CERT"] = f"{TLS_DIR}/tls.crt"
                    want["SPECDEC_BACKEND_TLS_KEY"] = f"{TLS_DIR}/tls.key"
            check(tls_keys == want, f"{where(cm)}: TLS variables {tls_keys}, expected {want}")
            for k, v in tls_keys.items():
                check(v.startswith(tm.get("mountPath", "?") + "/")
                      and v.rsplit("/", 1)[1] in [i["path"] for i in sv.get("items", [])],
                      f"{where(cm)}: {k}={v} is not a file of the tls mount")
        else:
            check(not tv and "tls" not in mounts and not any(m["mountPath"].startswith(TLS_DIR)
                                                            for m in ct.get("volumeMounts", [])),
                  f"{where(dep)}: tls volume {tv} or mount {tm} without TLS")
            check(not tls_keys, f"{where(cm)}: TLS variables {tls_keys} without TLS")
        check(not any("_TLS_" in e["name"] for e in ct.get("env", [])),
              f"{where(dep)}: TLS variables in env (the ConfigMap sets them)")

        # GPU scheduling only where asked for.
        res = ct.get("resources", {})
        gpu_here = gpu and c in ("target", "drafter")
        check(("nvidia.com/gpu" in res.get("limits", {})) == gpu_here, f"{where(dep)}: GPU limit {res}")
        tol = [t.get("key") for t in ps.get("tolerations", [])]
        check(("nvidia.com/gpu" in tol) == gpu_here, f"{where(dep)}: tolerations {tol}")
        check(bool(ps.get("nodeSelector")) == gpu_here, f"{where(dep)}: nodeSelector {ps.get('nodeSelector')}")
        if gpu_here:
            check(ct["image"].endswith("-cuda"), f"{where(dep)}: image {ct['image']} is not the CUDA build")

        if scenario == "features":
            check(ct["image"] == "registry.example.com/specdec:0.1.0", f"{where(dep)}: image {ct['image']}")
            check(ps.get("imagePullSecrets") == [{"name": "regcred"}], f"{where(dep)}: imagePullSecrets")
            inits = ps.get("initContainers", [])
            if check(len(inits) == 1, f"{where(dep)}: initContainers {inits}"):
                check("/models/" in " ".join(inits[0]["command"]), f"{where(dep)}: tpl not applied: {inits[0]['command']}")
                check(inits[0]["volumeMounts"][0]["mountPath"] == "/models", f"{where(dep)}: init mount")
        else:
            check(ct["image"].startswith(f"specdec-{c}:0.1.0"), f"{where(dep)}: image {ct['image']}")
            check("initContainers" not in ps, f"{where(dep)}: unexpected initContainers")

    # No pod behind two Services that expose "metrics": the ServiceMonitor and prometheus-k8s.yml
    # scrape the endpoints of every release Service by that port name.
    scraped = {}
    for (kind, name), d in by.items():
        if kind == "Service" and any(p["name"] == "metrics" for p in d["spec"]["ports"]):
            key = tuple(sorted(d["spec"]["selector"].items()))
            check(key not in scraped, f"{scenario}: Services {scraped.get(key)} and {name} both expose metrics of the same pods")
            scraped[key] = name

    # The router reaches the others through their Services: the target and drafter through the
    # headless ones by dns:/// (round_robin over every pod), the policy through its ClusterIP.
    rcm = by.get(("ConfigMap", f"{fullname}-router"), {}).get("data", {})
    for c, key in (("target", "SPECDEC_TARGET_ENDPOINT"), ("drafter", "SPECDEC_DRAFTER_ENDPOINT"),
                   ("policy", "SPECDEC_POLICY_ENDPOINT")):
        if c not in services:
            check(key not in rcm, f"{scenario}: router {key} set without the {c} service")
            continue
        addr = rcm.get(key, "")
        check("," not in addr, f"{scenario}: router {key}={addr} lists several addresses")
        if headless_backends and c + "-headless" in services:
            h = services[c + "-headless"]
            grpc_port = {p["name"]: p["port"] for p in h["spec"]["ports"]}["grpc"]
            want = f"dns:///{h['metadata']['name']}.{NAMESPACE}.svc.{domain}:{grpc_port}"
        else:
            grpc_port = {p["name"]: p["port"] for p in services[c]["spec"]["ports"]}["grpc"]
            want = f"{fullname}-{c}:{grpc_port}"
        check(addr == want, f"{scenario}: router {key}={addr}, expected {want}")
    check(rcm.get("SPECDEC_TOKENIZER") == "/models/specdec-pycode/target", f"{scenario}: router tokenizer")

    # cert-manager Certificate: into the mounted Secret, usable as server and client certificate,
    # naming every Service (all in-cluster forms) and whatever the router dials.
    certs = [d for d in docs if d.get("kind") == "Certificate"]
    if tls and tls[3]:
        secret, _, _, (issuer_kind, issuer_name), extra = tls
        if check(len(certs) == 1, f"{scenario}: {len(certs)} Certificates"):
            cs = certs[0]["spec"]
            check(cs.get("secretName") == secret, f"{where(certs[0])}: secretName {cs.get('secretName')}, expected {secret}")
            check(cs.get("issuerRef") == {"name": issuer_name, "kind": issuer_kind, "group": "cert-manager.io"},
                  f"{where(certs[0])}: issuerRef {cs.get('issuerRef')}")
            usages = cs.get("usages", [])
            check({"server auth", "client auth"} <= set(usages), f"{where(certs[0])}: usages {usages}")
            names = cs.get("dnsNames", [])
            check(len(names) == len(set(names)), f"{where(certs[0])}: duplicate dnsNames {names}")
            domain = OPTIONS[scenario][1].rstrip(".")
            for (kind, sname), d in by.items():
                if kind != "Service" or not any(p["name"] == "grpc" for p in d["spec"]["ports"]):
                    continue
                for form in (sname, f"{sname}.{NAMESPACE}", f"{sname}.{NAMESPACE}.svc",
                             f"{sname}.{NAMESPACE}.svc.{domain}"):
                    check(form in names, f"{where(certs[0])}: dnsNames lack {form}")
            for key, addr in rcm.items():
                if key.endswith("_ENDPOINT"):
                    for a in addr.split(","):
                        host = a.split("///", 1)[-1].rsplit(":", 1)[0]
                        check(host in names, f"{where(certs[0])}: the router dials {a} ({key}), "
                                             f"but dnsNames lack {host}")
            for n in extra:
                check(n in names, f"{where(certs[0])}: dnsNames lack the extra name {n}")
    else:
        check(not certs, f"{scenario}: Certificate rendered without tls.certManager")

    for d in docs:
        if d.get("kind") == "HorizontalPodAutoscaler":
            s = d["spec"]
            check(("Deployment", s["scaleTargetRef"]["name"]) in by and s["scaleTargetRef"]["kind"] == "Deployment",
                  f"{where(d)}: scaleTargetRef {s['scaleTargetRef']}")
            for m in s["metrics"]:
                check(m["type"] == "Pods", f"{where(d)}: metric type {m['type']}")
                name = m.get("pods", {}).get("metric", {}).get("name")
                check(exported.get(name, (None, None))[1] == "gauge",
                      f"{where(d)}: metric {name} is not a gauge the services export")
                check(m["pods"]["target"]["type"] == "AverageValue", f"{where(d)}: target {m['pods']['target']}")
            check(1 <= s["minReplicas"] <= s["maxReplicas"], f"{where(d)}: replicas {s['minReplicas']}..{s['maxReplicas']}")
        if d.get("kind") == "ServiceMonitor":
            sel = d["spec"]["selector"]["matchLabels"]
            check(d["metadata"]["labels"].get("release") == "kube-prometheus-stack", f"{where(d)}: extra labels missing")
            for c, svc in services.items():
                check(all(svc["metadata"]["labels"].get(k) == v for k, v in sel.items()),
                      f"{where(d)}: does not select the {c} Service")
            eps = d["spec"]["endpoints"]
            check([e["port"] for e in eps] == ["metrics"] and eps[0].get("honorLabels") is True,
                  f"{where(d)}: endpoints {eps}")
            check(any(r.get("targetLabel") == "job" for r in eps[0].get("relabelings", [])), f"{where(d)}: job relabeling")

    router_svc = f"{fullname}-router"
    check(f"port-forward svc/{router_svc} " in notes, f"{scenario}: NOTES.txt does not show how to reach {router_svc}")
    check(f"port-forward svc/{router_svc} 8000:{http_svc_port}\n" in notes
          and f"http://{router_svc}.{NAMESPACE}.svc:{http_svc_port}/v1\n" in notes
          and "curl http://127.0.0.1:8000/v1/completions" in notes,
          f"{scenario}: NOTES.txt does not show how to reach the HTTP API of {router_svc}")
    bearer = '-H "Authorization: Bearer $KEY"' in notes
    check(bearer == bool(API_KEYS[scenario]), f"{scenario}: NOTES.txt Authorization header shown = {bearer}")
    if API_KEYS[scenario]:
        secret, key = API_KEYS[scenario]
        check(f"{API_KEYS_DIR}/{key}" in notes and f"Secret {secret}" in notes,
              f"{scenario}: NOTES.txt does not name the API keys Secret {secret} and file")
    if tls:
        secret, _, router_mutual, _, _ = tls
        check("TLS is on" in notes and f"get secret {secret} " in notes and "ca\\.crt" in notes
              and "--router localhost:50050 --tls-ca ca.crt " in notes and "tcpSocket" in notes,
              f"{scenario}: NOTES.txt does not explain TLS (Secret {secret}, ca.crt, --tls-ca, probes)")
        check(("--tls-cert client.crt --tls-key client.key" in notes) == router_mutual,
              f"{scenario}: NOTES.txt client certificate shown = {not router_mutual}")
    else:
        check("TLS" not in notes and "--tls-ca" not in notes and "--router 127.0.0.1:50050 " in notes,
              f"{scenario}: NOTES.txt mentions TLS without tls.enabled")
    check("<no value>" not in notes and "<no value>" not in text, f"{scenario}: <no value> in the output")


# Values whose content is Kubernetes' own (pod spec fragments, label maps): the key itself is
# commented, its children need not be.
FREEFORM = {"resources", "nodeSelector", "tolerations", "affinity", "podAnnotations", "annotations",
            "labels", "podSecurityContext", "securityContext", "behavior", "extraEnv", "extraArgs",
            "initContainers", "imagePullSecrets", "accessModes"}


def lint_values():
    """Every key of values.yaml and values-gpu.yaml has a comment, and is read by a template."""
    templates = "".join(open(p).read() for p in glob.glob(os.path.join(CHART, "templates/*")))
    for path in (os.path.join(CHART, "values.yaml"), os.path.join(CHART, "values-gpu.yaml")):
        prev, stack = "", []  # stack: (indent, key)
        for i, line in enumerate(open(path).read().splitlines(), 1):
            m = re.match(r"^(\s*)([A-Za-z][\w./-]*):(\s|$)", line)
            if m and not line.lstrip().startswith("- "):
                indent = len(m.group(1))
                while stack and stack[-1][0] >= indent:
                    stack.pop()
                if not any(k in FREEFORM for _, k in stack):
                    check(prev.lstrip().startswith("#") or " # " in line,
                          f"{os.path.basename(path)}:{i}: key {m.group(2)} has no comment")
                stack.append((indent, m.group(2)))
            if line.strip():
                prev = line
    values = yaml.safe_load(open(os.path.join(CHART, "values.yaml")))

    def leaves(node, path):
        if isinstance(node, dict) and node and not (path and path[-1] in FREEFORM):
            for k, v in node.items():
                yield from leaves(v, path + [k])
        else:
            yield path
    for path in leaves(values, []):
        key = path[-1]
        check(re.search(r"[.\"]" + re.escape(key) + r"\b", templates),
              f"values.yaml: {'.'.join(path)} is not read by any template")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    for scenario in SCENARIOS:
        with open(os.path.join(out, f"{scenario}.yaml")) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        with open(os.path.join(out, f"{scenario}.notes.txt")) as f:
            notes = f.read()
        before = len(errors)
        check_render(scenario, docs, notes)
        print(f"check_chart: {scenario}: {len(docs)} documents, {len(errors) - before} problems")
    lint_values()
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
