"""The one HTTP retry policy (embeval.subjects.adapters.http_client) against a scripted local server
(127.0.0.1): 503 then 200, 429 with Retry-After, 500 (not retried), connection refused, oversized
bodies; and both HTTP adapters (OpenVLA REST, OpenAI chat) retry the same statuses the same way."""
from __future__ import annotations

import json
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from conftest import free_port

from embeval.action import Observation
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError
from embeval.subjects.adapters.http_client import HttpClient, RetriesExhausted, RetryPolicy, RetryReply, parse_retry_after
from embeval.subjects.adapters.openai_chat import OpenAIChatLLM
from embeval.subjects.adapters.openvla_rest import OpenVLARestPolicy

ACTION = [0.1, 0.2, 0.3, 0.0, 0.0, 0.0, 1.0]
CHAT = {"choices": [{"message": {"role": "assistant", "content": "Paris"}}]}


class Scripted:
    """A local server answering each request with the next (status, headers, body) of ``script``; the last repeats."""

    def __init__(self):
        self.script: list[tuple[int, dict, bytes]] = []
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                owner.paths.append(self.path)
                status, headers, body = owner.script[min(len(owner.paths), len(owner.script)) - 1]
                self.send_response(status)
                chunked = headers.pop("chunked", False) if isinstance(headers, dict) else False
                for k, v in headers.items():
                    self.send_header(k, v)
                if chunked:  # no Content-Length: the client must bound the body while reading it
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for i in range(0, len(body), 65536):
                        part = body[i:i + 65536]
                        self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, *replies):
        self.script = [(s, dict(h), b if isinstance(b, bytes) else json.dumps(b).encode()) for s, h, b in replies]
        self.paths = []

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def srv():
    s = Scripted()
    yield s
    s.close()


def _client(waits, **policy):
    return HttpClient(5.0, RetryPolicy(**{"max_retries": 3, "backoff_s": 0.5, **policy}), sleep=waits.append)


def test_503_then_200_retries_after_backoff(srv):
    srv.answer((503, {}, {"error": "loading"}), (200, {}, {"ok": 1}))
    waits = []
    r = _client(waits).post_json(srv.url + "/x", {"a": 1})
    assert r.status_code == 200 and r.json() == {"ok": 1}
    assert len(srv.paths) == 2 and waits == [0.5]


def test_429_retry_after_is_honoured_and_capped(srv):
    srv.answer((429, {"Retry-After": "7"}, b"slow down"), (429, {"Retry-After": "1000"}, b""), (200, {}, {"ok": 1}))
    waits = []
    assert _client(waits).post_json(srv.url + "/x", {}).json() == {"ok": 1}
    assert waits == [7.0, 60.0]  # the server's 7 s, then 1000 s capped at retry_after_cap_s
    assert parse_retry_after(formatdate(1000.0 + 12, usegmt=True), now=1000.0) == 12.0  # the HTTP-date form
    assert parse_retry_after("soon") is None and parse_retry_after("-3") == 0.0
    srv.answer((429, {"Retry-After": "0"}, b""), (200, {}, {"ok": 2}))  # real sleep: Retry-After 0 waits 0 s
    assert HttpClient(5.0, RetryPolicy(max_retries=1, backoff_s=9.0)).post_json(srv.url + "/x", {}).json() == {"ok": 2}


def test_500_is_not_retried_and_goes_back_to_the_caller(srv):
    srv.answer((500, {}, b"boom"), (200, {}, {"ok": 1}))
    waits = []
    r = _client(waits).post_json(srv.url + "/x", {})
    assert r.status_code == 500 and r.text == "boom" and len(srv.paths) == 1 and waits == []


def test_retries_run_out_with_the_last_failure(srv):
    srv.answer((502, {}, b"bad gateway"))
    waits = []
    with pytest.raises(RetriesExhausted) as ei:
        _client(waits, backoff_cap_s=1.5).post_json(srv.url + "/x", {})
    assert ei.value.reached and ei.value.attempts == 4 and "HTTP 502: bad gateway" in ei.value.last
    assert waits == [0.5, 1.0, 1.5]  # doubling, bounded by backoff_cap_s
    assert isinstance(ei.value, ServerUnavailableError)


def test_connection_refused_is_retried_then_reported():
    url = f"http://127.0.0.1:{free_port()}/x"
    waits = []
    with pytest.raises(RetriesExhausted) as ei:
        _client(waits, max_retries=2).post_json(url, {})
    assert not ei.value.reached and ei.value.attempts == 3 and "ConnectError" in ei.value.last
    assert waits == [0.5, 1.0]


@pytest.mark.parametrize("chunked", [False, True])
def test_oversized_body_fails_at_once(srv, chunked):
    srv.answer((200, {"chunked": chunked}, b"x" * 300_000))
    waits = []
    c = HttpClient(5.0, RetryPolicy(max_retries=3), max_body_bytes=100_000, sleep=waits.append)
    with pytest.raises(InvalidInputError, match="more than 100000 bytes"):
        c.post_json(srv.url + "/x", {})
    assert len(srv.paths) == 1 and waits == []
    srv.answer((200, {"chunked": chunked}, b"y" * 99_000))
    assert len(c.post_json(srv.url + "/x", {}).content) == 99_000


def test_parser_may_ask_for_a_retry(srv):
    srv.answer((200, {}, {"v": ""}), (200, {}, {"v": "done"}))
    waits = []

    def parse(r):
        if not r.json()["v"]:
            raise RetryReply("empty reply")
        return r.json()["v"]

    assert _client(waits).post_json(srv.url + "/x", {}, parse) == "done" and waits == [0.5]


@pytest.mark.parametrize("kw, field", [({"max_retries": -1}, "max_retries"), ({"max_retries": 2.5}, "max_retries"),
                                       ({"backoff_s": float("nan")}, "backoff"), ({"retry_after_cap_s": -1}, "retry_after_cap_s")])
def test_policy_rejects_bad_settings(kw, field):
    with pytest.raises(ConfigError, match=field):
        RetryPolicy(**kw)
    with pytest.raises(ConfigError, match="timeout"):
        HttpClient(0)
    with pytest.raises(ConfigError, match="url"):
        HttpClient(1.0).post_json("ftp://127.0.0.1/x", {})


# --------------------------------------------------------------------------- each adapter follows the one policy

def _obs():
    return Observation(images={"third_person": np.zeros((8, 8, 3), np.uint8)}, instruction="pick")


def _openvla(url, waits):
    a = OpenVLARestPolicy(url=url, max_retries=2, backoff=0.25)
    a.http.sleep = waits.append
    return a, lambda: a.request(_obs())[0].tolist(), ACTION


def _openai(url, waits):
    a = OpenAIChatLLM(url=url + "/v1", max_retries=2, backoff=0.25)
    a.client.client.sleep = waits.append
    return a, lambda: a.chat([{"role": "user", "content": "capital?"}]), "Paris"


ADAPTERS = {"openvla_rest": (_openvla, ACTION), "openai": (_openai, CHAT)}


@pytest.mark.parametrize("name", sorted(ADAPTERS))
@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_adapters_retry_the_same_statuses(srv, name, status):
    make, ok = ADAPTERS[name]
    srv.answer((status, {}, b"busy"), (status, {"Retry-After": "3"}, b"busy"), (200, {}, ok))
    waits = []
    _, call, want = make(srv.url, waits)
    assert call() == want
    assert len(srv.paths) == 3 and waits == [0.25, 3.0]


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_adapters_do_not_retry_500_and_name_it(srv, name):
    make, ok = ADAPTERS[name]
    srv.answer((500, {}, b"model crashed"), (200, {}, ok))
    waits = []
    _, call, _ = make(srv.url, waits)
    with pytest.raises(ServerUnavailableError, match="HTTP 500.*model crashed"):
        call()
    assert len(srv.paths) == 1 and waits == []


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_adapters_report_exhausted_retries_and_refused_connections(srv, name):
    make, _ = ADAPTERS[name]
    srv.answer((503, {}, b"still loading"))
    waits = []
    _, call, _ = make(srv.url, waits)
    with pytest.raises(ServerUnavailableError, match="HTTP 503: still loading"):
        call()
    assert len(srv.paths) == 3 and waits == [0.25, 0.5]
    waits.clear()
    _, call, _ = make(f"http://127.0.0.1:{free_port()}", waits)
    with pytest.raises(ServerUnavailableError, match="ConnectError.*(embeval serve|start the server)"):
        call()
    assert waits == [0.25, 0.5]


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_adapters_bound_the_reply_size(srv, name):
    make, _ = ADAPTERS[name]
    waits = []
    a, call, _ = make(srv.url, waits)
    http = a.http if name == "openvla_rest" else a.client.client
    assert http.max_body_bytes == 64 * 1024 * 1024
    http.max_body_bytes = 1000
    srv.answer((200, {}, b"[" + b"0.0, " * 1000 + b"0.0]"))
    with pytest.raises(InvalidInputError, match="more than 1000 bytes"):
        call()
    assert len(srv.paths) == 1
