#!/usr/bin/env python3
"""Runs the helm/specdec chart's rendered manifests with `podman kube play`, on one machine
without Kubernetes, as faithfully as podman allows.

  deploy/podman/kube_play.py up   [-f VALUES.yaml] [--models DIR] [--manifest FILE]
  deploy/podman/kube_play.py down [--manifest FILE]

`up` renders the chart (helm template when helm is installed, else the project's renderer
tests/deploy/helm_render), fills the models claim with the pack, plays the ConfigMaps, the claim
and the Deployments of the render unchanged but for what a cluster would provide (below), runs
every container's startup and readiness probe as the kubelet would, and prints the router's
address. `down` stops the pods (SIGTERM, then the pods' grace period) and removes them; the
claim's volume is kept, as the chart's helm.sh/resource-policy: keep asks.

What differs from a real cluster, and what stands in for it:
  - no API server, scheduler or kubelet: podman creates one pod per Deployment replica;
  - Services: podman has none. Every Service of the render becomes, in the pods that may call
    it, hostAliases from its names (<svc>, <svc>.<ns>, <svc>.<ns>.svc, <svc>.<ns>.svc.<domain>)
    to the IP of the pod its selector picks, which is what cluster DNS answers for a headless
    Service (and what kube-proxy forwards a ClusterIP to, with one replica). The backends are
    played first so that their IPs are known when the router's pod is made;
  - probes: podman 4 does not run gRPC probes; this script calls each declared probe (gRPC health,
    httpGet, tcpSocket) on the pod's IP until it succeeds or its failureThreshold runs out;
  - the claim: a podman volume of the claim's name, made and filled from --models before the pods
    start (a PersistentVolumeClaim bound to a volume that holds the pack); podman 4 refuses to
    play a claim whose volume exists, so the claim's document itself is not played;
  - PodDisruptionBudgets, HPAs and ServiceMonitors have nothing to act on here and are skipped;
  - every pod joins one podman network (--network, default specdec-kube), the pod network;
  - podman 4 publishes every containerPort on the host (a cluster publishes none), so that pods do
    not collide, each port gets a free hostPort on 127.0.0.1 (state.json lists them).
The manifest actually played is written to --manifest (default /tmp/specdec-kube/played.yaml).
"""
import argparse
import copy
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
PLAYED = ("ConfigMap", "Deployment")


def sh(*cmd, timeout=600, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def render(args):
    """The chart's manifests as a list of documents."""
    flags = ["--namespace", args.namespace] + sum((["-f", f] for f in args.values), [])
    if shutil.which("helm"):
        out = sh("helm", "template", args.release, os.path.join(REPO, "helm/specdec"), *flags)
    else:
        renderer = os.path.join(args.work, "helm_render")
        if not os.path.exists(renderer):
            gopath = "/usr/share/gocode"
            env = dict(os.environ, GO111MODULE="off", GOPATH=gopath, GOFLAGS="",
                       GOCACHE=os.path.join(args.work, "go-cache"))
            subprocess.run(["go", "build", "-o", renderer,
                            os.path.join(REPO, "tests/deploy/helm_render/main.go")],
                           check=True, env=env, cwd=REPO)
        out = sh(renderer, "-name", args.release, "-namespace", args.namespace,
                 *sum((["-f", f] for f in args.values), []), os.path.join(REPO, "helm/specdec"))
    return [d for d in yaml.safe_load_all(out) if d]


def fill_claim(engine, claim, models):
    """A podman volume named after the claim, holding the pack as the chart's paths expect."""
    if subprocess.run([engine, "volume", "exists", claim]).returncode == 0:
        sh(engine, "volume", "rm", "-f", claim)
    sh(engine, "volume", "create", claim)
    mountpoint = json.loads(sh(engine, "volume", "inspect", claim))[0]["Mountpoint"]
    for name in os.listdir(models):
        src = os.path.join(models, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(mountpoint, name))


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def service_aliases(services, pods, namespace, domain):
    """hostAliases entries: every Service name -> the IP of the pod its selector picks."""
    by_ip = {}
    for svc in services:
        name = svc["metadata"]["name"]
        for pod in pods:
            if selects(svc["spec"].get("selector", {}), pod["labels"]):
                by_ip.setdefault(pod["ip"], []).extend(
                    [name, f"{name}.{namespace}", f"{name}.{namespace}.svc",
                     f"{name}.{namespace}.svc.{domain}"])
                break
    return [{"ip": ip, "hostnames": names} for ip, names in sorted(by_ip.items())]


def free_port(taken):
    """A port on 127.0.0.1 that nothing listens on and that is not in `taken` (then added to it).
    Every port of a release is chosen before any pod binds one, and the kernel may hand the same
    ephemeral port out again once the socket that found it closes."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


def loopback_ports(deployment, taken):
    """Gives every containerPort a free hostPort on 127.0.0.1, none of them in `taken` (which
    collects them); returns {container/port: host}."""
    published = {}
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        for p in c.get("ports", []):
            p["hostIP"], p["hostPort"] = "127.0.0.1", free_port(taken)
            published[f"{c['name']}/{p.get('name', p['containerPort'])}"] = \
                f"127.0.0.1:{p['hostPort']}"
    return published


def play(engine, docs, network, path):
    with open(path, "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)
    sh(engine, "kube", "play", "--network", network, "--replace", path)


def pod_of(engine, deployment, network):
    """(pod name, IP, labels, container names) of the pod podman made for a Deployment."""
    pods = json.loads(sh(engine, "pod", "ps", "--format", "json"))
    for p in pods:
        if p["Name"].startswith(deployment["metadata"]["name"] + "-pod"):
            containers = [c["Names"] for c in p["Containers"] if not c["Names"].endswith("-infra")]
            info = json.loads(sh(engine, "inspect", containers[0]))[0]
            ip = info["NetworkSettings"]["Networks"][network]["IPAddress"]
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            return {"name": p["Name"], "ip": ip, "labels": labels, "containers": containers}
    raise RuntimeError(f"no pod of Deployment {deployment['metadata']['name']}")


def probe_once(probe, ip, ports):
    def port_of(p):
        return ports.get(p, p) if isinstance(p, str) else p
    timeout = probe.get("timeoutSeconds", 1)
    try:
        if "grpc" in probe:
            sys.path.insert(0, os.path.join(REPO, "tests/deploy"))
            from check_containers import health  # the gRPC health call, written once
            return health(f"{ip}:{port_of(probe['grpc']['port'])}", timeout=timeout)
        if "httpGet" in probe:
            g = probe["httpGet"]
            url = f"{g.get('scheme', 'HTTP').lower()}://{ip}:{port_of(g['port'])}{g.get('path', '/')}"
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return 200 <= r.status < 400
        if "tcpSocket" in probe:
            with socket.create_connection((ip, port_of(probe["tcpSocket"]["port"])), timeout):
                return True
    except (OSError, ValueError):
        return False
    raise RuntimeError(f"probe kind not handled: {probe}")


def run_probes(deployment, pod):
    """Every container's startupProbe, then readinessProbe, with the kubelet's budgets."""
    report = {}
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", []) if "name" in p}
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = c.get(kind)
            if not probe:
                continue
            start, tries = time.monotonic(), probe.get("failureThreshold", 3)
            ok = False
            for _ in range(tries):
                if probe_once(probe, pod["ip"], ports):
                    ok = True
                    break
                time.sleep(min(probe.get("periodSeconds", 10), 1.0))
            report[f"{c['name']}.{kind}"] = {"ok": ok, "seconds": round(time.monotonic() - start, 2)}
            if not ok:
                raise RuntimeError(f"{pod['name']}: {kind} of {c['name']} failed {tries} times")
    return report


def write_manifest(path, docs):
    with open(path, "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)


def up(args):
    os.makedirs(args.work, exist_ok=True)
    docs = render(args)
    kinds = {}
    for d in docs:
        kinds.setdefault(d["kind"], []).append(d)
    skipped = sorted(k for k in kinds if k not in PLAYED
                     and k not in ("Service", "PersistentVolumeClaim"))
    if subprocess.run([args.engine, "network", "exists", args.network]).returncode != 0:
        sh(args.engine, "network", "create", args.network)
    for claim in kinds.get("PersistentVolumeClaim", []):
        fill_claim(args.engine, claim["metadata"]["name"], args.models)

    deployments = kinds.get("Deployment", [])
    component = lambda d: d["spec"]["template"]["metadata"]["labels"].get(  # noqa: E731
        "app.kubernetes.io/component")
    deployments = [copy.deepcopy(d) for d in deployments]
    taken = set()
    published = {d["metadata"]["name"]: loopback_ports(d, taken) for d in deployments}
    backends = [d for d in deployments if component(d) != "router"]
    routers = [d for d in deployments if component(d) == "router"]
    start = time.monotonic()
    base = kinds.get("ConfigMap", [])
    # What is about to be played is on record first: `down` removes it even when a play fails.
    write_manifest(args.manifest, base + backends + routers)
    play(args.engine, base + backends, args.network, os.path.join(args.work, "backends.yaml"))
    pods = [pod_of(args.engine, d, args.network) for d in backends]
    aliases = service_aliases(kinds.get("Service", []), pods, args.namespace, args.cluster_domain)
    for d in routers:
        d["spec"]["template"]["spec"]["hostAliases"] = aliases
    play(args.engine, kinds.get("ConfigMap", []) + routers, args.network,
         os.path.join(args.work, "router.yaml"))
    pods += [pod_of(args.engine, d, args.network) for d in routers]
    write_manifest(args.manifest, base + backends + routers)  # the routers' host aliases too

    probes = {}
    for d, pod in zip(backends + routers, pods):
        probes[pod["name"]] = run_probes(d, pod)
    router = next(p for p in pods if p["labels"].get("app.kubernetes.io/component") == "router")
    state = {"router": f"{router['ip']}:50051", "pods": pods, "probes": probes,
             "ready_seconds": round(time.monotonic() - start, 2), "skipped_kinds": skipped,
             "loopback": published,
             "service_aliases": aliases, "manifest": args.manifest}
    with open(os.path.join(args.work, "state.json"), "w") as f:
        json.dump(state, f, indent=2)
    print(json.dumps(state, indent=2))
    return 0


def down(args):
    """Stops the router's pod first, then the backends' (SIGTERM, then each pod's grace period),
    records how every container exited, and removes the pods. Exit status 1 when one was killed
    or failed."""
    path = args.manifest
    if not os.path.exists(path):
        print(f"kube_play: nothing played ({path} is missing)")
        return 0
    deployments = [d for d in yaml.safe_load_all(open(path)) if d and d["kind"] == "Deployment"]
    deployments.sort(key=lambda d: d["spec"]["template"]["metadata"]["labels"].get(
        "app.kubernetes.io/component") != "router")
    report, bad = {}, 0
    for d in deployments:
        grace = d["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        try:
            pod = pod_of(args.engine, d, args.network)
        except (RuntimeError, KeyError, IndexError):  # never played, or never started
            continue
        start = time.monotonic()
        sh(args.engine, "pod", "stop", "-t", str(grace), pod["name"], check=False,
           timeout=grace + 60)
        seconds = round(time.monotonic() - start, 2)
        for c in pod["containers"]:
            code = sh(args.engine, "inspect", "--format", "{{.State.ExitCode}}", c).strip()
            report[c] = {"exit_code": int(code), "stop_seconds": seconds, "grace": grace}
            bad += code != "0"
    for name in ("router.yaml", "backends.yaml"):
        played = os.path.join(args.work, name)
        if os.path.exists(played):
            sh(args.engine, "kube", "down", played, check=False)
    with open(os.path.join(args.work, "stopped.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("-f", "--values", action="append", default=[],
                    help="values file for the render (repeatable)")
    ap.add_argument("--models", default=os.path.join(REPO, "models"),
                    help="directory copied into the models claim (default: the repository's "
                         "models/, holding specdec-pycode/)")
    ap.add_argument("--release", default="demo")
    ap.add_argument("--namespace", default="inference")
    ap.add_argument("--cluster-domain", default="cluster.local")
    ap.add_argument("--network", default="specdec-kube")
    ap.add_argument("--engine", default="podman")
    ap.add_argument("--work", default="/tmp/specdec-kube")
    ap.add_argument("--manifest", default=None)
    args = ap.parse_args()
    args.manifest = args.manifest or os.path.join(args.work, "played.yaml")
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(REPO, "deploy/podman/containers.conf"))
    return (up if args.action == "up" else down)(args)


if __name__ == "__main__":
    sys.exit(main())
