"""openpi's policy-server protocol, both sides: ``embeval serve openpi`` checked by openpi-client 0.1.2's own
``WebsocketClientPolicy`` and ``msgpack_numpy`` (the peer's released code, not a re-implementation), and
``adapter: openpi`` running an Act2Answer episode and a Decision unit against an openpi-protocol server."""
from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

openpi_client = pytest.importorskip("openpi_client")
from openpi_client import msgpack_numpy  # noqa: E402
from openpi_client.action_chunk_broker import ActionChunkBroker  # noqa: E402
from openpi_client.websocket_client_policy import WebsocketClientPolicy  # noqa: E402

from embeval.conventions import from_embeval  # noqa: E402
from embeval.errors import ConfigError, InvalidInputError  # noqa: E402
from embeval.serving.openpi_server import OpenPiServer  # noqa: E402
from embeval.serving.runner import app_from_spec  # noqa: E402
from embeval.serving.vla_eval_server import serve_in_thread  # noqa: E402
from embeval.subjects.adapters import openpi_protocol as P  # noqa: E402
from embeval.subjects.registry import load_subject  # noqa: E402
from embeval.subjects.scripted import ImageStatsPolicy  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
TINY_VLA = ROOT / "config/subjects/tiny_vla.yaml"


def _libero_obs(seed: int, prompt: str = "pick up the red cube") -> dict:
    rng = np.random.default_rng(seed)
    return {"observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
            "observation/wrist_image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
            "observation/state": np.array([0.42, -0.03, 0.26, 0.1, -0.05, 0.2, 0.03, -0.03]), "prompt": prompt}


@pytest.fixture(scope="module")
def tiny_server():
    with serve_in_thread(app_from_spec(TINY_VLA, "openpi")) as running:
        yield running


def test_openpi_client_gets_repeatable_libero_chunks_from_the_tiny_vla(tiny_server):
    client = WebsocketClientPolicy(tiny_server.url)
    meta = client.get_server_metadata()
    assert (meta["layout"], meta["action_dim"], meta["convention"]) == ("libero", 7, "libero_osc")
    h = meta["action_horizon"]
    obs = _libero_obs(0)
    a = client.infer(obs)["actions"]
    b = WebsocketClientPolicy(tiny_server.url).infer(obs)["actions"]  # a fresh connection: a fresh episode
    assert a.shape == (h, 7) and a.dtype == np.float32 and np.all(np.isfinite(a)) and np.array_equal(a, b)
    # the same numbers as the policy in process on the observation the spec's mapping makes
    policy = tiny_server.server.policy
    from embeval.subjects.protocols import fork_policy

    mine = fork_policy(policy)
    seen = P.read_observation(P.LAYOUTS.get("libero"), obs)
    assert seen.state["gripper"][0] == pytest.approx(0.75) and seen.images["wrist"].shape == (224, 224, 3)
    mine.reset(obs["prompt"])
    expect = from_embeval(mine.act(seen), tiny_server.server.convention)
    assert np.allclose(a[0], expect, atol=1e-6)
    assert not np.allclose(a[0], client.infer(_libero_obs(1))["actions"][0])  # the images matter
    # openpi's own chunk broker slices the chunk
    broker = ActionChunkBroker(WebsocketClientPolicy(tiny_server.url), action_horizon=h)
    assert np.array_equal(broker.infer(obs)["actions"], a[0])
    assert httpx.get(tiny_server.http_url + "/healthz", timeout=5).text == "OK\n"


def test_wire_format_equals_openpi_msgpack_numpy():
    obj = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.float64(2.5), "n": [1, "x"]}
    back, _ = P.unpack(msgpack_numpy.packb(obj))
    assert np.array_equal(back["a"], obj["a"]) and back["a"].dtype == np.float32 and back["s"] == 2.5
    theirs = msgpack_numpy.unpackb(P.pack(obj))
    assert np.array_equal(theirs["a"], obj["a"]) and theirs["s"] == np.float64(2.5) and theirs["n"] == [1, "x"]
    assert P.pack(obj) == msgpack_numpy.packb(obj)  # byte for byte
    with pytest.raises(TypeError, match="complex"):
        P.pack({"c": np.zeros(2, np.complex64)})
    bad = msgpack_numpy.packb({"x": 1})[:-1] + b"\xc1"
    with pytest.raises(P.ProtocolError, match="msgpack"):
        P.unpack(bad)
    lie = {b"__ndarray__": True, b"data": b"\0" * 3, b"dtype": "<f4", b"shape": [2]}
    import msgpack

    with pytest.raises(P.ProtocolError, match="bytes of data"):
        P.unpack(msgpack.packb({"x": lie}, use_bin_type=True))
    obj_dtype = {b"__ndarray__": True, b"data": b"", b"dtype": "|O", b"shape": [0]}
    with pytest.raises(P.ProtocolError, match="dtype"):
        P.unpack(msgpack.packb({"x": obj_dtype}, use_bin_type=True))


def test_hostile_observations_are_refused_with_one_line_and_close_1011(tiny_server):
    from websockets.sync.client import connect

    client = WebsocketClientPolicy(tiny_server.url)
    with pytest.raises(RuntimeError, match="misses image 'observation/wrist_image'"):
        client.infer({k: v for k, v in _libero_obs(0).items() if k != "observation/wrist_image"})
    with connect(tiny_server.url) as ws:
        ws.recv()  # metadata
        ws.send("not msgpack")
        assert "text frame" in ws.recv()
        with pytest.raises(Exception):
            ws.recv(timeout=5)
        assert ws.close_code == 1011
    with connect(tiny_server.url) as ws:
        ws.recv()
        ws.send(msgpack_numpy.packb({**_libero_obs(0), "observation/state": np.full(8, np.nan)}))
        assert "finite" in ws.recv()
    # the server keeps serving
    assert WebsocketClientPolicy(tiny_server.url).infer(_libero_obs(0))["actions"].shape[1] == 7
    h = httpx.get(tiny_server.http_url + "/health", timeout=5).json()
    assert h["protocol"] == "openpi" and h["errors"] >= 3


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="joint-space"):
        OpenPiServer(ImageStatsPolicy(), openpi={"layout": "droid"})
    with pytest.raises(ConfigError, match="layout"):
        OpenPiServer(ImageStatsPolicy(), openpi={"layout": "bridge"})
    with pytest.raises(ConfigError, match="joint-space"):
        load_subject({"kind": "policy", "adapter": "openpi", "url": "ws://127.0.0.1:1", "params": {"layout": "aloha"}})


@pytest.fixture(scope="module")
def stats_server():
    with serve_in_thread(OpenPiServer(ImageStatsPolicy(scale=0.2), openpi={"layout": "libero", "convention": "embeval"})) as r:
        yield r


def _adapter(url: str, **params):
    return load_subject({"id": "pi", "kind": "policy", "adapter": "openpi", "url": url,
                         "params": {"convention": "embeval", "image_size": 32, **params}})


def test_adapter_runs_a_decision_unit_equal_to_the_policy_in_process(stats_server):
    from embeval.sim.backends import make_episode_env, score_episode

    env = make_episode_env({"backend": "pybullet", "env": "Pick", "width": 48, "height": 32, "max_steps": 3})
    try:
        remote = _adapter(stats_server.url)
        sc, ref, dis = score_episode(env, remote, 1, ("darken", 4, 9))
        assert ref.outcome.n_actions == dis.outcome.n_actions == 3 and remote.requests == 6
        assert 0.0 <= sc.decision < 1.0 and np.isfinite(sc.execution.score)
        assert remote.server_metadata["layout"] == "libero"
        again, _, _ = score_episode(env, _adapter(stats_server.url), 1, ("darken", 4, 9))
        assert again.decision == pytest.approx(sc.decision)  # reproducible over the wire
    finally:
        env.close()


def test_adapter_runs_an_act2answer_episode_and_queues_chunks(stats_server, tmp_path):
    from embeval.act2answer.episode import run_episode, sim_config
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import EpisodeSpec, build_scene
    from embeval.sim import SimEnv

    items = generate_items(tmp_path, ["color"], per_category=1, seed=0)
    env = SimEnv(sim_config(64, 48))
    try:
        remote = _adapter(stats_server.url)
        local = ImageStatsPolicy(scale=0.2)
        # the table start: its first observation is the reset scene's (a grasped start moves the cube first)
        scene, task = build_scene(items[0], "original", EpisodeSpec(max_steps=6, start="table"))
        probe = env.reset(1, task, scene)  # the episode's first observation, as run_episode makes it
        local.reset("x")
        from embeval.resize import resize

        small = {c: resize(im, 32, 32, "pil_lanczos") for c, im in probe.images.items()}
        remote_first = local.act(type(probe)(images=small, instruction=probe.instruction, state=probe.state)).vector
        r = run_episode(env, remote, items[0], "original", EpisodeSpec(max_steps=6, start="table"), seed=1)
        assert r.steps == 6 == remote.requests and len(r.actions) == 6
        assert r.actions[0] == pytest.approx(list(remote_first), abs=1e-6)
    finally:
        env.close()
    # a chunk of 4 from a fake openpi server is used one action per step, as ActionChunkBroker does
    remote = _adapter("ws://127.0.0.1:9", action_horizon=2)
    remote.request = lambda ob: np.tile(np.arange(7, dtype=np.float64) / 10, (4, 1)) + np.arange(4)[:, None] / 100
    ob = P.read_observation(P.LAYOUTS.get("libero"), _libero_obs(0))
    xs = [remote.act(ob).vector[0] for _ in range(3)]
    assert xs == pytest.approx([0.0, 0.01, 0.0])  # two of each chunk, then a new request
    with pytest.raises(Exception, match="not reachable"):
        _adapter("ws://127.0.0.1:9", connect_retries=0, timeout=2).act(ob)
    with pytest.raises(InvalidInputError, match="camera 'wrist'"):
        _adapter(stats_server.url).payload(type(ob)(images={"third_person": ob.images["third_person"]},
                                                     instruction="x", state=ob.state))
