"""The HTTP transport of the load tester: the router's OpenAI-compatible front (``--http URL``).

:class:`HttpClient` has the interface the runner uses of the SDK's ``specdec.Client``:
``generate_stream(prompt, options, timeout)`` returns a stream that yields chunks with
``token_ids`` and ``step``, holds the final ``summary`` once it has ended and stops on
``cancel()``; failures raise :class:`HttpError`, which has the SDK error's ``code_name`` and
``message``. Only the standard library is used (``http.client``), so a load test over HTTP needs
no grpc.

Every request is a streamed ``POST /v1/completions`` on a connection of its own, with
``stream_options.include_usage``; its Server-Sent Events are parsed as they arrive:

- a chunk with choices carries the token ids it commits in ``specdec.token_ids``: the stream
  yields it (chunks without token ids, e.g. a finish chunk with no new token, are not yielded,
  as the gRPC stream yields no empty chunk);
- the usage chunk (``choices: []``) gives the summary: ``usage.completion_tokens`` and the
  ``specdec`` statistics (see :class:`HttpSummary`);
- ``data: [DONE]`` ends the stream (the rest of the response is read, so that the exchange ends
  cleanly); an ``{"error": ...}`` event fails it.

Cancelling closes the connection (``shutdown`` first, so that a thread blocked reading it wakes
up at once), which cancels the request on the router. HTTP statuses and error events map to the
gRPC status names that the gRPC transport reports (``ERROR_CODES``; an error's own ``code`` wins
when it is such a name), so both transports' errors are counted under the same keys.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

# HTTP status -> the gRPC status name recorded as the request's error code.
ERROR_CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
GRPC_CODE_NAMES = frozenset((
    "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
    "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
))
MAX_LINE = 1 << 20  # longest accepted line of the event stream


class HttpError(Exception):
    """A failed HTTP request, or a broken event stream.

    Attributes: ``code_name`` (a gRPC status name such as ``"RESOURCE_EXHAUSTED"``, see
    ``ERROR_CODES``), ``message``, ``status`` (the HTTP status, None when the response had
    started or there was none) and ``retry_after`` (the Retry-After header, if any).
    """

    def __init__(self, code_name: str, message: str, status: Optional[int] = None,
                 retry_after: Optional[str] = None):
        self.code_name = code_name
        self.message = message
        self.status = status
        self.retry_after = retry_after
        super().__init__(f"{code_name}: {message}")


def _code_name(code, status: Optional[int]) -> str:
    if isinstance(code, str) and code.upper() in GRPC_CODE_NAMES:
        return code.upper()
    if isinstance(code, int) and not isinstance(code, bool) and code in ERROR_CODES:
        return ERROR_CODES[code]
    if status is None:
        return "UNKNOWN"
    return ERROR_CODES.get(status, f"HTTP_{status}")


def error_from_response(status: int, body: bytes, retry_after: Optional[str] = None) -> HttpError:
    """The error of a non-200 response: its OpenAI-shaped body
    ``{"error": {"message", "type", "param", "code"}}`` (or any other body, quoted)."""
    text = body.decode("utf-8", "replace")
    message, code = text.strip()[:300], None
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
        err = obj["error"]
        message, code = str(err.get("message") or err.get("type") or ""), err.get("code")
    if retry_after:
        message += f" (Retry-After: {retry_after})"
    return HttpError(_code_name(code, status), f"HTTP {status}: {message}", status, retry_after)


def error_from_event(event: Dict[str, object]) -> HttpError:
    """The error of an ``{"error": {...}}`` event inside a stream that had started (HTTP 200)."""
    err = event.get("error")
    if not isinstance(err, dict):
        return HttpError("UNKNOWN", f"error event: {json.dumps(event)[:300]}")
    return HttpError(_code_name(err.get("code"), None),
                     f"error event: {err.get('message') or err.get('type') or ''}")


class SseParser:
    """Server-Sent Events, line by line: ``feed(line)`` returns the data of the event that a
    blank line completes (``data:`` lines joined by newlines), else None. Comments (``:...``)
    and other fields (``event:``, ``id:``, ``retry:``) are ignored."""

    def __init__(self) -> None:
        self._data: List[str] = []
        self._has_data = False

    def feed(self, line: Union[bytes, str]) -> Optional[str]:
        if isinstance(line, bytes):
            line = line.decode("utf-8")
        line = line.rstrip("\r\n")
        if not line:
            if not self._has_data:
                return None
            data = "\n".join(self._data)
            self._data, self._has_data = [], False
            return data
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        return None


@dataclass(frozen=True)
class HttpOptions:
    """The options of one request, with the fields of the SDK's GenerateOptions that the load
    tester sets. 0 for max_new_tokens, block_size and draft_length is the server's default;
    method DEFAULT sends no ``speculative.method``."""

    method: str = "AR"
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    ignore_eos: bool = False
    block_size: int = 0
    draft_length: int = 0
    request_id: str = ""


def request_body(prompt: Union[str, Sequence[int]], options: HttpOptions,
                 model: str) -> Dict[str, object]:
    """The JSON body of the streamed ``POST /v1/completions`` for ``prompt`` (text or token
    ids)."""
    if isinstance(prompt, str):
        if not prompt:
            raise ValueError("prompt must be a non-empty string or a non-empty list of token ids")
        p: Union[str, List[int]] = prompt
    else:
        p = [int(t) for t in prompt]
        if not p:
            raise ValueError("prompt must be a non-empty string or a non-empty list of token ids")
    body: Dict[str, object] = {
        "model": model,
        "prompt": p,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": options.temperature,
        "top_p": options.top_p,
        "top_k": options.top_k,
        "seed": options.seed,
        "ignore_eos": options.ignore_eos,
    }
    if options.max_new_tokens:
        body["max_tokens"] = options.max_new_tokens
    spec: Dict[str, object] = {}
    method = options.method.strip().upper()
    if method != "DEFAULT":
        spec["method"] = method
    if options.block_size:
        spec["block_size"] = options.block_size
    if options.draft_length:
        spec["draft_length"] = options.draft_length
    if spec:
        body["speculative"] = spec
    return body


@dataclass(frozen=True)
class HttpChunk:
    """The tokens of one streamed chunk (``specdec.token_ids``) and its text. ``step`` is always
    None: the HTTP chunks carry no per-step statistics."""

    token_ids: Tuple[int, ...]
    text: str
    step: None = None


@dataclass(frozen=True)
class HttpSummary:
    """The statistics of a finished stream, from its usage chunk: ``usage`` and ``specdec``.

    ``specdec`` has at least method, tau, block_size, draft_tokens and target_passes (prefill +
    verify steps); the fields of the gRPC Summary's RequestStats that it also has
    (verify_steps, drafted_tokens, accepted_tokens, committed_tokens, drafter_fallback,
    policy_fallback; int64 ones may be JSON strings) are taken as they are. Without them,
    ``verify_steps`` is target passes - 1, ``committed_tokens`` tau x verify steps,
    ``drafted_tokens`` draft_tokens, and accepted tokens and fallbacks are None (not
    reported)."""

    method: str
    finish_reason: str              # "LENGTH" or "STOP" (the last choice's, upper-cased)
    tau: Optional[float]
    verify_steps: int
    drafted_tokens: int
    accepted_tokens: Optional[int]
    committed_tokens: int
    prompt_tokens: int
    completion_tokens: int
    target_passes: int
    block_size: int
    drafter_fallback: Optional[bool]
    policy_fallback: Optional[bool]
    request_id: str
    ttft_ms: Optional[float]
    decode_ms: Optional[float]
    estimated_speedup: Optional[float]

    @classmethod
    def from_event(cls, event: Dict[str, object], finish_reason: str) -> "HttpSummary":
        usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
        sd = event.get("specdec") if isinstance(event.get("specdec"), dict) else {}

        def num(d, key, kind):
            v = d.get(key)  # type: ignore[union-attr]
            return None if v is None or isinstance(v, bool) else kind(v)

        def flag(key):
            v = sd.get(key)  # type: ignore[union-attr]
            return v if isinstance(v, bool) else None

        tau = num(sd, "tau", float)
        passes = num(sd, "target_passes", int) or 0
        verify = num(sd, "verify_steps", int)
        verify = max(0, passes - 1) if verify is None else verify
        committed = num(sd, "committed_tokens", int)
        if committed is None:
            committed = round(tau * verify) if tau is not None else 0
        drafted = num(sd, "drafted_tokens", int)
        return cls(
            method=str(sd.get("method") or ""),  # type: ignore[union-attr]
            finish_reason=finish_reason.upper(),
            tau=tau,
            verify_steps=verify,
            drafted_tokens=(num(sd, "draft_tokens", int) or 0) if drafted is None else drafted,
            accepted_tokens=num(sd, "accepted_tokens", int),
            committed_tokens=committed,
            prompt_tokens=num(usage, "prompt_tokens", int) or 0,
            completion_tokens=num(usage, "completion_tokens", int) or 0,
            target_passes=passes,
            block_size=num(sd, "block_size", int) or 0,
            drafter_fallback=flag("drafter_fallback"),
            policy_fallback=flag("policy_fallback"),
            request_id=str(sd.get("request_id") or ""),  # type: ignore[union-attr]
            ttft_ms=num(sd, "ttft_ms", float),
            decode_ms=num(sd, "decode_ms", float),
            estimated_speedup=num(sd, "estimated_speedup", float),
        )


class HttpStream:
    """One streamed completion: iterate it for :class:`HttpChunk` s; ``summary`` is set once the
    stream has ended with ``data: [DONE]``; ``cancel()`` closes the connection (from any
    thread). Errors raise :class:`HttpError`."""

    def __init__(self, conn: http.client.HTTPConnection, path: str, body: bytes,
                 headers: Dict[str, str], timeout: Optional[float]):
        self.summary: Optional[HttpSummary] = None
        self._conn = conn
        # The socket itself: http.client drops conn.sock when a response takes the connection
        # over (Connection: close), and cancel() must still reach it.
        self._sock: Optional[socket.socket] = None
        self._resp: Optional[http.client.HTTPResponse] = None
        self._parser = SseParser()
        self._finish_reason = ""
        self._lock = threading.Lock()
        self._reading = False
        self._cancelled = False
        self._closed = False
        self._done = False
        self._deadline = time.monotonic() + timeout if timeout else None
        try:
            conn.connect()
            self._sock = conn.sock
            conn.request("POST", path, body=body, headers=headers)
        except OSError as e:
            self._close()
            raise HttpError("UNAVAILABLE", f"{conn.host}:{conn.port}: {type(e).__name__}: {e}") \
                from None

    def __iter__(self) -> "HttpStream":
        return self

    def cancel(self) -> None:
        """Closes the connection; a read blocked in another thread returns at once."""
        with self._lock:
            if self._closed or self._done:
                return
            self._cancelled = True
            sock = self._sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            if not self._reading:
                self._close_locked()

    def _close_locked(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._resp is not None:
            self._resp.close()
        self._conn.close()

    def _close(self) -> None:
        with self._lock:
            self._close_locked()

    def _set_timeout(self) -> None:
        if self._deadline is None or self._sock is None:
            return
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise HttpError("DEADLINE_EXCEEDED", "the request's deadline passed")
        self._sock.settimeout(left)

    def __next__(self) -> HttpChunk:
        with self._lock:
            if self._done:
                raise StopIteration
            if self._cancelled or self._closed:
                self._close_locked()
                raise HttpError("CANCELLED", "the client closed the connection")
            self._reading = True
        finished = True
        try:
            chunk = self._next_chunk()
            finished = False
            return chunk
        except StopIteration:
            raise
        except HttpError as e:
            if self._cancelled:
                raise HttpError("CANCELLED", "the client closed the connection") from None
            raise e from None
        except (OSError, http.client.HTTPException) as e:
            if self._cancelled:
                raise HttpError("CANCELLED", "the client closed the connection") from None
            if isinstance(e, socket.timeout):
                raise HttpError("DEADLINE_EXCEEDED", "the request's deadline passed") from None
            raise HttpError("UNAVAILABLE", f"{type(e).__name__}: {e}") from None
        finally:
            with self._lock:
                self._reading = False
                if finished or self._cancelled:
                    self._close_locked()

    def _next_chunk(self) -> HttpChunk:
        if self._resp is None:
            self._set_timeout()
            resp = self._conn.getresponse()
            self._resp = resp
            if resp.status != 200:
                raise error_from_response(resp.status, resp.read(64 * 1024),
                                          resp.getheader("Retry-After"))
        while True:
            self._set_timeout()
            line = self._resp.readline(MAX_LINE)
            if not line:
                raise HttpError("INTERNAL", "the event stream ended before data: [DONE]")
            data = self._parser.feed(line)
            if data is None:
                continue
            if data.strip() == "[DONE]":
                self._done = True
                self._drain()
                raise StopIteration
            try:
                event = json.loads(data)
            except ValueError:
                raise HttpError("INTERNAL", f"an event is not JSON: {data[:200]!r}") from None
            if not isinstance(event, dict):
                raise HttpError("INTERNAL", f"an event is not a JSON object: {data[:200]!r}")
            if "error" in event:
                raise error_from_event(event)
            chunk = self._event(event)
            if chunk is not None:
                return chunk

    def _drain(self) -> None:
        """Reads what follows ``[DONE]`` (the end of the chunked body), at most for a second, so
        that the server sees the whole response delivered, not a client that went away (the
        router counts that as 499)."""
        try:
            if self._sock is not None:
                left = 1.0 if self._deadline is None else self._deadline - time.monotonic()
                self._sock.settimeout(max(0.001, min(1.0, left)))
            self._resp.read()  # type: ignore[union-attr]
        except (OSError, http.client.HTTPException):
            pass

    def _event(self, event: Dict[str, object]) -> Optional[HttpChunk]:
        """The chunk of a choice event with tokens; records the finish reason and the summary."""
        choices = event.get("choices")
        if isinstance(choices, list) and choices:
            choice = choices[0] if isinstance(choices[0], dict) else {}
            if choice.get("finish_reason"):
                self._finish_reason = str(choice["finish_reason"])
            sd = event.get("specdec")
            ids = sd.get("token_ids") if isinstance(sd, dict) else None
            if not ids:
                return None
            text = choice.get("text")
            if text is None and isinstance(choice.get("delta"), dict):
                text = choice["delta"].get("content")
            return HttpChunk(tuple(int(t) for t in ids), text or "")
        if isinstance(event.get("usage"), dict):
            self.summary = HttpSummary.from_event(event, self._finish_reason)
        return None


class HttpClient:
    """The router's OpenAI-compatible HTTP front at ``url`` (``http://host:port``, optionally
    with a path prefix; ``https://`` works too; an OpenAI base URL ending in ``/v1`` names the
    same front). ``model`` is sent in every request;
    ``api_key`` as ``Authorization: Bearer``. ``options_cls`` and ``error_cls`` are what the
    runner builds options with and catches."""

    options_cls = HttpOptions
    error_cls = HttpError

    def __init__(self, url: str, model: str = "", api_key: str = "",
                 timeout: Optional[float] = 300.0, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"--http wants http://HOST:PORT, got {url!r}")
        prefix = u.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        self.url = f"{u.scheme}://{u.netloc}{prefix}"
        self.address = self.url
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = prefix
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        # https:// verifies the router's certificate against tls_ca (else the system's CAs) and
        # presents tls_cert/tls_key when given (a router started with --tls-client-ca).
        self._ssl_context = None
        if tls_ca or tls_cert or tls_key:
            if not self._https:
                raise ValueError(f"--tls-ca/--tls-cert/--tls-key need an https:// URL, got {url!r}")
        if self._https:
            self._ssl_context = ssl.create_default_context(cafile=tls_ca)
            if tls_cert or tls_key:
                self._ssl_context.load_cert_chain(tls_cert, tls_key)

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=self._ssl_context)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        h = {"User-Agent": "specdec-loadtest"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        h.update(extra or {})
        return h

    def get(self, path: str, timeout: float = 5.0) -> Tuple[int, bytes]:
        """(status, body) of ``GET path``; raises OSError when the router does not answer."""
        conn = self._connection(timeout)
        try:
            conn.request("GET", self._prefix + path, headers=self._headers())
            resp = conn.getresponse()
            return resp.status, resp.read()
        except http.client.HTTPException as e:
            raise OSError(f"{type(e).__name__}: {e}") from None
        finally:
            conn.close()

    def models(self, timeout: float = 5.0) -> List[str]:
        """The model ids of ``GET /v1/models``."""
        status, body = self.get("/v1/models", timeout)
        if status != 200:
            raise error_from_response(status, body)
        try:
            data = json.loads(body).get("data")
        except (ValueError, AttributeError):
            data = None
        if not isinstance(data, list):
            raise HttpError("INTERNAL", f"/v1/models: not an OpenAI list: {body[:200]!r}")
        return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]

    def generate_stream(self, prompt: Union[str, Sequence[int]],
                        options: Optional[HttpOptions] = None,
                        timeout: Optional[float] = None) -> HttpStream:
        """Sends the request (connects and writes it) and returns its stream; the response is
        read when the stream is iterated. ``options.request_id`` goes out as ``X-Request-Id``,
        the deadline as ``X-Request-Timeout-Ms``."""
        options = options if options is not None else HttpOptions()
        body = json.dumps(request_body(prompt, options, self.model)).encode("utf-8")
        timeout = self.timeout if timeout is None else timeout
        headers = self._headers({"Content-Type": "application/json",
                                 "Accept": "text/event-stream"})
        if options.request_id:
            headers["X-Request-Id"] = options.request_id
        if timeout:  # the router ends the request at the same deadline as a gRPC one
            headers["X-Request-Timeout-Ms"] = str(max(1, int(timeout * 1000)))
        return HttpStream(self._connection(timeout), self._prefix + "/v1/completions", body,
                          headers, timeout)

    def close(self) -> None:
        pass


__all__ = ["HttpClient", "HttpStream", "HttpOptions", "HttpChunk", "HttpSummary", "HttpError",
           "SseParser", "request_body", "error_from_response", "error_from_event", "ERROR_CODES"]
