#!/usr/bin/env python3
"""Checks a release played by deploy/podman/kube_play.py up: its pods passed their probes, run as
the chart's securityContext says, and the router pod serves requests (every method equal to AR at
T=0) with the counters of /metrics moving.

  tests/deploy/check_kube_play.py STATE_JSON      (written by kube_play.py up)

Writes served.json (the requests and their outcomes) beside STATE_JSON.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_containers as cc  # noqa: E402


def main():
    state_path = sys.argv[1]
    with open(state_path) as f:
        state = json.load(f)
    for pod, probes in state["probes"].items():
        for name, r in probes.items():
            cc.check(r["ok"], f"{pod}: {name} passed after {r['seconds']} s")
    cc.check(len(state["pods"]) == 4, f"{len(state['pods'])} pods played (router, target, "
             "drafter, policy)")
    for pod in state["pods"]:
        for c in pod["containers"]:
            uid = cc.sh("podman", "exec", c, "id", "-u")
            cc.check(uid == "10001", f"{c}: runs as uid {uid} (securityContext runAsUser)")
            rc = subprocess.run(["podman", "exec", c, "touch", "/probe"],
                                capture_output=True).returncode
            cc.check(rc != 0, f"{c}: read-only root filesystem")
            replica = cc.sh("podman", "exec", c, "printenv", "SPECDEC_REPLICA", check_rc=False)
            component = pod["labels"]["app.kubernetes.io/component"]
            if component in ("target", "drafter"):
                cc.check(replica == pod["name"], f"{c}: SPECDEC_REPLICA (fieldRef "
                         f"metadata.name) = {replica!r}")

    router = state["router"]
    prompts = [p for p in open(os.path.join(cc.REPO, "models/specdec-pycode/eval/"
                                            "heldout_prompts.txt")).read().split("\n\n")
               if p.strip()][:2]
    before = cc.metric_total(cc.scrape(router.replace(":50051", ":9090")),
                             "specdec_requests_total") or 0.0
    cc.check_methods(router, prompts, 24)
    after = cc.metric_total(cc.scrape(router.replace(":50051", ":9090")),
                            "specdec_requests_total") or 0.0
    served = len(prompts) * (1 + len(cc.METHODS))
    cc.check(after - before == served, f"router /metrics: specdec_requests_total rose by "
             f"{after - before:g} for {served} requests")
    cc.check(cc.wait_until(lambda: cc.knows_backends(router), 30, 0.5),
             "the router reaches the target, the drafter and the policy through the Services' "
             "names")
    with open(os.path.join(os.path.dirname(state_path), "served.json"), "w") as f:
        json.dump({"requests": served, "failures": cc.failures}, f, indent=2)
    return 1 if cc.failures else 0


if __name__ == "__main__":
    sys.exit(main())
