"""The one HTTP client of the adapters that talk to a model server (OpenVLA REST, OpenAI chat).

Retry policy (:class:`RetryPolicy`), the same for every adapter:

* retried: connection errors and timeouts (httpx transport errors), HTTP 429, 502, 503 and 504, and
  replies the adapter's parser rejects with :class:`RetryReply` (e.g. an empty chat answer);
* not retried: every other status (500 included: a server error that would repeat) goes back to the
  adapter, which words the error; a reply body over ``max_body_bytes`` fails at once;
* wait before retry ``k`` (1, 2, ...): the server's ``Retry-After`` (seconds or an HTTP date) when it
  sends one, capped at ``retry_after_cap_s``; else ``backoff_s * 2 ** (k - 1)`` capped at ``backoff_cap_s``;
* at most ``max_retries`` retries (``max_retries + 1`` attempts), each with ``timeout_s`` for connect, read,
  write and pool; when they run out :class:`RetriesExhausted` (a :class:`ServerUnavailableError`) carries
  the last failure for the adapter's message.

httpx is imported on first use.
"""
from __future__ import annotations

import email.utils
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from embeval import checks
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError

T = TypeVar("T")

#: HTTP statuses that mean "try again later" (rate limit, gateway/upstream down, overloaded)
RETRY_STATUS = frozenset({429, 502, 503, 504})
MAX_BODY_BYTES = 64 * 1024 * 1024  # 64 MiB: far above any action or chat reply


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait between attempts (seconds); see the module docstring."""

    max_retries: int = 2
    backoff_s: float = 0.5
    backoff_cap_s: float = 30.0
    retry_after_cap_s: float = 60.0
    retry_status: frozenset[int] = field(default=RETRY_STATUS)

    def __post_init__(self):
        checks.integer(self.max_retries, "field 'params.max_retries'", 0, 100)
        for name in ("backoff_s", "backoff_cap_s", "retry_after_cap_s"):
            what = "params.backoff" if name == "backoff_s" else name
            checks.number(getattr(self, name), f"field '{what}'", 0, unit="s")

    def delay(self, retry: int, retry_after: str | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based), honouring a ``Retry-After`` header value."""
        server = parse_retry_after(retry_after)
        if server is not None:
            return min(server, self.retry_after_cap_s)
        return min(self.backoff_s * 2.0 ** (retry - 1), self.backoff_cap_s)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header as seconds from ``now`` (>= 0): delta-seconds or an HTTP date; None if absent/unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        s = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None or when.tzinfo is None:
            return None
        s = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, s) if math.isfinite(s) else None


class RetryReply(Exception):
    """Raised by a reply parser: the reply is unusable but another attempt may succeed (e.g. an empty answer)."""


class RetriesExhausted(ServerUnavailableError):
    """Every attempt failed with a retryable failure; ``last`` describes the last one, ``reached`` whether the
    server answered at all."""

    def __init__(self, url: str, attempts: int, last: str, reached: bool):
        self.url, self.attempts, self.last, self.reached = url, attempts, last, reached
        super().__init__(f"{url} failed {attempts} times (last: {last})")


@dataclass
class HttpReply:
    """A whole reply: ``status_code``, ``headers`` (lower-case names) and the body bytes ``content``."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        import json

        return json.loads(self.content)  # ValueError (JSONDecodeError) when it is not JSON


class HttpClient:
    """POST JSON with :class:`RetryPolicy`; thread-safe (one connection pool shared by all threads)."""

    def __init__(self, timeout_s: float = 30.0, policy: RetryPolicy | None = None,
                 headers: Mapping[str, str] | None = None, max_body_bytes: int = MAX_BODY_BYTES,
                 sleep: Callable[[float], None] = time.sleep):
        self.timeout_s = checks.number(timeout_s, "field 'params.timeout'", 0, unit="s", lo_open=True)
        self.policy = policy or RetryPolicy()
        self.max_body_bytes = int(max_body_bytes)
        self._headers = dict(headers or {})
        self.sleep = sleep  # injectable (tests record the waits)
        self._client = None
        self._lock = threading.Lock()

    @property
    def client(self):
        """The underlying ``httpx.Client`` (created on first use, once for all threads)."""
        with self._lock:
            if self._client is None:
                import httpx

                self._client = httpx.Client(timeout=self.timeout_s, headers=self._headers)
            return self._client

    @property
    def headers(self):
        return self.client.headers

    def _post_once(self, url: str, body: Any) -> HttpReply:
        with self.client.stream("POST", url, json=body) as r:
            declared = r.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                raise self._too_big(url)
            chunks, size = [], 0
            for chunk in r.iter_bytes():
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise self._too_big(url)
                chunks.append(chunk)
            return HttpReply(r.status_code, {k.lower(): v for k, v in r.headers.items()}, b"".join(chunks))

    def _too_big(self, url: str) -> InvalidInputError:
        return InvalidInputError(f"{url} replied with more than {self.max_body_bytes} bytes; a model server's reply is far "
                                 "smaller: check that the url points at the model server")

    def post_json(self, url: str, body: Any, parse: Callable[[HttpReply], T] | None = None) -> T | HttpReply:
        """POST ``body`` as JSON until a reply is not retryable; return ``parse(reply)`` (or the reply itself).

        Retryable failures follow :attr:`policy`; ``parse`` may raise :class:`RetryReply` to retry an unusable
        reply. When attempts run out: :class:`RetriesExhausted`."""
        import httpx

        last, reached = "no attempt made", False
        attempts = self.policy.max_retries + 1
        wait = 0.0
        for attempt in range(attempts):
            if attempt:
                self.sleep(wait)
            try:
                reply = self._post_once(url, body)
            except httpx.InvalidURL as exc:
                raise ConfigError(f"field 'url': {url!r} is not a valid http(s) URL ({exc})") from None
            except httpx.UnsupportedProtocol as exc:
                raise ConfigError(f"field 'url': {url!r} is not an http:// or https:// URL ({exc})") from None
            except httpx.TransportError as exc:  # connection refused/reset, timeouts, broken replies
                last, wait = f"{type(exc).__name__}: {exc}", self.policy.delay(attempt + 1)
                continue
            reached = True
            if reply.status_code in self.policy.retry_status:
                last = f"HTTP {reply.status_code}: {reply.text[:200]}"
                wait = self.policy.delay(attempt + 1, reply.headers.get("retry-after"))
                continue
            if parse is None:
                return reply
            try:
                return parse(reply)
            except RetryReply as exc:
                last, wait = str(exc), self.policy.delay(attempt + 1)
        raise RetriesExhausted(url, attempts, last, reached)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
