"""Unit tests of the load tester (loadtest/specdec_loadtest) on synthetic data, no cluster.

Percentiles, the ITL / TPOT / throughput definitions, cell aggregation, seeded Poisson arrivals
and cancels, prompt loading, /metrics parsing and the kv-handle check (against a local HTTP
server), results.json assembly and validation, the table, gnuplot script generation (and a real
PNG when gnuplot is installed), RSS sampling, the closed/open-loop runner over a fake client
(when the Python SDK imports), the gRPC transport's --api-key and --tls-ca/--tls-cert/--tls-key
against fake gRPC routers (plaintext, TLS and mTLS with certificates of
tests/services/common/make_test_certs.sh, which needs openssl), and
the HTTP transport (--http: event-stream parsing, request bodies, error mapping, cancels, the
runner and the command line) against a fake HTTP front.

    /usr/bin/python3 -m unittest -v tests/loadtest/test_loadtest_unit.py
"""

import gzip
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from statistics import median
from types import SimpleNamespace

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(_REPO, "loadtest"))

from specdec_loadtest import (  # noqa: E402
    ar_check, http_client, plots, prom, prompts, report, schedule, stats)
from specdec_loadtest.cli import build_parser  # noqa: E402
from specdec_loadtest.procwatch import (  # noqa: E402
    RssWatcher, baseline_and_last, parse_pids, read_rss_kib)
from specdec_loadtest.stats import RequestRecord  # noqa: E402


def rec(seq, t_start, chunks, *, status=stats.OK, measured=True, t_end=None, **kw):
    """A record with chunks [(time, tokens), ...]."""
    r = RequestRecord(seq=seq, prompt_index=seq, measured=measured, t_start=t_start)
    r.chunk_times = [t for t, _ in chunks]
    r.chunk_tokens = [n for _, n in chunks]
    r.status = status
    r.t_end = t_end if t_end is not None else (chunks[-1][0] if chunks else t_start)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


class PercentileTest(unittest.TestCase):
    def test_linear_interpolation(self):
        data = [4.0, 1.0, 3.0, 2.0]  # unsorted on purpose
        self.assertEqual(stats.percentile(data, 0), 1.0)
        self.assertEqual(stats.percentile(data, 100), 4.0)
        self.assertAlmostEqual(stats.percentile(data, 50), 2.5)
        self.assertAlmostEqual(stats.percentile(data, 90), 3.7)  # numpy: 3.7
        self.assertAlmostEqual(stats.percentile(data, 99), 3.97)
        self.assertAlmostEqual(stats.percentile(list(range(101)), 37), 37.0)
        self.assertEqual(stats.percentile([5.0], 99), 5.0)

    def test_bad_input(self):
        with self.assertRaises(ValueError):
            stats.percentile([], 50)
        with self.assertRaises(ValueError):
            stats.percentile([1.0], 101)

    def test_summarize(self):
        s = stats.summarize([0.001, 0.002, 0.003], 1e3)
        self.assertEqual(s["count"], 3)
        self.assertAlmostEqual(s["mean"], 2.0)
        self.assertAlmostEqual(s["p50"], 2.0)
        self.assertAlmostEqual(s["min"], 1.0)
        self.assertAlmostEqual(s["max"], 3.0)
        empty = stats.summarize([])
        self.assertEqual(empty["count"], 0)
        self.assertIsNone(empty["p99"])


class DefinitionsTest(unittest.TestCase):
    def test_itl_is_gap_over_chunk_tokens_per_token(self):
        # chunk 0 (1 token) at 0.10; 4 tokens 40 ms later; 1 token 10 ms later.
        samples = stats.itl_samples([0.10, 0.14, 0.15], [1, 4, 1])
        self.assertEqual(len(samples), 5)
        for s in samples:
            self.assertAlmostEqual(s, 0.01)

    def test_empty_chunks_carry_their_gap(self):
        samples = stats.itl_samples([0.0, 0.01, 0.03], [1, 0, 2])
        self.assertEqual(len(samples), 2)
        self.assertAlmostEqual(samples[0], 0.015)
        self.assertEqual(stats.chunk_gaps([0.0, 0.01, 0.03], [1, 0, 2]), [0.03])

    def test_tpot_is_the_mean_itl(self):
        times, toks = [1.0, 1.2, 1.3, 1.6], [1, 3, 1, 2]
        self.assertAlmostEqual(stats.tpot(times, toks), 0.6 / 6)
        itl = stats.itl_samples(times, toks)
        self.assertAlmostEqual(sum(itl) / len(itl), stats.tpot(times, toks))
        self.assertIsNone(stats.tpot([1.0], [1]))

    def test_tokens_in_window(self):
        a = rec(0, 0.0, [(0.5, 1), (1.5, 2), (2.5, 4)])
        b = rec(1, 0.0, [(1.0, 1), (3.0, 8)])
        self.assertEqual(stats.tokens_in_window([a, b], 1.0, 2.5), 2 + 4 + 1)

    def test_aggregate_cell(self):
        w0, w1 = 10.0, 20.0
        records = [
            # warm-up request: unmeasured, but its tokens inside the window count
            rec(0, 9.0, [(9.5, 1), (10.5, 3)], measured=False, tau=2.0, completion_tokens=4),
            rec(1, 11.0, [(11.1, 1), (11.3, 3)], t_end=11.35, tau=3.0, verify_steps=1,
                committed_tokens=3, drafted_tokens=15, accepted_tokens=2, completion_tokens=4,
                block_size=16, method_run="DFLASH"),
            rec(2, 12.0, [(12.2, 1), (12.4, 1), (12.6, 2)], t_end=12.7, tau=1.5, verify_steps=2,
                committed_tokens=3, drafted_tokens=30, accepted_tokens=1, completion_tokens=4,
                block_size=14, method_run="DFLASH"),
            rec(3, 13.0, [(13.1, 1)], status=stats.CANCELLED, t_end=13.1),
            rec(4, 14.0, [], status=stats.ERROR, error_code="UNAVAILABLE",
                error_message="no target"),
            rec(5, 19.0, [(19.5, 1), (20.5, 3)], status=stats.ABORTED, t_end=20.6),
            # finishes after the window: latency counts, tokens after w1 do not
            rec(6, 19.9, [(19.95, 1), (20.2, 3)], t_end=20.3, tau=3.0, verify_steps=1,
                committed_tokens=3, completion_tokens=4, block_size=16),
        ]
        c = stats.aggregate_cell(records, w0, w1, max_new_tokens=4, ignore_eos=True,
                                 timeline_bucket_s=5.0)
        self.assertEqual(c["requests"], 6)
        self.assertEqual((c["completed"], c["cancelled"], c["unfinished"]), (3, 1, 1))
        self.assertEqual(c["unexpected_errors"], 1)
        self.assertEqual(c["errors"], {"UNAVAILABLE": {"count": 1, "sample": "no target"}})
        self.assertEqual(c["output_tokens"], 3 + 4 + 4 + 1 + 1 + 1)
        self.assertAlmostEqual(c["throughput_tok_s"], 14 / 10)
        # records 0 (warm-up), 1, 2 completed inside the window; 6 ended after it
        self.assertAlmostEqual(c["requests_per_s"], 3 / 10)
        self.assertEqual(c["ttft_ms"]["count"], 4)  # completed + cancelled
        self.assertAlmostEqual(c["ttft_ms"]["min"], 50.0)
        self.assertEqual(c["e2e_ms"]["count"], 3)
        self.assertAlmostEqual(c["e2e_ms"]["p50"], 400.0)
        self.assertEqual(c["itl_ms"]["count"], 3 + 3 + 3)
        self.assertAlmostEqual(c["tau_mean"], 2.5)
        self.assertAlmostEqual(c["tau_aggregate"], 9 / 4)
        self.assertEqual(c["block_sizes"], {"14": 1, "16": 2})
        self.assertEqual(list(c["block_sizes"]), ["14", "16"])
        self.assertEqual((c["drafted_tokens"], c["accepted_tokens"]), (45, 3))
        self.assertEqual(c["short_completions"], 0)
        self.assertEqual(c["stream_mismatches"], 0)
        self.assertEqual(c["methods_run"], ["DFLASH"])
        self.assertEqual(len(c["timeline"]), 2)
        self.assertAlmostEqual(sum(b["tok_s"] * 5 for b in c["timeline"]), 14)

    def test_short_completion_and_mismatch(self):
        r = rec(0, 0.0, [(0.1, 1), (0.2, 1)], completion_tokens=3)
        c = stats.aggregate_cell([r], 0.0, 1.0, max_new_tokens=4, ignore_eos=True)
        self.assertEqual(c["short_completions"], 1)
        self.assertEqual(c["stream_mismatches"], 1)
        c = stats.aggregate_cell([r], 0.0, 1.0, max_new_tokens=4, ignore_eos=False)
        self.assertEqual(c["short_completions"], 0)

    def test_short_completion_against_the_requests_own_length(self):
        # With varied lengths a request is short against what it asked for, not the cell's max.
        r = rec(0, 0.0, [(0.1, 1), (0.2, 2)], completion_tokens=3)
        r.asked_tokens = 3
        c = stats.aggregate_cell([r], 0.0, 1.0, max_new_tokens=8, ignore_eos=True)
        self.assertEqual(c["short_completions"], 0)
        r.asked_tokens = 5
        c = stats.aggregate_cell([r], 0.0, 1.0, max_new_tokens=8, ignore_eos=True)
        self.assertEqual(c["short_completions"], 1)


class ScheduleTest(unittest.TestCase):
    def test_poisson_is_deterministic_per_seed(self):
        a = schedule.poisson_arrivals(2.0, 30.0, seed=7)
        self.assertEqual(a, schedule.poisson_arrivals(2.0, 30.0, seed=7))
        self.assertNotEqual(a, schedule.poisson_arrivals(2.0, 30.0, seed=8))
        self.assertNotEqual(a, schedule.poisson_arrivals(3.0, 30.0, seed=7))
        self.assertEqual(a, sorted(a))
        self.assertTrue(all(0 <= t < 30.0 for t in a))
        # a prefix property: a longer run starts with the same arrivals
        self.assertEqual(schedule.poisson_arrivals(2.0, 60.0, seed=7)[:len(a)], a)

    def test_poisson_rate(self):
        n = len(schedule.poisson_arrivals(10.0, 1000.0, seed=1))
        self.assertLess(abs(n - 10000), 400)  # 4 sigma
        gaps = schedule.poisson_arrivals(5.0, 2000.0, seed=3)
        diffs = [b - a for a, b in zip(gaps, gaps[1:])]
        self.assertAlmostEqual(sum(diffs) / len(diffs), 0.2, delta=0.01)
        with self.assertRaises(ValueError):
            schedule.poisson_arrivals(0.0, 1.0, seed=1)

    def test_new_tokens(self):
        lengths = [schedule.new_tokens(5, i, 32, 96) for i in range(4000)]
        self.assertEqual(lengths, [schedule.new_tokens(5, i, 32, 96) for i in range(4000)])
        self.assertTrue(all(32 <= n <= 96 for n in lengths))
        self.assertEqual((min(lengths), max(lengths)), (32, 96))
        self.assertAlmostEqual(sum(lengths) / len(lengths), 64, delta=1.5)
        self.assertNotEqual(lengths[:50], [schedule.new_tokens(6, i, 32, 96) for i in range(50)])
        # No range: every request asks for the maximum.
        self.assertEqual({schedule.new_tokens(5, i, 0, 64) for i in range(100)}, {64})
        self.assertEqual({schedule.new_tokens(5, i, 64, 64) for i in range(100)}, {64})

    def test_cancel_points(self):
        pts = [schedule.cancel_point(5, i, 0.05, 64) for i in range(20000)]
        self.assertEqual(pts, [schedule.cancel_point(5, i, 0.05, 64) for i in range(20000)])
        hits = [p for p in pts if p is not None]
        self.assertAlmostEqual(len(hits) / len(pts), 0.05, delta=0.01)
        self.assertTrue(all(1 <= p <= 63 for p in hits))
        self.assertIsNone(schedule.cancel_point(5, 1, 0.0, 64))
        self.assertIsNone(schedule.cancel_point(5, 1, 1.0, 1))
        self.assertIsNotNone(schedule.cancel_point(5, 1, 1.0, 2))
        self.assertNotEqual(schedule.request_seed(1, 2), schedule.request_seed(1, 3))


class PromptsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, name, text, gz=False):
        path = os.path.join(self.dir.name, name)
        if gz:
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return path

    def test_jsonl_fields(self):
        lines = [{"task_id": "a", "prompt": "def f():\n"}, {"question": "2+2?", "answer": "4"},
                 {"text": "Write a function.", "code": "x"}, {"turns": ["Hi", "More"]}]
        path = self.write("mix.jsonl.gz", "\n".join(json.dumps(x) for x in lines) + "\n\n",
                          gz=True)
        self.assertEqual(prompts.load_prompts(path),
                         ["def f():\n", "2+2?", "Write a function.", "Hi"])
        bad = self.write("bad.jsonl", '{"other": 1}\n')
        with self.assertRaises(ValueError):
            prompts.load_prompts(bad)

    def test_text_formats(self):
        path = self.write("p.txt", "first line\nsecond\n\nthird\n")
        self.assertEqual(prompts.load_prompts(path), ["first line", "second", "third"])
        self.assertEqual(prompts.load_prompts(path, fmt="paragraphs"),
                         ["first line\nsecond", "third"])
        self.assertEqual(prompts.load_prompts(path, limit=2), ["first line", "second"])
        shuffled = prompts.load_prompts(path, shuffle=True, seed=3)
        self.assertEqual(sorted(shuffled), sorted(["first line", "second", "third"]))
        self.assertEqual(shuffled, prompts.load_prompts(path, shuffle=True, seed=3))
        with self.assertRaises(ValueError):
            prompts.load_prompts(os.path.join(self.dir.name, "missing.txt"))

    def test_shared_datasets(self):
        counts = {"humaneval": 164, "gsm8k": 1319, "mbpp": 974, "mt_bench": 80}
        for name, n in counts.items():
            path = prompts.resolve(name)
            if not os.path.isfile(path):
                self.skipTest(f"{path} is not present")
            ps = prompts.load_prompts(name)
            self.assertEqual(len(ps), n, name)
            self.assertTrue(all(isinstance(p, str) and p for p in ps))
        self.assertTrue(prompts.load_prompts("humaneval")[0].startswith("from typing import"))


METRICS_TEXT = """\
# HELP specdec_requests_total Requests by code
# TYPE specdec_requests_total counter
specdec_requests_total{code="OK"} 10
specdec_requests_total{code="CANCELLED"} 2
# TYPE specdec_kv_handles gauge
specdec_kv_handles{service="target"} %d
# TYPE specdec_target_compute_seconds histogram
specdec_target_compute_seconds_bucket{op="verify",le="0.1"} 4
specdec_target_compute_seconds_sum{op="verify"} 0.5
specdec_target_compute_seconds_count{op="verify"} 5
garbage line without value
"""


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    handles = 0

    def do_GET(self):  # noqa: N802 (http.server API)
        body = (METRICS_TEXT % type(self).handles).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class PromTest(unittest.TestCase):
    def test_parse_and_delta(self):
        samples, types = prom.parse(METRICS_TEXT % 3)
        self.assertEqual(samples['specdec_requests_total{code="OK"}'], 10.0)
        self.assertEqual(types["specdec_target_compute_seconds"], "histogram")
        self.assertEqual(prom.kv_handles(METRICS_TEXT % 3), 3.0)
        self.assertIsNone(prom.kv_handles("other_metric 1\n"))
        sel = prom.select(samples, prom.DEFAULT_SELECT)
        self.assertNotIn('specdec_target_compute_seconds_bucket{op="verify",le="0.1"}', sel)
        self.assertIn('specdec_target_compute_seconds_sum{op="verify"}', sel)
        after = dict(sel)
        after['specdec_requests_total{code="OK"}'] = 15.0
        after['specdec_requests_total{code="UNAVAILABLE"}'] = 1.0
        after['specdec_kv_handles{service="target"}'] = 0.0
        d = prom.delta(sel, after, types)
        self.assertEqual(d["counters"], {'specdec_requests_total{code="OK"}': 5.0,
                                         'specdec_requests_total{code="UNAVAILABLE"}': 1.0})
        self.assertEqual(d["gauges"]['specdec_kv_handles{service="target"}'],
                         {"before": 3.0, "after": 0.0})
        self.assertEqual(prom.normalize_url("127.0.0.1:9091"), "http://127.0.0.1:9091/metrics")
        self.assertEqual(prom.normalize_url("http://h:1/x"), "http://h:1/x")

    def test_default_select_keeps_the_http_counters(self):
        samples = {'specdec_http_requests_total{code="200",endpoint="/v1/completions"}': 3.0,
                   'specdec_http_request_duration_seconds_sum{endpoint="/v1/completions"}': 1.5,
                   'specdec_http_request_duration_seconds_count{endpoint="/v1/completions"}': 3.0,
                   'specdec_http_request_duration_seconds_bucket{endpoint="/v1/completions",'
                   'le="0.1"}': 1.0}
        self.assertEqual(sorted(prom.select(samples, prom.DEFAULT_SELECT)), sorted(
            k for k in samples if "_bucket" not in k))

    def test_check_handles_against_a_server(self):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MetricsHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        url = f"127.0.0.1:{server.server_address[1]}"
        _MetricsHandler.handles = 0
        r = prom.check_handles([url], grace_s=1.0)
        self.assertTrue(r["ok"], r)
        _MetricsHandler.handles = 2
        t0 = time.monotonic()
        r = prom.check_handles([url], grace_s=0.3, interval_s=0.1)
        self.assertFalse(r["ok"])
        self.assertGreaterEqual(time.monotonic() - t0, 0.3)
        self.assertEqual(list(r["endpoints"].values())[0]["kv_handles"], 2.0)
        # leaked handles released during the grace period: passes
        threading.Timer(0.3, lambda: setattr(_MetricsHandler, "handles", 0)).start()
        r = prom.check_handles([url], grace_s=5.0, interval_s=0.1)
        self.assertTrue(r["ok"])
        # an endpoint that does not answer fails the check
        r = prom.check_handles(["127.0.0.1:1"], grace_s=0.0)
        self.assertFalse(r["ok"])
        self.assertIn("error", r["endpoints"]["http://127.0.0.1:1/metrics"])
        scraper = prom.Scraper([url])
        before = scraper.snapshot()
        _MetricsHandler.handles = 1
        diff = prom.Scraper.diff(before, scraper.snapshot())
        self.assertEqual(diff[prom.normalize_url(url)]["gauges"]
                         ['specdec_kv_handles{service="target"}'], {"before": 0.0, "after": 1.0})


def fake_run(mode, method, level, seed):
    t = 100.0
    records = []
    for i in range(6):
        s = t + i * 0.5
        records.append(rec(i, s, [(s + 0.02, 1), (s + 0.05, 3), (s + 0.08, 4)],
                           t_end=s + 0.09, tau=1.0 if method == "AR" else 2.5 + seed * 0.1,
                           verify_steps=7, committed_tokens=7, completion_tokens=8,
                           block_size=0 if method == "AR" else 16))
    return SimpleNamespace(mode=mode, method=method, level=level, records=records, w0=t,
                           w1=t + 3.0, t_begin=t - 1.0, t_end=t + 3.5, client_cpu_s=0.05,
                           extra={"stuck_threads": 0})


def fake_cells():
    cells = []
    for mode, levels in (("closed", (1, 2, 4)), ("open", (0.5, 1.0))):
        for lv in levels:
            for i, m in enumerate(("AR", "DFLASH_ADAPTIVE")):
                cells.append(report.cell_dict(fake_run(mode, m, lv, i), max_new_tokens=8,
                                              ignore_eos=True, timeline_bucket_s=1.0))
    return cells


class ReportTest(unittest.TestCase):
    def test_document_is_valid_json_with_schema(self):
        cells = fake_cells()
        doc = report.results_document(
            config={"methods": ["AR"]}, router={"address": "x", "info": {}}, cells=cells,
            host={"cpus": 2}, started_at="a", finished_at="b", plots=["throughput_closed.png"])
        self.assertEqual(report.validate(doc), [])
        self.assertTrue(doc["ok"])
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sub", "results.json")
            report.write_json(path, doc)
            with open(path, encoding="utf-8") as f:
                back = json.load(f)
        self.assertEqual(report.validate(back), [])
        self.assertEqual(back["cells"][0]["concurrency"], 1)
        self.assertEqual(back["cells"][-1]["rate"], 1.0)
        self.assertEqual(back["cells"][1]["block_sizes"], {"16": 6})
        self.assertAlmostEqual(back["cells"][0]["client_cpu_util"], 0.05 / 4.5)

    def test_validate_finds_problems(self):
        cells = fake_cells()
        del cells[0]["itl_ms"]
        cells[1]["requests"] += 1
        cells[2]["ttft_ms"]["p50"] = 1e9
        cells[3]["errors"] = {"INTERNAL": {"count": 2, "sample": "x"}}
        doc = report.results_document(config={}, router={}, cells=cells, host={},
                                      started_at="", finished_at="", failures=["boom"])
        self.assertFalse(doc["ok"])
        problems = "\n".join(report.validate(doc))
        self.assertIn("cells[0] lacks 'itl_ms'", problems)
        self.assertIn("cells[1]: completed + cancelled", problems)
        self.assertIn("cells[2].ttft_ms percentiles are not ordered", problems)
        self.assertIn("cells[3]: errors by code sum to 2", problems)
        self.assertIn("schema", "\n".join(report.validate({"cells": []})))

    def test_table(self):
        cells = fake_cells()
        text = report.format_table(cells)
        lines = text.splitlines()
        self.assertEqual(len(lines), 1 + len(cells))
        self.assertIn("TTFT p50/p99 ms", lines[0])
        self.assertTrue(lines[1].startswith("c=1"))
        self.assertIn("DFLASH_ADAPTIVE", lines[2])
        self.assertIn("16:6", lines[2])
        self.assertTrue(lines[-1].startswith("r=1/s"))
        md = report.format_table(cells, "markdown").splitlines()
        self.assertTrue(md[0].startswith("| load | method"))
        self.assertTrue(md[1].startswith("| --- |"))
        self.assertEqual(report.format_errors(cells), "")


class RepeatSummaryTest(unittest.TestCase):
    @staticmethod
    def cell(method, level, tok_s, itl, tau=1.0):
        return {"mode": "closed", "method": method, "level": level, "throughput_tok_s": tok_s,
                "itl_ms": {"p50": itl}, "tau_mean": tau, "unexpected_errors": 0}

    def test_medians_ratios_and_median_cells(self):
        c = self.cell
        # Three rounds at level 1 in rotation, one round at level 2.
        cells = [c("AR", 1, 100, 2.0), c("DFLASH", 1, 80, 3.0), c("ADA", 1, 90, 2.2),
                 c("AR", 1, 130, 1.8), c("DFLASH", 1, 70, 3.1), c("ADA", 1, 125, 2.1),
                 c("AR", 1, 110, 1.9), c("DFLASH", 1, 90, 2.9), c("ADA", 1, 120, 2.0),
                 c("AR", 2, 200, 2.5), c("DFLASH", 2, 250, 2.4), c("ADA", 2, 240, 2.6)]
        summary = report.summarize_rounds(cells, versus="ADA")
        by = {(e["level"], e["method"]): e for e in summary}
        self.assertEqual([(e["level"], e["method"]) for e in summary],
                         [(1, "AR"), (1, "DFLASH"), (1, "ADA"), (2, "AR"), (2, "DFLASH"),
                          (2, "ADA")])
        self.assertEqual(by[(1, "AR")]["rounds"], 3)
        self.assertEqual(by[(1, "AR")]["throughput_tok_s"], 110)
        self.assertEqual(by[(1, "AR")]["throughput_rounds"], [100, 130, 110])
        self.assertEqual(by[(1, "ADA")]["throughput_tok_s"], 120)
        self.assertAlmostEqual(by[(1, "ADA")]["versus_best_other"], 120 / 110)
        self.assertAlmostEqual(by[(1, "ADA")]["vs_best"], 1.0)
        self.assertAlmostEqual(by[(1, "DFLASH")]["vs_best"], 80 / 120)
        self.assertAlmostEqual(by[(1, "ADA")]["itl_p50_vs_ar"], 2.1 - 1.9)
        self.assertNotIn("versus_best_other", by[(1, "AR")])
        self.assertAlmostEqual(by[(2, "ADA")]["versus_best_other"], 240 / 250)
        self.assertAlmostEqual(by[(2, "ADA")]["itl_p50_vs_ar"], 2.6 - 2.5)
        # Even counts take the mean of the middle two for the median, the lower one for plots.
        two = report.summarize_rounds([c("AR", 1, 100, 2.0), c("AR", 1, 120, 3.0)])
        self.assertEqual(two[0]["throughput_tok_s"], 110)
        self.assertEqual(two[0]["itl_p50_ms"], 2.5)
        picked = report.median_cells(cells)
        self.assertEqual([(p["level"], p["method"], p["throughput_tok_s"]) for p in picked],
                         [(1, "AR", 110), (1, "DFLASH", 80), (1, "ADA", 120), (2, "AR", 200),
                          (2, "DFLASH", 250), (2, "ADA", 240)])
        self.assertEqual(report.median_cells([c("AR", 1, 120, 3.0), c("AR", 1, 100, 2.0)])[0]
                         ["throughput_tok_s"], 100)
        text = report.format_summary(summary, "ADA").splitlines()
        self.assertEqual(len(text), 1 + len(summary))
        self.assertIn("ADA / best other", text[0])
        self.assertIn("100 130 110", text[1])
        self.assertIn("1.09", text[3])

    def test_repeat_and_versus_flags(self):
        a = build_parser().parse_args(["--router", "h:1", "--concurrency", "1,4", "--methods",
                                       "ar,dflash", "--repeat", "2", "--versus", "dflash"])
        self.assertEqual((a.repeat, a.versus), (2, "DFLASH"))
        with open(os.devnull, "w") as devnull:
            old = sys.stderr
            sys.stderr = devnull
            try:
                from specdec_loadtest import cli
                for bad in (["--repeat", "0"], ["--versus", "DYSPEC_TREE"]):
                    p = build_parser()
                    with self.assertRaises(SystemExit):
                        cli._check_args(p, p.parse_args(["--router", "h:1", "--methods",
                                                         "ar,dflash"] + bad))
            finally:
                sys.stderr = old


class PlotsTest(unittest.TestCase):
    def test_data_and_script(self):
        cells = fake_cells()
        dat = plots.data_text(cells, "closed")
        blocks = dat.strip().split("\n\n\n")
        self.assertEqual(len(blocks), 2)
        self.assertTrue(blocks[0].startswith("# AR:"))
        rows = blocks[1].splitlines()[1:]
        self.assertEqual([float(r.split()[0]) for r in rows], [1.0, 2.0, 4.0])
        self.assertEqual(len(rows[0].split()), len(plots.COLUMNS))
        script, pngs = plots.script_text(cells, terminal="pngcairo", rss=True)
        self.assertEqual(pngs, ["throughput_closed.png", "itl_p50_closed.png", "ttft_closed.png",
                                "e2e_closed.png", "throughput_open.png", "itl_p50_open.png",
                                "ttft_open.png", "e2e_open.png", "rss.png"])
        for png in pngs:
            self.assertIn(f"set output '{png}'", script)
        self.assertIn("set terminal pngcairo noenhanced", script)
        self.assertIn("set logscale x 2", script)
        self.assertIn("'plot_closed.dat' index 1 using 1:2", script)  # DFLASH_ADAPTIVE tok/s
        self.assertIn("title 'DFLASH_ADAPTIVE p99'", script)
        closed_only = [c for c in cells if c["mode"] == "closed"]
        _, pngs = plots.script_text(closed_only)
        self.assertNotIn("throughput_open.png", pngs)

    def test_render_png(self):
        import shutil
        if not shutil.which("gnuplot"):
            self.skipTest("gnuplot is not installed")
        memory = {"1": {"name": "svc", "samples": [[0, 10.0], [1, 11.0], [2, 11.5]]}}
        with tempfile.TemporaryDirectory() as d:
            made, err = plots.render(fake_cells(), d, memory=memory)
            self.assertEqual(err, "")
            self.assertEqual(len(made), 9)
            for png in made:
                self.assertTrue(plots.is_png(os.path.join(d, png)), png)
            self.assertTrue(os.path.isfile(os.path.join(d, "plots.gp")))
            self.assertFalse(plots.is_png(os.path.join(d, "plots.gp")))


class ProcWatchTest(unittest.TestCase):
    def test_rss_of_self(self):
        me = os.getpid()
        self.assertGreater(read_rss_kib(me), 0)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "a.pid"), "w") as f:
                f.write(f"{me}\n")
            self.assertEqual(parse_pids([str(me), os.path.join(d, "a.pid"), d]), [me, me, me])
            with self.assertRaises(ValueError):
                parse_pids([os.path.join(d, "missing.pid")])
        w = RssWatcher([me], interval=0.05).start()
        time.sleep(0.1)
        w.mark_baseline()
        blob = bytearray(32 * 1024 * 1024)  # grows RSS by ~32 MiB once touched
        for i in range(0, len(blob), 4096):
            blob[i] = 1
        time.sleep(0.15)
        w.stop()
        m = w.report()[str(me)]
        self.assertTrue(m["alive"])
        self.assertGreater(m["growth_pct"], 0.0)
        self.assertGreaterEqual(m["max_mib"], m["last_mib"])
        self.assertGreaterEqual(len(m["samples"]), 3)
        del blob


class RssWindowTest(unittest.TestCase):
    def test_windowed_medians_ignore_a_dip_at_the_baseline(self):
        # Flat at ~100 MiB with a one-sample dip right at the baseline mark and a spike at the end.
        s = [(float(t), 100) for t in range(0, 30)]
        s[10] = (10.0, 80)
        s[29] = (29.0, 130)
        base, last = baseline_and_last(s, 10.0, 0)
        self.assertEqual((base, last), (80.0, 130.0))  # single samples: +62%
        base, last = baseline_and_last(s, 10.0, 5.0)
        self.assertEqual((base, last), (100.0, 100.0))  # windowed medians: flat

    def test_windowed_medians_follow_real_growth(self):
        s = [(float(t), 100 + 2 * t) for t in range(0, 60)]
        base, last = baseline_and_last(s, 20.0, 10.0)
        self.assertEqual(base, median([100 + 2 * t for t in range(20, 30)]))
        self.assertEqual(last, median([100 + 2 * t for t in range(50, 60)]))
        self.assertEqual(baseline_and_last([], 0.0, 10.0), (None, None))


class CliTest(unittest.TestCase):
    def test_parse(self):
        a = build_parser().parse_args(["--router", "h:1", "--concurrency", "1,2,4",
                                       "--rate", "0.5,2", "--methods", "ar,dflash",
                                       "--check-handles", "h:2,h:3"])
        self.assertEqual(a.concurrency, [1, 2, 4])
        self.assertEqual(a.rate, [0.5, 2.0])
        self.assertEqual(a.methods, ["AR", "DFLASH"])
        self.assertEqual(a.check_handles, ["h:2", "h:3"])
        with open(os.devnull, "w") as devnull:
            old = sys.stderr
            sys.stderr = devnull
            try:
                with self.assertRaises(SystemExit):
                    build_parser().parse_args(["--router", "h:1", "--concurrency", "0"])
            finally:
                sys.stderr = old

    def test_temperatures_mix_request_by_request(self):
        from specdec_loadtest.runner import LoadConfig, Runner
        a = build_parser().parse_args(["--router", "h:1", "--concurrency", "1"])
        self.assertEqual(a.temperature, [0.0])
        a = build_parser().parse_args(["--router", "h:1", "--concurrency", "1",
                                       "--temperature", "0,1"])
        self.assertEqual(a.temperature, [0.0, 1.0])
        client = SimpleNamespace(options_cls=http_client.HttpOptions, error_cls=RuntimeError)
        mixed = Runner(client, ["p"], LoadConfig(temperatures=(0.0, 1.0)))
        self.assertEqual([mixed.options("AR", n, "r").temperature for n in range(4)],
                         [0.0, 1.0, 0.0, 1.0])
        single = Runner(client, ["p"], LoadConfig(temperature=0.7))
        self.assertEqual({single.options("AR", n, "r").temperature for n in range(3)}, {0.7})
        for bad in (["--temperature", "0,-1"], ["--temperature", "x"],
                    ["--temperature", "0,1", "--check-ar"]):
            with open(os.devnull, "w") as devnull:
                old = sys.stderr
                sys.stderr = devnull
                try:
                    with self.assertRaises(SystemExit, msg=str(bad)):
                        p = build_parser()
                        from specdec_loadtest.cli import _check_args
                        _check_args(p, p.parse_args(["--router", "h:1", "--concurrency", "1"]
                                                    + bad))
                finally:
                    sys.stderr = old

    def test_from_json_prints_and_replots(self):
        import contextlib
        import io
        import shutil
        from specdec_loadtest.cli import main
        doc = report.results_document(config={"max_new_tokens": 8}, router={}, cells=fake_cells(),
                                      host={}, started_at="", finished_at="")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.json")
            report.write_json(path, doc)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = main(["--from-json", path, "--out", os.path.join(d, "plots"), "--quiet"]
                          + ([] if shutil.which("gnuplot") else ["--no-plots"]))
            self.assertEqual(rc, 0)
            self.assertIn("DFLASH_ADAPTIVE", out.getvalue())
            if shutil.which("gnuplot"):
                self.assertTrue(plots.is_png(os.path.join(d, "plots", "throughput_closed.png")))
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"cells": []}, f)
            with contextlib.redirect_stderr(io.StringIO()):
                self.assertEqual(main(["--from-json", path, "--no-plots"]), 2)


def _sdk_available():
    sys.path.insert(0, os.path.join(_REPO, "clients", "python"))
    try:
        import specdec  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 - no grpc / protobuf / grpc_tools
        return False


class ArCheckTest(unittest.TestCase):
    REF = [5, 6, 7, 8, 9, 10]

    def record(self, tokens, status=stats.OK, asked=6, seq=0):
        r = RequestRecord(seq=seq, prompt_index=0, measured=True, t_start=0.0,
                          asked_tokens=asked)
        r.token_ids, r.status = list(tokens), status
        return r

    def test_completed_requests_must_equal_the_reference_prefix_they_asked_for(self):
        self.assertIsNone(ar_check.check_record(self.record(self.REF), self.REF, 6))
        self.assertIsNone(ar_check.check_record(self.record([5, 6, 7], asked=3), self.REF, 6))
        problem = ar_check.check_record(self.record([5, 6, 1, 8, 9, 10]), self.REF, 6)
        self.assertIn("first difference at token 2", problem)
        # too short or too long for what it asked
        self.assertIsNotNone(ar_check.check_record(self.record([5, 6, 7], asked=6), self.REF, 6))
        self.assertIsNotNone(ar_check.check_record(self.record(self.REF, asked=4), self.REF, 6))

    def test_a_reference_that_stopped_early_bounds_every_completion(self):
        ref = [5, 6, 1]  # AR met a stop token after 3 tokens
        self.assertIsNone(ar_check.check_record(self.record(ref, asked=6), ref, 6))
        self.assertIsNotNone(ar_check.check_record(self.record([5, 6, 1, 2], asked=6), ref, 6))

    def test_failed_requests_are_checked_on_what_they_streamed(self):
        err = stats.ERROR
        self.assertIsNone(ar_check.check_record(self.record([5, 6], status=err), self.REF, 6))
        self.assertIsNotNone(ar_check.check_record(self.record([5, 9], status=err), self.REF, 6))
        cell = [self.record(self.REF, seq=0), self.record([5, 0, 7, 8, 9, 10], seq=1),
                self.record([], status=err, seq=2), self.record([5], status=stats.CANCELLED,
                                                                  seq=3)]
        got = ar_check.compare(cell, [self.REF], 6)
        self.assertEqual((got["checked"], got["equal"], got["differ"]), (3, 2, 1))
        self.assertEqual(len(got["examples"]), 1)


class FakeStream:
    """Yields `tokens` one-token chunks, one every `gap` seconds; honours cancel()."""

    def __init__(self, tokens, gap, summary):
        self.tokens, self.gap, self._summary = tokens, gap, summary
        self.summary = None
        self.cancelled = threading.Event()

    def __iter__(self):
        from specdec import SpecdecError
        import grpc
        for i in range(self.tokens):
            if self.cancelled.wait(self.gap):
                raise SpecdecError(grpc.StatusCode.CANCELLED, "Locally cancelled")
            yield SimpleNamespace(token_ids=(i,), step=None)
        self.summary = self._summary

    def cancel(self):
        self.cancelled.set()


class FakeClient:
    def __init__(self, tokens=8, gap=0.005, fail_every=0):
        self.tokens, self.gap, self.fail_every = tokens, gap, fail_every
        self.calls = 0
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0

    def generate_stream(self, prompt, opts, timeout=None):
        from specdec import SpecdecError
        import grpc
        with self.lock:
            self.calls += 1
            n = self.calls
        if self.fail_every and n % self.fail_every == 0:
            raise SpecdecError(grpc.StatusCode.RESOURCE_EXHAUSTED, "caches full")
        summary = SimpleNamespace(tau=2.0, verify_steps=4, drafted_tokens=8, accepted_tokens=3,
                                  committed_tokens=7, completion_tokens=opts.max_new_tokens,
                                  block_size=16, finish_reason="LENGTH", drafter_fallback=False,
                                  policy_fallback=False, method=opts.method)
        client = self

        class Counted(FakeStream):
            def __iter__(self):
                with client.lock:
                    client.in_flight += 1
                    client.max_in_flight = max(client.max_in_flight, client.in_flight)
                try:
                    yield from super().__iter__()
                finally:
                    with client.lock:
                        client.in_flight -= 1

        return Counted(opts.max_new_tokens, self.gap, summary)


@unittest.skipUnless(_sdk_available(), "the specdec Python SDK (grpc) does not import")
class RunnerTest(unittest.TestCase):
    def test_check_ar_compares_each_kept_completion_with_its_prompts_ar_tokens(self):
        from specdec_loadtest.runner import LoadConfig, Runner
        cfg = LoadConfig(max_new_tokens=6, warmup_s=0, duration_s=0, max_requests=6,
                         keep_tokens=True)
        runner = Runner(FakeClient(gap=0.001), ["p1", "p2"], cfg)
        refs = ar_check.references(runner)
        self.assertEqual(refs, [[0, 1, 2, 3, 4, 5]] * 2)
        measured = [r for r in runner.closed_loop("DFLASH", 2).records if r.measured]
        self.assertEqual(len(measured), 6)
        self.assertEqual(ar_check.compare(measured, refs, 6)["differ"], 0)
        refs[1][3] = 99  # as if prompt 1's requests had strayed from AR
        got = ar_check.compare(measured, refs, 6)
        self.assertEqual(got["differ"], 3)
        self.assertIn("first difference at token 3", got["examples"][0])

    def test_closed_loop_keeps_concurrency_and_counts(self):
        from specdec_loadtest.runner import LoadConfig, Runner
        client = FakeClient(gap=0.002)
        cfg = LoadConfig(max_new_tokens=8, warmup_s=0.1, duration_s=0.4, cancel_fraction=0.2,
                         seed=1)
        opened = []
        run = Runner(client, ["p1", "p2"], cfg, on_window_open=lambda: opened.append(1)) \
            .closed_loop("DFLASH", 3)
        self.assertEqual(opened, [1])
        self.assertEqual(client.max_in_flight, 3)
        self.assertAlmostEqual(run.w1 - run.w0, 0.4, delta=1e-6)
        cell = report.cell_dict(run, max_new_tokens=8, ignore_eos=True)
        self.assertGreater(cell["requests"], 10)
        self.assertEqual(cell["unfinished"], 0)
        self.assertEqual(cell["unexpected_errors"], 0)
        self.assertGreater(cell["cancelled"], 0)
        self.assertEqual(cell["completed"] + cell["cancelled"], cell["requests"])
        self.assertEqual(cell["completion_tokens"]["min"], 8)
        self.assertEqual(cell["stream_mismatches"], 0)
        self.assertEqual(cell["tau_mean"], 2.0)
        # every measured request was issued inside the window
        for r in run.records:
            if r.measured:
                self.assertTrue(run.w0 <= r.t_start < run.w1 + 0.01)
        # the cancelled ones stopped where planned
        for r in run.records:
            if r.status == stats.CANCELLED:
                self.assertEqual(r.streamed_tokens, r.cancel_after)
        self.assertEqual(report.validate(report.results_document(
            config={}, router={}, cells=[cell], host={}, started_at="", finished_at="")), [])

    def test_closed_loop_request_bound_and_errors(self):
        from specdec_loadtest.runner import LoadConfig, Runner
        client = FakeClient(gap=0.001, fail_every=4)
        cfg = LoadConfig(max_new_tokens=4, warmup_s=0.0, duration_s=0.0, max_requests=12)
        run = Runner(client, ["p"], cfg).closed_loop("AR", 2)
        cell = report.cell_dict(run, max_new_tokens=4, ignore_eos=True)
        self.assertEqual(cell["requests"], 12)
        self.assertEqual(cell["unexpected_errors"], 3)
        self.assertEqual(cell["errors"]["RESOURCE_EXHAUSTED"]["sample"], "caches full")
        self.assertEqual(cell["completed"], 9)

    def test_open_loop_counts_and_cancels_unfinished(self):
        from specdec_loadtest.runner import LoadConfig, Runner
        client = FakeClient(tokens=4, gap=0.05)  # 0.2 s per request
        cfg = LoadConfig(max_new_tokens=4, warmup_s=0.2, duration_s=0.8, seed=3)
        t0 = time.monotonic()
        run = Runner(client, ["p"], cfg).open_loop("AR", 20.0)
        self.assertLess(time.monotonic() - t0, 2.5)  # in-flight requests were cancelled
        cell = report.cell_dict(run, max_new_tokens=4, ignore_eos=True)
        expected = sum(1 for a in schedule.poisson_arrivals(20.0, 1.0, 3) if a >= 0.2)
        self.assertEqual(cell["requests"], expected)
        self.assertEqual(cell["measured_arrivals"], expected)
        self.assertGreater(cell["unfinished"], 0)
        self.assertEqual(cell["unexpected_errors"], 0)
        self.assertEqual(cell["completed"] + cell["unfinished"], cell["requests"])
        self.assertEqual(client.in_flight, 0)

    def test_open_loop_drops_beyond_max_inflight(self):
        from specdec_loadtest.runner import LoadConfig, Runner
        client = FakeClient(tokens=4, gap=0.2)  # 0.8 s per request: they pile up
        cfg = LoadConfig(max_new_tokens=4, warmup_s=0.0, duration_s=0.6, seed=5, max_inflight=2)
        run = Runner(client, ["p"], cfg).open_loop("AR", 30.0)
        cell = report.cell_dict(run, max_new_tokens=4, ignore_eos=True)
        self.assertGreater(cell["dropped"], 0)
        self.assertEqual(client.max_in_flight, 2)
        self.assertEqual(cell["requests"] + cell["dropped"], cell["measured_arrivals"])


class _FakeRouterGrpc:
    """A gRPC router for the load tester's gRPC transport: GetInfo serves AR and DFLASH;
    Generate streams max_new_tokens one-token chunks and a summary, or, when `refuse` is (code,
    message, trailing metadata), refuses before any answer. Records the `authorization` metadata
    of every call (None when absent). With `server_credentials` it serves TLS; `peers` records
    per call (transport security type, client certificate common name), e.g. (b"ssl", b"client"),
    or (b"insecure", None) over plaintext."""

    def __init__(self, refuse=None, server_credentials=None):
        import grpc
        from concurrent import futures
        from specdec.v1 import common_pb2, router_pb2, router_pb2_grpc

        self.lock = threading.Lock()
        self.generate_auth = []
        self.info_auth = []
        self.peers = []
        outer = self

        def authorization(context):  # called with outer.lock held
            auth = context.auth_context()
            outer.peers.append((auth.get("transport_security_type", [None])[0],
                                auth.get("x509_common_name", [None])[0]))
            values = [v for k, v in context.invocation_metadata() if k == "authorization"]
            return values[0] if len(values) == 1 else (values or None)

        class Servicer(router_pb2_grpc.RouterServicer):
            def GetInfo(self, request, context):
                with outer.lock:
                    outer.info_auth.append(authorization(context))
                return router_pb2.RouterInfo(methods=[common_pb2.AR, common_pb2.DFLASH],
                                             default_max_new_tokens=8)

            def Generate(self, request, context):
                with outer.lock:
                    outer.generate_auth.append(authorization(context))
                if refuse is not None:
                    code, message, trailing = refuse
                    context.set_trailing_metadata(trailing)
                    context.abort(code, message)
                for i in range(request.max_new_tokens):
                    chunk = router_pb2.GenerateResponse()
                    chunk.chunk.token_ids.append(i)
                    chunk.chunk.index = i
                    yield chunk
                done = router_pb2.GenerateResponse()
                done.summary.usage.completion_tokens = request.max_new_tokens
                done.summary.stats.method = request.method
                done.summary.stats.tau = 1.0
                done.summary.finish_reason = router_pb2.LENGTH
                yield done

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        router_pb2_grpc.add_RouterServicer_to_server(Servicer(), self.server)
        if server_credentials is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = self.server.add_secure_port("127.0.0.1:0", server_credentials)
        self.address = f"127.0.0.1:{self.port}"
        self.server.start()

    def stop(self):
        self.server.stop(None)


def _run_cli_grpc(srv, extra, env_key="from-the-environment", stdout=None):
    """cli.main against `srv` (2 methods x 2 requests, one at a time: exactly 4 Generate
    calls) with $SPECDEC_API_KEY = env_key: (exit status, stderr, results.json). `stdout`: a
    list that gets the printed lines."""
    import contextlib
    import io
    from unittest import mock
    from specdec_loadtest import cli
    with tempfile.TemporaryDirectory() as d:
        pfile = os.path.join(d, "p.txt")
        with open(pfile, "w", encoding="utf-8") as f:
            f.write("first prompt\nsecond prompt\n")
        out, err = io.StringIO(), io.StringIO()
        with mock.patch.dict(os.environ, {"SPECDEC_API_KEY": env_key}), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["--router", srv.address, "--methods", "AR,DFLASH",
                           "--concurrency", "1", "--requests", "2", "--duration", "0",
                           "--warmup", "0", "--cooldown", "0", "--max-new-tokens", "3",
                           "--ignore-eos", "--prompts", pfile, "--no-plots", "--quiet",
                           "--wait-ready", "0", "--out", d] + extra)
        doc = None
        if os.path.exists(os.path.join(d, "results.json")):
            with open(os.path.join(d, "results.json"), encoding="utf-8") as f:
                doc = json.load(f)
    if stdout is not None:
        stdout.extend(out.getvalue().splitlines())
    return rc, err.getvalue(), doc


@unittest.skipUnless(_sdk_available(), "the specdec Python SDK (grpc) does not import")
class GrpcApiKeyTest(unittest.TestCase):
    """--api-key over the gRPC transport: it reaches the SDK's client and every Generate call."""

    def router(self, **kw):
        srv = _FakeRouterGrpc(**kw)
        self.addCleanup(srv.stop)
        return srv

    def run_cli(self, srv, extra, env_key="from-the-environment"):
        return _run_cli_grpc(srv, extra, env_key)

    def test_api_key_reaches_every_generate_call(self):
        srv = self.router()
        rc, err, doc = self.run_cli(srv, ["--api-key", "lt-secret-1"])
        self.assertEqual(rc, 0, err)
        self.assertEqual(srv.generate_auth, ["Bearer lt-secret-1"] * 4)
        self.assertEqual(srv.info_auth, [None])  # GetInfo needs no key
        self.assertEqual(doc["transport"], {"kind": "grpc", "address": srv.address,
                                            "tls": False, "client_cert": False})
        self.assertEqual(srv.peers, [(b"insecure", None)] * 5)  # plaintext without --tls-*
        self.assertEqual(doc["config"]["api_key"], "***")
        self.assertNotIn("lt-secret-1", json.dumps(doc))
        self.assertEqual([(c["method"], c["completed"], c["unexpected_errors"])
                          for c in doc["cells"]], [("AR", 2, 0), ("DFLASH", 2, 0)])

    def test_without_api_key_no_key_is_sent(self):
        srv = self.router()
        rc, err, doc = self.run_cli(srv, [])  # $SPECDEC_API_KEY is set, and ignored
        self.assertEqual(rc, 0, err)
        self.assertEqual(srv.generate_auth, [None] * 4)
        self.assertEqual(doc["config"]["api_key"], "")

    def test_connect_passes_the_key_to_the_client(self):
        from specdec_loadtest import cli
        srv = self.router()
        client, info = cli._connect(srv.address, 10.0, 0.0, "lt-secret-2")
        try:
            self.assertTrue(client.has_api_key)
            self.assertEqual(info.methods, ("AR", "DFLASH"))
        finally:
            client.close()
        client, _ = cli._connect(srv.address, 10.0, 0.0)
        try:
            self.assertFalse(client.has_api_key)
        finally:
            client.close()
        with self.assertRaises(RuntimeError) as cm:
            cli._connect(srv.address, 10.0, 0.0, "two words")
        self.assertEqual(str(cm.exception), "--api-key: api_key must be printable ASCII "
                                            "without spaces or control characters")

    def test_api_key_goes_with_router_alone(self):
        from specdec_loadtest import cli
        p = build_parser()
        a = p.parse_args(["--router", "h:1", "--api-key", "k"])
        cli._check_args(p, a)  # no error: --api-key is not --http only any more
        self.assertEqual((a.router, a.api_key, a.http), ("h:1", "k", None))
        self.assertIn("every Generate call", p.format_help())

    def test_refusals_keep_their_code_and_retry_hint(self):
        import grpc
        srv = self.router(refuse=(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  "API key lt is over its 10 tokens per minute; retry in 2.5 s",
                                  (("retry-after-ms", "2500"),)))
        rc, err, doc = self.run_cli(srv, ["--api-key", "lt-key"])
        self.assertEqual(rc, 0, err)
        self.assertEqual(srv.generate_auth, ["Bearer lt-key"] * 4)  # refusals are not retried
        for c in doc["cells"]:
            self.assertEqual((c["requests"], c["completed"], c["unexpected_errors"]), (2, 0, 2))
            self.assertEqual(c["errors"]["RESOURCE_EXHAUSTED"]["sample"],
                             "API key lt is over its 10 tokens per minute; retry in 2.5 s "
                             "(retry-after-ms: 2500)")
        srv = self.router(refuse=(grpc.StatusCode.UNAUTHENTICATED, "the API key is not valid",
                                  ()))
        rc, err, doc = self.run_cli(srv, ["--api-key", "wrong", "--fail-on-error"])
        self.assertEqual(rc, 1, err)
        self.assertEqual(doc["cells"][0]["errors"]["UNAUTHENTICATED"]["sample"],
                         "the API key is not valid")


def _make_test_certs(directory):
    """The TLS test certificates (tests/services/common/make_test_certs.sh) made in `directory`:
    {file name: path}. RuntimeError, saying so, when openssl is missing or the script fails."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the TLS tests need openssl to make their certificates "
                           "(apt-get install openssl)")
    script = os.path.join(_REPO, "tests", "services", "common", "make_test_certs.sh")
    run = subprocess.run(["bash", script, directory], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{script} {directory} failed (exit {run.returncode}): "
                           f"{run.stderr.strip()}")
    return {name: os.path.join(directory, name) for name in os.listdir(directory)}


@unittest.skipUnless(_sdk_available(), "the specdec Python SDK (grpc) does not import")
class GrpcTlsTest(unittest.TestCase):
    """--tls-ca/--tls-cert/--tls-key: they reach the SDK's client, the requests go over TLS (or
    mTLS) to a fake router served with grpc.ssl_server_credentials, and results.json records
    only booleans and paths."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="specdec-loadtest-tls.")
        try:
            cls.certs = _make_test_certs(cls.tmp)
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def router(self, require_client_auth=False):
        import grpc

        def read(name):
            with open(self.certs[name], "rb") as f:
                return f.read()
        creds = grpc.ssl_server_credentials(
            [(read("server.key"), read("server.pem"))],
            root_certificates=read("ca.pem") if require_client_auth else None,
            require_client_auth=require_client_auth)
        srv = _FakeRouterGrpc(server_credentials=creds)
        self.addCleanup(srv.stop)
        return srv

    def mtls_args(self, name="client", ca="ca.pem"):
        return ["--tls-ca", self.certs[ca], "--tls-cert", self.certs[f"{name}.pem"],
                "--tls-key", self.certs[f"{name}.key"]]

    def test_mtls_options_reach_the_client_and_every_call(self):
        srv = self.router(require_client_auth=True)
        lines = []
        rc, err, doc = _run_cli_grpc(srv, self.mtls_args() + ["--api-key", "lt-tls"],
                                     stdout=lines)
        self.assertEqual(rc, 0, err)
        self.assertEqual(lines[0], f"transport: grpc {srv.address} (mTLS)")
        # GetInfo, then 2 methods x 2 requests, all over TLS with the client certificate
        self.assertEqual(srv.peers, [(b"ssl", b"client")] * 5)
        self.assertEqual(srv.generate_auth, ["Bearer lt-tls"] * 4)
        self.assertEqual(report.validate(doc), [])
        self.assertEqual(doc["transport"], {"kind": "grpc", "address": srv.address,
                                            "tls": True, "client_cert": True})
        self.assertEqual((doc["router"]["address"], doc["router"]["tls"],
                          doc["router"]["client_cert"]), (srv.address, True, True))
        self.assertEqual((doc["config"]["tls_ca"], doc["config"]["tls_cert"],
                          doc["config"]["tls_key"]),
                         (self.certs["ca.pem"], self.certs["client.pem"],
                          self.certs["client.key"]))
        text = json.dumps(doc)
        for name in ("client.key", "client.pem", "ca.pem"):  # paths only, never contents
            with open(self.certs[name], encoding="ascii") as f:
                body = [ln for ln in f.read().splitlines() if ln and not ln.startswith("-----")]
            self.assertTrue(body)
            for line in body:
                self.assertNotIn(line, text)
        self.assertNotIn("BEGIN", text)
        self.assertEqual([(c["method"], c["completed"], c["unexpected_errors"])
                          for c in doc["cells"]], [("AR", 2, 0), ("DFLASH", 2, 0)])

    def test_tls_ca_alone(self):
        srv = self.router()
        lines = []
        rc, err, doc = _run_cli_grpc(srv, ["--tls-ca", self.certs["ca.pem"]], stdout=lines)
        self.assertEqual(rc, 0, err)
        self.assertEqual(lines[0], f"transport: grpc {srv.address} (TLS)")
        self.assertEqual(srv.peers, [(b"ssl", None)] * 5)
        self.assertEqual(doc["transport"], {"kind": "grpc", "address": srv.address,
                                            "tls": True, "client_cert": False})
        self.assertEqual((doc["config"]["tls_ca"], doc["config"]["tls_cert"],
                          doc["config"]["tls_key"]), (self.certs["ca.pem"], None, None))

    def test_connect_hands_the_tls_options_to_the_client(self):
        from unittest import mock
        import specdec
        from specdec_loadtest import cli
        p = build_parser()
        a = p.parse_args(["--router", "h:1"] + self.mtls_args())
        cli._check_args(p, a)
        tls = cli.tls_options(a)
        self.assertEqual(tls, {"tls_ca": self.certs["ca.pem"], "tls_cert": self.certs["client.pem"],
                               "tls_key": self.certs["client.key"]})
        fake = mock.MagicMock()
        fake.info.return_value = "info"
        with mock.patch.object(specdec, "Client", return_value=fake) as client_cls:
            self.assertEqual(cli._connect("h:1", 7.0, 0.0, "k", tls=tls), (fake, "info"))
        client_cls.assert_called_once_with(
            "h:1", timeout=7.0, api_key="k", tls_ca=self.certs["ca.pem"],
            tls_cert=self.certs["client.pem"], tls_key=self.certs["client.key"])
        # and the real client is a TLS client with a client certificate
        srv = self.router(require_client_auth=True)
        client, info = cli._connect(srv.address, 10.0, 0.0, tls=tls)
        try:
            self.assertTrue(client.uses_tls)
            self.assertTrue(client.has_client_cert)
            self.assertEqual(info.methods, ("AR", "DFLASH"))
        finally:
            client.close()
        self.assertEqual(srv.peers, [(b"ssl", b"client")])

    def test_refused_handshakes_end_the_run_with_status_2(self):
        cases = [
            (False, []),                                        # plaintext against TLS
            (False, ["--tls-ca", self.certs["other_ca.pem"]]),  # the wrong CA
            (True, ["--tls-ca", self.certs["ca.pem"]]),         # mTLS without a certificate
            (True, self.mtls_args("other_client")),             # a certificate of another CA
        ]
        for require, extra in cases:
            with self.subTest(require_client_auth=require, args=[os.path.basename(x)
                                                                 for x in extra]):
                srv = self.router(require_client_auth=require)
                rc, err, doc = _run_cli_grpc(srv, extra)
                self.assertEqual(rc, 2, err)
                self.assertIsNone(doc)
                self.assertTrue(err.startswith(f"specdec_loadtest: router {srv.address} did not "
                                               "answer GetInfo: UNAVAILABLE: "), err)
                self.assertEqual(srv.info_auth + srv.generate_auth, [])

    def https_front(self, require_client_cert):
        """A local HTTPS server answering GET /health with 200 (the router's HTTP front with
        --tls-cert/--tls-key, and --tls-client-ca when `require_client_cert`)."""
        import ssl

        class Health(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.certs["server.pem"], self.certs["server.key"])
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.certs["ca.pem"])
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        return f"https://127.0.0.1:{srv.server_address[1]}"

    def test_https_front_with_a_ca_and_a_client_certificate(self):
        url = self.https_front(require_client_cert=False)
        ok = http_client.HttpClient(url, tls_ca=self.certs["ca.pem"])
        self.assertEqual(ok.get("/health", timeout=5.0)[0], 200)
        wrong = http_client.HttpClient(url, tls_ca=self.certs["other_ca.pem"])
        with self.assertRaises(OSError):  # ssl.SSLCertVerificationError
            wrong.get("/health", timeout=5.0)
        mtls = self.https_front(require_client_cert=True)
        with_cert = http_client.HttpClient(mtls, tls_ca=self.certs["ca.pem"],
                                           tls_cert=self.certs["client.pem"],
                                           tls_key=self.certs["client.key"])
        self.assertEqual(with_cert.get("/health", timeout=5.0)[0], 200)
        without = http_client.HttpClient(mtls, tls_ca=self.certs["ca.pem"])
        with self.assertRaises(OSError):  # the server refuses the handshake
            without.get("/health", timeout=5.0)
        with self.assertRaises(ValueError):
            http_client.HttpClient("http://127.0.0.1:1", tls_ca=self.certs["ca.pem"])
        p = build_parser()
        from specdec_loadtest import cli
        cli._check_args(p, p.parse_args(["--http", url, "--tls-ca", self.certs["ca.pem"]]))

    def test_bad_tls_options(self):
        import contextlib
        import io
        from specdec_loadtest import cli
        ca, cert, key = self.certs["ca.pem"], self.certs["client.pem"], self.certs["client.key"]
        usage = [
            (["--router", "h:1", "--tls-ca", ca, "--tls-cert", cert],
             "--tls-cert and --tls-key go together (a client certificate and its key)"),
            (["--router", "h:1", "--tls-ca", ca, "--tls-key", key],
             "--tls-cert and --tls-key go together (a client certificate and its key)"),
            (["--router", "h:1", "--tls-cert", cert, "--tls-key", key],
             "--tls-cert and --tls-key need --tls-ca (the CA that signed the router's "
             "certificate)"),
            (["--http", "http://h:8000", "--tls-ca", ca],
             "--tls-ca: the TLS options go with --router (the gRPC connection) or an https:// "
             "--http URL"),
        ]
        for argv, message in usage:
            with self.subTest(argv=argv):
                p = build_parser()
                err = io.StringIO()
                with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
                    cli._check_args(p, p.parse_args(argv))
                self.assertEqual(cm.exception.code, 2)
                self.assertEqual(err.getvalue().splitlines()[-1],
                                 f"specdec_loadtest: error: {message}")
        # --http with --router: the GetInfo connection takes them
        p = build_parser()
        a = p.parse_args(["--http", "http://h:8000", "--router", "h:1", "--tls-ca", ca])
        cli._check_args(p, a)
        self.assertEqual(cli.tls_options(a), {"tls_ca": ca, "tls_cert": None, "tls_key": None})
        missing = os.path.join(self.tmp, "missing.pem")
        with self.assertRaises(RuntimeError) as cm:
            cli._connect("127.0.0.1:1", 5.0, 0.0, tls={"tls_ca": missing})
        self.assertEqual(str(cm.exception),
                         f"--tls-ca: cannot read {missing!r}: No such file or directory")
        with self.assertRaises(RuntimeError) as cm:
            cli._connect("127.0.0.1:1", 5.0, 0.0,
                         tls={"tls_ca": ca, "tls_cert": cert, "tls_key": self.tmp})
        self.assertEqual(str(cm.exception), f"--tls-key: cannot read {self.tmp!r}: Is a directory")
        with self.assertRaises(RuntimeError) as cm:  # the SDK's own checks, in option names
            cli._connect("127.0.0.1:1", 5.0, 0.0, tls={"tls_ca": None, "tls_cert": cert,
                                                       "tls_key": key})
        self.assertEqual(str(cm.exception), "--tls-cert and --tls-key need --tls-ca (the CA "
                                            "that signed the router's certificate)")
        srv = self.router()
        rc, err, doc = _run_cli_grpc(srv, ["--tls-ca", ca, "--tls-cert", missing, "--tls-key", key])
        self.assertEqual(rc, 2)
        self.assertEqual(err, f"specdec_loadtest: --tls-cert: cannot read {missing!r}: "
                              "No such file or directory\n")
        self.assertIsNone(doc)

    def test_http_requests_with_getinfo_over_mtls(self):
        import contextlib
        import io
        from specdec_loadtest import cli
        grpc_srv = self.router(require_client_auth=True)
        http_srv = _FakeRouterHttp(gap=0.001)
        self.addCleanup(http_srv.stop)
        with tempfile.TemporaryDirectory() as d:
            pfile = os.path.join(d, "p.txt")
            with open(pfile, "w", encoding="utf-8") as f:
                f.write("a prompt\n")
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli.main(["--http", http_srv.url, "--router", grpc_srv.address,
                               "--methods", "AR", "--concurrency", "1", "--requests", "2",
                               "--duration", "0", "--warmup", "0", "--cooldown", "0",
                               "--max-new-tokens", "2", "--prompts", pfile, "--no-plots",
                               "--quiet", "--wait-ready", "0", "--out", d] + self.mtls_args())
            self.assertEqual(rc, 0, err.getvalue())
            with open(os.path.join(d, "results.json"), encoding="utf-8") as f:
                doc = json.load(f)
        self.assertEqual(grpc_srv.peers, [(b"ssl", b"client")])  # GetInfo only
        self.assertEqual(grpc_srv.generate_auth, [])
        self.assertEqual(doc["transport"]["kind"], "http")
        self.assertEqual((doc["router"]["tls"], doc["router"]["client_cert"]), (True, True))
        self.assertEqual(doc["cells"][0]["completed"], 2)


class _FakeRouterHttp(http.server.ThreadingHTTPServer):
    """The router's OpenAI-compatible front as the load tester uses it: /health, /v1/models and
    streamed /v1/completions; every `fail_every`-th completion is answered 429, the others
    stream max_tokens tokens, `per_chunk` per chunk, `gap` seconds apart (chunked transfer
    encoding, or Connection: close without it when not `chunked`), a finish chunk, the usage
    chunk (its specdec.token_ids repeat every token) and [DONE]. `error_after`: an error event
    instead of the token after that many. `cut_after`: the connection is closed after that many
    tokens, without [DONE]. `end_delay` (chunked): the end of the body follows [DONE] that much
    later, unless the client has closed the connection by then (counted in `early_closes`, as
    the router counts such a stream 499)."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, gap=0.0, per_chunk=1, chunked=True, fail_every=0, health=200,
                 error_after=None, cut_after=None, end_delay=0.0):
        super().__init__(("127.0.0.1", 0), _FakeRouterHandler)
        self.gap, self.per_chunk, self.chunked = gap, per_chunk, chunked
        self.fail_every, self.health = fail_every, health
        self.error_after, self.cut_after, self.end_delay = error_after, cut_after, end_delay
        self.lock = threading.Lock()
        self.bodies = []
        self.headers_seen = []
        self.disconnects = 0  # streams whose client went away while they were written
        self.early_closes = 0  # clients that closed between [DONE] and the end of the body
        self.handled = 0  # streams whose handler has returned
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self):
        self.shutdown()
        self.server_close()

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients close at will
            super().handle_error(request, client_address)


class _FakeRouterHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, status, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 (http.server API)
        if self.path == "/health":
            ok = self.server.health == 200
            self._json(self.server.health, {"status": "ok" if ok else "unavailable"})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [
                {"id": "target", "object": "model", "created": 0, "owned_by": "specdec"}]})
        else:
            self._json(404, {"error": {"message": "no such path", "type": "not_found_error",
                                       "param": None, "code": None}})

    def _send(self, data):
        if self.server.chunked:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            self.wfile.write(data)

    def _event(self, obj):
        self._send(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def do_POST(self):  # noqa: N802 (http.server API)
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.bodies.append(body)
            srv.headers_seen.append(dict(self.headers))
            k = len(srv.bodies)
        if srv.fail_every and k % srv.fail_every == 0:
            self._json(429, {"error": {"message": "caches full", "type": "rate_limit_error",
                                       "param": None, "code": None}}, [("Retry-After", "1")])
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if srv.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        head = {"id": f"cmpl-{k}", "object": "text_completion", "created": 0, "model": "target"}
        n = body["max_tokens"]
        tokens = list(range(100, 100 + n))
        try:
            self._send(b": keep-alive comment\n\n")
            for i in range(0, n, srv.per_chunk):
                if i:
                    time.sleep(srv.gap)
                if srv.error_after is not None and i >= srv.error_after:
                    self._event({"error": {"message": "target lost", "type": "server_error",
                                           "param": None, "code": "UNAVAILABLE"}})
                    self._send(b"")
                    return
                if srv.cut_after is not None and i >= srv.cut_after:
                    self.close_connection = True
                    return
                ids = tokens[i:i + srv.per_chunk]
                self._event(dict(head, choices=[{"index": 0, "text": " ".join(map(str, ids)),
                                                 "finish_reason": None, "logprobs": None}],
                                 specdec={"token_ids": ids}))
            self._event(dict(head, choices=[{"index": 0, "text": "", "finish_reason": "length",
                                             "logprobs": None}], specdec={"token_ids": []}))
            if (body.get("stream_options") or {}).get("include_usage"):
                self._event(dict(head, choices=[], usage={
                    "prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n},
                    specdec={"request_id": f"r{k}", "method": body["speculative"]["method"],
                             "tau": 2.0, "block_size": 16, "estimated_speedup": 1.5,
                             "ttft_ms": 1.0, "decode_ms": 2.0, "draft_tokens": 12,
                             "target_passes": 5, "token_ids": tokens}))
            self._send(b"data: [DONE]\n\n")
            if srv.chunked and srv.end_delay:
                time.sleep(srv.end_delay)
                try:
                    gone = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
                except BlockingIOError:
                    gone = False
                if gone:
                    with srv.lock:
                        srv.early_closes += 1
                    return
            self._send(b"")
        except (BrokenPipeError, ConnectionResetError):
            with srv.lock:
                srv.disconnects += 1
        finally:
            with srv.lock:
                srv.handled += 1


class HttpTransportTest(unittest.TestCase):
    def server(self, **kw):
        srv = _FakeRouterHttp(**kw)
        self.addCleanup(srv.stop)
        return srv

    def test_sse_parser(self):
        p = http_client.SseParser()
        events = [p.feed(line) for line in (
            b": comment\n", b"\n", b"event: message\r\n", b"data: {\"a\": 1}\r\n", b"\r\n",
            b"data:x\n", b"data: y\n", b"id: 7\n", b"\n", b"data: [DONE]\n", b"\n")]
        self.assertEqual([e for e in events if e is not None], ['{"a": 1}', "x\ny", "[DONE]"])
        self.assertEqual(events[:5], [None, None, None, None, '{"a": 1}'])
        # A blank line without data dispatches nothing; an empty data line is an empty event.
        self.assertIsNone(p.feed("\n"))
        self.assertIsNone(p.feed("data:\n"))
        self.assertEqual(p.feed("\n"), "")

    def test_request_body(self):
        opts = http_client.HttpOptions(method="dflash", max_new_tokens=64, temperature=0.7,
                                       top_k=20, top_p=0.9, seed=123, ignore_eos=True,
                                       block_size=8, draft_length=0, request_id="x")
        self.assertEqual(http_client.request_body("def f():", opts, "target"), {
            "model": "target", "prompt": "def f():", "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0.7, "top_p": 0.9,
            "top_k": 20, "seed": 123, "ignore_eos": True, "max_tokens": 64,
            "speculative": {"method": "DFLASH", "block_size": 8}})
        ar = http_client.request_body([1, 403, 407], http_client.HttpOptions(
            method="AR", max_new_tokens=4, draft_length=3), "m")
        self.assertEqual(ar["prompt"], [1, 403, 407])
        self.assertEqual(ar["speculative"], {"method": "AR", "draft_length": 3})
        self.assertEqual((ar["temperature"], ar["top_k"], ar["top_p"], ar["seed"],
                          ar["ignore_eos"]), (0.0, 0, 1.0, 0, False))
        default = http_client.request_body("p", http_client.HttpOptions(
            method="DEFAULT", max_new_tokens=0), "m")
        self.assertNotIn("speculative", default)
        self.assertNotIn("max_tokens", default)
        for bad in ("", []):
            with self.assertRaises(ValueError):
                http_client.request_body(bad, http_client.HttpOptions(), "m")

    def test_error_mapping(self):
        body = json.dumps({"error": {"message": "caches full", "type": "rate_limit_error",
                                     "param": None, "code": None}}).encode()
        e = http_client.error_from_response(429, body, "2")
        self.assertEqual((e.code_name, e.message, e.status, e.retry_after),
                         ("RESOURCE_EXHAUSTED", "HTTP 429: caches full (Retry-After: 2)", 429, "2"))
        cases = [(400, None, "INVALID_ARGUMENT"), (401, None, "UNAUTHENTICATED"),
                 (403, None, "PERMISSION_DENIED"), (404, None, "NOT_FOUND"),
                 (503, None, "UNAVAILABLE"), (504, None, "DEADLINE_EXCEEDED"),
                 (500, None, "INTERNAL"), (418, None, "HTTP_418"),
                 (400, "FAILED_PRECONDITION", "FAILED_PRECONDITION"),
                 (400, "resource_exhausted", "RESOURCE_EXHAUSTED"),
                 (400, "invalid_value", "INVALID_ARGUMENT")]
        for status, code, want in cases:
            b = json.dumps({"error": {"message": "m", "type": "t", "param": None,
                                      "code": code}}).encode()
            self.assertEqual(http_client.error_from_response(status, b).code_name, want,
                             (status, code))
        e = http_client.error_from_response(503, b"upstream down\n")
        self.assertEqual((e.code_name, e.message), ("UNAVAILABLE", "HTTP 503: upstream down"))
        e = http_client.error_from_event({"error": {"message": "boom", "code": 504}})
        self.assertEqual((e.code_name, e.message, e.status),
                         ("DEADLINE_EXCEEDED", "error event: boom", None))
        self.assertEqual(http_client.error_from_event({"error": {"message": "x"}}).code_name,
                         "UNKNOWN")

    def read_all(self, stream):
        t0 = time.perf_counter()
        times, chunks = [], []
        for c in stream:
            times.append(time.perf_counter() - t0)
            chunks.append(c)
        return times, chunks

    def test_stream_tokens_summary_and_timing(self):
        for chunked in (True, False):
            with self.subTest(chunked=chunked):
                srv = self.server(gap=0.4, per_chunk=2, chunked=chunked, end_delay=0.1)
                client = http_client.HttpClient(srv.url, model="target", api_key="k")
                opts = http_client.HttpOptions(method="DFLASH", max_new_tokens=5, seed=9,
                                               ignore_eos=True, block_size=16,
                                               request_id="lt-7")
                stream = client.generate_stream("def f():", opts, timeout=10)
                times, chunks = self.read_all(stream)
                self.assertEqual([c.token_ids for c in chunks],
                                 [(100, 101), (102, 103), (104,)])
                self.assertEqual(chunks[0].text, "100 101")
                self.assertTrue(all(c.step is None for c in chunks))
                # Each chunk is taken as it arrives: the first long before the second is sent.
                self.assertLess(times[0], 0.3)
                self.assertGreater(times[1] - times[0], 0.2)
                s = stream.summary
                self.assertEqual((s.method, s.finish_reason, s.tau, s.completion_tokens,
                                  s.prompt_tokens, s.block_size, s.drafted_tokens,
                                  s.target_passes, s.verify_steps, s.committed_tokens),
                                 ("DFLASH", "LENGTH", 2.0, 5, 5, 16, 12, 5, 4, 8))
                self.assertIsNone(s.accepted_tokens)
                self.assertIsNone(s.drafter_fallback)
                self.assertEqual(srv.bodies, [http_client.request_body("def f():", opts,
                                                                        "target")])
                h = srv.headers_seen[0]
                self.assertEqual(h["Authorization"], "Bearer k")
                self.assertEqual(h["Accept"], "text/event-stream")
                self.assertEqual(h["X-Request-Id"], "lt-7")
                self.assertEqual(h["X-Request-Timeout-Ms"], "10000")
                self.assertEqual(list(stream), [])  # ended: iterating again yields nothing
                # The client read the whole response before it closed the connection.
                deadline = time.monotonic() + 3.0
                while srv.handled < 1 and time.monotonic() < deadline:
                    time.sleep(0.02)
                self.assertEqual((srv.handled, srv.early_closes), (1, 0))

    def test_summary_takes_request_stats_when_present(self):
        # The router may add the gRPC Summary's RequestStats (int64 fields as JSON strings).
        event = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9,
                                          "total_tokens": 12},
                 "specdec": {"method": "DFLASH_ADAPTIVE", "verify_steps": "4",
                             "drafted_tokens": "60", "accepted_tokens": "5",
                             "committed_tokens": "8", "tau": 2.0, "block_size": 16,
                             "policy_fallback": False, "drafter_fallback": True,
                             "request_id": "r", "draft_tokens": "64", "target_passes": 6,
                             "estimated_speedup": 1.4, "ttft_ms": 3.5}}
        s = http_client.HttpSummary.from_event(event, "stop")
        self.assertEqual((s.method, s.finish_reason, s.verify_steps, s.drafted_tokens,
                          s.accepted_tokens, s.committed_tokens, s.drafter_fallback,
                          s.policy_fallback, s.target_passes, s.completion_tokens,
                          s.prompt_tokens, s.request_id, s.estimated_speedup, s.ttft_ms),
                         ("DFLASH_ADAPTIVE", "STOP", 4, 60, 5, 8, True, False, 6, 9, 3, "r",
                          1.4, 3.5))
        # Without them: derived from target passes and tau; accepted and fallbacks unknown.
        s = http_client.HttpSummary.from_event(
            {"choices": [], "usage": {"completion_tokens": 4},
             "specdec": {"method": "AR", "tau": 1.0, "draft_tokens": 0, "target_passes": 4}},
            "length")
        self.assertEqual((s.verify_steps, s.committed_tokens, s.drafted_tokens,
                          s.accepted_tokens, s.drafter_fallback, s.policy_fallback),
                         (3, 3, 0, None, None, None))

    def test_stream_errors(self):
        opts = http_client.HttpOptions(method="AR", max_new_tokens=4)
        srv = self.server(fail_every=1)
        stream = http_client.HttpClient(srv.url, model="target").generate_stream("p", opts)
        with self.assertRaises(http_client.HttpError) as cm:
            next(stream)
        e = cm.exception
        self.assertEqual((e.code_name, e.status, e.retry_after), ("RESOURCE_EXHAUSTED", 429, "1"))
        self.assertEqual(e.message, "HTTP 429: caches full (Retry-After: 1)")

        srv = self.server(error_after=2)
        stream = http_client.HttpClient(srv.url).generate_stream("p", opts)
        self.assertEqual(next(stream).token_ids, (100,))
        self.assertEqual(next(stream).token_ids, (101,))
        with self.assertRaises(http_client.HttpError) as cm:
            next(stream)
        self.assertEqual((cm.exception.code_name, cm.exception.message),
                         ("UNAVAILABLE", "error event: target lost"))

        srv = self.server(cut_after=1, chunked=False)
        stream = http_client.HttpClient(srv.url).generate_stream("p", opts)
        with self.assertRaises(http_client.HttpError) as cm:
            list(stream)
        self.assertEqual(cm.exception.code_name, "INTERNAL")
        self.assertIn("before data: [DONE]", cm.exception.message)

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()  # nothing listens there
        with self.assertRaises(http_client.HttpError) as cm:
            http_client.HttpClient(f"127.0.0.1:{port}").generate_stream("p", opts)
        self.assertEqual(cm.exception.code_name, "UNAVAILABLE")

        srv = self.server(gap=2.0)
        stream = http_client.HttpClient(srv.url).generate_stream("p", opts, timeout=0.4)
        next(stream)
        t0 = time.monotonic()
        with self.assertRaises(http_client.HttpError) as cm:
            next(stream)
        self.assertEqual(cm.exception.code_name, "DEADLINE_EXCEEDED")
        self.assertLess(time.monotonic() - t0, 1.5)

    def test_cancel_closes_the_connection(self):
        srv = self.server(gap=0.5)
        opts = http_client.HttpOptions(method="AR", max_new_tokens=100)
        stream = http_client.HttpClient(srv.url).generate_stream("p", opts)
        next(stream)
        # From another thread while this one is blocked reading: the read returns at once, not
        # when the next chunk arrives.
        threading.Timer(0.05, stream.cancel).start()
        t0 = time.monotonic()
        with self.assertRaises(http_client.HttpError) as cm:
            next(stream)
        self.assertEqual(cm.exception.code_name, "CANCELLED")
        self.assertLess(time.monotonic() - t0, 0.35)
        deadline = time.monotonic() + 3.0
        while srv.disconnects < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(srv.disconnects, 1)  # the server saw the connection close
        # From the reading thread, between two chunks (a planned client cancel).
        stream = http_client.HttpClient(srv.url).generate_stream("p", opts)
        next(stream)
        stream.cancel()
        with self.assertRaises(http_client.HttpError) as cm:
            next(stream)
        self.assertEqual(cm.exception.code_name, "CANCELLED")
        deadline = time.monotonic() + 3.0
        while srv.disconnects < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(srv.disconnects, 2)

    def test_runner_over_http(self):
        from specdec_loadtest.runner import LoadConfig, Runner
        srv = self.server(gap=0.002, fail_every=5)
        client = http_client.HttpClient(srv.url, model="target")
        cfg = LoadConfig(max_new_tokens=8, warmup_s=0.0, duration_s=0.0, max_requests=20,
                         cancel_fraction=0.3, seed=2, block_size=16)
        run = Runner(client, ["p1", "p2"], cfg).closed_loop("DFLASH", 2)
        cell = report.cell_dict(run, max_new_tokens=8, ignore_eos=True)
        measured = [r for r in run.records if r.measured]
        self.assertEqual(cell["requests"], 20)
        planned_cancels = sum(1 for r in measured if r.cancel_after is not None
                              and r.status != stats.ERROR)
        self.assertGreater(planned_cancels, 0)
        self.assertEqual(cell["cancelled"], planned_cancels)
        for r in measured:
            if r.status == stats.CANCELLED:
                self.assertEqual(r.streamed_tokens, r.cancel_after)
        failed = sum(1 for r in measured if r.status == stats.ERROR)
        self.assertGreater(failed, 0)
        self.assertEqual(cell["errors"], {"RESOURCE_EXHAUSTED": {
            "count": failed, "sample": "HTTP 429: caches full (Retry-After: 1)"}})
        self.assertEqual(cell["completed"] + cell["cancelled"] + failed, 20)
        self.assertEqual(cell["completion_tokens"], {"min": 8, "max": 8, "mean": 8.0})
        self.assertEqual(cell["stream_mismatches"], 0)
        self.assertEqual(cell["tau_mean"], 2.0)
        self.assertEqual(cell["tau_aggregate"], 2.0)
        self.assertEqual(cell["block_sizes"], {"16": cell["completed"]})
        self.assertEqual(cell["drafted_tokens"], 12 * cell["completed"])
        self.assertIsNone(cell["accepted_tokens"])
        self.assertIsNone(cell["acceptance_rate"])
        self.assertEqual(cell["fallbacks"], {"drafter": None, "policy": None})
        self.assertEqual(cell["methods_run"], ["DFLASH"])
        self.assertEqual(cell["ttft_ms"]["count"], cell["completed"] + cell["cancelled"])
        self.assertEqual(cell["itl_ms"]["count"],
                         sum(r.streamed_tokens - 1 for r in measured if r.status != stats.ERROR))
        for b in srv.bodies:
            self.assertEqual((b["model"], b["speculative"], b["ignore_eos"]),
                             ("target", {"method": "DFLASH", "block_size": 16}, True))
        # Every measured request reached the server with its own seed (a filler request aborted
        # at the end of the cell may not have).
        seeds = sorted(b["seed"] for b in srv.bodies)
        self.assertEqual(len(seeds), len(set(seeds)))
        self.assertLessEqual({schedule.request_seed(2, r.seq) for r in measured}, set(seeds))
        self.assertLessEqual(set(seeds), {schedule.request_seed(2, r.seq) for r in run.records})
        self.assertEqual(report.validate(report.results_document(
            config={}, router={}, cells=[cell], host={}, started_at="", finished_at="")), [])

    def test_open_loop_over_http_aborts_in_flight(self):
        from specdec_loadtest.runner import LoadConfig, Runner
        srv = self.server(gap=0.1)  # 0.7 s per request of 8 tokens
        client = http_client.HttpClient(srv.url, model="target")
        cfg = LoadConfig(max_new_tokens=8, warmup_s=0.0, duration_s=0.5, seed=4)
        t0 = time.monotonic()
        run = Runner(client, ["p"], cfg).open_loop("AR", 10.0)
        self.assertLess(time.monotonic() - t0, 1.5)  # the requests in flight were cancelled
        cell = report.cell_dict(run, max_new_tokens=8, ignore_eos=True)
        self.assertEqual(cell["requests"],
                         len(schedule.poisson_arrivals(10.0, 0.5, 4)))
        self.assertEqual(cell["unfinished"], cell["requests"])
        self.assertEqual(cell["unexpected_errors"], 0)
        self.assertEqual({r.status for r in run.records}, {stats.ABORTED})

    def test_cli_over_http(self):
        import contextlib
        import io
        from specdec_loadtest import cli
        srv = self.server(gap=0.001)
        with tempfile.TemporaryDirectory() as d:
            pfile = os.path.join(d, "p.txt")
            with open(pfile, "w", encoding="utf-8") as f:
                f.write("first prompt\nsecond prompt\n")
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli.main(["--http", srv.url, "--api-key", "secret", "--methods", "AR,DFLASH",
                               "--concurrency", "2", "--requests", "4", "--duration", "0",
                               "--warmup", "0", "--cooldown", "0", "--max-new-tokens", "4",
                               "--ignore-eos", "--prompts", pfile, "--no-plots", "--quiet",
                               "--out", d])
            self.assertEqual(rc, 0, err.getvalue())
            self.assertEqual(out.getvalue().splitlines()[0],
                             f"transport: http POST {srv.url}/v1/completions (model target)")
            with open(os.path.join(d, "results.json"), encoding="utf-8") as f:
                doc = json.load(f)
        self.assertEqual(report.validate(doc), [])
        self.assertEqual(doc["transport"], {"kind": "http", "url": srv.url, "model": "target",
                                            "models": ["target"]})
        self.assertEqual(doc["router"], {"address": None, "tls": False, "client_cert": False,
                                         "info": None})
        self.assertEqual(doc["config"]["api_key"], "***")
        self.assertEqual([(c["method"], c["completed"], c["completion_tokens"]["min"])
                          for c in doc["cells"]], [("AR", 4, 4), ("DFLASH", 4, 4)])
        self.assertEqual({h["Authorization"] for h in srv.headers_seen}, {"Bearer secret"})
        self.assertEqual({b["prompt"] for b in srv.bodies}, {"first prompt", "second prompt"})

    def test_cli_checks_and_readiness(self):
        from specdec_loadtest import cli
        with open(os.devnull, "w") as devnull:
            old = sys.stderr
            sys.stderr = devnull
            try:
                for bad in ([], ["--router", "h:1", "--model", "m"]):
                    p = build_parser()
                    with self.assertRaises(SystemExit):
                        cli._check_args(p, p.parse_args(bad))
            finally:
                sys.stderr = old
        p = build_parser()
        a = p.parse_args(["--http", "http://h:8000", "--model", "m"])
        cli._check_args(p, a)
        self.assertEqual((a.http, a.model, a.router), ("http://h:8000", "m", None))
        srv = self.server(health=503)
        with self.assertRaises(RuntimeError) as cm:
            cli._connect_http(srv.url, "", "", 10.0, 0.0)
        self.assertIn("/health did not answer 200: HTTP 503", str(cm.exception))
        srv.health = 200
        client, models = cli._connect_http(srv.url + "/", "", "", 10.0, 0.0)
        self.assertEqual((client.url, client.model, models), (srv.url, "target", ["target"]))
        # The OpenAI base URL names the same front.
        client, _ = cli._connect_http(srv.url + "/v1", "target", "", 10.0, 0.0)
        self.assertEqual(client.url, srv.url)
        self.assertEqual(http_client.HttpClient("h:9/prefix/v1/").url, "http://h:9/prefix")
        with self.assertRaises(RuntimeError) as cm:
            cli._connect_http(srv.url, "other", "", 10.0, 0.0)
        self.assertIn("does not serve model 'other'", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
