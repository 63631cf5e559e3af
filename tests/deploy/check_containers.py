#!/usr/bin/env python3
"""Runs the four specdec services as containers of the images deploy/docker/build_images.sh made,
and checks them as a user would reach them on loopback.

  tests/deploy/check_containers.py [--engine podman] [--repository specdec] [--tag 0.1.0]
                                   [--out DIR] [--tokens N]

What it checks (each failure is printed and makes the exit status 1):
  - images: labels (version, revision), a non-root user, no compiler, CMake or sources inside;
  - containers: non-root, read-only root filesystem, no capabilities, the pack mounted read-only
    at /models as the chart mounts it; every service's gRPC health check SERVING, and the router
    ready as the chart's readiness probe sees it (GET /health) before the first request;
  - the Python SDK: every method's greedy completion equals AR's, prompt by prompt;
  - the load tester with --check-ar and --check-handles against the containers;
  - /metrics of the router, the target and the drafter scraped, with the counters the requests
    must have moved;
  - a request in flight when the router is stopped finishes, and every container exits 0 on
    SIGTERM within its grace period (drained, not killed).
It writes results.json (cold start, per-service start to SERVING, requests) to --out.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import grpc

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
sys.path.insert(0, os.path.join(REPO, "clients/python"))
sys.path.insert(0, os.path.join(REPO, "loadtest"))
from specdec import Client, GenerateOptions  # noqa: E402

PACK = "/models/specdec-pycode"
METHODS = ["DFLASH", "DFLASH_ADAPTIVE", "DRAFT_CHAIN", "DYSPEC_TREE", "NGRAM"]
SERVICES = ["target", "drafter", "policy", "router"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def sh(*cmd, check_rc=True, timeout=300):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check_rc and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout.strip()


def health(address, timeout=2.0):
    """grpc.health.v1.Health/Check for the server as a whole; True when SERVING."""
    with grpc.insecure_channel(address) as ch:
        check_rpc = ch.unary_unary("/grpc.health.v1.Health/Check",
                                   request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        try:
            reply = check_rpc(b"", timeout=timeout)  # HealthCheckRequest{service: ""}
        except grpc.RpcError:
            return False
    return reply == b"\x08\x01"  # HealthCheckResponse{status: SERVING}


def router_ready(address):
    """The chart's readiness probe of the router: HTTP GET /health answers 200 once the router's
    health loop has seen a SERVING target (its gRPC health answers SERVING from the start, for
    the liveness probe)."""
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def wait_until(predicate, timeout, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


class Cluster:
    def __init__(self, engine, image_of, prefix):
        self.engine, self.image_of, self.prefix = engine, image_of, prefix
        self.network = f"{prefix}-net"
        self.ports = {}

    def name(self, service):
        return f"{self.prefix}-{service}"

    def env(self, service):
        endpoint = lambda s: f"{self.name(s)}:50051"  # noqa: E731 (the network's DNS)
        return {
            "target": {"SPECDEC_TARGET_MODEL": f"{PACK}/target",
                       "SPECDEC_TARGET_DFLASH": f"{PACK}/dflash", "SPECDEC_THREADS": "1",
                       "SPECDEC_REPLICA": self.name("target")},
            "drafter": {"SPECDEC_TARGET_MODEL": f"{PACK}/target",
                        "SPECDEC_DFLASH_MODEL": f"{PACK}/dflash",
                        "SPECDEC_DRAFT_LM_MODEL": f"{PACK}/draft", "SPECDEC_THREADS": "1",
                        "SPECDEC_REPLICA": self.name("drafter")},
            "policy": {"SPECDEC_POLICY_DIR": f"{PACK}/policy"},
            "router": {"SPECDEC_TARGET_ENDPOINT": endpoint("target"),
                       "SPECDEC_DRAFTER_ENDPOINT": endpoint("drafter"),
                       "SPECDEC_POLICY_ENDPOINT": endpoint("policy"),
                       "SPECDEC_TOKENIZER": f"{PACK}/target",
                       "SPECDEC_ROUTER_HTTP_ADDRESS": "0.0.0.0:8000",
                       "SPECDEC_DRAIN_MS": "20000"},
        }[service]

    def start(self, service):
        cmd = [self.engine, "run", "-d", "--name", self.name(service), "--network", self.network,
               "--read-only", "--tmpfs", "/tmp:rw,size=64m", "--cap-drop", "ALL",
               "--security-opt", "no-new-privileges",
               "-v", f"{REPO}/models:/models:ro",
               "-p", "127.0.0.1::50051", "-p", "127.0.0.1::9090"]
        if service == "router":
            cmd += ["-p", "127.0.0.1::8000"]
        for k, v in self.env(service).items():
            cmd += ["-e", f"{k}={v}"]
        sh(*cmd, self.image_of(service))
        for port in (50051, 9090) + ((8000,) if service == "router" else ()):
            host = sh(self.engine, "port", self.name(service), f"{port}/tcp").splitlines()[0]
            self.ports[(service, port)] = host

    def address(self, service, port=50051):
        return self.ports[(service, port)]

    def logs(self, service):
        r = subprocess.run([self.engine, "logs", self.name(service)], capture_output=True,
                           text=True)
        return r.stdout + r.stderr

    def remove(self):
        for s in SERVICES:
            subprocess.run([self.engine, "rm", "-f", "-t", "0", self.name(s)],
                           capture_output=True)
        subprocess.run([self.engine, "network", "rm", "-f", self.network], capture_output=True)


def check_image(engine, image, revision):
    labels = json.loads(sh(engine, "image", "inspect", "--format", "{{json .Labels}}", image))
    check(labels.get("org.opencontainers.image.revision") == revision,
          f"{image}: label revision = {labels.get('org.opencontainers.image.revision')}")
    check(bool(labels.get("org.opencontainers.image.version")), f"{image}: version label")
    user = sh(engine, "image", "inspect", "--format", "{{.Config.User}}", image)
    check(user not in ("", "0", "root", "0:0"), f"{image}: runs as user {user!r}")
    found = sh(engine, "run", "--rm", "--entrypoint", "/bin/sh", image, "-c",
               "for t in cc gcc g++ c++ cmake ninja make ccache protoc; do "
               "command -v $t; done; ls -d /src /usr/include/torch 2>/dev/null; true")
    check(found == "", f"{image}: no build tools or sources inside ({found.split() or 'none'})")


def knows_backends(address):
    """True once the router's GetInfo describes all three backends (its health loop saw them)."""
    with Client(address, timeout=10) as c:
        info = c.info()
    return info.target is not None and info.drafter is not None and info.policy is not None


def first_token_time(address, prompt):
    with Client(address, timeout=60) as c:
        stream = c.generate_stream(prompt, GenerateOptions(max_new_tokens=1, ignore_eos=True))
        for _ in stream:
            return time.monotonic()
    return None


def check_methods(address, prompts, tokens):
    """Every method's greedy tokens against AR's, per prompt."""
    with Client(address, timeout=120) as c:
        for i, p in enumerate(prompts):
            ar = c.generate(p, GenerateOptions(method="AR", max_new_tokens=tokens,
                                               ignore_eos=True)).tokens
            for m in METHODS:
                r = c.generate(p, GenerateOptions(method=m, max_new_tokens=tokens, ignore_eos=True))
                check(r.tokens == ar and len(ar) == tokens,
                      f"prompt {i}: {m} equals AR ({len(r.tokens)} tokens, tau {r.tau:.2f})")


def scrape(address):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        return r.read().decode()


def metric_total(text, name):
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def run_loadtest(cluster, out, tokens):
    handles = ",".join(cluster.address(s, 9090) for s in ("target", "drafter"))
    cmd = [sys.executable, "-m", "specdec_loadtest", "--router", cluster.address("router"),
           "--quiet", "--prompts", f"{REPO}/models/specdec-pycode/eval/heldout_prompts.txt",
           "--prompt-format", "paragraphs", "--max-prompts", "8", "--max-new-tokens", str(tokens),
           "--ignore-eos", "--concurrency", "2", "--methods", "AR,DFLASH_ADAPTIVE,DYSPEC_TREE",
           "--requests", "4", "--duration", "0", "--warmup", "0", "--cooldown", "0.2",
           "--check-ar", "--check-handles", handles, "--fail-on-error", "--no-plots",
           "--metrics-url", cluster.address("router", 9090), "--out", os.path.join(out, "load")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "loadtest")))
    check(r.returncode == 0, f"load tester --check-ar --check-handles exited {r.returncode}"
          + ("" if r.returncode == 0 else ":\n" + (r.stdout + r.stderr)[-3000:]))


def check_drain(cluster, engine, prompt):
    """Stops the router with a long request in flight; it must finish, then everything exits 0."""
    outcome = {}

    def long_request():
        try:
            with Client(cluster.address("router"), timeout=120) as c:
                outcome["tokens"] = len(c.generate(prompt, GenerateOptions(
                    method="DFLASH", max_new_tokens=400, ignore_eos=True)).tokens)
        except Exception as e:  # noqa: BLE001 (reported below)
            outcome["error"] = repr(e)

    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(0.5)
    stopped = {}
    for s in ["router", "drafter", "policy", "target"]:
        start = time.monotonic()
        sh(engine, "stop", "-t", "30", cluster.name(s), timeout=60)
        stopped[s] = time.monotonic() - start
        if s == "router":
            t.join(timeout=60)
            check(outcome.get("tokens") == 400,
                  f"a request in flight at the router's SIGTERM finished ({outcome})")
    for s in SERVICES:
        code = sh(engine, "inspect", "--format", "{{.State.ExitCode}}", cluster.name(s))
        check(code == "0" and stopped[s] < 30,
              f"{s}: exited {code} {stopped[s]:.1f} s after SIGTERM (drained, not killed)")
    return stopped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default="podman")
    ap.add_argument("--repository", default="specdec")
    ap.add_argument("--tag", default="0.1.0")
    ap.add_argument("--out", default="/tmp/specdec-containers")
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    image_of = lambda s: f"{args.repository}-{s}:{args.tag}"  # noqa: E731
    revision = sh("git", "-C", REPO, "rev-parse", "HEAD")
    for s in SERVICES:
        check_image(args.engine, image_of(s), revision)

    cluster = Cluster(args.engine, image_of, f"specdec-ct{os.getpid()}")
    results = {"images": {image_of(s): int(sh(args.engine, "image", "inspect", "--format",
                                                 "{{.Size}}", image_of(s))) for s in SERVICES}}
    try:
        sh(args.engine, "network", "create", cluster.network)
        t0 = time.monotonic()
        for s in SERVICES:
            cluster.start(s)
        serving = {}
        for s in SERVICES:
            ok = wait_until(lambda: health(cluster.address(s)), 120)
            serving[s] = round(time.monotonic() - t0, 2)
            if not check(ok, f"{s}: gRPC health SERVING {serving[s]} s after the first start"):
                print(cluster.logs(s)[-3000:])
        ready = wait_until(lambda: router_ready(cluster.address("router", 8000)), 60)
        serving["router_ready"] = round(time.monotonic() - t0, 2)
        check(ready, f"router: ready (GET /health 200) {serving['router_ready']} s after the "
              "first start")
        if failures:
            return 1
        prompts = [p for p in open(f"{REPO}/models/specdec-pycode/eval/heldout_prompts.txt")
                   .read().split("\n\n") if p.strip()][:3]
        first = first_token_time(cluster.address("router"), prompts[0])
        results["cold_start_s"] = round(first - t0, 2)
        results["start_to_serving_s"] = serving
        print(f"cold start (first container start to first token): {results['cold_start_s']} s")

        check(wait_until(lambda: knows_backends(cluster.address("router")), 30, 0.5),
              "GetInfo names the target, the drafter and the policy (within 30 s)")
        for s in SERVICES:
            uid = sh(args.engine, "exec", cluster.name(s), "id", "-u")
            check(uid == "10001", f"{s}: the process runs as uid {uid}")
            wrote = subprocess.run([args.engine, "exec", cluster.name(s), "touch", "/probe"],
                                   capture_output=True).returncode
            check(wrote != 0, f"{s}: the root filesystem is read-only")
            wrote = subprocess.run([args.engine, "exec", cluster.name(s), "touch",
                                    f"{PACK}/probe"], capture_output=True).returncode
            check(wrote != 0, f"{s}: the pack is mounted read-only")

        check_methods(cluster.address("router"), prompts, args.tokens)
        run_loadtest(cluster, args.out, args.tokens)

        router = scrape(cluster.address("router", 9090))
        target = scrape(cluster.address("target", 9090))
        drafter = scrape(cluster.address("drafter", 9090))
        for name, text, metric in [("router", router, "specdec_requests_total"),
                                   ("router", router, "specdec_acceptance_length_request_count"),
                                   ("target", target, "specdec_target_operations_total"),
                                   ("drafter", drafter, "specdec_drafter_operations_total")]:
            value = metric_total(text, metric)
            check(value is not None and value > 0, f"{name} /metrics: {metric} = {value}")
        results["drain_stop_s"] = {k: round(v, 2) for k, v in
                                   check_drain(cluster, args.engine, prompts[1]).items()}
    except Exception as e:  # noqa: BLE001 (reported as a failure, with the services' logs)
        check(False, f"unexpected error: {e!r}")
    finally:
        if failures:
            for s in SERVICES:
                print(f"--- {s} log (tail)\n{cluster.logs(s)[-2000:]}")
        cluster.remove()
    results["failures"] = failures
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
