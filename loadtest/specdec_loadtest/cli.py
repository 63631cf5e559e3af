"""Command line of the specdec load tester: parses the options, runs every (load level, method)
cell against the router (over gRPC, or over its HTTP front with --http), prints the table and
writes results.json and the plots."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import sys
import time
from typing import Dict, List, Optional, Sequence

from . import ar_check, plots, prom, prompts, report
from .procwatch import RssWatcher, parse_pids

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SDK_DIR = os.path.join(_REPO, "clients", "python")
DEFAULT_METHODS = "AR,DFLASH,DFLASH_ADAPTIVE"

EPILOG = """\
load levels:
  --concurrency runs closed-loop cells (that many requests always in flight), --rate runs
  open-loop cells (Poisson arrivals at that many requests/s); both may be given. Every level is
  run for every method, methods interleaved per level (level 1: AR, DFLASH, ...; level 2: ...).
  Each cell: --warmup seconds of unmeasured load, then a measurement window of --duration
  seconds (closed loop: or until --requests measured requests finished).

metrics (details in loadtest/README.md):
  TTFT      first chunk - request start
  ITL       per token: gap to the previous chunk / tokens in the chunk (token-weighted)
  chunk gap gap between consecutive chunks (one sample per chunk)
  TPOT      per request: (last chunk - first chunk) / tokens after the first chunk
  E2E       end of the stream - request start (completed requests)
  tok/s     tokens streamed inside the window / window length (all requests of the cell)
  req/s     requests completed inside the window / window length
  tau       mean of the requests' Summary tau (committed tokens per verify step)

transport:
  --router sends every request over the gRPC Generate RPC (the Python SDK); --http URL sends it
  as a streamed POST URL/v1/completions to the router's OpenAI-compatible HTTP front (standard
  library only), with the same options, prompts and timestamps, tokens counted from each chunk's
  specdec.token_ids. With both, --router only answers GetInfo (method check, recorded info).
  --api-key KEY goes with either transport: 'authorization: Bearer KEY' metadata on every
  Generate call, or the Authorization header of every HTTP request.
  --tls-ca CA.pem connects to --router over TLS (the router's certificate checked against that
  CA); --tls-cert CERT.pem --tls-key KEY.pem add the client certificate of a router that
  requires one (mTLS). They go with --router, whichever transport carries the requests.

exit status: 0 ok; 1 a check failed (--check-handles, --max-rss-growth, --fail-on-error,
--check-ar) or the
run was interrupted; 2 bad usage, router not reachable, or a method it does not serve.

examples:
  %(prog)s --router 127.0.0.1:50050 --concurrency 1,2,4,8,16 --methods AR,DFLASH,DFLASH_ADAPTIVE \\
      --prompts humaneval --max-new-tokens 64 --ignore-eos --duration 20 --out /tmp/sweep
  %(prog)s --router 127.0.0.1:50050 --concurrency 8 --methods DFLASH_ADAPTIVE --duration 1800 \\
      --cancel-fraction 0.05 --ignore-eos --watch-pid $SPECDEC_RUN_DIR \\
      --check-handles 127.0.0.1:9091,127.0.0.1:9092 --out /tmp/soak
  %(prog)s --http http://127.0.0.1:8000 --concurrency 1,4,16 --methods AR,DFLASH_ADAPTIVE \\
      --prompts humaneval --max-new-tokens 64 --ignore-eos --out /tmp/sweep-http
"""


def _csv(kind, zero_allowed=False):
    """A parser of a comma-separated list of ``kind`` values, each > 0 (>= 0 where
    ``zero_allowed``)."""
    def parse(value: str):
        items = prom.split_list(value)
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        try:
            out = [kind(v) for v in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad list {value!r}") from None
        if zero_allowed and any(not v >= 0 for v in out):
            raise argparse.ArgumentTypeError(f"values must be >= 0: {value!r}")
        if not zero_allowed and any(not v > 0 for v in out):
            raise argparse.ArgumentTypeError(f"values must be > 0: {value!r}")
        return out
    return parse


def _methods(value: str) -> List[str]:
    out = [m.upper() for m in prom.split_list(value)]
    if not out:
        raise argparse.ArgumentTypeError("no methods")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specdec_loadtest",
        description="Load generator for the specdec router's streaming Generate RPC (or its "
                    "OpenAI-compatible HTTP front): "
                    "closed-loop concurrency sweeps and open-loop Poisson arrivals, several "
                    "decoding methods side by side, latency percentiles, JSON and PNG reports.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("target and load")
    g.add_argument("--router", metavar="HOST:PORT",
                   help="the router's gRPC address (required unless --http or --from-json); "
                        "with --http it only answers GetInfo (method check, recorded info)")
    g.add_argument("--http", metavar="URL",
                   help="send the requests to the router's OpenAI-compatible HTTP front at URL "
                        "(e.g. http://127.0.0.1:8000, or the OpenAI base URL .../v1), each a "
                        "streamed POST /v1/completions, instead of the gRPC Generate RPC")
    g.add_argument("--model", default="", metavar="NAME",
                   help="--http: the requests' model (default: the first of GET /v1/models)")
    g.add_argument("--api-key", default="", metavar="KEY",
                   help="API key of a router started with --api-keys, sent as "
                        "'Authorization: Bearer KEY': over gRPC as call metadata of every "
                        "Generate call (the SDK's Client(api_key=...)), with --http as a header. "
                        "Only this option sets it ($SPECDEC_API_KEY is not read); not written "
                        "to results.json")
    g.add_argument("--tls-ca", metavar="PEM",
                   help="connect to --router over TLS, checking its certificate against this "
                        "CA certificate (PEM file); default: plaintext")
    g.add_argument("--tls-cert", metavar="PEM",
                   help="with --tls-ca and --tls-key: the client certificate (PEM file) "
                        "presented to a router that requires one (mTLS)")
    g.add_argument("--tls-key", metavar="PEM",
                   help="the private key (PEM file) of --tls-cert; results.json records only "
                        "the paths of the TLS files")
    g.add_argument("--methods", type=_methods, default=_methods(DEFAULT_METHODS),
                   metavar="M,M,...",
                   help=f"decoding methods to compare (default {DEFAULT_METHODS}); any of AR, "
                        "DRAFT_CHAIN, DYSPEC_TREE, DFLASH, DFLASH_ADAPTIVE, NGRAM, DEFAULT")
    g.add_argument("--concurrency", type=_csv(int), metavar="N,N,...",
                   help="closed-loop levels: requests kept in flight (default 1 when no --rate)")
    g.add_argument("--rate", type=_csv(float), metavar="R,R,...",
                   help="open-loop levels: Poisson arrival rates in requests/s")
    g.add_argument("--duration", type=float, default=20.0, metavar="S",
                   help="measurement window per cell in seconds (default 20; 0 = closed loop "
                        "bounded by --requests only)")
    g.add_argument("--requests", type=int, default=0, metavar="N",
                   help="closed loop: at most N measured requests per cell (0 = no limit); the "
                        "window ends when they have finished, or after --duration")
    g.add_argument("--warmup", type=float, default=2.0, metavar="S",
                   help="unmeasured load before each cell's window (default 2)")
    g.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run every level's methods N times in rotation (AR, DFLASH, ..., AR, "
                        "DFLASH, ...) and report per method the median over the rounds; plots "
                        "draw the median cell (default 1)")
    g.add_argument("--versus", metavar="METHOD", type=lambda v: v.strip().upper(),
                   help="with --repeat: also report METHOD's median throughput over the best "
                        "median of the other methods at each level, and its ITL p50 minus AR's")
    g.add_argument("--cooldown", type=float, default=0.5, metavar="S",
                   help="idle pause after each cell, before its closing /metrics scrape "
                        "(default 0.5)")
    g.add_argument("--cancel-fraction", type=float, default=0.0, metavar="F",
                   help="share of requests the client cancels mid-stream, after a random number "
                        "of tokens in 1..max-new-tokens-1 (counted as 'cancelled', not errors)")
    g.add_argument("--max-inflight", type=int, default=512, metavar="N",
                   help="open loop: arrivals while N requests are in flight are dropped and "
                        "counted (default 512)")
    g.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="per-request deadline in seconds (default 300)")
    g.add_argument("--wait-ready", type=float, default=30.0, metavar="S",
                   help="wait up to S seconds for the router to answer GetInfo (--http: "
                        "GET /health with 200) (default 30)")

    g = p.add_argument_group("prompts and generation")
    g.add_argument("--prompts", default="humaneval", metavar="NAME|FILE",
                   help="dataset name (humaneval, gsm8k, mbpp, mt_bench: from "
                        "../shared/datasets, or $SPECDEC_SHARED/datasets) or a file: .jsonl[.gz] "
                        "or text (default humaneval)")
    g.add_argument("--prompt-format", choices=("lines", "paragraphs"), default="lines",
                   help="text files: one prompt per line (default), or prompts separated by "
                        "blank lines")
    g.add_argument("--max-prompts", type=int, default=0, metavar="N",
                   help="use the first N prompts (0 = all); requests cycle through them")
    g.add_argument("--shuffle", action="store_true",
                   help="shuffle the prompts with --seed before taking --max-prompts")
    g.add_argument("--max-new-tokens", type=int, default=64, metavar="N",
                   help="tokens to generate per request (default 64)")
    g.add_argument("--min-new-tokens", type=int, default=0, metavar="N",
                   help="if > 0, each request asks for a seeded uniform number of tokens in "
                        "N..--max-new-tokens (varied lengths: a closed loop's requests then do "
                        "not finish in lockstep); default 0, every request asks for "
                        "--max-new-tokens")
    g.add_argument("--ignore-eos", action="store_true",
                   help="generate past EOS, so every request yields --max-new-tokens tokens")
    g.add_argument("--temperature", type=_csv(float, zero_allowed=True), default=[0.0],
                   metavar="T[,T...]",
                   help="0 = greedy (default); several, comma-separated: request n takes the "
                        "(n mod count)-th, so that greedy and sampled requests mix")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0,
                   help="seeds the Poisson arrivals, the cancels, the prompt shuffle and the "
                        "requests' sampling seeds (default 0)")
    g.add_argument("--block-size", type=int, default=0,
                   help="DFLASH*: block size (0 = server default / policy)")
    g.add_argument("--draft-length", type=int, default=0,
                   help="DRAFT_CHAIN: K (0 = server default)")

    g = p.add_argument_group("output")
    g.add_argument("--out", metavar="DIR",
                   help="write DIR/results.json, the PNG plots and their gnuplot script")
    g.add_argument("--no-plots", action="store_true", help="do not run gnuplot")
    g.add_argument("--table", choices=("text", "markdown"), default="text",
                   help="format of the table printed to stdout")
    g.add_argument("--timeline", type=float, default=10.0, metavar="S",
                   help="store per-cell throughput per S-second bucket (0 = off; default 10)")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    g.add_argument("--from-json", metavar="FILE",
                   help="run nothing: print the table of a saved results.json and redraw its "
                        "plots into --out (default: the file's directory)")

    g = p.add_argument_group("service metrics, memory and checks")
    g.add_argument("--metrics-url", type=prom.split_list, default=[], metavar="URL,...",
                   help="/metrics endpoints (host:port or URLs) scraped before and after each "
                        "cell; the delta of the selected series is stored per cell")
    g.add_argument("--metrics-select", default=prom.DEFAULT_SELECT, metavar="REGEX",
                   help="metric names to store (full match; default: request (gRPC and HTTP), "
                        "spec-decode, operation and fallback counters, latency sums/counts, "
                        "kv/session gauges)")
    g.add_argument("--check-handles", type=prom.split_list, default=[], metavar="URL,...",
                   help="after the run, every listed /metrics endpoint must report "
                        "specdec_kv_handles == 0 within --check-grace seconds, else exit 1")
    g.add_argument("--check-grace", type=float, default=10.0, metavar="S",
                   help="grace period of --check-handles (default 10)")
    g.add_argument("--watch-pid", type=prom.split_list, default=[], metavar="PID,...",
                   help="sample VmRSS of these processes (PIDs, pid files, or directories of "
                        "*.pid files such as $SPECDEC_RUN_DIR) every --watch-interval seconds; "
                        "growth is measured from the end of the first warm-up")
    g.add_argument("--watch-interval", type=float, default=1.0, metavar="S")
    g.add_argument("--rss-window", type=float, default=60.0, metavar="S",
                   help="growth compares the median RSS of the first S seconds after the warm-up "
                        "with that of the last S seconds (0: single samples)")
    g.add_argument("--max-rss-growth", type=float, default=None, metavar="PCT",
                   help="fail (exit 1) when a watched process grew by more than PCT percent")
    g.add_argument("--fail-on-error", action="store_true",
                   help="fail (exit 1) when any request ended with an unexpected error")
    g.add_argument("--check-ar", action="store_true",
                   help="greedy only: run every prompt once with AR alone first, then fail "
                        "(exit 1) when any request's tokens differ from its prompt's AR tokens")
    return p


def _check_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if a.from_json:
        return
    if not a.router and not a.http:
        p.error("--router or --http is required")
    if a.check_ar and any(t != 0 for t in a.temperature):
        p.error("--check-ar compares greedy outputs: it needs --temperature 0")
    if a.model and not a.http:
        p.error("--model goes with --http")
    tls_given = [f for f, v in (("--tls-ca", a.tls_ca), ("--tls-cert", a.tls_cert),
                                ("--tls-key", a.tls_key)) if v is not None]
    https = bool(a.http) and a.http.lower().startswith("https://")
    if tls_given and not a.router and not https:
        p.error(f"{', '.join(tls_given)}: the TLS options go with --router (the gRPC connection) "
                "or an https:// --http URL")
    if (a.tls_cert is None) != (a.tls_key is None):
        p.error("--tls-cert and --tls-key go together (a client certificate and its key)")
    if a.tls_cert is not None and a.tls_ca is None:
        p.error("--tls-cert and --tls-key need --tls-ca (the CA that signed the router's "
                "certificate)")
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    if a.versus and a.versus not in a.methods:
        p.error(f"--versus {a.versus} is not one of --methods")
    if not a.concurrency and not a.rate:
        a.concurrency = [1]
    if a.duration < 0 or a.warmup < 0 or a.cooldown < 0:
        p.error("--duration, --warmup and --cooldown must be >= 0")
    if a.rate and a.duration <= 0:
        p.error("--rate needs --duration > 0")
    if a.concurrency and a.duration <= 0 and a.requests <= 0:
        p.error("--concurrency needs --duration > 0 or --requests > 0")
    if a.requests < 0 or a.max_prompts < 0 or a.max_new_tokens < 1:
        p.error("--requests and --max-prompts must be >= 0, --max-new-tokens >= 1")
    if a.min_new_tokens < 0 or a.min_new_tokens > a.max_new_tokens:
        p.error("--min-new-tokens must be in 0..--max-new-tokens")
    if not 0.0 <= a.cancel_fraction <= 1.0:
        p.error("--cancel-fraction must be in [0, 1]")
    if a.timeout <= 0 or a.max_inflight < 1 or a.watch_interval <= 0 or a.rss_window < 0:
        p.error("--timeout, --max-inflight and --watch-interval must be > 0")


def _tokens_desc(a: argparse.Namespace) -> str:
    """The new tokens a request asks for, as the reports print it: "64" or "32-96"."""
    if 0 < a.min_new_tokens < a.max_new_tokens:
        return f"{a.min_new_tokens}-{a.max_new_tokens}"
    return str(a.max_new_tokens)


def _log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


_TLS_OPTIONS = {"tls_ca": "--tls-ca", "tls_cert": "--tls-cert", "tls_key": "--tls-key"}


def tls_options(a: argparse.Namespace) -> Dict[str, Optional[str]]:
    """The SDK Client's TLS keyword arguments from --tls-ca/--tls-cert/--tls-key (paths or
    None)."""
    return {"tls_ca": a.tls_ca, "tls_cert": a.tls_cert, "tls_key": a.tls_key}


def _connect(address: str, timeout: float, wait_s: float, api_key: str = "",
             tls: Optional[Dict[str, Optional[str]]] = None):
    """A specdec.Client whose router answered GetInfo, and that Info. The client presents
    ``api_key`` on every Generate call ("" = none: the SDK's $SPECDEC_API_KEY fallback is off,
    so that only --api-key decides). ``tls``: the Client's tls_ca/tls_cert/tls_key (see
    tls_options; None or all None: plaintext)."""
    if SDK_DIR not in sys.path:
        sys.path.insert(0, SDK_DIR)
    from specdec import Client, SpecdecError
    try:
        client = Client(address, timeout=timeout, api_key=api_key, **(tls or {}))
    except ValueError as e:
        # The SDK names the offending argument first: say the TLS ones as this tool's options
        # (in the text before a quoted path only, so that a path stays as given).
        msg = str(e)
        if msg.startswith(tuple(_TLS_OPTIONS)):
            head, quote, tail = msg.partition("'")
            for arg, flag in _TLS_OPTIONS.items():
                head = re.sub(rf"\b{arg}\b", flag, head)
            raise RuntimeError(head + quote + tail) from None
        raise RuntimeError(f"--api-key: {msg}") from None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return client, client.info(timeout=5.0)
        except SpecdecError as e:
            if time.monotonic() >= deadline:
                client.close()
                raise RuntimeError(f"router {address} did not answer GetInfo: {e}") from None
            time.sleep(0.5)


def _connect_http(url: str, model: str, api_key: str, timeout: float, wait_s: float,
                  tls: Optional[Dict[str, Optional[str]]] = None):
    """An HttpClient whose router answered GET /health with 200, and the ids of its
    GET /v1/models. Without ``model`` the client sends the first of them. ``tls``: the CA and
    client certificate of an https:// URL (tls_options; ignored for http://)."""
    from .http_client import HttpClient, HttpError
    https = url.lower().startswith("https://")
    try:
        client = HttpClient(url, model=model, api_key=api_key, timeout=timeout,
                            **((tls or {}) if https else {}))
    except (ValueError, OSError) as e:
        raise RuntimeError(str(e)) from None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            status, body = client.get("/health", timeout=5.0)
            if status == 200:
                break
            why = f"HTTP {status} {body[:200].decode('utf-8', 'replace')}"
        except OSError as e:
            why = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{client.url}/health did not answer 200: {why}")
        time.sleep(0.5)
    try:
        models = client.models()
    except (OSError, HttpError) as e:
        raise RuntimeError(f"{client.url}/v1/models: {e}") from None
    if not model:
        if not models:
            raise RuntimeError(f"{client.url}/v1/models lists no model")
        client.model = models[0]
    elif model not in models:
        raise RuntimeError(f"the router does not serve model {model!r} "
                           f"(it serves {', '.join(models) or 'none'})")
    return client, models


def _info_dict(info) -> Dict[str, object]:
    from google.protobuf import json_format
    return json_format.MessageToDict(info.raw, preserving_proto_field_name=True)


def _loadavg() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def replot(a: argparse.Namespace) -> int:
    """--from-json: the table and the plots of a saved results.json."""
    try:
        with open(a.from_json, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"specdec_loadtest: {a.from_json}: {e}", file=sys.stderr)
        return 2
    problems = report.validate(doc)
    if problems:
        print(f"specdec_loadtest: {a.from_json} is not a load-test result: {problems[:5]}",
              file=sys.stderr)
        return 2
    print(report.format_table(doc["cells"], a.table))
    if not a.no_plots:
        out = a.out or os.path.dirname(os.path.abspath(a.from_json))
        n = doc.get("config", {}).get("max_new_tokens")
        made, err = plots.render(doc["cells"], out, memory=doc.get("memory"),
                                 title_suffix=f"{n} new tokens" if n else "")
        if err:
            print(f"specdec_loadtest: plots: {err}", file=sys.stderr)
            return 1
        _log(a.quiet, f"specdec_loadtest: wrote {len(made)} plots into {out}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    _check_args(parser, a)
    if a.from_json:
        return replot(a)
    try:
        prompt_list = prompts.load_prompts(a.prompts, fmt=a.prompt_format, limit=a.max_prompts,
                                           shuffle=a.shuffle, seed=a.seed)
        pids = parse_pids(a.watch_pid)
    except ValueError as e:
        print(f"specdec_loadtest: {e}", file=sys.stderr)
        return 2
    info = None
    try:
        if a.http:
            client, models = _connect_http(a.http, a.model, a.api_key, a.timeout, a.wait_ready,
                                           tls=tls_options(a))
            transport: Dict[str, object] = {"kind": "http", "url": client.url,
                                            "model": client.model, "models": models}
            target = f"POST {client.url}/v1/completions (model {client.model})"
            if a.router:
                # GetInfo only, which needs no key
                grpc_client, info = _connect(a.router, a.timeout, a.wait_ready,
                                             tls=tls_options(a))
                grpc_client.close()
        else:
            client, info = _connect(a.router, a.timeout, a.wait_ready, a.api_key,
                                    tls=tls_options(a))
            transport = {"kind": "grpc", "address": a.router, "tls": a.tls_ca is not None,
                         "client_cert": a.tls_cert is not None}
            target = a.router + (" (mTLS)" if a.tls_cert else " (TLS)" if a.tls_ca else "")
    except RuntimeError as e:
        print(f"specdec_loadtest: {e}", file=sys.stderr)
        return 2
    # Over HTTP alone the served methods are unknown: requests for one the router does not
    # serve fail, and are counted as errors.
    missing = ([m for m in a.methods if m != "DEFAULT" and m not in info.methods]
               if info is not None else [])
    if missing:
        print(f"specdec_loadtest: the router does not serve {', '.join(missing)} "
              f"(it serves {', '.join(info.methods)})", file=sys.stderr)
        client.close()
        return 2

    from .runner import LoadConfig, Runner
    cfg = LoadConfig(
        max_new_tokens=a.max_new_tokens, min_new_tokens=a.min_new_tokens,
        ignore_eos=a.ignore_eos, temperature=a.temperature[0],
        temperatures=tuple(a.temperature) if len(a.temperature) > 1 else (),
        top_k=a.top_k, top_p=a.top_p, seed=a.seed, block_size=a.block_size,
        draft_length=a.draft_length, timeout_s=a.timeout, cancel_fraction=a.cancel_fraction,
        warmup_s=a.warmup, duration_s=a.duration, max_requests=a.requests,
        max_inflight=a.max_inflight, keep_tokens=a.check_ar)
    watcher = RssWatcher(pids, a.watch_interval, a.rss_window).start() if pids else None
    runner = Runner(client, prompt_list, cfg,
                    on_window_open=watcher.mark_baseline if watcher else None)
    scraper = prom.Scraper(a.metrics_url, a.metrics_select) if a.metrics_url else None

    rounds = range(a.repeat)
    plan = [("closed", float(c), m) for c in (a.concurrency or []) for _ in rounds
            for m in a.methods]
    plan += [("open", float(r), m) for r in (a.rate or []) for _ in rounds for m in a.methods]
    started = _now_iso()
    load_start = _loadavg()
    cells: List[Dict[str, object]] = []
    failures: List[str] = []
    refs = None
    if a.check_ar:
        try:
            refs = ar_check.references(runner, a.timeout)
        except Exception as e:  # noqa: BLE001 - no reference, no check
            print(f"specdec_loadtest: --check-ar: the AR reference failed: {e}", file=sys.stderr)
            client.close()
            return 2
        _log(a.quiet, f"specdec_loadtest: AR references of {len(refs)} prompts")
    _log(a.quiet, f"specdec_loadtest: {len(plan)} cells against {target} "
                  f"({len(prompt_list)} prompts, {_tokens_desc(a)} new tokens)")
    try:
        for i, (mode, level, method) in enumerate(plan, 1):
            label = f"c={int(level)}" if mode == "closed" else f"r={level:g}/s"
            _log(a.quiet, f"[{i}/{len(plan)}] {mode} {label} {method} ...")
            load1 = _loadavg()
            before = scraper.snapshot() if scraper else None
            run = (runner.closed_loop(method, int(level)) if mode == "closed"
                   else runner.open_loop(method, level))
            if a.cooldown > 0:  # lets the cell's cancellations reach the services
                time.sleep(a.cooldown)
            metrics = scraper.diff(before, scraper.snapshot()) if scraper else None
            cell = report.cell_dict(run, max_new_tokens=a.max_new_tokens,
                                    ignore_eos=a.ignore_eos, timeline_bucket_s=a.timeline,
                                    metrics=metrics)
            cell["loadavg_1m_before"] = load1
            if refs is not None:
                cell["ar_check"] = ar_check.compare(run.records, refs, a.max_new_tokens)
                if cell["ar_check"]["differ"]:
                    failures.append(f"{mode} {label} {method}: {cell['ar_check']['differ']} of "
                                    f"{cell['ar_check']['checked']} requests differ from AR: "
                                    f"{cell['ar_check']['examples'][:2]}")
            cells.append(cell)
            _log(a.quiet, f"[{i}/{len(plan)}] {mode} {label} {method}: "
                          f"{cell['requests']} requests, {cell['throughput_tok_s']:.1f} tok/s, "
                          f"{cell['unexpected_errors']} errors"
                          + (f", {cell['ar_check']['equal']}/{cell['ar_check']['checked']} equal "
                             "to AR" if refs is not None else ""))
    except KeyboardInterrupt:
        failures.append("interrupted")
    client.close()

    memory = None
    if watcher:
        watcher.stop()
        memory = watcher.report()
        if a.max_rss_growth is not None:
            for pid, m in memory.items():
                g = m["growth_pct"]
                if g is not None and g > a.max_rss_growth:
                    failures.append(f"RSS of {m['name']} ({pid}) grew {g:.1f}% "
                                    f"(> {a.max_rss_growth}%)")
    handles = None
    if a.check_handles:
        handles = prom.check_handles(a.check_handles, a.check_grace)
        if not handles["ok"]:
            failures.append(f"specdec_kv_handles not 0 after {a.check_grace:g} s: "
                            f"{handles['endpoints']}")
    if a.fail_on_error:
        n = sum(int(c["unexpected_errors"]) for c in cells)  # type: ignore[arg-type]
        if n:
            failures.append(f"{n} requests ended with unexpected errors")

    print(f"transport: {transport['kind']} {target}")
    print(report.format_table(cells, a.table))
    summary = report.summarize_rounds(cells, a.versus) if a.repeat > 1 else None
    if summary:
        print(f"\nmedians over {a.repeat} rounds:\n" + report.format_summary(summary, a.versus))
    errs = report.format_errors(cells)
    if errs:
        print("\nerrors:\n" + errs)
    if memory:
        print("\nresident memory (MiB, growth from the end of the first warm-up; medians of "
              f"{a.rss_window:g} s windows):")
        for pid, m in memory.items():
            growth = m["growth_pct"]
            print(f"  {m['name']} ({pid}): {m['baseline_mib'] or 0:.1f} -> "
                  f"{m['last_mib'] or 0:.1f}, max {m['max_mib'] or 0:.1f}, growth "
                  + (f"{growth:.1f}%" if growth is not None else "-"))
    if handles:
        values = {u: e.get("kv_handles", e.get("error"))
                  for u, e in handles["endpoints"].items()}  # type: ignore[union-attr]
        print(f"\nkv handles check: {'ok' if handles['ok'] else 'FAILED'} {values}")

    if a.out:
        made: List[str] = []
        if not a.no_plots and cells:
            made, err = plots.render(report.median_cells(cells) if a.repeat > 1 else cells,
                                     a.out, memory=memory,
                                     title_suffix=f"{_tokens_desc(a)} new tokens")
            if err:
                print(f"specdec_loadtest: plots: {err}", file=sys.stderr)
        doc = report.results_document(
            config=dict(vars(a), prompts_file=prompts.resolve(a.prompts),
                        prompt_count=len(prompt_list), api_key="***" if a.api_key else ""),
            router={"address": a.router, "tls": a.tls_ca is not None,
                    "client_cert": a.tls_cert is not None,
                    "info": _info_dict(info) if info is not None else None},
            transport=transport,
            cells=cells,
            host={"cpus": os.cpu_count(), "platform": platform.platform(),
                  "python": platform.python_version(), "loadavg_1m_at_start": load_start},
            started_at=started, finished_at=_now_iso(), memory=memory, check_handles=handles,
            plots=made, failures=failures, summary=summary)
        report.write_json(os.path.join(a.out, "results.json"), doc)
        _log(a.quiet, f"specdec_loadtest: wrote {os.path.join(a.out, 'results.json')}"
                      + (f" and {len(made)} plots" if made else ""))
    for f in failures:
        print(f"specdec_loadtest: FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0
