"""Chaos runs: faults injected into a local cluster while the load tester drives it.

    PYTHONPATH=loadtest /usr/bin/python3 -m specdec_loadtest.chaos --out /tmp/chaos

Starts the four services with ``deploy/local/cluster.sh`` on their own ports, computes each
prompt's AR completion alone (greedy), then runs one scenario per fault. In each, one closed-loop
worker per method (the load tester's ``Runner.run_request``) keeps a request in flight; after
``--fault-at`` seconds the fault is injected:

- ``none``: nothing (the control row);
- ``target-pause``: SIGSTOP to the target for ``--pause-s`` seconds, then SIGCONT;
- ``target-kill``: SIGKILL to the target, restarted at once with the same command line;
- ``router-kill``: SIGKILL to the router, restarted at once;
- ``drafter-flap``: the drafter killed and restarted ``--flaps`` times (down 1.5 s, up 3 s);
- ``policy-kill``: SIGKILL to the policy service, restarted after ``--pause-s`` seconds.

From the end of the fault (SIGCONT, or the restart's launch) a probe sends a short request every
100 ms on a fresh channel until one is served normally (AR for the target and the router,
DRAFT_CHAIN without drafter fallback for the drafter, DFLASH_ADAPTIVE without policy fallback
for the policy service): that is the time to recover. The load runs on for ``--after-s``
seconds, then the target's ``specdec_kv_handles`` must return to 0.

A scenario passes when no request's tokens differ from AR (completed requests entirely, failed
ones in what they streamed), every failure has an expected status (UNAVAILABLE,
DEADLINE_EXCEEDED, ABORTED, CANCELLED), no request that started after the recovery failed,
handles went back to 0 and the cluster recovered within ``--recover-bound-s``.
Writes ``chaos.json`` and ``chaos.md`` into ``--out``; exit status 0 when every scenario passed.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Dict, List, Optional

from . import ar_check, prom, prompts
from .runner import LoadConfig, Runner, _Active
from .stats import ABORTED, ERROR, OK, RUNNING

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SDK_DIR = os.path.join(_REPO, "clients", "python")
FAULTS = ("none", "target-pause", "target-kill", "router-kill", "drafter-flap", "policy-kill")
EXPECTED_CODES = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "CANCELLED"}
METHODS = "AR,DFLASH,DFLASH_ADAPTIVE,DRAFT_CHAIN,DYSPEC_TREE,NGRAM"
perf_counter = time.perf_counter


class Cluster:
    """The local cluster of deploy/local/cluster.sh, with each service restartable alone."""

    def __init__(self, build_dir: str, pack: str, run_dir: str, port_base: int):
        self.run_dir = run_dir
        self.env = dict(os.environ, BUILD_DIR=build_dir, SPECDEC_RUN_DIR=run_dir,
                        SPECDEC_PORT_BASE=str(port_base),
                        SPECDEC_METRICS_BASE=str(port_base + 100),
                        SPECDEC_HTTP_PORT=str(port_base + 4),
                        TARGET_MODEL=f"{pack}/target", DRAFT_LM=f"{pack}/draft",
                        DFLASH_MODEL=f"{pack}/dflash", POLICY_MODEL=f"{pack}/policy")
        self.router = f"127.0.0.1:{port_base}"
        self.ports = {"router": port_base, "target": port_base + 1, "drafter": port_base + 2,
                      "policy": port_base + 3}
        self.target_metrics = f"http://127.0.0.1:{port_base + 101}/metrics"
        self.cmdlines: Dict[str, List[str]] = {}
        self.children: List[subprocess.Popen] = []

    def _cluster_sh(self, verb: str) -> None:
        subprocess.run(["bash", "deploy/local/cluster.sh", verb], cwd=_REPO, env=self.env,
                       check=True, stdout=subprocess.DEVNULL)

    def start(self) -> None:
        self._cluster_sh("start")
        for name in self.ports:
            pid = self.pid(name)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                self.cmdlines[name] = [p.decode() for p in f.read().split(b"\0") if p]

    def stop(self) -> None:
        self._cluster_sh("stop")
        for child in self.children:
            child.poll()

    def pid(self, name: str) -> int:
        with open(os.path.join(self.run_dir, f"{name}.pid")) as f:
            return int(f.read().strip())

    def signal(self, name: str, sig: int) -> None:
        os.kill(self.pid(name), sig)

    def kill(self, name: str) -> None:
        """SIGKILL, and wait until every thread of the process is gone (or a zombie)."""
        pid = self.pid(name)
        os.kill(pid, signal.SIGKILL)
        for child in self.children:
            if child.pid == pid:
                child.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.02)

    def restart(self, name: str) -> None:
        """Launches ``name`` again with its first command line; does not wait for it."""
        log = open(os.path.join(self.run_dir, f"{name}.log"), "ab")
        child = subprocess.Popen(self.cmdlines[name], cwd=_REPO, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.children.append(child)
        with open(os.path.join(self.run_dir, f"{name}.pid"), "w") as f:
            f.write(f"{child.pid}\n")


def _alive(pid: int) -> bool:
    """Whether any thread of ``pid`` is still running. A SIGKILLed process's main thread turns
    zombie before its other threads have exited, and its listening sockets stay open until the
    last one has: a service restarted on the same ports at that moment cannot bind them."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    return True
        except OSError:
            continue
    return False


def inject(cluster: Cluster, fault: str, a: argparse.Namespace) -> None:
    """Applies ``fault``; returns when it has ended (resumed, or restarts launched)."""
    if fault == "target-pause":
        cluster.signal("target", signal.SIGSTOP)
        time.sleep(a.pause_s)
        cluster.signal("target", signal.SIGCONT)
    elif fault in ("target-kill", "router-kill"):
        name = fault.split("-")[0]
        cluster.kill(name)
        cluster.restart(name)
    elif fault == "drafter-flap":
        for i in range(a.flaps):
            cluster.kill("drafter")
            time.sleep(1.5)
            cluster.restart("drafter")
            if i + 1 < a.flaps:
                time.sleep(3.0)
    elif fault == "policy-kill":
        cluster.kill("policy")
        time.sleep(a.pause_s)
        cluster.restart("policy")
    elif fault != "none":
        raise ValueError(f"unknown fault {fault!r}")


def probe_recovery(router: str, fault: str, bound_s: float) -> Optional[float]:
    """Seconds until a fresh client is served normally again (see the module docstring)."""
    from specdec import Client, GenerateOptions, SpecdecError
    method = {"drafter-flap": "DRAFT_CHAIN", "policy-kill": "DFLASH_ADAPTIVE"}.get(fault, "AR")
    opts = GenerateOptions(method=method, max_new_tokens=8, ignore_eos=True,
                           request_id=f"chaos-probe-{fault}")
    t0 = perf_counter()
    while perf_counter() - t0 < bound_s:
        client = Client(router, timeout=3.0)
        try:
            s = client.generate("def f(x):\n", opts).summary
            if not (s.drafter_fallback and fault == "drafter-flap") and not (
                    s.policy_fallback and fault == "policy-kill"):
                return perf_counter() - t0
        except SpecdecError:
            pass
        finally:
            client.close()
        time.sleep(0.1)
    return None


class Load:
    """One closed-loop worker per method; a client that failed waits 200 ms before its next
    request (a client's retry pause, so that a down router is not hammered in a busy loop)."""

    def __init__(self, runner: Runner, methods: List[str]):
        self.runner = runner
        self.methods = methods
        self.records: List = []
        self.active = _Active()
        self.stop = threading.Event()
        self.seq = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._worker, args=(m,), daemon=True)
                        for m in methods]

    def _worker(self, method: str) -> None:
        while not self.stop.is_set():
            with self.lock:
                seq = self.seq
                self.seq += 1
            rec = self.runner.new_record(seq, True)
            self.records.append(rec)
            self.runner.run_request(rec, method, "chaos", self.active)
            rec.method_run = rec.method_run or method
            if rec.status == ERROR:
                self.stop.wait(0.2)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def in_flight(self) -> int:
        return sum(1 for r in list(self.records) if r.status == RUNNING)

    def finish(self) -> None:
        self.stop.set()
        self.active.abort_all()
        for t in self.threads:
            t.join(timeout=60)


def _stage(fault: str, what: str, t0: float) -> None:
    """A progress line, so that a scenario that stalls shows where."""
    print(f"chaos: {fault}: {what} at +{perf_counter() - t0:.1f} s", flush=True)


def run_scenario(cluster: Cluster, runner: Runner, refs, fault: str,
                 a: argparse.Namespace) -> Dict[str, object]:
    load = Load(runner, a.methods)
    load.start()
    time.sleep(a.fault_at)
    t_fault = perf_counter()
    in_flight = load.in_flight()
    inject(cluster, fault, a)
    t_fault_end = perf_counter()
    _stage(fault, "injected", t_fault)
    recovery = probe_recovery(cluster.router, fault, a.recover_bound_s)
    _stage(fault, "probed recovery", t_fault)
    t_recovered = t_fault_end + (recovery if recovery is not None else a.recover_bound_s)
    time.sleep(a.after_s)
    load.finish()
    _stage(fault, "load finished", t_fault)
    handles = prom.check_handles([cluster.target_metrics], a.handle_grace_s)
    return summarize(fault, load.records, refs, a, in_flight, t_fault, t_fault_end,
                     t_recovered, recovery, handles)


def summarize(fault, records, refs, a, in_flight, t_fault, t_fault_end, t_recovered,
              recovery, handles) -> Dict[str, object]:
    """The scenario's row: outcomes by status, AR agreement, handles, recovery, verdict."""
    outcomes: Counter = Counter()
    late_failures, unexpected, differ = [], [], []
    examples: Dict[str, str] = {}  # the first message of each failure status
    for rec in records:
        if rec.status == ABORTED:
            outcomes["aborted at the end"] += 1
            continue
        outcomes["OK" if rec.status == OK else rec.error_code or rec.status] += 1
        problem = ar_check.check_record(rec, refs[rec.prompt_index], a.max_new_tokens)
        if problem:
            differ.append(problem)
        if rec.status == ERROR:
            examples.setdefault(rec.error_code, rec.error_message)
            if rec.error_code not in EXPECTED_CODES:
                unexpected.append(f"{rec.error_code}: {rec.error_message}")
            if rec.t_start > t_recovered + 1.0:
                late_failures.append(f"{rec.error_code} {rec.t_start - t_fault_end:.1f} s after "
                                     f"the fault: {rec.error_message}")
    problems = []
    if differ:
        problems.append(f"{len(differ)} requests differ from AR: {differ[:3]}")
    if unexpected:
        problems.append(f"unexpected statuses: {unexpected[:3]}")
    if late_failures:
        problems.append(f"{len(late_failures)} failures after recovery: {late_failures[:3]}")
    if recovery is None:
        problems.append(f"not recovered within {a.recover_bound_s:g} s")
    if not handles["ok"]:
        problems.append(f"kv handles not 0: {handles['endpoints']}")
    handles_after = [e.get("kv_handles", e.get("error"))
                     for e in handles["endpoints"].values()]  # type: ignore[union-attr]
    return {"fault": fault, "in_flight_at_fault": in_flight, "requests": len(records),
            "outcomes": dict(outcomes), "equal_to_ar": sum(
                1 for r in records if r.status == OK and not ar_check.check_record(
                    r, refs[r.prompt_index], a.max_new_tokens)),
            "differ_from_ar": len(differ), "fault_s": round(t_fault_end - t_fault, 3),
            "recovery_s": None if recovery is None else round(recovery, 3),
            "handles_after": handles_after[0] if len(handles_after) == 1 else handles_after,
            "handles_waited_s": handles["waited_s"], "error_examples": examples,
            "passed": not problems,
            "problems": problems}


def table(rows: List[Dict[str, object]]) -> str:
    lines = ["| fault | in flight at fault | requests | outcomes | OK = AR | differ from AR "
             "| handles after | fault lasted (s) | time to recover (s) | result |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        rec = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.2f}"
        lines.append(f"| {r['fault']} | {r['in_flight_at_fault']} | {r['requests']} | "
                     f"{outcomes} | {r['equal_to_ar']} | {r['differ_from_ar']} | "
                     f"{r['handles_after']} | {r['fault_s']:.2f} | {rec} | "
                     f"{'pass' if r['passed'] else 'FAIL'} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specdec_loadtest.chaos", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="directory for chaos.json, chaos.md, logs")
    p.add_argument("--faults", default=",".join(FAULTS), help="comma-separated, of " + ", ".join(FAULTS))
    p.add_argument("--methods", default=METHODS, help="one closed-loop worker per method")
    p.add_argument("--build-dir", default=os.path.join(_REPO, "build"))
    p.add_argument("--pack", default=os.path.join(_REPO, "models", "specdec-pycode"))
    p.add_argument("--port-base", type=int, default=51050)
    p.add_argument("--prompts", default="humaneval")
    p.add_argument("--max-prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--fault-at", type=float, default=4.0, help="seconds of load before the fault")
    p.add_argument("--after-s", type=float, default=6.0, help="seconds of load after recovery")
    p.add_argument("--pause-s", type=float, default=5.0, help="SIGSTOP / policy downtime")
    p.add_argument("--flaps", type=int, default=3)
    p.add_argument("--recover-bound-s", type=float, default=30.0)
    p.add_argument("--handle-grace-s", type=float, default=15.0)
    p.add_argument("--request-timeout-s", type=float, default=60.0)
    p.add_argument("--watchdog-s", type=float, default=0.0,
                   help="after this many seconds, print every thread's stack and exit 1 (0: off)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    a.methods = [m.strip().upper() for m in a.methods.split(",") if m.strip()]
    faults = [f.strip() for f in a.faults.split(",") if f.strip()]
    bad = [f for f in faults if f not in FAULTS]
    if bad:
        print(f"chaos: unknown faults {bad}; choose from {', '.join(FAULTS)}", file=sys.stderr)
        return 2
    if SDK_DIR not in sys.path:
        sys.path.insert(0, SDK_DIR)
    from specdec import Client
    if a.watchdog_s > 0:
        faulthandler.dump_traceback_later(a.watchdog_s, exit=True)
    os.makedirs(a.out, exist_ok=True)
    cluster = Cluster(os.path.abspath(a.build_dir), os.path.abspath(a.pack),
                      os.path.abspath(os.path.join(a.out, "run")), a.port_base)
    cluster.start()
    rows: List[Dict[str, object]] = []
    try:
        client = Client(cluster.router, timeout=a.request_timeout_s)
        cfg = LoadConfig(max_new_tokens=a.max_new_tokens, ignore_eos=True, temperature=0.0,
                         timeout_s=a.request_timeout_s, keep_tokens=True)
        runner = Runner(client, prompts.load_prompts(a.prompts, limit=a.max_prompts), cfg)
        refs = ar_check.references(runner, a.request_timeout_s)
        for fault in faults:
            print(f"chaos: {fault} ...", flush=True)
            rows.append(run_scenario(cluster, runner, refs, fault, a))
            r = rows[-1]
            print(f"chaos: {fault}: {r['outcomes']}, recovery {r['recovery_s']} s, handles "
                  f"{r['handles_after']}: {'pass' if r['passed'] else r['problems']}", flush=True)
        client.close()
    finally:
        cluster.stop()
    md = table(rows)
    print(md)
    with open(os.path.join(a.out, "chaos.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.out, "chaos.json"), "w") as f:
        json.dump({"config": {k: v for k, v in vars(a).items()}, "scenarios": rows}, f, indent=2)
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
