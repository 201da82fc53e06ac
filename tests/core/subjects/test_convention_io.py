"""Action conventions at the edges: the servers answer in ``serve.convention`` (``gripper`` overriding it), the
remote clients convert absolute and quaternion conventions against the observation's TCP pose, the adapters read
the convention's cameras / crop / image size (their own params override), and LeRobot reads ``convention.size``
raw numbers (quaternion ACT, two arms)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from embeval.action import Action, ActionSpec, Observation, apply_delta
from embeval.conventions import convention, from_embeval, model_image
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError
from embeval.resize import resize

DELTA = np.array([0.02, -0.01, 0.03, 0.1, -0.05, 0.2, 0.25])
TCP7 = np.array([0.4, -0.1, 0.3, *Rotation.from_rotvec([3.0, 0.2, -0.1]).as_quat()])  # xyz + quaternion xyzw
TCP6 = np.array([0.4, -0.1, 0.3, 3.0, 0.2, -0.1])


class FixedPolicy:
    """Answers DELTA every step (an embeval Action), remembering the observations it saw."""

    id = "fixed"
    action_spec = ActionSpec()

    def __init__(self):
        self.seen: list[Observation] = []

    def reset(self, instruction: str) -> None:
        pass

    def act(self, observation: Observation) -> Action:
        self.seen.append(observation)
        return Action(DELTA)


def _img(h=40, w=40, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _obs(**state):
    return Observation(images={"third_person": _img(seed=1), "wrist": _img(seed=2)}, instruction="pick up the cube",
                       state=state)


def _target(tcp6, delta, frame="base"):
    """The absolute [x y z rx ry rz] pose that ``delta`` reaches from ``tcp6``."""
    return apply_delta(tcp6, delta[:6], frame)


def _same_pose(a, b, atol=1e-5):
    assert np.allclose(a[:3], b[:3], atol=atol)
    assert np.allclose(Rotation.from_rotvec(a[3:6]).as_matrix(), Rotation.from_rotvec(b[3:6]).as_matrix(), atol=atol)


# --------------------------------------------------------------------------- servers
def test_server_default_reply_is_unchanged_and_gripper_overrides_the_convention():
    from embeval.serving.openvla_server import server_convention, wire_action

    default = server_convention()
    assert default.name == "embeval" and default.gripper == "open1"
    assert wire_action(Action(DELTA), default).tolist() == DELTA.astype(np.float32).tolist()  # exactly as before
    libero = server_convention("libero_osc", gripper="open1")  # --gripper wins over the convention's gripper
    raw = wire_action(Action(DELTA), libero)
    assert raw[6] == pytest.approx(0.25) and np.allclose(raw[:3], DELTA[:3] / 0.05)
    assert server_convention("libero_osc").gripper == "signed_close_positive"
    assert wire_action(Action(DELTA), server_convention("libero_osc"))[6] == pytest.approx(0.5)  # 1 - 2 * 0.25
    with pytest.raises(ConfigError, match=r"field 'serve.convention'"):
        server_convention("no_such_convention")
    with pytest.raises(ConfigError, match=r"'serve.convention.gripper' must be one of"):
        server_convention({"base": "embeval"}, gripper="flipped")


def test_spec_serve_convention_reaches_both_servers(tmp_path):
    import yaml

    from embeval.serving.runner import app_from_spec

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"id": "fixed", "kind": "policy", "adapter": "embedded", "path": "tiny-vla",
                                    "serve": {"convention": {"base": "mm_deg", "gripper": "close1"}}}))
    vla = app_from_spec(spec, "vla-eval", subject=FixedPolicy())
    try:
        assert vla.convention.translation_units == "mm" and vla.gripper == "close1"
        assert np.allclose(vla._reply(Action(DELTA)), [20, -10, 30, *np.degrees(DELTA[3:6]), 0.75], atol=1e-4)
        hello = vla.hello_payload()["action_spec"]
        assert hello["position"]["description"].startswith("millimetres") and hello["rotation"]["format"] == "euler_xyz"
    finally:
        vla.shutdown()
    over = app_from_spec(spec, "vla-eval", subject=FixedPolicy(), gripper="open1")  # --gripper overrides the spec
    try:
        assert over.gripper == "open1" and over.convention.translation_units == "mm"
    finally:
        over.shutdown()
    spec.write_text(yaml.safe_dump({"id": "fixed", "kind": "policy", "adapter": "embedded", "path": "tiny-vla",
                                    "serve": {"convention": "mm_dgr"}}))
    with pytest.raises(ConfigError, match=r"serve.convention.*mm_dgr|mm_dgr.*serve.convention"):
        app_from_spec(spec, "openvla", subject=FixedPolicy())


# --------------------------------------------------------------------------- clients with an absolute convention
def test_openvla_rest_absolute_convention_round_trip():
    """Server and client both in tcp_abs_rotvec: the wire carries the target pose, the client's Action is the delta
    again (before, the client made an absolute Action of it)."""
    from embeval.serving import openvla_server
    from embeval.serving.runner import serve_in_thread
    from embeval.subjects.adapters.openvla_rest import OpenVLARestPolicy

    policy = FixedPolicy()
    app = openvla_server.create_app(policy, convention="tcp_abs_rotvec", state={"tcp_pose": "tcp_pose"})
    with serve_in_thread(app) as srv:
        client = OpenVLARestPolicy(url=srv.url, unnorm_key=None, convention="tcp_abs_rotvec",
                                   state_fields={"tcp_pose": "tcp_pose"})
        try:
            client.reset("pick up the cube")
            raw = client.request(_obs(tcp_pose=TCP7))[0]
            _same_pose(raw[:6], _target(TCP6, DELTA))
            assert raw[6] == pytest.approx(0.25)
            a = client.act(_obs(tcp_pose=TCP7))
            assert np.allclose(a.vector, DELTA, atol=1e-5)
            # the same delta from the 6-number rotation-vector form of the pose
            assert np.allclose(client.act(_obs(tcp_pose=TCP6)).vector, DELTA, atol=1e-5)
            assert not client.action_spec.absolute  # deltas: the doctor must not convert them again
            client._queue.append(np.r_[TCP6, 1.0])  # a queued target, and an observation without the pose
            with pytest.raises(InvalidInputError, match=r"'tcp_abs_rotvec' is absolute: observation.state needs 'tcp_pose'"):
                client.act(_obs())
        finally:
            client.close()
        blind = OpenVLARestPolicy(url=srv.url, unnorm_key=None, convention="tcp_abs_rotvec")  # sends no pose
        try:
            with pytest.raises(ServerUnavailableError, match=r"HTTP 400.*is absolute.*tcp_pose"):
                blind.act(_obs(tcp_pose=TCP7))
        finally:
            blind.close()


def test_vla_eval_absolute_and_quaternion_conventions_round_trip():
    from embeval.serving.vla_eval_server import VlaEvalServer, serve_in_thread
    from embeval.subjects.adapters.vla_eval_client import VlaEvalPolicy

    for conv in ("tcp_abs_rotvec", {"rotation": "quaternion"}):
        server = VlaEvalServer(FixedPolicy(), convention=conv)
        with serve_in_thread(server) as running:
            client = VlaEvalPolicy(url=running.url, convention=conv)
            try:
                client.reset("pick up the cube")
                raw = client.request(_obs(tcp_pose=TCP7))[0]
                if conv == "tcp_abs_rotvec":
                    _same_pose(raw[:6], _target(TCP6, DELTA))
                else:  # 8 numbers: translation, quaternion xyzw, gripper
                    assert raw.shape == (8,)
                    assert np.allclose(Rotation.from_quat(raw[3:7]).as_euler("xyz"), DELTA[3:6], atol=1e-5)
                assert np.allclose(client.act(_obs(tcp_pose=TCP7)).vector, DELTA, atol=1e-5)
                if conv == "tcp_abs_rotvec":  # the server cannot answer a target without the current pose
                    with pytest.raises(InvalidInputError, match=r"refused the observation.*is absolute.*tcp_pose"):
                        client.act(_obs())
            finally:
                client.close()
    # a 7-number client against the 8-number server names the width and the fix
    server = VlaEvalServer(FixedPolicy(), convention={"rotation": "quaternion"})
    with serve_in_thread(server) as running:
        client = VlaEvalPolicy(url=running.url)
        try:
            with pytest.raises(InvalidInputError, match=r"shape \(1, 8\); expected \(7,\).*params.convention"):
                client.act(_obs(tcp_pose=TCP7))
        finally:
            client.close()


def test_vla_eval_act_slots_use_each_slots_pose():
    from embeval.serving.vla_eval_server import VlaEvalServer, serve_in_thread
    from embeval.subjects.adapters.vla_eval_client import VlaEvalPolicy

    server = VlaEvalServer(FixedPolicy(), convention="tcp_abs_rotvec", max_batch_size=2, max_wait_ms=50)
    other = np.array([0.2, 0.3, 0.5, 0.0, 0.0, 0.0, 1.0])
    with serve_in_thread(server) as running:
        client = VlaEvalPolicy(url=running.url, convention="tcp_abs_rotvec")
        try:
            client.reset_slots([0, 1], ["a", "b"])
            out = client.act_slots([0, 1], [_obs(tcp_pose=TCP7), _obs(tcp_pose=other)])
            assert all(np.allclose(a.vector, DELTA, atol=1e-5) for a in out)
            client.end_slots([0, 1])
        finally:
            client.close()


# --------------------------------------------------------------------------- image fields
def test_openvla_rest_reads_the_conventions_image_fields():
    from embeval.subjects.adapters.numpy_json import decode_array
    from embeval.subjects.adapters.openvla_rest import OpenVLARestPolicy

    conv = {"cameras": ["wrist"], "image_size": [16, 12], "crop": 0.25}
    obs = _obs()
    img = decode_array(OpenVLARestPolicy(convention=conv).payload(obs)["image"])
    want = resize(obs.images["wrist"][10:30, 10:30], 16, 12, "pil_lanczos")  # a quarter of the area: half of each side
    np.testing.assert_array_equal(img, want)
    over = decode_array(OpenVLARestPolicy(convention=conv, camera="third_person", image_size=8).payload(obs)["image"])
    np.testing.assert_array_equal(over, resize(obs.images["third_person"][10:30, 10:30], 8, 8, "pil_lanczos"))
    plain = decode_array(OpenVLARestPolicy().payload(obs)["image"])  # embeval's convention: first camera, as is
    np.testing.assert_array_equal(plain, obs.images["third_person"])
    with pytest.raises(ConfigError, match=r"'params.convention.cameras': camera 'top'"):
        OpenVLARestPolicy(convention={"cameras": ["top"]}).payload(obs)


def test_vla_eval_client_reads_the_conventions_cameras_and_size():
    from embeval.subjects.adapters.vla_eval_client import VlaEvalPolicy

    obs = _obs()
    body = VlaEvalPolicy(convention={"cameras": ["wrist"], "image_size": 20}).payload(obs)
    assert list(body["images"]) == ["wrist"]
    np.testing.assert_array_equal(body["images"]["wrist"], resize(obs.images["wrist"], 20, 20, "pil_lanczos"))
    body = VlaEvalPolicy(convention={"cameras": ["wrist"], "image_size": 20}, cameras={"third_person": "agentview"},
                         image_size=[10, 14]).payload(obs)
    assert list(body["images"]) == ["agentview"] and body["images"]["agentview"].shape == (10, 14, 3)
    assert sorted(VlaEvalPolicy().payload(obs)["images"]) == ["third_person", "wrist"]


def test_model_image_crop_keeps_the_centre():
    img = np.arange(10 * 8 * 3, dtype=np.uint8).reshape(10, 8, 3)
    out = model_image(img, convention({"crop": 0.25}), None)
    np.testing.assert_array_equal(out, img[2:7, 2:6])  # 5 x 4: half of each side, centred (odd margin below)
    assert model_image(img, convention(), None) is img


# --------------------------------------------------------------------------- LeRobot with convention.size
def test_lerobot_quaternion_convention_and_two_arms(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("lerobot")
    from conftest import tiny_act_checkpoint

    from embeval.subjects import load_subject

    tiny_act_checkpoint(tmp_path / "q", state=6, action=8, action_std=1.0, dim_model=16)
    spec = {"kind": "policy", "adapter": "lerobot", "path": str(tmp_path / "q"),
            "params": {"convention": {"rotation": "quaternion"}}}
    subject = load_subject(spec)
    raw = from_embeval(Action(DELTA), convention({"rotation": "quaternion"}))
    assert raw.shape == (8,)
    subject.policy.select_action = lambda batch: torch.tensor([raw.tolist()])
    subject.reset("x")
    obs = Observation(images={"third_person": np.zeros((32, 32, 3), np.uint8)}, state={"joint_positions": np.zeros(6)})
    np.testing.assert_allclose(subject.act(obs).vector, DELTA, atol=1e-6)
    with pytest.raises(ConfigError, match=r"'params.action_indices' must list 8 indices"):
        load_subject({**spec, "params": {**spec["params"], "action_indices": [0, 1, 2, 3, 4, 5, 6]}})
    with pytest.raises(ConfigError, match=r"'params.action_scale' must be one number or 8"):
        load_subject({**spec, "params": {**spec["params"], "action_scale": [1] * 7}})
    with pytest.raises(ConfigError, match=r"'params.convention.image_size': 64x64.*32x32"):
        load_subject({**spec, "params": {"convention": {"rotation": "quaternion", "image_size": 64}}})
    # two quaternion arms: 16 numbers, the arm that moves most
    tiny_act_checkpoint(tmp_path / "q2", state=6, action=16, action_std=1.0, dim_model=16)
    still = from_embeval(Action([0.001, 0, 0, 0, 0, 0, 1.0]), convention({"rotation": "quaternion"}))
    two = load_subject({**spec, "path": str(tmp_path / "q2"), "params": {**spec["params"], "arms": 2}})
    for out in (np.r_[still, raw], np.r_[raw, still]):
        two.policy.select_action = lambda batch, out=out: torch.tensor([out.tolist()])
        two.reset("x")
        np.testing.assert_allclose(two.act(obs).vector, DELTA, atol=1e-6)
    with pytest.raises(ConfigError, match=r"'params.arms' must be the number of 8-value arm blocks"):
        load_subject({**spec, "params": {**spec["params"], "arms": 3}})


def test_lerobot_absolute_convention_and_convention_cameras(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("lerobot")
    from conftest import tiny_act_checkpoint

    from embeval.subjects import load_subject

    tiny_act_checkpoint(tmp_path, state=6, action=7, action_std=1.0, dim_model=16)
    spec = {"kind": "policy", "adapter": "lerobot", "path": str(tmp_path),
            "params": {"convention": {"base": "tcp_abs_rotvec", "cameras": ["wrist"], "crop": 0.25}}}
    subject = load_subject(spec)
    target = _target(TCP6, DELTA)
    subject.policy.select_action = lambda batch: torch.tensor([[*target, 0.25]])
    subject.reset("x")
    wrist = _img(64, 64, seed=3)
    obs = Observation(images={"third_person": _img(64, 64, seed=4), "wrist": wrist},
                      state={"joint_positions": np.zeros(6), "tcp_pose": TCP7})
    np.testing.assert_allclose(subject.act(obs).vector, DELTA, atol=1e-6)
    assert subject.camera_map == {"observation.images.top": "wrist"}
    from embeval.subjects.adapters.lerobot_policy import image_to_tensor

    fed = subject.batch(obs)["observation.images.top"]  # the crop is the input's 32 x 32: no resize
    np.testing.assert_array_equal(fed.numpy(), image_to_tensor(wrist[16:48, 16:48], (3, 32, 32)).numpy())
    explicit = load_subject(spec, camera_map={"observation.images.top": "third_person"})  # the param overrides
    assert explicit.camera_map == {"observation.images.top": "third_person"}
