"""Greedy tokens through the cluster alone and inside batches of 2 to 32 mixed requests.

Starts the four services on the embedded pack (deploy/local/cluster.sh, through the chaos tool's
Cluster), runs each of 8 HumanEval prompts alone with AR, then batches of 2, 8 and 32 concurrent
requests, every method mixed (request i: method i % 6, prompt i % 8), started 10 ms apart so that
prompts join passes already running. Every completion must equal its prompt's AR tokens, bit for
bit (docs/design.md section 2.6). Exit 0 pass, 1 failure, 77 skipped (no grpc Python, no
binaries). Environment: BUILD_DIR (default <repo>/build), SPECDEC_PACK.
"""

import os
import socket
import sys
import tempfile
import threading
import time

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(_REPO, "loadtest"))
sys.path.insert(0, os.path.join(_REPO, "clients", "python"))

METHODS = ("AR", "DFLASH", "DFLASH_ADAPTIVE", "DRAFT_CHAIN", "DYSPEC_TREE", "NGRAM")
TOKENS = 32


def free_base() -> int:
    """A port base whose service (+0..+4) and /metrics (+100..+103) ports are free."""
    for base in range(24650, 24950, 10):
        ports = [base + o for o in (0, 1, 2, 3, 4, 100, 101, 102, 103)]
        if all(socket.socket().connect_ex(("127.0.0.1", p)) != 0 for p in ports):
            return base
    raise RuntimeError("no free port base in 24650..24950")


def main() -> int:
    try:
        import grpc  # noqa: F401
        from specdec import Client, GenerateOptions
    except Exception as e:  # noqa: BLE001
        print(f"batch_invariance_cluster_test: SKIP: {e}", file=sys.stderr)
        return 77
    from specdec_loadtest import prom, prompts
    from specdec_loadtest.chaos import Cluster
    build = os.environ.get("BUILD_DIR", os.path.join(_REPO, "build"))
    pack = os.environ.get("SPECDEC_PACK", os.path.join(_REPO, "models", "specdec-pycode"))
    if not os.path.exists(os.path.join(build, "services", "router", "specdec-router")):
        print("batch_invariance_cluster_test: SKIP: no service binaries", file=sys.stderr)
        return 77
    humaneval = prompts.resolve("humaneval")
    if not os.path.exists(humaneval):
        print(f"batch_invariance_cluster_test: SKIP: no {humaneval} (../shared)", file=sys.stderr)
        return 77
    texts = prompts.load_prompts(humaneval, limit=8)
    run_dir = tempfile.mkdtemp(prefix="specdec-invariance.")
    cluster = Cluster(build, pack, run_dir, free_base())
    cluster.start()
    failures = []
    try:
        client = Client(cluster.router, timeout=120)

        def generate(method: str, prompt: int):
            opts = GenerateOptions(method=method, max_new_tokens=TOKENS, ignore_eos=True)
            return client.generate(texts[prompt], opts)

        alone = [generate("AR", p).tokens for p in range(len(texts))]
        for n in (2, 8, 32):
            got = [None] * n

            def run(i: int) -> None:
                try:
                    got[i] = generate(METHODS[i % len(METHODS)], i % len(texts))
                except Exception as e:  # noqa: BLE001 - a failed request is a failure
                    got[i] = e

            threads = []
            for i in range(n):
                threads.append(threading.Thread(target=run, args=(i,)))
                threads[-1].start()
                time.sleep(0.01)
            for t in threads:
                t.join()
            for i, r in enumerate(got):
                what = f"batch of {n}, request {i} ({METHODS[i % len(METHODS)]}, prompt {i % 8})"
                if isinstance(r, Exception):
                    failures.append(f"{what}: {r}")
                elif r.tokens != alone[i % len(texts)]:
                    first = next((k for k, (a, b) in enumerate(zip(r.tokens, alone[i % 8]))
                                  if a != b), min(len(r.tokens), TOKENS))
                    failures.append(f"{what}: differs from AR alone at token {first}")
            print(f"batch of {n}: {sum(1 for r in got if not isinstance(r, Exception))} "
                  f"completed, {len([f for f in failures if f'batch of {n},' in f])} differ")
        client.close()
        # The target ran passes of several sessions: its batch-size histogram's sum exceeds its
        # count.
        samples, _ = prom.parse(prom.fetch(cluster.target_metrics))
        total = sum(v for k, v in samples.items() if k.startswith("specdec_target_batch_size_sum"))
        count = sum(v for k, v in samples.items()
                    if k.startswith("specdec_target_batch_size_count"))
        print(f"target passes: {count:.0f}, mean sessions per pass {total / max(count, 1):.2f}")
        if not total > count:
            failures.append(f"no target pass held two sessions (sum {total}, count {count})")
    finally:
        cluster.stop()
    for f in failures:
        print(f"batch_invariance_cluster_test: FAIL: {f}", file=sys.stderr)
    if not failures:
        print("batch_invariance_cluster_test: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
