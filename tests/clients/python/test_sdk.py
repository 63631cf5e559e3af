"""Integration tests of the specdec Python SDK against a running cluster.

Run through run_test.sh (which starts and stops a local cluster), or by hand against any router:
    SPECDEC_ADDRESS=127.0.0.1:50050 /usr/bin/python3 -m unittest -v tests/clients/python/test_sdk.py
The cluster must serve AR and DRAFT_CHAIN (a target plus an AR draft LM).

RetryTest, ApiKeyTest and TlsTest run against in-process fake routers (no cluster needed;
TlsTest makes its certificates with tests/services/common/make_test_certs.sh, which needs openssl):
    /usr/bin/python3 tests/clients/python/test_sdk.py RetryTest ApiKeyTest TlsTest
KeyedRouterTest needs a router started with the keys file this script writes
(`test_sdk.py --write-api-keys FILE`, then `specdec-router --api-keys FILE` or
SPECDEC_API_KEYS=FILE); run_test.sh restarts its cluster that way and runs it with
SPECDEC_KEYED_ROUTER=1 (it is skipped otherwise). TlsRouterTest needs a router serving mTLS with
the certificates of make_test_certs.sh in the directory SPECDEC_TLS_CERTS (server.pem/.key,
--tls-client-ca ca.pem); run_test.sh restarts its cluster that way (it is skipped otherwise).
"""

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(_REPO, "clients", "python"))

import grpc  # noqa: E402

from specdec import (  # noqa: E402
    API_KEY_ENV, Chunk, Client, GenerateOptions, Result, SpecdecError, Summary)

ADDRESS = os.environ.get("SPECDEC_ADDRESS", "127.0.0.1:20650")
PROMPT = "Once upon a time"
N = 16  # small: the CPU drafter of the test setup is slow


# Keys of the keyed-router test (test keys, not secrets): id -> (key, max_concurrent,
# tokens_per_minute, revoked). The file holds only their SHA-256 (write_api_keys).
API_KEYS = {
    "sdk-ok": ("sdk-test-key-ok-5f1c", 0, 0, False),
    "sdk-revoked": ("sdk-test-key-revoked-9a2e", 0, 0, True),
    "sdk-metered": ("sdk-test-key-metered-77b0", 0, 1, False),
    "sdk-single": ("sdk-test-key-single-c3d4", 1, 0, False),
}


def write_api_keys(path):
    """Writes the router's keys file for API_KEYS (digests only)."""
    keys = [{"id": kid, "sha256": hashlib.sha256(key.encode("ascii")).hexdigest(),
             "max_concurrent": conc, "tokens_per_minute": tpm, "revoked": revoked}
            for kid, (key, conc, tpm, revoked) in API_KEYS.items()]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"keys": keys}, f, indent=1)


def _client(address=ADDRESS, **kw):
    """A Client that never picks a key up from the environment unless given one."""
    kw.setdefault("api_key", "")
    return Client(address, timeout=kw.pop("timeout", 120.0), **kw)


class SdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = _client()
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
        with _client("127.0.0.1:1", timeout=2.0) as c:
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
        with _client(f"127.0.0.1:{router.port}", timeout=10.0) as c:
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


class _KeyCheckingRouter:
    """A fake router that records each call's `authorization` metadata (None when absent) and
    answers Generate with one token and a summary, or, when `refuse` is (code, message,
    trailing metadata), refuses it before any answer. With `server_credentials` it serves TLS
    and records, per call, the transport security type and the client certificate's common
    name (`peers`: (b"ssl", b"client") or (b"ssl", None) without a client certificate)."""

    def __init__(self, refuse=None, server_credentials=None):
        from concurrent import futures
        from specdec.v1 import router_pb2, router_pb2_grpc

        self.generate_auth = []
        self.info_auth = []
        self.peers = []
        outer = self

        def authorization(context):
            auth = context.auth_context()
            outer.peers.append((auth.get("transport_security_type", [None])[0],
                                auth.get("x509_common_name", [None])[0]))
            values = [v for k, v in context.invocation_metadata() if k == "authorization"]
            return values[0] if len(values) == 1 else (values or None)

        class Servicer(router_pb2_grpc.RouterServicer):
            def GetInfo(self, request, context):
                outer.info_auth.append(authorization(context))
                return router_pb2.RouterInfo(default_max_new_tokens=8)

            def Generate(self, request, context):
                outer.generate_auth.append(authorization(context))
                if refuse is not None:
                    code, message, trailing = refuse
                    context.set_trailing_metadata(trailing)
                    context.abort(code, message)
                chunk = router_pb2.GenerateResponse()
                chunk.chunk.token_ids.append(7)
                yield chunk
                done = router_pb2.GenerateResponse()
                done.summary.usage.completion_tokens = 1
                yield done

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        router_pb2_grpc.add_RouterServicer_to_server(Servicer(), self.server)
        if server_credentials is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = self.server.add_secure_port("127.0.0.1:0", server_credentials)
        self.address = f"127.0.0.1:{self.port}"
        self.server.start()

    def stop(self):
        self.server.stop(None)


class ApiKeyTest(unittest.TestCase):
    """The api_key option and retry hints, against _KeyCheckingRouter."""

    def setUp(self):
        self.router = None

    def tearDown(self):
        if self.router is not None:
            self.router.stop()

    def _calls(self, refuse=None, **client_kw):
        """generate() and one streamed generation (and info()) through a Client(**client_kw);
        the authorization values the router saw on Generate and on GetInfo."""
        self.router = _KeyCheckingRouter(refuse)
        with Client(self.router.address, timeout=10.0, **client_kw) as c:
            opts = GenerateOptions(max_new_tokens=1)
            self.assertEqual(c.generate([1, 2], opts).tokens, [7])
            self.assertEqual([t for ch in c.generate_stream("hi", opts) for t in ch.token_ids], [7])
            c.info()
        return self.router.generate_auth, self.router.info_auth

    def test_api_key_goes_with_every_generate_call(self):
        with mock.patch.dict(os.environ, {API_KEY_ENV: "from-env"}):
            gen, info = self._calls(api_key="sk-live_0123.abc~")
        self.assertEqual(gen, ["Bearer sk-live_0123.abc~"] * 2)
        self.assertEqual(info, [None])  # GetInfo needs no key and gets none

    def test_environment_fallback(self):
        self.assertEqual(API_KEY_ENV, "SPECDEC_API_KEY")
        with mock.patch.dict(os.environ, {API_KEY_ENV: "env-key-1"}):
            gen, info = self._calls()
        self.assertEqual(gen, ["Bearer env-key-1"] * 2)
        self.assertEqual(info, [None])

    def test_empty_key_sends_none_whatever_the_environment(self):
        with mock.patch.dict(os.environ, {API_KEY_ENV: "env-key-2"}):
            gen, _ = self._calls(api_key="")
        self.assertEqual(gen, [None, None])
        env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
        with mock.patch.dict(os.environ, env, clear=True):
            self.router.stop()
            gen, _ = self._calls()
        self.assertEqual(gen, [None, None])
        with mock.patch.dict(os.environ, {API_KEY_ENV: ""}):
            self.router.stop()
            gen, _ = self._calls()
        self.assertEqual(gen, [None, None])

    def test_has_api_key(self):
        def has_key(**kw):
            with Client("127.0.0.1:1", **kw) as c:
                return c.has_api_key
        with mock.patch.dict(os.environ, {API_KEY_ENV: ""}):
            self.assertFalse(has_key())
            self.assertTrue(has_key(api_key="k"))
        with mock.patch.dict(os.environ, {API_KEY_ENV: "k"}):
            self.assertTrue(has_key())
            self.assertFalse(has_key(api_key=""))

    def test_bad_keys_raise_value_error_without_the_key(self):
        for bad in ("two words", "tab\there", "line\n", "kl\u00fcssel", " lead", "trail "):
            with self.subTest(key=repr(bad)):
                with self.assertRaises(ValueError) as cm:
                    Client("127.0.0.1:1", api_key=bad)
                self.assertEqual(str(cm.exception), "api_key must be printable ASCII without "
                                                    "spaces or control characters")
        with self.assertRaises(ValueError) as cm:
            Client("127.0.0.1:1", api_key=b"bytes-key")
        self.assertEqual(str(cm.exception), "api_key must be a str, got bytes")
        with mock.patch.dict(os.environ, {API_KEY_ENV: "secret value"}):
            with self.assertRaises(ValueError) as cm:
                Client("127.0.0.1:1")
        self.assertEqual(str(cm.exception), "SPECDEC_API_KEY must be printable ASCII without "
                                            "spaces or control characters")

    def _refused(self, code, message, trailing):
        """The SpecdecErrors of generate() and of iterating generate_stream() against a router
        refusing every Generate call with (code, message, trailing metadata)."""
        self.router = _KeyCheckingRouter((code, message, trailing))
        errors = []
        with Client(self.router.address, timeout=10.0, api_key="k1") as c:
            with self.assertRaises(SpecdecError) as cm:
                c.generate([1], GenerateOptions(max_new_tokens=1))
            errors.append(cm.exception)
            with self.assertRaises(SpecdecError) as cm:
                list(c.generate_stream("x", GenerateOptions(max_new_tokens=1)))
            errors.append(cm.exception)
        self.assertEqual(self.router.generate_auth, ["Bearer k1"] * 2)  # not retried
        return errors

    def test_retry_after_from_trailing_metadata(self):
        message = "API key team-a is over its 60 tokens per minute; retry in 1.5 s"
        for e in self._refused(grpc.StatusCode.RESOURCE_EXHAUSTED, message,
                               (("retry-after-ms", "1500"),)):
            self.assertEqual(e.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(e.code_name, "RESOURCE_EXHAUSTED")
            self.assertEqual(e.message, message)
            self.assertEqual(e.retry_after_s, 1.5)
            self.assertEqual(str(e), f"RESOURCE_EXHAUSTED: {message}")
        self.router.stop()
        for e in self._refused(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy",
                               (("retry-after-ms", "1"),)):
            self.assertEqual(e.retry_after_s, 0.001)

    def test_no_or_malformed_retry_hint_is_none(self):
        cases = [
            (grpc.StatusCode.RESOURCE_EXHAUSTED, ()),
            (grpc.StatusCode.RESOURCE_EXHAUSTED, (("retry-after-ms", "soon"),)),
            (grpc.StatusCode.RESOURCE_EXHAUSTED, (("retry-after-ms", "-5"),)),
            (grpc.StatusCode.RESOURCE_EXHAUSTED, (("retry-after-ms", "1.5"),)),
            (grpc.StatusCode.RESOURCE_EXHAUSTED, (("retry-after", "3"),)),
            (grpc.StatusCode.UNAUTHENTICATED, ()),
            (grpc.StatusCode.PERMISSION_DENIED, ()),
        ]
        for code, trailing in cases:
            with self.subTest(code=code.name, trailing=trailing):
                for e in self._refused(code, "no", trailing):
                    self.assertEqual(e.code, code)
                    self.assertIsNone(e.retry_after_s)
                self.router.stop()
                self.router = None
        self.assertIsNone(SpecdecError(grpc.StatusCode.INTERNAL, "x").retry_after_s)


def make_test_certs(directory):
    """Makes the TLS test certificates (tests/services/common/make_test_certs.sh) in `directory`.
    Raises RuntimeError, saying so, when openssl is missing or the script fails."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the TLS tests need openssl to make their certificates "
                           "(apt-get install openssl)")
    script = os.path.join(_REPO, "tests", "services", "common", "make_test_certs.sh")
    run = subprocess.run(["bash", script, directory], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{script} {directory} failed (exit {run.returncode}): "
                           f"{run.stderr.strip()}")
    return {name: os.path.join(directory, name) for name in os.listdir(directory)}


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _tls_server_credentials(certs, require_client_auth):
    """server.pem/server.key; with `require_client_auth`, clients must present a certificate
    signed by ca.pem."""
    return grpc.ssl_server_credentials(
        [(_read(certs["server.key"]), _read(certs["server.pem"]))],
        root_certificates=_read(certs["ca.pem"]) if require_client_auth else None,
        require_client_auth=require_client_auth)


class TlsTest(unittest.TestCase):
    """tls_ca / tls_cert / tls_key against _KeyCheckingRouter serving TLS with the certificates
    of make_test_certs.sh (a fresh set per run, in a temporary directory)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="specdec-sdk-tls.")
        try:
            cls.certs = make_test_certs(cls.tmp)
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.router = None

    def tearDown(self):
        if self.router is not None:
            self.router.stop()

    def serve(self, require_client_auth=False):
        if self.router is not None:
            self.router.stop()
        self.router = _KeyCheckingRouter(
            server_credentials=_tls_server_credentials(self.certs, require_client_auth))
        return self.router

    def pem(self, name):
        return self.certs[name]

    def client(self, **kw):
        kw.setdefault("api_key", "")
        return Client(self.router.address, timeout=10.0, **kw)

    def assert_served(self, c):
        """generate(), a streamed generation and info() through `c` all succeed."""
        opts = GenerateOptions(max_new_tokens=1)
        self.assertEqual(c.generate([1, 2], opts).tokens, [7])
        self.assertEqual([t for ch in c.generate_stream("hi", opts) for t in ch.token_ids], [7])
        self.assertEqual(c.info().default_max_new_tokens, 8)

    def assert_refused(self, c, reason=None):
        """info() and generate() through `c` fail UNAVAILABLE (the handshake failed) and the
        router never saw a call; `reason` must then be in the error's message."""
        with self.assertRaises(SpecdecError) as cm:
            c.info()
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
        if reason is not None:
            self.assertIn(reason, cm.exception.message)
        with self.assertRaises(SpecdecError) as cm:
            c.generate([1], GenerateOptions(max_new_tokens=1))
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual((self.router.info_auth, self.router.generate_auth), ([], []))

    def test_tls_with_the_right_ca(self):
        self.serve()
        with self.client(tls_ca=self.pem("ca.pem"), api_key="k-tls") as c:
            self.assertTrue(c.uses_tls)
            self.assertFalse(c.has_client_cert)
            self.assert_served(c)
        self.assertEqual(self.router.generate_auth, ["Bearer k-tls"] * 2)  # keys go over TLS too
        self.assertEqual(self.router.info_auth, [None])
        self.assertEqual(self.router.peers, [(b"ssl", None)] * 3)

    def test_tls_ca_may_be_a_path_object(self):
        import pathlib
        self.serve()
        with self.client(tls_ca=pathlib.Path(self.pem("ca.pem"))) as c:
            self.assertEqual(c.info().default_max_new_tokens, 8)

    def test_tls_fails_against_another_ca(self):
        self.serve()
        with self.client(tls_ca=self.pem("other_ca.pem")) as c:
            self.assertTrue(c.uses_tls)
            self.assert_refused(c, "certificate verify failed")

    def test_plaintext_and_tls_do_not_mix(self):
        self.serve()
        with self.client() as c:  # plaintext client, TLS router
            self.assertFalse(c.uses_tls)
            self.assert_refused(c)
        self.router.stop()
        self.router = _KeyCheckingRouter()  # TLS client, plaintext router
        with self.client(tls_ca=self.pem("ca.pem")) as c:
            self.assert_refused(c)

    def test_mtls_with_the_client_certificate(self):
        self.serve(require_client_auth=True)
        with self.client(tls_ca=self.pem("ca.pem"), tls_cert=self.pem("client.pem"),
                         tls_key=self.pem("client.key")) as c:
            self.assertTrue(c.uses_tls)
            self.assertTrue(c.has_client_cert)
            self.assert_served(c)
        self.assertEqual(self.router.peers, [(b"ssl", b"client")] * 3)

    def test_mtls_fails_without_a_client_certificate(self):
        self.serve(require_client_auth=True)
        with self.client(tls_ca=self.pem("ca.pem")) as c:
            self.assert_refused(c)

    def test_mtls_fails_with_a_certificate_the_router_does_not_trust(self):
        for name in ("other_client", "expired_client"):
            with self.subTest(cert=name):
                self.serve(require_client_auth=True)
                with self.client(tls_ca=self.pem("ca.pem"), tls_cert=self.pem(f"{name}.pem"),
                                 tls_key=self.pem(f"{name}.key")) as c:
                    self.assert_refused(c)

    def test_bad_tls_options_raise_value_error(self):
        ca, cert, key = self.pem("ca.pem"), self.pem("client.pem"), self.pem("client.key")
        missing = os.path.join(self.tmp, "missing.pem")
        not_pem = os.path.join(self.tmp, "not_pem.key")
        with open(not_pem, "w", encoding="ascii") as f:
            f.write("private-key-material-0xSECRET\n")
        cases = [
            (dict(tls_ca=ca, tls_cert=cert),
             "tls_cert needs tls_key: a client certificate goes with its private key"),
            (dict(tls_ca=ca, tls_key=key),
             "tls_key needs tls_cert: a client certificate goes with its private key"),
            (dict(tls_cert=cert),
             "tls_cert needs tls_key: a client certificate goes with its private key"),
            (dict(tls_cert=cert, tls_key=key),
             "tls_cert and tls_key need tls_ca (the CA that signed the router's certificate)"),
            (dict(tls_ca=missing),
             f"tls_ca: cannot read {missing!r}: No such file or directory"),
            (dict(tls_ca=ca, tls_cert=missing, tls_key=key),
             f"tls_cert: cannot read {missing!r}: No such file or directory"),
            (dict(tls_ca=ca, tls_cert=cert, tls_key=self.tmp),
             f"tls_key: cannot read {self.tmp!r}: Is a directory"),
            (dict(tls_ca=ca, tls_cert=cert, tls_key=not_pem),
             f"tls_key: {not_pem!r} is not a PEM file (no '-----BEGIN' line)"),
            (dict(tls_ca=""), "tls_ca must be a non-empty path"),
            (dict(tls_ca=_read(ca)), "tls_ca must be a path (str or os.PathLike), got bytes"),
        ]
        for kw, message in cases:
            with self.subTest(**{k: os.path.basename(str(v)) for k, v in kw.items()}):
                with self.assertRaises(ValueError) as cm:
                    Client("127.0.0.1:1", api_key="", **kw)
                self.assertEqual(str(cm.exception), message)
        channel = grpc.insecure_channel("127.0.0.1:1")
        try:
            with self.assertRaises(ValueError) as cm:
                Client("127.0.0.1:1", api_key="", channel=channel, tls_ca=ca)
            self.assertEqual(str(cm.exception), "tls_ca, tls_cert and tls_key go with an address, "
                                                "not with channel (give the channel its own "
                                                "credentials)")
        finally:
            channel.close()


@unittest.skipUnless(os.environ.get("SPECDEC_KEYED_ROUTER") == "1",
                     "needs a router started with the keys file of write_api_keys "
                     "(run_test.sh; SPECDEC_KEYED_ROUTER=1)")
class KeyedRouterTest(unittest.TestCase):
    """A real router started with --api-keys (SPECDEC_API_KEYS) and write_api_keys' file.
    It must be freshly started: the metered key stays in debt for minutes after a run."""

    @classmethod
    def setUpClass(cls):
        cls.anonymous = _client()
        deadline = time.monotonic() + 60
        while True:  # GetInfo needs no key; it is UNAVAILABLE until the target is up
            try:
                cls.info = cls.anonymous.info(timeout=5)
                break
            except SpecdecError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"router at {ADDRESS} never became ready: {e}")
                time.sleep(0.5)

    @classmethod
    def tearDownClass(cls):
        cls.anonymous.close()

    def keyed(self, kid):
        return _client(api_key=API_KEYS[kid][0])

    def test_info_needs_no_key(self):
        self.assertIn("AR", self.info.methods)

    def test_no_key_is_unauthenticated(self):
        with self.assertRaises(SpecdecError) as cm:
            self.anonymous.generate(PROMPT, GenerateOptions(max_new_tokens=4))
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(cm.exception.message,
                         'an API key is required: send it as "Authorization: Bearer <key>"')
        self.assertIsNone(cm.exception.retry_after_s)

    def test_unknown_key_is_unauthenticated(self):
        with _client(api_key="sdk-test-key-unknown") as c:
            with self.assertRaises(SpecdecError) as cm:
                list(c.generate_stream(PROMPT, GenerateOptions(max_new_tokens=4)))
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(cm.exception.message, "the API key is not valid")

    def test_right_key_gets_tokens(self):
        opts = GenerateOptions(method="AR", max_new_tokens=N, ignore_eos=True)
        with self.keyed("sdk-ok") as c:
            r = c.generate(PROMPT, opts)
            self.assertEqual(len(r.tokens), N)
            self.assertEqual(r.summary.completion_tokens, N)
            self.assertTrue(r.text)
            streamed = [t for ch in c.generate_stream(PROMPT, opts) for t in ch.token_ids]
        self.assertEqual(streamed, r.tokens)

    def test_key_from_the_environment(self):
        with mock.patch.dict(os.environ, {API_KEY_ENV: API_KEYS["sdk-ok"][0]}):
            c = Client(ADDRESS, timeout=120.0)
        with c:
            r = c.generate(PROMPT, GenerateOptions(method="AR", max_new_tokens=4, ignore_eos=True))
        self.assertEqual(len(r.tokens), 4)

    def test_revoked_key_is_permission_denied(self):
        with self.keyed("sdk-revoked") as c:
            with self.assertRaises(SpecdecError) as cm:
                c.generate(PROMPT, GenerateOptions(max_new_tokens=4))
        self.assertEqual(cm.exception.code, grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(cm.exception.message, "API key sdk-revoked is revoked")
        self.assertIsNone(cm.exception.retry_after_s)

    def test_over_the_token_rate_gives_a_retry_hint(self):
        # 1 token per minute: the first request is admitted (a full bucket of 1 token) and
        # charged prompt + completion tokens; the next one is refused until the debt is repaid.
        t0 = time.monotonic()
        with self.keyed("sdk-metered") as c:
            r = c.generate(PROMPT, GenerateOptions(method="AR", max_new_tokens=4,
                                                   ignore_eos=True))
            with self.assertRaises(SpecdecError) as cm:
                c.generate(PROMPT, GenerateOptions(method="AR", max_new_tokens=4))
        elapsed_s = time.monotonic() - t0
        e = cm.exception
        self.assertEqual(e.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        debt = r.summary.prompt_tokens + r.summary.completion_tokens - 1
        # wait = ceil(debt minutes - the refill since the first call) + 1 ms
        upper = (debt * 60000 + 1) / 1000.0
        self.assertLessEqual(e.retry_after_s, upper)
        self.assertGreaterEqual(e.retry_after_s, upper - elapsed_s - 0.002)
        self.assertEqual(e.message, "API key sdk-metered is over its 1 tokens per minute; "
                                    f"retry in {e.retry_after_s:.1f} s")

    def test_over_the_concurrency_gives_a_retry_hint(self):
        # A long request (about 0.6 s here) holds the key's one slot while a second call is made
        # a few ms after its first chunk. Should the long one ever end first anyway, try again:
        # a router that does not enforce the limit lets all three attempts through.
        long_opts = GenerateOptions(method="DRAFT_CHAIN", max_new_tokens=480, ignore_eos=True)
        refusal = None
        with self.keyed("sdk-single") as c:
            for _ in range(3):
                with c.generate_stream(PROMPT, long_opts) as first:
                    next(iter(first))
                    try:
                        c.generate(PROMPT, GenerateOptions(max_new_tokens=1))
                    except SpecdecError as e:
                        refusal = e
                if refusal is not None:
                    break
                time.sleep(0.2)  # the cancelled long request releases the slot
        self.assertIsNotNone(refusal, "a second request at once was admitted three times")
        self.assertEqual(refusal.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(refusal.retry_after_s, 1.0)
        self.assertEqual(refusal.message, "API key sdk-single has its 1 concurrent requests "
                                          "running; retry later")


@unittest.skipUnless(os.environ.get("SPECDEC_TLS_CERTS"),
                     "needs a router serving mTLS with the certificates of make_test_certs.sh in "
                     "SPECDEC_TLS_CERTS (run_test.sh)")
class TlsRouterTest(unittest.TestCase):
    """A real router started with --tls-cert server.pem --tls-key server.key --tls-client-ca
    ca.pem, the files of make_test_certs.sh in the directory SPECDEC_TLS_CERTS."""

    @classmethod
    def setUpClass(cls):
        d = os.environ["SPECDEC_TLS_CERTS"]
        cls.certs = {n: os.path.join(d, n) for n in os.listdir(d)}
        cls.client = cls.mtls("client")
        deadline = time.monotonic() + 60
        while True:  # GetInfo is UNAVAILABLE until the target is up
            try:
                cls.info = cls.client.info(timeout=5)
                break
            except SpecdecError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"router at {ADDRESS} never answered over mTLS: {e}")
                time.sleep(0.5)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    @classmethod
    def mtls(cls, name, ca="ca.pem"):
        return _client(tls_ca=cls.certs[ca], tls_cert=cls.certs[f"{name}.pem"],
                       tls_key=cls.certs[f"{name}.key"])

    def test_generate_over_mtls(self):
        self.assertIn("AR", self.info.methods)
        opts = GenerateOptions(method="AR", max_new_tokens=N, ignore_eos=True)
        r = self.client.generate(PROMPT, opts)
        self.assertEqual(len(r.tokens), N)
        self.assertEqual(r.summary.completion_tokens, N)
        streamed = [t for ch in self.client.generate_stream(PROMPT, opts) for t in ch.token_ids]
        self.assertEqual(streamed, r.tokens)

    def assert_refused(self, c):
        with c:
            with self.assertRaises(SpecdecError) as cm:
                c.info(timeout=10)
            self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
            with self.assertRaises(SpecdecError) as cm:
                c.generate(PROMPT, GenerateOptions(max_new_tokens=2), timeout=10)
            self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_without_a_client_certificate_is_refused(self):
        self.assert_refused(_client(tls_ca=self.certs["ca.pem"]))

    def test_a_client_certificate_of_another_ca_is_refused(self):
        self.assert_refused(self.mtls("other_client"))

    def test_an_expired_client_certificate_is_refused(self):
        self.assert_refused(self.mtls("expired_client"))

    def test_the_wrong_ca_is_refused(self):
        self.assert_refused(self.mtls("client", ca="other_ca.pem"))

    def test_plaintext_is_refused(self):
        self.assert_refused(_client())


def main(argv):
    if len(argv) == 3 and argv[1] == "--write-api-keys":
        write_api_keys(argv[2])
        return 0
    unittest.main(argv=argv, verbosity=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
