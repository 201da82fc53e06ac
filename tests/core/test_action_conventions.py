"""ActionConvention: every built-in against a hand computation, spec overrides and their errors, round trips,
and the docs table kept equal to the registry."""
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from embeval.action import Action, apply_delta
from embeval.errors import ConfigError, InvalidInputError
from embeval.conventions import (
    CONVENTIONS,
    ActionConvention,
    convention,
    conventions_table,
    from_embeval,
    to_embeval,
)


def rpy(R):
    return Rotation.from_matrix(R).as_euler("xyz")


def test_embeval_is_identity_exactly():
    v = [0.01, -0.02, 0.03, 0.4, -2.0, 3.5, 0.3]  # yaw beyond pi stays as given (no rewrapping)
    assert to_embeval(v, "embeval").vector.tolist() == v
    assert from_embeval(Action(v), "embeval").tolist() == v


def test_libero_osc_by_hand():
    raw = np.array([0.2, -0.4, 1.5, 0.3, -0.2, 0.6, 0.5])  # 1.5 is clipped to 1
    a = to_embeval(raw, "libero_osc").vector
    assert np.allclose(a[:3], [0.01, -0.02, 0.05])
    assert np.allclose(a[3:6], rpy(Rotation.from_rotvec(raw[3:6] * 0.5).as_matrix()))
    assert a[6] == pytest.approx(0.25)  # +0.5 = mostly closed on LIBERO's -1 open .. +1 close
    assert np.allclose(from_embeval(a, "libero_osc"), np.clip(raw, -1, 1))


def test_openvla_libero_and_bridge_grippers():
    assert to_embeval([0, 0, 0, 0, 0, 0, 1.0], "openvla_libero").gripper == 1.0  # [0, 1] 1 = open
    assert to_embeval([0.1, 0, 0, 0, 0, 0, 1.0], "openvla_bridge").vector.tolist() == [0.1, 0, 0, 0, 0, 0, 1.0]
    c = convention({"base": "openvla_bridge", "gripper": "close1"})
    assert c.image_size == (224,) and to_embeval([0, 0, 0, 0, 0, 0, 0.8], c).gripper == pytest.approx(0.2)
    s = convention({"gripper": "signed_close_positive"})
    assert to_embeval([0, 0, 0, 0, 0, 0, -1.0], s).gripper == 1.0 and to_embeval([0] * 6 + [1.0], s).gripper == 0.0


def test_mm_and_degrees():
    a = to_embeval([10.0, -5.0, 2.0, 90.0, 0.0, -45.0, 1.0], "mm_deg").vector
    assert np.allclose(a[:6], [0.01, -0.005, 0.002, np.pi / 2, 0.0, -np.pi / 4])
    assert np.allclose(from_embeval(a, "mm_deg"), [10, -5, 2, 90, 0, -45, 1])


@pytest.mark.parametrize("rotation,rep", [
    ("quaternion", lambda R: Rotation.from_matrix(R).as_quat()),
    ("rot6d", lambda R: np.concatenate([R[:, 0], R[:, 1]]) * [2, 2, 2, 1, 1, 1]),  # columns need not be unit
    ("rotvec", lambda R: Rotation.from_matrix(R).as_rotvec()),
])
def test_rotation_representations(rotation, rep):
    R = Rotation.from_euler("xyz", [0.3, -0.5, 1.2]).as_matrix()
    c = convention({"rotation": rotation})
    a = to_embeval(np.concatenate([[0.1, 0.2, 0.3], rep(R), [1.0]]), c).vector
    assert np.allclose(a[3:6], [0.3, -0.5, 1.2])
    back = to_embeval(from_embeval(a, c), c).vector
    assert np.allclose(back, a)


def test_intrinsic_euler_order():
    c = convention({"order": "ZYX", "rotation_units": "deg"})
    a = to_embeval([0, 0, 0, 30, 20, 10, 1], c).vector
    assert np.allclose(a[3:6], rpy(Rotation.from_euler("ZYX", [30, 20, 10], degrees=True).as_matrix()))
    assert np.allclose(from_embeval(a, c)[3:6], [30, 20, 10])


@pytest.mark.parametrize("frame", ["base", "tool0"])
def test_absolute_pose_to_delta(frame):
    tcp = np.array([0.4, -0.1, 0.3, 3.0, 0.2, -0.1])
    target = np.array([0.45, -0.05, 0.28, 2.9, 0.3, 0.0])
    c = convention({"base": "tcp_abs_rotvec", "frame": frame})
    a = to_embeval(np.concatenate([target, [1.0]]), c, tcp_pose=tcp)
    assert np.allclose(Rotation.from_rotvec(apply_delta(tcp, a.vector[:6], frame)[3:]).as_matrix(),
                       Rotation.from_rotvec(target[3:]).as_matrix())
    assert np.allclose(apply_delta(tcp, a.vector[:6], frame)[:3], target[:3])
    raw = from_embeval(a, c, tcp_pose=tcp)
    assert np.allclose(Rotation.from_rotvec(raw[3:6]).as_matrix(), Rotation.from_rotvec(target[3:]).as_matrix())
    assert np.allclose(raw[:3], target[:3])
    # to_embeval without the current pose: the Action holds the absolute pose (xyz + rpy); adapters refuse that case
    absolute = to_embeval(np.concatenate([target, [1.0]]), c).vector
    assert np.allclose(absolute[:3], target[:3]) and np.allclose(absolute[3:6], rpy(Rotation.from_rotvec(target[3:]).as_matrix()))
    # adapters turn the targets into deltas against the observed pose, so their ActionSpec says delta
    assert not c.action_spec().absolute and c.action_spec().frame == frame


def test_libero_to_from_use_the_convention():
    from embeval.sim.libero import from_libero, to_libero

    raw = [0.3, -0.1, 0.2, 0.1, 0.2, -0.3, -1.0]
    assert np.allclose(from_libero(raw).vector, to_embeval(raw, "libero_osc").vector)
    assert np.allclose(to_libero(from_libero(raw)), raw)


@pytest.mark.parametrize("value,message", [
    ("libero", r"unknown action convention 'libero'.*did you mean|unknown action convention 'libero'"),
    ({"base": "embeval", "grip": "close1"}, r"'params.convention.grip' is not a convention field"),
    ({"gripper": "flipped"}, r"'params.convention.gripper' must be one of open1"),
    ({"rotation": "euler6"}, r"'params.convention.rotation' must be one of euler, rotvec"),
    ({"order": "xxy"}, r"'params.convention.order'"),
    ({"translation_units": "in"}, r"'params.convention.translation_units'"),
    ({"scale": [1, 2]}, r"'params.convention.scale' must be one non-zero finite number or 7"),
    ({"clip": -1}, r"'params.convention.clip'"),
    ({"chunk_size": 0}, r"'params.convention.chunk_size'"),
    ({"frame": "world"}, r"'params.convention.frame' must be one of base, tool0"),
    (7, r"'params.convention' must be a convention name"),
])
def test_bad_specs_are_one_line_errors(value, message):
    with pytest.raises(ConfigError, match=message) as e:
        convention(value)
    assert "\n" not in str(e.value)


def test_wrong_length_and_nan_are_refused():
    with pytest.raises(InvalidInputError, match="reads 8 numbers"):
        to_embeval([0] * 7, convention({"rotation": "quaternion"}))
    with pytest.raises(InvalidInputError, match="NaN"):
        to_embeval([0, 0, float("nan"), 0, 0, 0, 1], "embeval")


def test_round_trip_every_builtin():
    a = Action([0.01, -0.02, 0.015, 0.1, -0.2, 0.3, 0.0])
    tcp = [0.4, 0.0, 0.3, 3.1, 0.0, 0.0]
    for name in CONVENTIONS.names():
        c = CONVENTIONS.get(name)
        assert isinstance(c, ActionConvention)
        back = to_embeval(from_embeval(a, c, tcp_pose=tcp), c, tcp_pose=tcp).vector
        assert np.allclose(back, a.vector, atol=1e-9), name


def test_adapter_spec_names_a_convention():
    from embeval.subjects.adapters.openvla_rest import OpenVLARestPolicy

    p = OpenVLARestPolicy(convention={"base": "libero_osc", "chunk_size": 4})
    assert p.gripper == "signed_close_positive" and p.action_spec.chunk_size == 4
    p._queue.append(np.array([1.0, 0, 0, 0, 0, 0, -1.0]))
    assert np.allclose(p.act(None).vector, [0.05, 0, 0, 0, 0, 0, 1.0])
    legacy = OpenVLARestPolicy(gripper="close1", convention="libero_osc")  # the older field still overrides
    assert legacy.convention.gripper == "close1" and legacy.convention.scale[0] == 0.05


def test_docs_table_matches_registry():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "subjects.md").read_text()
    m = re.search(r"<!-- conventions-table:start -->\n(.*?)\n<!-- conventions-table:end -->", doc, re.S)
    assert m and m.group(1) == conventions_table(), "regenerate with embeval.conventions.conventions_table()"
