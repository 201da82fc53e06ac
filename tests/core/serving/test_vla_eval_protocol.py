"""vla-evaluation-harness's model-server protocol, both sides: ``embeval serve vla-eval`` and
the ``vla-eval`` subject adapter.

Real WebSocket connections on 127.0.0.1 against servers in threads (one test starts the CLI as a process):
the client's actions equal the in-process tiny VLA's; the wire format matches an independent msgpack
encoding written here from RFC-0002's message layout; 8 concurrent sessions are batched into one
``act_slots`` call and answer as batch 1; hostile frames get an error message (and a close where the frame
is not a message) while the server keeps serving others.
"""
from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import httpx
import msgpack
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from embeval.action import Action, ActionSpec, Observation
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError
from embeval.serving.limits import ServerLimits
from embeval.serving.runner import app_from_spec
from embeval.serving.vla_eval_server import VlaEvalServer, serve_in_thread
from embeval.subjects.adapters import vla_eval_protocol as P
from embeval.subjects.registry import load_subject

ROOT = Path(__file__).resolve().parents[3]
TINY_VLA = ROOT / "config/subjects/tiny_vla.yaml"
STATS = ROOT / "config/subjects/image_stats_policy.yaml"
INSTRUCTIONS = ["pick up the red cube", "push the blue block left", "open the gripper"]


@pytest.fixture(scope="module")
def tiny():
    """The shipped tiny VLA, loaded once; tests use forks (shared network, own episode state)."""
    return load_subject(TINY_VLA)


def _obs(rng: np.random.Generator, instruction: str, size: int = 24) -> Observation:
    img = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    tcp = np.array([0.4 + rng.normal(0, 0.02), rng.normal(0, 0.05), 0.25, 0.0, 0.0, 0.0, 1.0])
    return Observation(images={"third_person": img, "wrist": img[::-1].copy()}, instruction=instruction,
                       state={"tcp_pose": tcp, "gripper": np.array([1.0])})


def _client(url: str, **params):
    return load_subject({"id": "remote", "kind": "policy", "adapter": "vla-eval", "url": url, "params": params})


def _health(running) -> dict:
    r = httpx.get(running.http_url + "/health", timeout=5)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    return r.json()


# --------------------------------------------------------------------------- (a) client against server
def test_client_against_server_equals_in_process_policy(tiny):
    """Two episodes of 3 steps through adapter -> WebSocket -> server -> tiny VLA: every action equals the
    in-process policy's within 1e-5; each episode_start restarts the episode (end_slots then reset_slots)."""
    server = app_from_spec(TINY_VLA, "vla-eval", subject=tiny.fork())
    rng = np.random.default_rng(0)
    with serve_in_thread(server) as running:
        assert running.url.startswith("ws://127.0.0.1:")
        remote, ref = _client(running.url), tiny.fork()
        worst = 0.0
        for instruction in INSTRUCTIONS[:2]:
            remote.reset(instruction)
            ref.reset(instruction)
            for _ in range(3):
                ob = _obs(rng, instruction)
                a, b = remote.act(ob).vector, ref.act(ob).vector
                worst = max(worst, float(np.abs(a - b).max()))
        assert worst < 1e-5, worst
        assert remote.server_info["protocol_version"] == 1
        assert remote.server_info["action_spec"]["rotation"]["format"] == "euler_xyz"
        h = _health(running)
        assert (h["actions"], h["episodes"], h["errors"]) == (6, 2, 0)
        remote.close()
        deadline = time.monotonic() + 5
        while _health(running)["episodes_live"] and time.monotonic() < deadline:  # the close ends the episode
            time.sleep(0.05)
        assert _health(running)["episodes_live"] == 0


def test_client_names_the_url_when_no_server_listens():
    from embeval.serving.runner import free_local_port

    url = f"ws://127.0.0.1:{free_local_port()}"
    remote = _client(url, connect_retries=0)
    t0 = time.monotonic()
    with pytest.raises(ServerUnavailableError, match=f"{url}.*not reachable.*embeval serve vla-eval"):
        remote.act(_obs(np.random.default_rng(0), "pick"))
    assert time.monotonic() - t0 < 5
    with pytest.raises(ConfigError, match="ws://host:port"):
        _client("http://127.0.0.1:8000")


def test_client_times_out_on_a_silent_server():
    """A server that accepts the connection but never answers hello: ServerUnavailableError after ``timeout`` s."""
    import asyncio

    from websockets.asyncio.server import serve as ws_serve

    from embeval.serving.runner import _bind

    sock = _bind("127.0.0.1", 0)
    url = f"ws://127.0.0.1:{sock.getsockname()[1]}"
    loop = asyncio.new_event_loop()
    stop, ready = threading.Event(), threading.Event()

    async def silent(ws):
        while not stop.is_set():
            await asyncio.sleep(0.05)

    async def main():
        async with ws_serve(silent, sock=sock):
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)

    t = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    t.start()
    assert ready.wait(10)
    try:
        t0 = time.monotonic()
        with pytest.raises(ServerUnavailableError, match=r"sent no hello reply within 0.5 s"):
            _client(url, timeout=0.5, connect_retries=0).reset("pick")
        assert time.monotonic() - t0 < 3
    finally:
        stop.set()
        t.join(5)


# --------------------------------------------------------------------------- (b) the wire format
def _frame(type_: str, payload: dict, seq: int) -> bytes:
    """RFC-0002's message, encoded here with msgpack alone (independent of embeval's codec)."""
    return msgpack.packb({"type": type_, "payload": payload, "seq": seq, "timestamp": time.time()}, use_bin_type=True)


def _nd(arr: np.ndarray) -> dict:
    return {"__ndarray__": True, "data": arr.tobytes(), "dtype": arr.dtype.str, "shape": list(arr.shape)}


def _png(img: np.ndarray) -> dict:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return {"__image__": True, "format": "png", "data": buf.getvalue(), "shape": list(img.shape)}


def test_wire_format_matches_an_independent_msgpack_encoding(tiny):
    """hello -> hello (same seq); episode_start (no reply); an observation with a raw __ndarray__ image, a
    png __image__ and a flat 'states' vector cut by serve.vla_eval.state -> action with the observation's seq,
    {"actions": __ndarray__ '<f4' shape [7]} equal to the in-process policy; and embeval's own pack()
    produces the same layout."""
    server = VlaEvalServer(tiny.fork(), vla_eval={"cameras": {"agentview": "third_person", "eye_in_hand": "wrist"},
                                                   "state": {"tcp_pose": [0, 7], "gripper": [7, 8]}})
    ob = _obs(np.random.default_rng(3), "pick up the red cube", size=20)
    ref = tiny.fork()
    ref.reset(ob.instruction)
    expected = ref.act(ob).vector
    states = np.concatenate([ob.state["tcp_pose"], ob.state["gripper"]]).astype(np.float32)
    with serve_in_thread(server) as running, connect(running.url, compression=None) as ws:
        ws.send(_frame("hello", {"harness_version": "test", "protocol_version": 1}, 1))
        hello = msgpack.unpackb(ws.recv(timeout=10), raw=False)
        assert set(hello) == {"type", "payload", "seq", "timestamp"}
        assert (hello["type"], hello["seq"], hello["payload"]["protocol_version"]) == ("hello", 1, 1)
        assert isinstance(hello["timestamp"], float) and abs(hello["timestamp"] - time.time()) < 60
        ws.send(_frame("episode_start", {"task": {"name": "pick"}}, 2))
        payload = {"images": {"agentview": _nd(ob.images["third_person"]), "eye_in_hand": _png(ob.images["wrist"]),
                              "unused_camera": _nd(np.zeros((4, 4, 3), np.uint8))},
                   "task_description": ob.instruction, "states": _nd(states)}
        ws.send(_frame("observation", payload, 3))
        reply = msgpack.unpackb(ws.recv(timeout=30), raw=False)
        assert (reply["type"], reply["seq"]) == ("action", 3)
        act = reply["payload"]["actions"]
        assert (act["__ndarray__"], act["dtype"], act["shape"]) == (True, "<f4", [7])
        got = np.frombuffer(act["data"], dtype="<f4")
        assert np.abs(got - expected).max() < 1e-5
        ws.send(_frame("episode_end", {"metrics": {"success": False}}, 4))
    mine = msgpack.unpackb(P.pack("action", {"actions": np.arange(7, dtype=np.float32)}, 9), raw=False)
    assert set(mine) == {"type", "payload", "seq", "timestamp"} and (mine["type"], mine["seq"]) == ("action", 9)
    assert mine["payload"]["actions"] == _nd(np.arange(7, dtype=np.float32))
    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    png = msgpack.unpackb(P.pack("observation", {"images": {"a": img}}, 1, image_format="png"), raw=False)
    assert png["payload"]["images"]["a"]["__image__"] is True and png["payload"]["images"]["a"]["format"] == "png"
    assert np.array_equal(P.unpack(P.pack("observation", {"images": {"a": img}}, 1, image_format="png")).payload["images"]["a"], img)


# --------------------------------------------------------------------------- (c) batching across sessions
def test_eight_concurrent_sessions_are_batched_and_equal_batch1(tiny):
    """8 clients (one connection each), 3 steps in lock-step at --max-batch-size 8: /health counts batches of
    more than one observation (fewer policy calls than observations) and every action equals the batch-1
    in-process policy's within 1e-5."""
    server = app_from_spec(TINY_VLA, "vla-eval", subject=tiny.fork(), max_batch_size=8, max_wait_ms=300)
    n, steps = 8, 3
    episodes = [[_obs(np.random.default_rng(100 + i), INSTRUCTIONS[i % 3]) for _ in range(steps)] for i in range(n)]
    for i in range(n):
        for k, ob in enumerate(episodes[i]):
            episodes[i][k] = Observation(images=ob.images, instruction=INSTRUCTIONS[i % 3],
                                         state={**ob.state, "tcp_pose": ob.state["tcp_pose"] + [0.01 * k, 0, 0, 0, 0, 0, 0]})
    expected = []
    for i in range(n):
        ref = tiny.fork()
        ref.reset(INSTRUCTIONS[i % 3])
        expected.append([ref.act(ob).vector for ob in episodes[i]])
    got = [[None] * steps for _ in range(n)]
    errors: list = []
    with serve_in_thread(server) as running:
        clients = [_client(running.url) for _ in range(n)]
        for i, c in enumerate(clients):
            c.reset(INSTRUCTIONS[i % 3])
        barrier = threading.Barrier(n)

        def run(i: int) -> None:
            try:
                for k in range(steps):
                    barrier.wait(timeout=30)
                    got[i][k] = clients[i].act(episodes[i][k]).vector
            except Exception as exc:  # reported below
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        h = _health(running)
        for c in clients:
            c.close()
    assert h["actions"] == n * steps and h["errors"] == 0
    assert h["largest_batch"] > 1, h
    assert h["largest_batch"] <= 8
    worst = max(float(np.abs(got[i][k] - expected[i][k]).max()) for i in range(n) for k in range(steps))
    assert worst < 1e-5, worst


def test_act_slots_of_one_client_reach_the_server_as_one_batch(tiny):
    """The adapter's own batched calls (what a vectorised embeval run uses): 6 slots, one connection each, all
    observations sent before any answer is read -> the server answers them in batches of more than one, equal
    to batch 1; end_slots ends the episodes and keeps the connections for new slots."""
    server = app_from_spec(TINY_VLA, "vla-eval", subject=tiny.fork(), max_batch_size=8, max_wait_ms=300)
    n = 6
    slots = [f"env{i}" for i in range(n)]
    rng = np.random.default_rng(7)
    obs = [[_obs(rng, INSTRUCTIONS[i % 3]) for i in range(n)] for _ in range(2)]
    refs = [tiny.fork() for _ in range(n)]
    for i, r in enumerate(refs):
        r.reset(INSTRUCTIONS[i % 3])
    expected = [[refs[i].act(step[i]).vector for i in range(n)] for step in obs]
    with serve_in_thread(server) as running:
        remote = _client(running.url)
        remote.reset_slots(slots, [INSTRUCTIONS[i % 3] for i in range(n)])
        got = [[a.vector for a in remote.act_slots(slots, step)] for step in obs]
        h = _health(running)
        assert h["connections"] == n and h["largest_batch"] > 1 and h["actions"] == 2 * n, h
        with pytest.raises(InvalidInputError, match="slot 'nope' has no episode"):
            remote.act_slots(["nope"], obs[0][:1])
        remote.end_slots(slots)
        remote.reset_slots(["again"], ["pick up the red cube"])
        assert _health(running)["connections"] == n  # a freed connection was reused
        remote.close()
    worst = max(float(np.abs(g - e).max()) for gs, es in zip(got, expected) for g, e in zip(gs, es))
    assert worst < 1e-5, worst


# --------------------------------------------------------------------------- (d) hostile input
class SlowPolicy:
    """ImageStats-like policy that sleeps ``delay`` s per call (to hold the model thread busy)."""

    action_spec = ActionSpec(frame="base", chunk_size=1)

    def __init__(self, delay: float = 0.0):
        self.id, self.delay = "slow", delay

    def reset(self, instruction):
        pass

    def act(self, observation):
        time.sleep(self.delay)
        return Action(np.array([float(observation.images["cam"].mean()) / 255.0, 0, 0, 0, 0, 0, 1.0]))


SMALL = ServerLimits(max_body_bytes=64 * 1024, max_image_pixels=32 * 32, max_request_pixels=2 * 32 * 32,
                     max_images=2, max_json_depth=16)


def _good(ws, seq: int, value: int = 128) -> dict:
    """One valid observation on ``ws``; its decoded reply."""
    img = np.full((8, 8, 3), value, np.uint8)
    ws.send(_frame("observation", {"images": {"cam": _nd(img)}, "task_description": "t"}, seq))
    return msgpack.unpackb(ws.recv(timeout=10), raw=False)


def _error(ws) -> dict:
    reply = msgpack.unpackb(ws.recv(timeout=10), raw=False)
    assert reply["type"] == "error", reply
    return reply


def _nest(levels: int) -> list:
    """A list nested ``levels`` deep."""
    out: list = [1]
    for _ in range(levels - 1):
        out = [out]
    return out


def _closed_with(ws) -> int:
    with pytest.raises(ConnectionClosed) as info:
        ws.recv(timeout=10)
    return info.value.rcvd.code if info.value.rcvd else -1


def test_hostile_frames_get_errors_and_the_server_keeps_serving():
    server = VlaEvalServer(SlowPolicy(), limits=SMALL)
    with serve_in_thread(server) as running, connect(running.url, compression=None) as keeper:
        assert _good(keeper, 1)["type"] == "action"

        # frames that are not messages: an error, then the connection is closed
        for frame, code, close in [(b"\xc1\xff\x00", "invalid_msgpack", 1007), ("hello", "text_frame", 1003),
                                   (msgpack.packb([1, 2, 3]), "invalid_message", 1007),
                                   (msgpack.packb({"type": "observation", "payload": {}}), "invalid_message", 1007),
                                   (msgpack.packb({"type": "observation", "payload": {}, "seq": "7", "timestamp": 0.0}),
                                    "invalid_message", 1007),
                                   (msgpack.packb({"type": 5, "payload": {}, "seq": 7, "timestamp": 0.0}),
                                    "invalid_message", 1007),
                                   (b"\x91" * 5000 + b"\xc0", "too_deep", 1007)]:
            with connect(running.url, compression=None) as ws:
                ws.send(frame)
                err = _error(ws)
                assert err["payload"]["code"] == code, err
                assert _closed_with(ws) == close

        # an oversized frame: the WebSocket layer closes with 1009 (message too big) before reading it whole
        with connect(running.url, compression=None, max_size=None) as ws:
            ws.send(_frame("observation", {"blob": b"x" * (128 * 1024)}, 1))
            assert _closed_with(ws) == 1009

        # readable messages with bad payloads: an error carrying their seq; the connection stays open
        big = np.zeros((40, 40, 3), np.uint8)  # 1600 pixels > 1024 per image
        huge_png = _png(np.zeros((2000, 2000, 3), np.uint8))  # a few KiB on the wire, 4 Mpixels in its header
        assert len(huge_png["data"]) < 64 * 1024
        bad = [
            ({"images": {"cam": _nd(np.zeros((8, 8, 3), np.uint8))}, "task_description": 5}, "invalid_type"),
            ({"images": ["not", "a", "map"], "task_description": "t"}, "invalid_type"),
            ({"images": {"cam": "pixels"}, "task_description": "t"}, "invalid_image"),
            ({"images": {"cam": {"__ndarray__": True, "data": b"\x00" * 8, "dtype": "|O", "shape": [1]}},
              "task_description": "t"}, "invalid_array"),
            ({"images": {"cam": {"__ndarray__": True, "data": b"\x00" * 5, "dtype": "|u1", "shape": [2, 2, 3]}},
              "task_description": "t"}, "invalid_array"),
            ({"images": {"cam": _nd(big)}, "task_description": "t"}, "too_many_pixels"),
            ({"images": {"cam": huge_png}, "task_description": "t"}, "too_many_pixels"),
            ({"images": {f"c{i}": _nd(np.zeros((4, 4, 3), np.uint8)) for i in range(3)}, "task_description": "t"},
             "too_many_images"),
            ({"images": {"cam": _nd(np.zeros((8, 8, 3), np.uint8))}, "task_description": "t",
              "state": _nd(np.array([np.nan]))}, "invalid_value"),
            ({"task_description": "t", "deep": _nest(20)}, "too_deep"),
        ]
        with connect(running.url, compression=None) as ws:
            for seq, (payload, code) in enumerate(bad, start=10):
                ws.send(_frame("observation", payload, seq))
                err = _error(ws)
                assert (err["seq"], err["payload"]["code"]) == (seq, code), err
                assert isinstance(err["payload"]["error"], str) and 10 < len(err["payload"]["error"]) < 400
            ws.send(_frame("teleport", {}, 40))
            err = _error(ws)
            assert (err["seq"], err["payload"]["code"]) == (40, "unknown_type")
            assert "unknown message type 'teleport'" in err["payload"]["error"]
            ws.send(_frame("action", {"actions": _nd(np.zeros(7))}, 41))
            assert _error(ws)["payload"]["code"] == "unexpected_type"
            reply = _good(ws, 42, value=255)  # the same connection still answers
            assert (reply["type"], reply["seq"]) == ("action", 42)
            assert np.frombuffer(reply["payload"]["actions"]["data"], "<f4")[0] == pytest.approx(1.0)

        assert _good(keeper, 2)["type"] == "action"  # the first connection was served throughout
        h = _health(running)
        assert h["connections"] == 1 and h["image_pixels_held"] == 0 and h["queued"] == 0
        assert h["errors"] >= len(bad) + 9


def test_queue_bound_connection_bound_and_health_while_a_batch_runs():
    """queue_size 1: a second observation while one runs gets 'queue_full' (not a hang); max_connections 2:
    a third connection gets 'too_many_connections' and close 1013; /health answers within 0.5 s while the
    policy sleeps 1 s."""
    from dataclasses import replace

    server = VlaEvalServer(SlowPolicy(delay=1.0), limits=replace(SMALL, queue_size=1), max_connections=2)
    with serve_in_thread(server) as running, connect(running.url, compression=None) as a, \
            connect(running.url, compression=None) as b:
        img = _nd(np.full((8, 8, 3), 10, np.uint8))
        a.send(_frame("observation", {"images": {"cam": img}, "task_description": "t"}, 1))
        time.sleep(0.3)  # a's observation is running
        t0 = time.monotonic()
        h = _health(running)
        assert time.monotonic() - t0 < 0.5 and h["queued"] == 1
        b.send(_frame("observation", {"images": {"cam": img}, "task_description": "t"}, 1))
        err = _error(b)
        assert err["payload"]["code"] == "queue_full" and "queue is full" in err["payload"]["error"]
        with connect(running.url, compression=None) as c:
            assert _error(c)["payload"]["code"] == "too_many_connections"
            assert _closed_with(c) == 1013
        reply = msgpack.unpackb(a.recv(timeout=10), raw=False)
        assert (reply["type"], reply["seq"]) == ("action", 1)
        assert _health(running)["rejected"] == 1


def test_client_reports_server_errors_and_busy_servers():
    """The adapter raises InvalidInputError with the server's message for a refused observation."""
    server = VlaEvalServer(SlowPolicy(), limits=SMALL)
    with serve_in_thread(server) as running:
        remote = _client(running.url)
        remote.reset("t")
        ob = Observation(images={"cam": np.zeros((40, 40, 3), np.uint8)}, instruction="t")
        with pytest.raises(InvalidInputError, match=rf"{running.url} refused the observation: .*over the server's limit"):
            remote.act(ob)
        a = remote.act(Observation(images={"cam": np.full((8, 8, 3), 255, np.uint8)}, instruction="t"))
        assert a.vector[0] == pytest.approx(1.0)
        remote.close()


def test_bad_serve_settings_are_config_errors(tiny):
    with pytest.raises(ConfigError, match=r"serve.vla_eval.state.gripper: must be \[start, stop\]"):
        VlaEvalServer(tiny, vla_eval={"state": {"gripper": [3, 1]}})
    with pytest.raises(ConfigError, match="serve.vla_eval has 'camera'"):
        VlaEvalServer(tiny, vla_eval={"camera": "x"})
    with pytest.raises(ConfigError, match="--max-connections"):
        VlaEvalServer(tiny, max_connections=0)
    with pytest.raises(ConfigError, match="needs a policy subject"):
        app_from_spec(ROOT / "config/subjects/scripted_llm.yaml", "vla-eval")


# --------------------------------------------------------------------------- the CLI
def test_cli_serves_a_spec_and_the_adapter_evaluates_it(tmp_path):
    """``embeval serve vla-eval SPEC --port P`` in its own process: /health answers, the adapter acts."""
    from embeval.serving.runner import start_serve_process

    proc, http_url = start_serve_process(["vla-eval", str(STATS), "--max-batch-size", "4"], timeout=90)
    try:
        url = "ws" + http_url[len("http"):]
        remote = _client(url)
        remote.reset("pick")
        img = np.full((16, 16, 3), 200, np.uint8)
        a = remote.act(Observation(images={"third_person": img}, instruction="pick"))
        assert a.vector[0] == pytest.approx(0.1 * (200 / 255 - 0.5), abs=1e-6) and a.vector[6] == 1.0
        h = httpx.get(http_url + "/health", timeout=5).json()
        assert (h["protocol"], h["max_batch_size"], h["actions"]) == ("vla-eval", 4, 1)
        remote.close()
    finally:
        proc.terminate()
        proc.wait(10)
