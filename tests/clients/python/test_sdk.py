"""Integration tests of the specdec Python SDK against a running cluster.

Run through run_test.sh (which starts and stops a local cluster), or by hand against any router:
    SPECDEC_ADDRESS=127.0.0.1:50050 /usr/bin/python3 -m unittest -v tests/clients/python/test_sdk.py
The cluster must serve AR and DRAFT_CHAIN (a target plus an AR draft LM).
"""

import dataclasses
import os
import sys
import time
import unittest

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(_REPO, "clients", "python"))

import grpc  # noqa: E402

from specdec import Chunk, Client, GenerateOptions, Result, SpecdecError, Summary  # noqa: E402

ADDRESS = os.environ.get("SPECDEC_ADDRESS", "127.0.0.1:20650")
PROMPT = "Once upon a time"
N = 16  # small: the CPU drafter of the test setup is slow


class SdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = Client(ADDRESS, timeout=120.0)
        deadline = time.monotonic() + 60
        while True:  # GetInfo is UNAVAILABLE until the target is up
            try:
                cls.info = cls.client.info(timeout=5)
                break
            except SpecdecError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"router at {ADDRESS} never became ready: {e}")
                time.sleep(0.5)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def test_info_lists_methods(self):
        for m in ("AR", "DRAFT_CHAIN", "DYSPEC_TREE"):
            self.assertIn(m, self.info.methods)
        self.assertIsNotNone(self.info.target)
        self.assertGreater(self.info.target.vocab_size, 0)
        self.assertGreater(self.info.default_max_new_tokens, 0)

    def test_stream_matches_generate(self):
        opts = GenerateOptions(method="DRAFT_CHAIN", max_new_tokens=N)
        stream = self.client.generate_stream(PROMPT, opts)
        self.assertIsNone(stream.summary)
        chunks = list(stream)
        self.assertTrue(chunks)
        self.assertTrue(all(isinstance(c, Chunk) for c in chunks))
        self.assertIsInstance(stream.summary, Summary)
        streamed = [t for c in chunks for t in c.token_ids]
        # indexes are contiguous positions in the completion
        pos = 0
        for c in chunks:
            self.assertEqual(c.index, pos)
            pos += len(c.token_ids)
        self.assertIsNone(chunks[0].step)  # the prefill's token
        result = self.client.generate(PROMPT, opts)
        self.assertIsInstance(result, Result)
        self.assertEqual(streamed, result.tokens)
        self.assertEqual("".join(c.text for c in chunks), result.text)
        self.assertTrue(result.text)
        self.assertEqual(stream.tokens, result.tokens)

    def test_draft_chain_equals_ar_greedy(self):
        ar = self.client.generate(PROMPT, GenerateOptions(method="AR", max_new_tokens=N))
        dc = self.client.generate(PROMPT, GenerateOptions(method="DRAFT_CHAIN", max_new_tokens=N,
                                                          draft_length=3))
        self.assertEqual(ar.method, "AR")
        self.assertEqual(dc.method, "DRAFT_CHAIN")
        self.assertEqual(dc.tokens, ar.tokens)
        self.assertEqual(dc.text, ar.text)

    def test_summary(self):
        r = self.client.generate(PROMPT, GenerateOptions(method="DRAFT_CHAIN", max_new_tokens=N))
        self.assertEqual(r.method, "DRAFT_CHAIN")
        self.assertGreaterEqual(r.tau, 1.0)
        self.assertGreater(r.verify_steps, 0)
        self.assertIn(r.finish_reason, ("LENGTH", "STOP"))
        self.assertEqual(r.summary.completion_tokens, len(r.tokens))
        self.assertGreater(r.summary.prompt_tokens, 0)
        ar = self.client.generate(PROMPT, GenerateOptions(method="AR", max_new_tokens=4))
        self.assertEqual(ar.method, "AR")
        self.assertAlmostEqual(ar.tau, 1.0)

    def test_token_id_prompt(self):
        ids = self.client.generate(PROMPT, GenerateOptions(max_new_tokens=4))
        self.assertEqual(len(ids.tokens), 4)
        r = self.client.generate([1] + ids.tokens, GenerateOptions(max_new_tokens=4))
        self.assertEqual(r.summary.prompt_tokens, 5)
        self.assertEqual(len(r.tokens), 4)

    def test_invalid_options_raise_value_error(self):
        bad = [dict(method="NOPE"), dict(method=3), dict(max_new_tokens=-1),
               dict(max_new_tokens=1.5), dict(temperature=-0.1), dict(temperature=float("nan")),
               dict(temperature=101.0), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.5),
               dict(seed=-1), dict(stop_token_ids=[-3]), dict(stop_token_ids="x"),
               dict(ignore_eos=1), dict(block_size=1), dict(block_size=257),
               dict(draft_length=65), dict(tree_budget=513), dict(tree_max_depth=-2),
               dict(tree_threshold=1.0), dict(stop=[""]), dict(stop=["a"] * 17)]
        for kwargs in bad:
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                with self.assertRaises(ValueError):
                    GenerateOptions(**kwargs)
        with self.assertRaisesRegex(ValueError, "unknown method 'NOPE'"):
            GenerateOptions(method="NOPE")
        ok = GenerateOptions(method="draft_chain")
        self.assertEqual(ok.method, "DRAFT_CHAIN")
        with self.assertRaises(ValueError):
            dataclasses.replace(ok, top_p=2.0)
        for prompt in ("", [], [-1], [1, "a"], None):
            with self.subTest(prompt=repr(prompt)):
                with self.assertRaises(ValueError):
                    self.client.generate_stream(prompt, ok)

    def test_server_rejection_raises_specdec_error(self):
        with self.assertRaises(SpecdecError) as cm:
            self.client.generate([1, 99999], GenerateOptions(max_new_tokens=4))
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(cm.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn("99999", cm.exception.message)
        with self.assertRaises(SpecdecError) as cm:  # also raised while streaming
            list(self.client.generate_stream([99999], GenerateOptions(max_new_tokens=4)))
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    def test_unreachable_router_raises_specdec_error(self):
        with Client("127.0.0.1:1", timeout=2.0) as c:
            with self.assertRaises(SpecdecError) as cm:
                c.info()
        self.assertIn(cm.exception.code, (grpc.StatusCode.UNAVAILABLE,
                                          grpc.StatusCode.DEADLINE_EXCEEDED))


class _ScriptedRouter:
    """A fake router (only the SDK's channel is under test): refuses the first `refusals`
    Generate calls with UNAVAILABLE before answering, then streams one token and, when
    `fail_after_chunk`, fails UNAVAILABLE, else ends with a summary."""

    def __init__(self, refusals, fail_after_chunk):
        from concurrent import futures
        from specdec.v1 import router_pb2, router_pb2_grpc

        self.calls = 0
        outer = self

        class Servicer(router_pb2_grpc.RouterServicer):
            def Generate(self, request, context):
                outer.calls += 1
                if outer.calls <= refusals:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "connection recycled")
                chunk = router_pb2.GenerateResponse()
                chunk.chunk.token_ids.append(7)
                yield chunk
                if fail_after_chunk:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "target lost")
                done = router_pb2.GenerateResponse()
                done.summary.usage.completion_tokens = 1
                yield done

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        router_pb2_grpc.add_RouterServicer_to_server(Servicer(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self):
        self.server.stop(None)


class RetryTest(unittest.TestCase):
    def _stream(self, router):
        with Client(f"127.0.0.1:{router.port}", timeout=10.0) as c:
            options = GenerateOptions(method="AR", max_new_tokens=1)
            return list(c.generate_stream([1, 2, 3], options))

    def test_a_call_refused_before_any_answer_is_retried(self):
        router = _ScriptedRouter(refusals=2, fail_after_chunk=False)
        try:
            items = self._stream(router)
        finally:
            router.stop()
        self.assertEqual(router.calls, 3)
        self.assertEqual([t for chunk in items for t in chunk.token_ids], [7])

    def test_a_call_that_delivered_tokens_is_never_retried(self):
        router = _ScriptedRouter(refusals=0, fail_after_chunk=True)
        try:
            with self.assertRaises(SpecdecError) as cm:
                self._stream(router)
        finally:
            router.stop()
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(router.calls, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
