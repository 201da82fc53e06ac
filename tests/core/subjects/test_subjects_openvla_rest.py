"""OpenVLA REST protocol: our client against our server (serving a registry policy), reply
variants (chunks, plain lists, gripper conventions), and failures (server down, NaN actions)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import free_port

from embeval.action import Action, Observation
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError
from embeval.serving.openvla_server import create_app
from embeval.serving.runner import serve_in_thread
from embeval.subjects import load_subject
from embeval.subjects.adapters.numpy_json import decode_array, encode_array
from embeval.subjects.adapters.openvla_rest import OpenVLARestPolicy
from embeval.conventions import gripper_from_embeval, gripper_to_embeval
from embeval.subjects.scripted import ImageStatsPolicy


class Recorder(ImageStatsPolicy):
    def __init__(self):
        super().__init__(id="recorder")
        self.resets: list[str] = []

    def reset(self, instruction):
        self.resets.append(instruction)
        super().reset(instruction)


@pytest.fixture(scope="module")
def server():
    policy = Recorder()
    with serve_in_thread(create_app(policy)) as srv:
        yield srv, policy


def _obs(seed, instruction="pick up the red cube"):
    rng = np.random.default_rng(seed)
    return Observation(images={"third_person": rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)}, instruction=instruction)


def test_numpy_wire_format_roundtrip_and_interop():
    for a in [np.arange(12, dtype=np.uint8).reshape(2, 2, 3), np.linspace(-1, 1, 7).astype(np.float32), np.eye(3)]:
        enc = json.loads(json.dumps(encode_array(a)))
        b = decode_array(enc)
        assert b.dtype == a.dtype and np.array_equal(a, b)
    json_numpy = pytest.importorskip("json_numpy")  # the package OpenVLA's clients use
    a = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    assert np.array_equal(decode_array(json.loads(json_numpy.dumps(a))), a)
    assert np.array_equal(json_numpy.loads(json.dumps(encode_array(a))), a)


def test_client_matches_direct_policy(server):
    srv, policy = server
    client = load_subject({"kind": "policy", "adapter": "openvla_rest", "url": srv.url, "params": {"unnorm_key": "bridge_orig"}})
    reference = ImageStatsPolicy()
    client.reset("pick up the red cube")
    for seed in range(3):
        obs = _obs(seed)
        got = client.act(obs)
        want = reference.act(obs)
        assert isinstance(got, Action)
        np.testing.assert_allclose(got.vector, want.vector, atol=1e-6)  # float32 on the wire
    # images of different brightness give different actions: the image really travelled
    dark = Observation(images={"c": np.zeros((8, 8, 3), np.uint8)}, instruction="x")
    bright = Observation(images={"c": np.full((8, 8, 3), 255, np.uint8)}, instruction="x")
    assert client.act(dark).gripper == 0.0 and client.act(bright).gripper == 1.0
    # the server resets the policy when the instruction changes, not on every call
    assert policy.resets.count("pick up the red cube") == 1 and policy.resets[-1] == "x"


def test_encoded_payload_and_resize(server):
    srv, _ = server
    client = OpenVLARestPolicy(url=srv.url + "/act", encoded=True, image_size=16)
    body = client.payload(_obs(0))
    assert list(body) == ["encoded"] and decode_array(json.loads(body["encoded"])["image"]).shape == (16, 16, 3)
    a = client.act(_obs(0))
    assert np.all(np.abs(a.translation) <= 0.05)


@pytest.mark.parametrize("conv", ["open1", "close1", "signed_open_positive", "signed_close_positive"])
def test_gripper_conventions_roundtrip(conv):
    for g in (0.0, 0.25, 1.0):
        assert gripper_to_embeval(gripper_from_embeval(g, conv), conv) == pytest.approx(g)
    assert gripper_to_embeval(-1.0, "signed_close_positive") == 1.0  # LIBERO: -1 = open
    with pytest.raises(ConfigError, match="gripper"):
        OpenVLARestPolicy(url="http://127.0.0.1:1", gripper="sideways")


def _raw_server(reply):
    from fastapi import FastAPI

    app = FastAPI()
    hits = {"n": 0}

    @app.post("/act")
    def act():
        hits["n"] += 1
        return reply

    return app, hits


def test_chunked_reply_and_gripper_conversion():
    chunk = [[0.01 * i, 0, 0, 0, 0, 0, -1.0 if i < 2 else 1.0] for i in range(3)]  # LIBERO: -1 open, +1 closed
    app, hits = _raw_server({"action": chunk})
    with serve_in_thread(app) as srv:
        client = OpenVLARestPolicy(url=srv.url, gripper="signed_close_positive", chunk_size=3)
        acts = [client.act(_obs(0)) for _ in range(3)]
        assert hits["n"] == 1
        assert [a.gripper for a in acts] == [1.0, 1.0, 0.0]
        assert acts[2].translation[0] == pytest.approx(0.02)
        client.act(_obs(0))
        assert hits["n"] == 2


def test_nan_action_and_error_replies_raise():
    app, _ = _raw_server(encode_array(np.full(7, np.nan, np.float32)))  # NaN survives json_numpy
    with serve_in_thread(app) as srv:
        with pytest.raises(InvalidInputError, match="NaN"):
            OpenVLARestPolicy(url=srv.url).act(_obs(0))
    app, _ = _raw_server("error")  # what upstream deploy.py answers when its model throws
    with serve_in_thread(app) as srv:
        with pytest.raises(ServerUnavailableError, match="instead of an action"):
            OpenVLARestPolicy(url=srv.url).act(_obs(0))
    app, _ = _raw_server([0.0] * 6)
    with serve_in_thread(app) as srv:
        with pytest.raises(InvalidInputError, match="shape"):
            OpenVLARestPolicy(url=srv.url).act(_obs(0))


def test_server_reports_policy_nan_and_bad_input():
    class NaNPolicy(ImageStatsPolicy):
        def act(self, observation):
            return Action(np.full(7, np.nan))

    with serve_in_thread(create_app(NaNPolicy())) as srv:
        with pytest.raises(ServerUnavailableError, match="HTTP 500.*NaN"):
            OpenVLARestPolicy(url=srv.url, max_retries=0).act(_obs(0))
        import httpx

        r = httpx.post(srv.url + "/act", json={"image": [[1, 2]], "instruction": "x"})
        assert r.status_code == 400 and "RGB uint8" in r.json()["error"]["message"]


def test_server_down_names_url_and_fix():
    port = free_port()
    client = OpenVLARestPolicy(url=f"http://127.0.0.1:{port}", max_retries=1, backoff=0.01, timeout=2)
    with pytest.raises(ServerUnavailableError) as ei:
        client.act(_obs(0))
    assert f"127.0.0.1:{port}" in str(ei.value) and "embeval serve openvla" in str(ei.value)


def test_oft_style_payload_extra_cameras_and_state():
    class Seen(ImageStatsPolicy):
        def act(self, observation):
            self.last = observation
            return super().act(observation)

    policy = Seen(camera="wrist_image")  # acts on the wrist camera only
    with serve_in_thread(create_app(policy)) as srv:
        client = OpenVLARestPolicy(url=srv.url, image_key="full_image", extra_cameras={"wrist_image": "wrist"},
                                   state_fields={"state": "joint_positions"}, unnorm_key=None)
        bright = np.full((8, 8, 3), 250, np.uint8)
        obs = Observation(images={"third_person": np.zeros((8, 8, 3), np.uint8), "wrist": bright}, instruction="x",
                          state={"joint_positions": np.arange(6.0)})
        assert "full_image" in client.payload(obs) and "unnorm_key" not in client.payload(obs)
        assert client.act(obs).gripper == 1.0  # decided by the wrist image
        assert sorted(policy.last.images) == ["third_person", "wrist_image"]
        np.testing.assert_array_equal(policy.last.state["state"], np.arange(6.0))
        with pytest.raises(InvalidInputError, match="extra_cameras"):
            client.act(Observation(images={"third_person": bright}, instruction="x", state={"joint_positions": np.zeros(6)}))
