"""``adapter: lerobot-server`` against LeRobot's own async-inference policy server
(``python -m lerobot.async_inference.policy_server``, LeRobot 0.6.1, run as a process): the same actions as
``adapter: lerobot`` loading the same checkpoint, an Act2Answer episode and a policy-decision run through it, clear
errors for a wrong spec or a missing server, and a hostile server's pickled reply refused without running it."""
from __future__ import annotations

import pickle
import socket
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lerobot")
grpc = pytest.importorskip("grpc")

from conftest import decision_unit, tiny_act_checkpoint  # noqa: E402

from embeval.action import Observation  # noqa: E402
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError  # noqa: E402
from embeval.subjects import load_subject  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
BASE = {"action_indices": [0, 1, 2, 3, 4, 5, 7], "gripper": "signed_open_positive"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def act_checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("act")
    tiny_act_checkpoint(d, state=6, action=8, action_std=0.1, chunk=4)
    return d


@pytest.fixture(scope="module")
def policy_server(tmp_path_factory):
    """LeRobot's policy server in its own process (its logs/ folder in a temporary directory)."""
    cwd = tmp_path_factory.mktemp("server")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lerobot.async_inference.policy_server", "--host=127.0.0.1",
                             f"--port={port}", "--inference_latency=0", "--obs_queue_timeout=5"], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the policy server exited with {proc.returncode}"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("LeRobot's policy server did not listen within 120 s")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _server_spec(url, ckpt, **params):
    return {"kind": "policy", "adapter": "lerobot-server", "url": url,
            "params": {**BASE, "policy_type": "act", "pretrained_name_or_path": str(ckpt),
                       "camera_map": {"observation.images.top": "third_person"}, "actions_per_chunk": 4, **params}}


def _obs(i):
    rng = np.random.default_rng(i)
    return Observation(images={"third_person": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)},
                       instruction="pick up the cube", state={"joint_positions": rng.normal(size=6)})


def test_served_act_answers_what_the_local_adapter_answers(policy_server, act_checkpoint):
    local = load_subject({"kind": "policy", "adapter": "lerobot", "path": str(act_checkpoint),
                          "params": {**BASE, "camera_map": {"observation.images.top": "third_person"}}})
    served = load_subject(_server_spec(policy_server, act_checkpoint))
    assert served.action_spec.chunk_size == 4
    for subject in (local, served):
        subject.reset("pick up the cube")
    try:
        for i in range(9):  # chunks of 4: requests at steps 0, 4 and 8
            want, got = local.act(_obs(i)), served.act(_obs(i))
            np.testing.assert_allclose(got.vector, want.vector, rtol=1e-5, atol=1e-5)
        assert served.requests == 3
        served.reset("pick up the cube")  # a new episode: the queue is dropped, the session kept
        np.testing.assert_allclose(served.act(_obs(0)).vector, _first(local, _obs(0)), rtol=1e-5, atol=1e-5)
        assert served.requests == 4
        wrong = Observation(images=_obs(0).images, instruction="x", state={"joint_positions": np.zeros(5)})
        served.reset("x")
        with pytest.raises(InvalidInputError, match="the session was opened with 6"):
            served.act(wrong)
    finally:
        served.close()


def _first(local, obs):
    local.reset("pick up the cube")
    return local.act(obs).vector


def test_act2answer_episode_and_decision_run_through_the_policy_server(policy_server, act_checkpoint, tmp_path):
    from embeval.act2answer.episode import run_items
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import EpisodeSpec

    spec = _server_spec(policy_server, act_checkpoint, state_key=["joint_positions"])
    subject = load_subject(spec)
    try:
        items = generate_items(tmp_path / "a2a", ["shape"], per_category=1, seed=3)
        (episode,) = run_items(subject, items[:1], EpisodeSpec(max_steps=5), layouts=("original",))
        assert episode.steps == 5 and len(episode.actions) == 5 and subject.requests == 2
        assert np.all(np.isfinite(np.asarray(episode.actions, dtype=float)))
    finally:
        subject.close()
    d = decision_unit({**spec, "id": "served-act"}, {"joint_positions": np.random.default_rng(0).normal(size=6)},
                      tmp_path, (64, 48))
    assert 0.0 <= d <= 1.0


def test_wrong_settings_fail_loudly(policy_server, act_checkpoint, tmp_path):
    with pytest.raises(ConfigError, match="camera_map"):
        load_subject({**_server_spec(policy_server, act_checkpoint), "params": {"policy_type": "act",
                                                                               "pretrained_name_or_path": "x"}})
    with pytest.raises(ConfigError, match="host:port"):
        load_subject({**_server_spec(policy_server, act_checkpoint), "url": "http://127.0.0.1:1"})
    with pytest.raises(ConfigError, match="observation.images"):
        load_subject(_server_spec(policy_server, act_checkpoint, camera_map={"top": "third_person"}))
    # a state entry the observation lacks: named before anything is sent
    bad = load_subject(_server_spec(policy_server, act_checkpoint, state_key=["tcp_pose"]))
    bad.reset("x")
    with pytest.raises(InvalidInputError, match="tcp_pose"):
        bad.act(_obs(0))
    # a checkpoint path the server cannot load: the server's failure, in one line
    missing = load_subject(_server_spec(policy_server, tmp_path / "nothing-here", load_timeout=60))
    missing.reset("x")
    with pytest.raises((InvalidInputError, ServerUnavailableError), match="policy server at"):
        missing.act(_obs(0))
    missing.close()
    with pytest.raises(ConfigError, match="one robot client at a time"):
        load_subject(_server_spec(policy_server, act_checkpoint)).fork()


def test_no_server_is_named_with_the_command_to_start_one(act_checkpoint):
    subject = load_subject(_server_spec(f"127.0.0.1:{_free_port()}", act_checkpoint, timeout=1))
    subject.reset("x")
    with pytest.raises(ServerUnavailableError, match="lerobot.async_inference.policy_server"):
        subject.act(_obs(0))


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def _hostile_server(reply: bytes):
    from lerobot.transport import services_pb2, services_pb2_grpc

    class Servicer(services_pb2_grpc.AsyncInferenceServicer):
        def Ready(self, request, context):  # noqa: N802
            return services_pb2.Empty()

        def SendPolicyInstructions(self, request, context):  # noqa: N802
            return services_pb2.Empty()

        def SendObservations(self, request_iterator, context):  # noqa: N802
            for _ in request_iterator:
                pass
            return services_pb2.Empty()

        def GetActions(self, request, context):  # noqa: N802
            return services_pb2.Actions(data=reply)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    services_pb2_grpc.add_AsyncInferenceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def test_a_hostile_servers_pickle_is_refused_unrun(act_checkpoint, tmp_path):
    from lerobot.async_inference.helpers import TimedAction

    marker = tmp_path / "pwned"
    cases = {"exec": (pickle.dumps(_Exploit(marker)), "not allowed"),
             "inner exec": (pickle.dumps([TimedAction(0.0, 1, _Exploit(marker))]), "not allowed"),
             "not a chunk": (pickle.dumps({"actions": [1, 2]}), "list of TimedAction"),
             "nan": (pickle.dumps([TimedAction(0.0, 1, torch.full((8,), float("nan")))]), "non-finite"),
             "truncated": (pickle.dumps([TimedAction(0.0, 1, torch.zeros(8))])[:-9], "not a LeRobot action chunk"),
             "short": (pickle.dumps([TimedAction(0.0, 1, torch.zeros(3))]), "action_indices")}
    for name, (reply, message) in cases.items():
        server, url = _hostile_server(reply)
        try:
            subject = load_subject(_server_spec(url, act_checkpoint, timeout=10))
            subject.reset("x")
            with pytest.raises(InvalidInputError, match=message):
                subject.act(_obs(0))
            subject.close()
        finally:
            server.stop(0)
        assert not marker.exists(), name
    # a well-formed reply from the same fake server is read: tensors come through torch's weights-only loader
    server, url = _hostile_server(pickle.dumps([TimedAction(0.0, i, torch.full((8,), 0.01 * i)) for i in range(1, 5)]))
    try:
        subject = load_subject(_server_spec(url, act_checkpoint, timeout=10))
        subject.reset("x")
        first = subject.act(_obs(0))
        np.testing.assert_allclose(first.vector[:6], 0.01, atol=1e-7)
        subject.close()
    finally:
        server.stop(0)


def test_shipped_spec_loads():
    subject = load_subject(ROOT / "config/subjects/lerobot_server.yaml")
    assert subject.url == "127.0.0.1:8080" and subject.actions_per_chunk == 50
    assert subject.params.state_key == ("tcp_pose", "gripper")
