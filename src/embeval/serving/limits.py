"""What both servers share to stay up under hostile clients: request limits, one error shape, and the
bounded model queue.

- :class:`ServerLimits`: request body size (413), body read time (408), JSON nesting depth (400),
  images per request and decoded pixels per image and per request (400), decoded pixels held by all
  requests at once (503), JSON-schema size, depth and output (400), and the model queue's capacity
  (503 with ``Retry-After``).
- :class:`ApiError` and :func:`error_body`: every error answers
  ``{"error": {"message", "type", "param", "code"}}`` (OpenAI's shape), never a traceback.
- :func:`read_body` / :func:`read_json`: read a body without holding more than the limit in memory
  (``Content-Length`` checked first, a streamed body counted while it arrives); :func:`parse_body`
  parses it (the servers do that in a worker thread, a few at a time: :func:`parse_limiter`); numbers
  that overflow a double (``1e999``) and lone UTF-16 surrogates (``"\\ud800"``) are refused there.
- :class:`PixelBudget`: the decoded image pixels all requests hold at once.
- :class:`HealthFirst`: answers ``GET /health`` before any other middleware or route.
- :class:`ModelQueue`: one worker thread runs the model calls in arrival order (models are rarely
  thread-safe); the event loop only awaits them, so ``/health`` answers while calls queue.
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

from embeval import checks
from embeval.config import check_keys
from embeval.errors import (
    ConfigError,
    ContextLengthError,
    EmbevalError,
    InvalidInputError,
)
from embeval.subjects.json_output import (
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_OUTPUT,
)

log = logging.getLogger("embeval.serving")
MiB = 2 ** 20
#: the largest request-body limit (MiB) a spec or ``--max-body-mb`` may set: a body is held in memory whole
MAX_BODY_MB = 1024
#: pixels of the largest image a server decodes by default (4096 x 4096; 48 MiB as RGB)
MAX_IMAGE_PIXELS = 4096 * 4096
#: the limits that are whole numbers (the others, e.g. ``body_timeout_s``, may be fractions)
_COUNTS = ("max_body_bytes", "max_json_depth", "max_image_pixels", "queue_size", "max_tokens", "max_inflight_bytes",
           "max_images", "max_request_pixels", "max_inflight_pixels", "parse_threads", "max_schema_bytes",
           "max_schema_depth", "max_schema_output")
#: (per-request limit, limit on what all requests hold at once): the second must hold one request
_AT_ONCE = (("max_body_bytes", "max_inflight_bytes"), ("max_image_pixels", "max_request_pixels"),
            ("max_request_pixels", "max_inflight_pixels"))


@dataclass(frozen=True)
class ServerLimits:
    """Bounds on what one client can make a server hold or do.

    ``max_body_bytes``: request body size (bytes); more is 413. ``body_timeout_s``: seconds to
    receive a body; slower is 408. ``max_json_depth``: nesting of arrays/objects; deeper is 400.
    ``max_image_pixels``: pixels of one decoded image; more is 400. ``queue_size``: model calls
    waiting or running; one more is 503 with ``Retry-After``. ``max_tokens``: the largest
    ``max_tokens`` a chat request may ask for. ``max_inflight_bytes``: request bodies held at once by
    all requests together (being read, parsed or queued); a request that would pass it is 503.

    Images (both servers): ``max_images`` per request and ``max_request_pixels`` decoded pixels in all of
    a request's images (400, checked from the image headers before any pixel is decoded);
    ``max_inflight_pixels``: decoded pixels held by all requests at once (503 with ``Retry-After``; an RGB
    pixel is 3 bytes). ``parse_threads``: requests parsed and decoded at once (the others wait), which
    keeps the event loop, and so ``/health``, off a crowd of threads competing for the GIL.

    JSON schemas (``response_format``): at most ``max_schema_bytes`` characters as compact JSON,
    ``max_schema_depth`` subschemas deep (``$ref`` counting), and able to make the model emit at most
    ``max_schema_output`` characters (see :func:`embeval.subjects.json_output.check_output_schema`).
    """

    max_body_bytes: int = 32 * MiB
    body_timeout_s: float = 30.0
    max_json_depth: int = 64
    max_image_pixels: int = MAX_IMAGE_PIXELS
    queue_size: int = 256
    max_tokens: int = 4096
    max_inflight_bytes: int = 512 * MiB
    max_images: int = 16
    max_request_pixels: int = MAX_IMAGE_PIXELS
    max_inflight_pixels: int = 8 * MAX_IMAGE_PIXELS
    parse_threads: int = 2
    max_schema_bytes: int = MAX_SCHEMA_BYTES
    max_schema_depth: int = MAX_SCHEMA_DEPTH
    max_schema_output: int = MAX_SCHEMA_OUTPUT

    def __post_init__(self):
        for f in fields(self):  # counts are integers >= 1, the others (seconds) finite numbers > 0
            if f.name in _COUNTS:
                checks.integer(getattr(self, f.name), f"server limit {f.name}", 1)
            else:
                checks.number(getattr(self, f.name), f"server limit {f.name}", 0, lo_open=True)
        for small, big in _AT_ONCE:
            if getattr(self, big) < getattr(self, small):
                raise ConfigError(f"server limit {big} ({getattr(self, big)}) must be at least {small} "
                                  f"({getattr(self, small)})")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None, where: str = "serve.limits") -> "ServerLimits":
        """From a spec's ``serve.limits`` mapping; ``max_body_mb`` is accepted for ``max_body_bytes``. A
        larger ``max_image_pixels`` alone raises the per-request and in-flight pixel limits to hold it."""
        data = dict(data or {})
        for mb, key in (("max_body_mb", "max_body_bytes"), ("max_inflight_mb", "max_inflight_bytes")):
            if mb in data:
                data[key] = mib_to_bytes(data.pop(mb), f"{where}.{mb}",
                                         upper_mib=MAX_BODY_MB if key == "max_body_bytes" else 16 * MAX_BODY_MB)
        check_keys(data, [f.name for f in fields(cls)] + ["max_body_mb", "max_inflight_mb"], where, noun="limit")
        defaults = {f.name: f.default for f in fields(cls)}
        for small, big in _AT_ONCE:  # a bound for all requests at once that was not given holds one request
            v = data.get(small, defaults[small])
            if big not in data and isinstance(v, (int, float)) and not isinstance(v, bool) and v > defaults[big]:
                data[big] = v
        return cls(**data)


def mib_to_bytes(value: Any, name: str, upper_mib: float = MAX_BODY_MB * 16) -> int:
    """``value`` MiB as whole bytes (at least 1); :class:`ConfigError` naming ``name`` unless it is a finite number
    in (0, ``upper_mib``] (:func:`embeval.checks.mib`)."""
    return max(1, int(checks.mib(value, name, upper_mib) * MiB))


#: the largest ``--max-request-mpixels`` (megapixels; 3 GiB of RGB)
MAX_REQUEST_MPIXELS = 1024


def mpixels_to_pixels(value: Any, name: str, upper: float = MAX_REQUEST_MPIXELS) -> int:
    """``value`` megapixels (10**6 pixels) as whole pixels; :class:`ConfigError` naming ``name`` unless it is a
    finite number in (0, ``upper``]."""
    return max(1, int(checks.number(value, name, 0, upper, unit="megapixels", lo_open=True) * 1e6))


class ApiError(Exception):
    """An error answered to the client: HTTP ``status`` and the OpenAI error fields."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = dict(headers or {})


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def as_api_error(exc: BaseException) -> ApiError:
    """The client-facing form of any exception: 4xx for bad input, 5xx for the model's own failures."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ContextLengthError):
        return ApiError(400, str(exc), param="messages", code="context_length_exceeded")
    if isinstance(exc, InvalidInputError):
        return ApiError(400, str(exc))
    if isinstance(exc, EmbevalError):  # e.g. the subject is itself a client of a server that is down
        return ApiError(503, str(exc), type="server_error", code="subject_unavailable")
    log.error("model call failed", exc_info=exc)  # the traceback goes to the server's log, not the client
    return ApiError(500, f"the model failed: {type(exc).__name__}: {exc}", type="server_error", code="model_error")


def error_response(exc: BaseException):
    from fastapi.responses import JSONResponse

    e = as_api_error(exc)
    return JSONResponse(status_code=e.status, content=error_body(e.message, e.type, e.param, e.code), headers=e.headers)


def install_error_handlers(app, limits: ServerLimits) -> None:
    """Answer routing errors (404, 405) and :class:`ApiError` in the OpenAI error shape, and add the
    :class:`InflightBodies` middleware."""
    from starlette.exceptions import HTTPException

    app.add_middleware(InflightBodies, limits=limits)

    @app.exception_handler(HTTPException)
    async def _http(request, exc: HTTPException):
        return error_response(ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}"))

    @app.exception_handler(ApiError)
    async def _api(request, exc: ApiError):
        return error_response(exc)


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')


def json_depth(raw: bytes | str, limit: int) -> int:
    """Deepest nesting of arrays/objects in the JSON text ``raw`` (0 for a scalar), read from the bytes
    before parsing: escapes and everything but quotes and brackets removed, then numpy over 1 MiB
    blocks tracks quote parity (brackets inside strings do not count) and the bracket level. Stops once
    past ``limit``; memory stays within a few copies of the body."""
    import numpy as np

    data = raw.encode() if isinstance(raw, str) else raw
    data = data.replace(b"\\\\", b"").replace(b'\\"', b"")  # escaped backslashes, then escaped quotes
    data = data.translate(None, _NOT_STRUCTURE)  # keep only quotes and brackets (C speed)
    depth = deepest = quotes = 0
    block = 1 << 20
    for i in range(0, len(data), block):
        a = np.frombuffer(data[i:i + block], np.uint8)
        q = a == 34
        inside = (np.cumsum(q, dtype=np.int32) + quotes) % 2 == 1
        quotes += int(np.count_nonzero(q))
        step = ((a == 91) | (a == 123)).astype(np.int32) - ((a == 93) | (a == 125))
        step[inside] = 0
        level = np.cumsum(step) + depth
        deepest, depth = max(deepest, int(level.max())), int(level[-1])
        if deepest > limit:
            break
    return deepest


class InflightBodies:
    """ASGI middleware: refuses a body larger than ``max_body_bytes`` by its ``Content-Length`` (413)
    and bounds the bytes of all bodies held at once (``max_inflight_bytes``; 503 with ``Retry-After``).
    A body without ``Content-Length`` is counted as its chunks arrive; it is released when the reply
    has been sent."""

    def __init__(self, app, limits: ServerLimits):
        self.app, self.limits = app, limits
        self.held = 0  # only touched on the event loop

    async def _refuse(self, send, e: ApiError) -> None:
        body = json.dumps(error_body(e.message, e.type, e.param, e.code)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in e.headers.items()]
        await send({"type": "http.response.start", "status": e.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _busy(self) -> ApiError:
        return ApiError(503, f"the server holds {self.held} bytes of request bodies, its limit is "
                             f"{self.limits.max_inflight_bytes}; retry later", type="server_error",
                        code="server_busy", headers={"Retry-After": "1"})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        n = int(declared) if declared.isdigit() else 0
        if n > self.limits.max_body_bytes:
            return await self._refuse(send, _too_large(self.limits, f"{n} bytes"))
        if self.held + n > self.limits.max_inflight_bytes:
            return await self._refuse(send, self._busy())
        held = n
        self.held += n

        async def counted():  # a body without Content-Length: count it as it arrives
            nonlocal held
            message = await receive()
            size = len(message.get("body", b"")) if message.get("type") == "http.request" else 0
            if size:
                if self.held + size > self.limits.max_inflight_bytes:
                    raise self._busy()
                held += size
                self.held += size
            return message

        try:
            await self.app(scope, counted if not declared else receive, send)
        finally:
            self.held -= held


def _no_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


class _OutOfRange(ValueError):
    pass


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _OutOfRange(f"the number {text[:24]}{'...' if len(text) > 24 else ''} is out of range (it overflows a "
                          "64-bit float to infinity); send numbers below 1.8e308 in magnitude")
    return v


#: a float literal that may overflow a double: an exponent of 3+ digits or 309+ digits in a row
_MAYBE_HUGE = re.compile(rb"[eE]\+?0*[1-9][0-9]{2}|[0-9]{309}")
#: a \uD800-\uDFFF escape that starts an escape (an even run of backslashes before it)
_SURROGATE_ESCAPE = re.compile(rb"(?<!\\)((?:\\\\)*)\\u([dD][89a-fA-F][0-9a-fA-F]{2})")


def lone_surrogate(raw: bytes) -> str | None:
    """The first UTF-16 surrogate escape in the JSON text ``raw`` that is not half of a pair (``"\\ud800"``
    alone parses to a string no UTF-8 reply can hold), else None. A regex over the bytes, C speed."""
    if not re.search(rb"\\u[dD][89a-fA-F]", raw):
        return None
    high_end, high = -1, ""
    for m in _SURROGATE_ESCAPE.finditer(raw):
        code, at = int(m.group(2), 16), m.start(2) - 2
        if code >= 0xDC00 and not m.group(1) and m.start() == high_end:
            high_end = -1  # the low half right after its high half: a pair
            continue
        if high_end >= 0 or code >= 0xDC00:
            return high if high_end >= 0 else raw[at:at + 6].decode()
        high_end, high = m.end(), raw[at:at + 6].decode()
    return high if high_end >= 0 else None


def parse_json(raw: bytes | str, limits: ServerLimits) -> Any:
    """Parse a request body; :class:`ApiError` 400 for non-JSON, NaN/Infinity, a number that overflows a
    double (1e999), a lone UTF-16 surrogate escape, or nesting over the limit."""
    too_deep = ApiError(400, f"request JSON is nested deeper than {limits.max_json_depth} levels; flatten it",
                        code="json_too_deep")
    if json_depth(raw, limits.max_json_depth) > limits.max_json_depth:
        raise too_deep
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    lone = lone_surrogate(data)
    if lone is not None:
        raise ApiError(400, f"request JSON holds the escape {lone} (half of a UTF-16 surrogate pair) without its "
                            "other half; send valid Unicode text", code="invalid_unicode")
    try:
        return json.loads(raw, parse_constant=_no_constant,
                          parse_float=_finite_float if _MAYBE_HUGE.search(data) else float)
    except RecursionError:  # cannot happen after the check above unless the limit is set over ~1000
        raise too_deep from None
    except _OutOfRange as exc:
        raise ApiError(400, f"request JSON: {exc}", code="number_out_of_range") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise ApiError(400, f"request body is not valid JSON ({exc})", code="invalid_json") from None


def _too_large(limits: ServerLimits, size: str) -> ApiError:
    return ApiError(413, f"request body is {size}, over the server's limit of {limits.max_body_bytes} bytes; send "
                         "smaller images or raise serve.limits.max_body_mb in the subject spec", code="request_too_large")


async def read_body(request, limits: ServerLimits) -> bytes:
    """The body, never more than ``limits.max_body_bytes`` of it in memory: a larger ``Content-Length``
    is refused before reading; a streamed body is counted as it arrives."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ApiError(400, f"Content-Length {declared!r} is not a byte count", code="invalid_request")
        if int(declared) > limits.max_body_bytes:
            raise _too_large(limits, f"{int(declared)} bytes")
    buf = bytearray()

    async def _read():
        async for chunk in request.stream():
            buf.extend(chunk)
            if len(buf) > limits.max_body_bytes:
                raise _too_large(limits, f"more than {limits.max_body_bytes} bytes")

    from starlette.requests import ClientDisconnect

    try:
        await asyncio.wait_for(_read(), limits.body_timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(408, f"request body not received within {limits.body_timeout_s:g} s", code="timeout") from None
    except ClientDisconnect:  # nobody is left to answer; not a server error
        raise ApiError(400, "the client disconnected before the body arrived", code="client_disconnected") from None
    return bytes(buf)


def parse_body(raw: bytes, limits: ServerLimits, empty: Any = ...) -> Any:
    """A request body read by :func:`read_body`, parsed (:func:`parse_json`); ``empty`` is returned for an
    empty body when given, else an empty body is a 400."""
    if not raw.strip():
        if empty is not ...:
            return empty
        raise ApiError(400, "request body is empty; send a JSON object", code="invalid_json")
    return parse_json(raw, limits)


async def read_json(request, limits: ServerLimits, empty: Any = ..., limiter: Any = None) -> Any:
    """The parsed JSON body (see :func:`read_body`, :func:`parse_body`). Bodies of 64 KiB or more are parsed
    in a worker thread, under ``limiter`` (an ``anyio.CapacityLimiter``, see :func:`parse_limiter`) when
    given. (The servers' main routes read the body and then parse and check it in one worker call.)"""
    raw = await read_body(request, limits)
    if len(raw) < 64 * 1024:
        return parse_body(raw, limits, empty)
    import anyio

    return await anyio.to_thread.run_sync(parse_body, raw, limits, empty, limiter=limiter)  # off the event loop


def parse_limiter(limits: ServerLimits):
    """The ``anyio.CapacityLimiter`` of a server's parsing and decoding threads (``limits.parse_threads``)."""
    import anyio

    return anyio.CapacityLimiter(int(limits.parse_threads))


class PixelBudget:
    """Decoded image pixels held by all of a server's requests at once (thread-safe): :meth:`take` reserves
    a request's pixels before they are decoded (:class:`ApiError` 503 with ``Retry-After`` when they do not
    fit), the returned :class:`Held` gives them back once."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.held = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> Held:
        with self._lock:
            if n and self.held + n > self.limit:
                raise ApiError(503, f"the server holds {self.held} decoded image pixels of other requests, its limit "
                                    f"is {self.limit}; this request's {n} do not fit now: retry later",
                               type="server_error", code="server_busy", headers={"Retry-After": "1"})
            self.held += n
        return Held(self, n)

    def _give(self, n: int) -> None:
        with self._lock:
            self.held -= n


class Held:
    """Pixels one request holds in a :class:`PixelBudget`; :meth:`release` gives them back (later calls do nothing)."""

    def __init__(self, budget: PixelBudget | None = None, n: int = 0):
        self._budget, self.n = budget, n
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            budget, self._budget = self._budget, None
        if budget is not None:
            budget._give(self.n)


class HealthFirst:
    """ASGI middleware, the outermost: answers ``GET /health`` with ``payload()`` (a JSON-able dict) at
    once, before body limits, routing or any parsing, so a server busy with requests still says how it is."""

    def __init__(self, app, payload: Callable[[], Mapping[str, Any]]):
        self.app, self.payload = app, payload

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") != "/health" or scope.get("method") not in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        body = json.dumps(self.payload()).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"cache-control", b"no-store")]})
        await send({"type": "http.response.body", "body": body if scope["method"] == "GET" else b""})


class ModelQueue:
    """Runs model calls one at a time in a worker thread; at most ``size`` calls wait or run.

    :meth:`run` raises :class:`ApiError` 503 with ``Retry-After`` (seconds, from the mean call time
    and the calls ahead) when the queue is full. Counters are read by ``/health``.
    """

    def __init__(self, size: int, name: str = "model"):
        self.size = int(size)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"embeval-{name}")
        self._lock = threading.Lock()
        self.pending = 0
        self.served = 0
        self.rejected = 0
        self._mean_s = 0.0

    def _retry_after(self) -> int:
        return max(1, math.ceil(self.pending * self._mean_s))

    def _done(self, _future) -> None:
        with self._lock:
            self.pending -= 1

    def _timed(self, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            dt = time.perf_counter() - t0
            with self._lock:
                self.served += 1
                self._mean_s = dt if self.served == 1 else 0.9 * self._mean_s + 0.1 * dt

    async def run(self, fn: Callable[..., Any], *args: Any, on_cancel: Callable[[], Any] | None = None) -> Any:
        """``fn(*args)`` on the model worker; 503 when the queue is full. ``on_cancel``: called when the call
        never runs (its client went away while it waited), e.g. to give back what the request held."""
        with self._lock:
            if self.pending >= self.size:
                self.rejected += 1
                raise ApiError(503, f"the model queue is full ({self.size} calls waiting or running); retry later",
                               type="server_error", code="queue_full", headers={"Retry-After": str(self._retry_after())})
            self.pending += 1
        try:
            future = self._pool.submit(self._timed, fn, *args)
        except BaseException:
            with self._lock:
                self.pending -= 1
            raise
        future.add_done_callback(self._done)
        if on_cancel is not None:
            future.add_done_callback(lambda f: f.cancelled() and on_cancel())
        return await asyncio.wrap_future(future)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"queued": self.pending, "queue_size": self.size, "served": self.served, "rejected": self.rejected,
                    "mean_call_ms": round(self._mean_s * 1000.0, 3)}

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
