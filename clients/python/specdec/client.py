"""Python client of the specdec router (service specdec.v1.Router).

Usage::

    from specdec import Client, GenerateOptions

    with Client("127.0.0.1:50050") as client:
        opts = GenerateOptions(method="DRAFT_CHAIN", max_new_tokens=64)
        stream = client.generate_stream("Once upon a time", opts)
        for chunk in stream:                  # Chunk(token_ids, text, index, step)
            print(chunk.text, end="", flush=True)
        print("\\ntau =", stream.summary.tau)  # Summary, set once the stream has ended

        result = client.generate([1, 403, 407], opts)   # token-id prompt, whole Result at once
        print(result.tokens, result.text, result.tau, result.finish_reason)

Every gRPC failure surfaces as :class:`SpecdecError` (``.code`` is a ``grpc.StatusCode``,
``.code_name`` its name such as ``"INVALID_ARGUMENT"``, ``.message`` the server's text,
``.retry_after_s`` the router's retry hint or None). Options are validated locally first and
raise ``ValueError``.

A router started with ``--api-keys`` requires a key on every Generate call:
``Client(address, api_key="...")``, or the environment variable ``SPECDEC_API_KEY`` when no
``api_key`` is given. It is sent as ``authorization: Bearer <key>`` call metadata.

A router serving TLS (``--tls-cert``/``--tls-key``) is reached with
``Client(address, tls_ca="ca.pem")``; one that also requires client certificates
(``--tls-client-ca``, mTLS) with ``tls_cert="client.pem", tls_key="client.key"`` as well.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from .v1 import common_pb2, router_pb2, router_pb2_grpc

__all__ = [
    "METHODS", "API_KEY_ENV", "GenerateOptions", "StepStats", "Chunk", "Summary", "Result",
    "ModelInfo", "Info", "GenerateStream", "SpecdecError", "Client",
]

# Decoding methods by name (common.proto enum Method). "DEFAULT" asks the router for its default.
METHODS = ("AR", "DRAFT_CHAIN", "DYSPEC_TREE", "DFLASH", "DFLASH_ADAPTIVE", "NGRAM", "DEFAULT")
_MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # common.proto: clients raise their receive limit to 64 MB
# The environment variable read for the API key when Client() gets no api_key.
API_KEY_ENV = "SPECDEC_API_KEY"
# Trailing metadata of a refusal (RESOURCE_EXHAUSTED over an API key's limits): when to retry.
_RETRY_AFTER_KEY = "retry-after-ms"
# A call that fails UNAVAILABLE before the router answered anything (e.g. it raced the GOAWAY of
# a connection the router recycles) is tried again, at most twice; once a response has arrived
# gRPC never retries, so no token is ever delivered twice.
_SERVICE_CONFIG = json.dumps({"methodConfig": [{
    "name": [{"service": "specdec.v1.Router"}],
    "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "0.5s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]},
}]})


def _method_name(value: int) -> str:
    if value == common_pb2.METHOD_UNSPECIFIED:
        return "DEFAULT"
    return common_pb2.Method.Name(value)


class SpecdecError(Exception):
    """A gRPC error from the router (or a broken stream).

    Attributes: ``code`` (``grpc.StatusCode``), ``code_name`` (e.g. ``"INVALID_ARGUMENT"``),
    ``message`` (the server's details), ``retry_after_s`` (float seconds: the router's retry
    hint, trailing metadata ``retry-after-ms``, sent with ``RESOURCE_EXHAUSTED`` when an API key
    is over its limits; None when the error carries none).
    """

    def __init__(self, code: grpc.StatusCode, message: str,
                 retry_after_s: Optional[float] = None):
        self.code = code
        self.code_name = code.name if isinstance(code, grpc.StatusCode) else str(code)
        self.message = message
        self.retry_after_s = retry_after_s
        super().__init__(f"{self.code_name}: {message}")

    @classmethod
    def from_rpc_error(cls, e: grpc.RpcError) -> "SpecdecError":
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        details = e.details() if hasattr(e, "details") else str(e)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "", _retry_after_s(e))


def _retry_after_s(e: grpc.RpcError) -> Optional[float]:
    """The ``retry-after-ms`` trailing metadata of a failed call in seconds; None when it is
    absent or not a non-negative integer."""
    try:
        trailing = e.trailing_metadata() if hasattr(e, "trailing_metadata") else None
    except Exception:  # noqa: BLE001 - an error object without a finished call
        return None
    for item in trailing or ():
        key, value = item[0], item[1]
        if key != _RETRY_AFTER_KEY:
            continue
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        value = str(value).strip()
        if not (value.isascii() and value.isdigit()):
            return None
        return int(value) / 1000.0
    return None


def _authorization(api_key: Optional[str]) -> Optional[Tuple[Tuple[str, str], ...]]:
    """The call metadata presenting ``api_key`` (None: from $SPECDEC_API_KEY; "": no key)."""
    source = "api_key"
    if api_key is None:
        api_key, source = os.environ.get(API_KEY_ENV, ""), API_KEY_ENV
    if not isinstance(api_key, str):
        raise ValueError(f"api_key must be a str, got {type(api_key).__name__}")
    if not api_key:
        return None
    # gRPC metadata values are printable ASCII; the router strips spaces around the key.
    # The key itself is never put into the message.
    if not all("!" <= ch <= "~" for ch in api_key):
        raise ValueError(f"{source} must be printable ASCII without spaces or control characters")
    return (("authorization", f"Bearer {api_key}"),)


def _read_pem(option: str, path) -> bytes:
    """The bytes of the PEM file ``path`` given as ``option``. ``ValueError`` naming the option
    and the path (never the file's contents) when it is not a path, cannot be read, or holds no
    PEM block."""
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{option} must be a path (str or os.PathLike), "
                         f"got {type(path).__name__}")
    path = os.fspath(path)
    if not path:
        raise ValueError(f"{option} must be a non-empty path")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"{option}: cannot read {path!r}: "
                         f"{e.strerror or type(e).__name__}") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"{option}: {path!r} is not a PEM file (no '-----BEGIN' line)")
    return data


def _tls_credentials(tls_ca, tls_cert, tls_key) -> Optional[grpc.ChannelCredentials]:
    """The channel credentials of the TLS options (None: none given, plaintext).
    ``tls_ca`` alone: TLS, the router's certificate checked against that CA; with ``tls_cert``
    and ``tls_key`` the client also presents that certificate (mTLS)."""
    if tls_ca is None and tls_cert is None and tls_key is None:
        return None
    if (tls_cert is None) != (tls_key is None):
        given, missing = ("tls_cert", "tls_key") if tls_key is None else ("tls_key", "tls_cert")
        raise ValueError(f"{given} needs {missing}: a client certificate goes with its private key")
    if tls_ca is None:
        raise ValueError("tls_cert and tls_key need tls_ca (the CA that signed the router's "
                         "certificate)")
    root = _read_pem("tls_ca", tls_ca)
    chain = _read_pem("tls_cert", tls_cert) if tls_cert is not None else None
    key = _read_pem("tls_key", tls_key) if tls_key is not None else None
    return grpc.ssl_channel_credentials(root_certificates=root, private_key=key,
                                        certificate_chain=chain)


def _check_int(name: str, value, lo: int, hi: int, zero_ok: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if zero_ok and value == 0:
        return
    if not lo <= value <= hi:
        allowed = f"0 or {lo}..{hi}" if zero_ok else f"{lo}..{hi}"
        raise ValueError(f"{name} = {value} is out of range (allowed: {allowed})")


def _check_float(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


@dataclass(frozen=True)
class GenerateOptions:
    """Options of one generation; validated on construction (``ValueError`` on a bad value).

    Ranges follow router.proto / common.proto. 0 for ``max_new_tokens``, ``block_size``,
    ``draft_length``, ``tree_budget``, ``tree_max_depth`` means "the server's default".
    Use ``dataclasses.replace(opts, method="AR")`` to derive variants.
    """

    method: str = "AR"              # one of METHODS (case-insensitive)
    max_new_tokens: int = 128       # 1..max_context - prompt length (the server checks the upper bound)
    temperature: float = 0.0        # 0 = greedy, else (0, 100]
    top_k: int = 0                  # 0 = off, else >= 1
    top_p: float = 1.0              # (0, 1]
    seed: int = 0                   # 0..2**64-1
    stop_token_ids: Sequence[int] = ()  # extra stop tokens (besides EOS unless ignore_eos)
    ignore_eos: bool = False
    block_size: int = 0             # DFLASH*: 0 or 2..256
    draft_length: int = 0           # DRAFT_CHAIN: 0 or 1..64
    tree_budget: int = 0            # DYSPEC_TREE: 0 or 1..512
    tree_max_depth: int = 0         # DYSPEC_TREE: 0 or 1..64
    tree_threshold: float = 0.0     # DYSPEC_TREE: 0 = greedy tree, else (0, 1)
    stop: Sequence[str] = ()        # stop strings: at most 16, each 1..256 UTF-8 bytes
    request_id: str = ""            # optional, echoed in the Summary

    def __post_init__(self):
        if not isinstance(self.method, str):
            raise ValueError(f"method must be a str, one of {', '.join(METHODS)}; got {self.method!r}")
        method = self.method.strip().upper()
        if method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; expected one of {', '.join(METHODS)}")
        object.__setattr__(self, "method", method)
        _check_int("max_new_tokens", self.max_new_tokens, 1, 2**31 - 1, zero_ok=True)
        t = _check_float("temperature", self.temperature)
        if not (t == 0.0 or 0.0 < t <= 100.0):
            raise ValueError(f"temperature = {t} is out of range (allowed: 0 for greedy, or (0, 100])")
        object.__setattr__(self, "temperature", t)
        _check_int("top_k", self.top_k, 0, 2**31 - 1)
        p = _check_float("top_p", self.top_p)
        if not 0.0 < p <= 1.0:
            raise ValueError(f"top_p = {p} is out of range (allowed: (0, 1])")
        object.__setattr__(self, "top_p", p)
        _check_int("seed", self.seed, 0, 2**64 - 1)
        if isinstance(self.stop_token_ids, (str, bytes)) or not isinstance(self.stop_token_ids, (list, tuple)):
            raise ValueError(f"stop_token_ids must be a list of ints, got {self.stop_token_ids!r}")
        for i, tok in enumerate(self.stop_token_ids):
            _check_int(f"stop_token_ids[{i}]", tok, 0, 2**31 - 1)
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be a bool, got {self.ignore_eos!r}")
        _check_int("block_size", self.block_size, 2, 256, zero_ok=True)
        _check_int("draft_length", self.draft_length, 1, 64, zero_ok=True)
        _check_int("tree_budget", self.tree_budget, 1, 512, zero_ok=True)
        _check_int("tree_max_depth", self.tree_max_depth, 1, 64, zero_ok=True)
        th = _check_float("tree_threshold", self.tree_threshold)
        if not (th == 0.0 or 0.0 < th < 1.0):
            raise ValueError(f"tree_threshold = {th} is out of range (allowed: 0, or (0, 1))")
        object.__setattr__(self, "tree_threshold", th)
        if isinstance(self.stop, (str, bytes)) or not isinstance(self.stop, (list, tuple)):
            raise ValueError(f"stop must be a list of strings, got {self.stop!r}")
        if len(self.stop) > 16:
            raise ValueError(f"stop has {len(self.stop)} strings (at most 16)")
        for i, s in enumerate(self.stop):
            if not isinstance(s, str) or not 1 <= len(s.encode("utf-8")) <= 256:
                raise ValueError(f"stop[{i}] must be a string of 1..256 UTF-8 bytes, got {s!r}")
        object.__setattr__(self, "stop", tuple(self.stop))
        if not isinstance(self.request_id, str):
            raise ValueError(f"request_id must be a str, got {self.request_id!r}")

    def to_proto(self, prompt: Union[str, Sequence[int]]) -> "router_pb2.GenerateRequest":
        """The GenerateRequest for ``prompt`` (text, or token ids) with these options."""
        req = router_pb2.GenerateRequest(
            method=(common_pb2.METHOD_UNSPECIFIED if self.method == "DEFAULT"
                    else common_pb2.Method.Value(self.method)),
            sampling=common_pb2.SamplingParams(temperature=self.temperature, top_k=self.top_k,
                                               top_p=self.top_p, seed=self.seed),
            max_new_tokens=self.max_new_tokens,
            stop_token_ids=list(self.stop_token_ids),
            stop=[s.encode("utf-8") for s in self.stop],
            block_size=self.block_size,
            draft_length=self.draft_length,
            tree_budget=self.tree_budget,
            tree_max_depth=self.tree_max_depth,
            tree_threshold=self.tree_threshold,
            ignore_eos=self.ignore_eos,
            return_text=True,
            request_id=self.request_id.encode("utf-8"),
        )
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("prompt must be a non-empty string or a non-empty list of token ids")
            req.text = prompt.encode("utf-8")
        elif isinstance(prompt, (list, tuple)):
            if not prompt:
                raise ValueError("prompt must be a non-empty string or a non-empty list of token ids")
            for i, tok in enumerate(prompt):
                _check_int(f"prompt[{i}]", tok, 0, 2**31 - 1)
            req.token_ids.ids.extend(prompt)
        else:
            raise ValueError(f"prompt must be a str or a list of int token ids, got {type(prompt).__name__}")
        return req


@dataclass(frozen=True)
class StepStats:
    """One target verify step (common.proto StepStats)."""
    drafted: int
    accepted: int
    committed: int
    block_size: int
    draft_ms: float
    verify_ms: float
    network_ms: float
    batch_size: int

    @classmethod
    def from_proto(cls, s) -> "StepStats":
        return cls(s.drafted, s.accepted, s.committed, s.block_size, s.draft_ms, s.verify_ms,
                   s.network_ms, s.batch_size)


@dataclass(frozen=True)
class Chunk:
    """Tokens committed by one target step. ``step`` is None for the prefill's first token."""
    token_ids: Tuple[int, ...]
    text: str
    index: int                  # position of token_ids[0] in the completion
    step: Optional[StepStats] = None


@dataclass(frozen=True)
class Summary:
    """The final statistics of a successful generation (router.proto Summary + RequestStats)."""
    method: str                 # the method actually run, e.g. "DRAFT_CHAIN"
    finish_reason: str          # "LENGTH" or "STOP"
    tau: float                  # committed tokens per verify step (1.0 for AR)
    verify_steps: int
    drafted_tokens: int
    accepted_tokens: int
    committed_tokens: int
    prompt_tokens: int
    completion_tokens: int
    target_passes: int
    stop_token_id: Optional[int]  # the stop token when finish_reason == "STOP" by token
    stop_string: str
    request_id: str
    block_size: int
    drafter_fallback: bool
    policy_fallback: bool
    note: str
    ttft_ms: float
    total_ms: float
    estimated_speedup: float
    raw: object = field(default=None, repr=False, compare=False)  # the router_pb2.Summary

    @classmethod
    def from_proto(cls, s) -> "Summary":
        st, u = s.stats, s.usage
        return cls(
            method=_method_name(st.method),
            finish_reason=router_pb2.FinishReason.Name(s.finish_reason),
            tau=st.tau, verify_steps=st.verify_steps, drafted_tokens=st.drafted_tokens,
            accepted_tokens=st.accepted_tokens, committed_tokens=st.committed_tokens,
            prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens,
            target_passes=u.target_passes,
            stop_token_id=None if s.stop_token_id < 0 else s.stop_token_id,
            stop_string=s.stop_string, request_id=s.request_id, block_size=st.block_size,
            drafter_fallback=st.drafter_fallback, policy_fallback=st.policy_fallback, note=st.note,
            ttft_ms=st.ttft_ms, total_ms=st.timings.total_ms,
            estimated_speedup=st.estimated_speedup, raw=s)


@dataclass(frozen=True)
class Result:
    """A whole generation: the completion's tokens and text, and its Summary."""
    tokens: List[int]
    text: str
    summary: Summary

    @property
    def tau(self) -> float:
        return self.summary.tau

    @property
    def method(self) -> str:
        return self.summary.method

    @property
    def verify_steps(self) -> int:
        return self.summary.verify_steps

    @property
    def finish_reason(self) -> str:
        return self.summary.finish_reason


@dataclass(frozen=True)
class ModelInfo:
    name: str
    architecture: str
    vocab_size: int
    max_context: int
    bos_token_id: int
    eos_token_ids: Tuple[int, ...]
    dtype: str
    device: str
    raw: object = field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, m) -> "ModelInfo":
        return cls(m.name, m.architecture, m.vocab_size, m.max_context, m.bos_token_id,
                   tuple(m.eos_token_ids), m.dtype, m.device, raw=m)


@dataclass(frozen=True)
class Info:
    """What the router serves (router.proto RouterInfo)."""
    methods: Tuple[str, ...]
    default_method: str
    default_max_new_tokens: int
    target: Optional[ModelInfo]
    drafter: Optional[ModelInfo]
    policy: Optional[ModelInfo]
    raw: object = field(default=None, repr=False, compare=False)


class GenerateStream:
    """An iterator over the :class:`Chunk` s of one generation.

    Iterate it to receive chunks as the target commits them. When iteration ends normally,
    ``summary`` holds the :class:`Summary` (it is None before). A gRPC error raises
    :class:`SpecdecError` from the iteration. ``result()`` drains what is left and returns the
    :class:`Result`; ``cancel()`` aborts the RPC. Usable as a context manager (cancels on exit if
    unfinished).
    """

    def __init__(self, call):
        self._call = call
        self.summary: Optional[Summary] = None
        self.tokens: List[int] = []
        self._text: List[str] = []
        self._done = False

    @property
    def text(self) -> str:
        return "".join(self._text)

    def __iter__(self) -> Iterator[Chunk]:
        return self

    def __next__(self) -> Chunk:
        if self._done:
            raise StopIteration
        try:
            while True:
                msg = next(self._call)
                kind = msg.WhichOneof("item")
                if kind == "chunk":
                    c = msg.chunk
                    if c.prompt:  # echo chunk: never requested by this client
                        continue
                    chunk = Chunk(tuple(c.token_ids), c.text, c.index,
                                  StepStats.from_proto(c.step) if c.HasField("step") else None)
                    self.tokens.extend(chunk.token_ids)
                    self._text.append(chunk.text)
                    return chunk
                if kind == "summary":
                    self.summary = Summary.from_proto(msg.summary)
        except StopIteration:
            self._done = True
            if self.summary is None:
                raise SpecdecError(grpc.StatusCode.INTERNAL,
                                   "the Generate stream ended without a Summary") from None
            raise
        except grpc.RpcError as e:
            self._done = True
            raise SpecdecError.from_rpc_error(e) from None

    def result(self) -> Result:
        for _ in self:
            pass
        return Result(list(self.tokens), self.text, self.summary)

    def cancel(self) -> None:
        if not self._done:
            self._done = True
            self._call.cancel()

    def __enter__(self) -> "GenerateStream":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


class Client:
    """A connection to a specdec router at ``address`` ("host:port").

    ``timeout`` is the default per-call deadline in seconds (None: no deadline); each call takes
    an optional ``timeout`` override. Close with ``close()`` or use as a context manager.

    ``api_key`` is presented on every Generate call as ``authorization: Bearer <key>`` metadata
    (routers started with ``--api-keys``; ``GetInfo`` needs no key and is sent none). None (the
    default) takes it from the environment variable ``SPECDEC_API_KEY`` when that is set and not
    empty; ``""`` sends no key whatever the environment says. A key must be printable ASCII
    without spaces (``ValueError`` otherwise, naming ``api_key`` or ``SPECDEC_API_KEY``).

    TLS: ``tls_ca`` is the path of the PEM CA certificate that signed the router's certificate;
    given, the channel is a TLS channel (``grpc.secure_channel``) that checks the router's
    certificate against it and ``address``'s host name or IP. ``tls_cert`` and ``tls_key``
    (PEM paths, both or neither, only with ``tls_ca``) are the client certificate and its key
    presented to a router that requires one (mTLS). None of them (the default): plaintext. The
    files are read here; a missing option, an unreadable or non-PEM file raises ``ValueError``
    naming the option and the path, never the contents. A handshake that fails (wrong CA, no or
    a refused client certificate) surfaces on the first call as ``SpecdecError`` UNAVAILABLE.
    """

    def __init__(self, address: str, timeout: Optional[float] = 120.0, *,
                 api_key: Optional[str] = None, channel: Optional[grpc.Channel] = None,
                 tls_ca: Optional[Union[str, os.PathLike]] = None,
                 tls_cert: Optional[Union[str, os.PathLike]] = None,
                 tls_key: Optional[Union[str, os.PathLike]] = None):
        self.address = address
        self.timeout = timeout
        self._metadata = _authorization(api_key)
        credentials = _tls_credentials(tls_ca, tls_cert, tls_key)
        if channel is not None and credentials is not None:
            raise ValueError("tls_ca, tls_cert and tls_key go with an address, not with channel "
                             "(give the channel its own credentials)")
        self._tls = credentials is not None
        self._mtls = tls_cert is not None
        options = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.enable_retries", 1),
            ("grpc.service_config", _SERVICE_CONFIG),
        ]
        if channel is not None:
            self._channel = channel
        elif credentials is not None:
            self._channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = router_pb2_grpc.RouterStub(self._channel)

    @property
    def uses_tls(self) -> bool:
        """Whether the channel was made with TLS (``tls_ca`` given)."""
        return self._tls

    @property
    def has_client_cert(self) -> bool:
        """Whether the channel presents a client certificate (``tls_cert``/``tls_key``: mTLS)."""
        return self._mtls

    @property
    def has_api_key(self) -> bool:
        """Whether Generate calls present an API key (the key itself is not exposed)."""
        return self._metadata is not None

    def _deadline(self, timeout):
        return self.timeout if timeout is None else timeout

    def info(self, timeout: Optional[float] = None) -> Info:
        """The router's RouterInfo: models, servable methods, defaults."""
        try:
            r = self._stub.GetInfo(common_pb2.GetInfoRequest(), timeout=self._deadline(timeout))
        except grpc.RpcError as e:
            raise SpecdecError.from_rpc_error(e) from None
        return Info(
            methods=tuple(_method_name(m) for m in r.methods),
            default_method=_method_name(r.default_method),
            default_max_new_tokens=r.default_max_new_tokens,
            target=ModelInfo.from_proto(r.target) if r.HasField("target") else None,
            drafter=ModelInfo.from_proto(r.drafter) if r.HasField("drafter") else None,
            policy=ModelInfo.from_proto(r.policy) if r.HasField("policy") else None,
            raw=r)

    def generate_stream(self, prompt: Union[str, Sequence[int]],
                        options: Optional[GenerateOptions] = None,
                        timeout: Optional[float] = None) -> GenerateStream:
        """Starts a generation; returns a :class:`GenerateStream` of chunks (see there).

        ``prompt`` is text (tokenized by the router) or a list of token ids. Bad options or
        prompts raise ``ValueError`` here, before any RPC.
        """
        options = options if options is not None else GenerateOptions()
        if not isinstance(options, GenerateOptions):
            raise ValueError(f"options must be a GenerateOptions, got {type(options).__name__}")
        request = options.to_proto(prompt)
        try:
            call = self._stub.Generate(request, timeout=self._deadline(timeout),
                                       metadata=self._metadata)
        except grpc.RpcError as e:  # pragma: no cover - errors normally surface on iteration
            raise SpecdecError.from_rpc_error(e) from None
        return GenerateStream(call)

    def generate(self, prompt: Union[str, Sequence[int]],
                 options: Optional[GenerateOptions] = None,
                 timeout: Optional[float] = None) -> Result:
        """Runs a generation to the end and returns its :class:`Result`."""
        return self.generate_stream(prompt, options, timeout).result()

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
