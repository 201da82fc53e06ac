"""embeval.rotations, the one home of rotation conversions, against scipy.spatial.transform.Rotation:
stated conventions (xyzw, extrinsic rpy, intrinsic upper-case sequences, radians), edge cases (identity,
180 degrees, negative-w quaternions), batches, hostile input; and the callers that use it."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from embeval import rotations as rot
from embeval.errors import InvalidInputError


def _rx(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def _ry(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def _rz(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


R_RANDOM = Rotation.random(64, random_state=3)
HALF_TURNS = [np.diag([1.0, -1, -1]), np.diag([-1.0, 1, -1]), np.diag([-1.0, -1, 1]),
              Rotation.from_rotvec(math.pi * np.array([1.0, 1, 0]) / math.sqrt(2)).as_matrix(),
              Rotation.from_rotvec(math.pi * np.array([-0.2, 0.3, 0.9]) / np.linalg.norm([-0.2, 0.3, 0.9])).as_matrix()]


def test_each_conversion_equals_scipy_on_random_batches():
    R = R_RANDOM.as_matrix()
    rv, q = R_RANDOM.as_rotvec(), R_RANDOM.as_quat(canonical=True)
    np.testing.assert_array_equal(rot.rotvec_to_matrix(rv), Rotation.from_rotvec(rv).as_matrix())
    np.testing.assert_array_equal(rot.matrix_to_rotvec(R), Rotation.from_matrix(R).as_rotvec())
    np.testing.assert_array_equal(rot.quat_to_matrix(q), Rotation.from_quat(q).as_matrix())
    np.testing.assert_array_equal(rot.matrix_to_quat(R), Rotation.from_matrix(R).as_quat(canonical=True))
    np.testing.assert_array_equal(rot.rotvec_to_quat(rv), Rotation.from_rotvec(rv).as_quat(canonical=True))
    np.testing.assert_array_equal(rot.quat_to_rotvec(q), Rotation.from_quat(q).as_rotvec())
    for seq in ("xyz", "XYZ", "ZYX", "zxz"):
        e = R_RANDOM.as_euler(seq)
        np.testing.assert_array_equal(rot.euler_to_matrix(e, seq), Rotation.from_euler(seq, e).as_matrix())
        np.testing.assert_array_equal(rot.matrix_to_euler(R, seq), Rotation.from_matrix(R).as_euler(seq))
    # leading axes are kept: (4, 16, 3) in, (4, 16, 3, 3) out
    assert rot.rotvec_to_matrix(rv.reshape(4, 16, 3)).shape == (4, 16, 3, 3)
    assert rot.matrix_to_quat(R.reshape(2, 32, 3, 3)).shape == (2, 32, 4)
    # a single item is bit-identical to scipy's single-item call (what action.py used to call)
    np.testing.assert_array_equal(rot.rpy_to_matrix([0.1, -0.2, 0.3]), Rotation.from_euler("xyz", [0.1, -0.2, 0.3]).as_matrix())


def test_stated_conventions():
    roll, pitch, yaw = 0.3, -0.7, 1.9
    # rpy: extrinsic x-y-z, R = Rz(yaw) Ry(pitch) Rx(roll)
    np.testing.assert_allclose(rot.rpy_to_matrix([roll, pitch, yaw]), _rz(yaw) @ _ry(pitch) @ _rx(roll), atol=1e-15)
    np.testing.assert_allclose(rot.matrix_to_rpy(_rz(yaw) @ _ry(pitch) @ _rx(roll)), [roll, pitch, yaw], atol=1e-12)
    # upper case: intrinsic, "XYZ" = Rx(a) Ry(b) Rz(c) (ManiSkill's / pytorch3d's euler_angles_to_matrix)
    np.testing.assert_allclose(rot.euler_to_matrix([roll, pitch, yaw], "XYZ"), _rx(roll) @ _ry(pitch) @ _rz(yaw), atol=1e-15)
    # quaternions scalar last: 90 degrees about z is [0, 0, sin 45, cos 45]
    np.testing.assert_allclose(rot.matrix_to_quat(_rz(math.pi / 2)), [0, 0, math.sqrt(0.5), math.sqrt(0.5)], atol=1e-15)
    # rotation vector: axis * angle in radians
    np.testing.assert_allclose(rot.matrix_to_rotvec(_ry(0.5)), [0, 0.5, 0], atol=1e-15)


def test_identity():
    for f, x in ((rot.matrix_to_rotvec, np.eye(3)), (rot.matrix_to_rotvec_fast, np.eye(3))):
        np.testing.assert_array_equal(f(x), np.zeros(3))
    np.testing.assert_array_equal(rot.matrix_to_quat(np.eye(3)), [0, 0, 0, 1])
    np.testing.assert_array_equal(rot.rotvec_to_matrix(np.zeros(3)), np.eye(3))
    np.testing.assert_array_equal(rot.rotvec_to_matrix_fast(np.zeros(3)), np.eye(3))
    np.testing.assert_array_equal(rot.quat_to_matrix([0, 0, 0, -1]), np.eye(3))  # -identity quaternion
    np.testing.assert_array_equal(rot.matrix_to_rpy(np.eye(3)), np.zeros(3))


@pytest.mark.parametrize("k", range(len(HALF_TURNS)))
def test_180_degrees(k):
    R = HALF_TURNS[k]
    for f in (rot.matrix_to_rotvec, rot.matrix_to_rotvec_fast):
        v = f(R)
        assert np.linalg.norm(v) == pytest.approx(math.pi, abs=1e-12)  # angle pi, either axis sign
        np.testing.assert_allclose(rot.rotvec_to_matrix(v), R, atol=1e-12)
        np.testing.assert_allclose(Rotation.from_rotvec(v).as_matrix(), Rotation.from_matrix(R).as_matrix(), atol=1e-12)
    q = rot.matrix_to_quat(R)
    assert 0 <= q[3] < 1e-12
    if q[3] == 0:  # exactly w = 0 (the diagonal half turns): the first non-zero of x, y, z is positive
        assert q[np.flatnonzero(q[:3])[0]] > 0
    np.testing.assert_allclose(rot.quat_to_matrix(q), R, atol=1e-12)
    np.testing.assert_allclose(rot.quat_to_matrix(-q), R, atol=1e-12)


def test_negative_w_quaternions_are_the_same_rotation():
    q = R_RANDOM.as_quat(canonical=True)
    neg = -q  # every w < 0
    assert np.all(neg[:, 3] < 0)
    np.testing.assert_allclose(rot.quat_to_matrix(neg), rot.quat_to_matrix(q), atol=1e-15)
    np.testing.assert_allclose(rot.quat_to_rotvec(neg), rot.quat_to_rotvec(q), atol=1e-12)
    assert np.all(np.linalg.norm(rot.quat_to_rotvec(neg), axis=-1) <= math.pi + 1e-12)
    np.testing.assert_allclose(rot.matrix_to_quat(rot.quat_to_matrix(neg)), q, atol=1e-12)  # canonical out: w >= 0
    # a rotation vector beyond pi (w < 0 from scipy's from_rotvec) comes back canonical
    big = np.array([0.0, 0.0, 1.5 * math.pi])
    assert Rotation.from_rotvec(big).as_quat()[3] < 0
    np.testing.assert_allclose(rot.rotvec_to_quat(big), [0, 0, math.sin(-math.pi / 4), math.cos(-math.pi / 4)], atol=1e-15)
    # unnormalised input is normalised
    np.testing.assert_allclose(rot.quat_to_matrix(3.0 * q[0]), rot.quat_to_matrix(q[0]), atol=1e-15)


def test_fast_variants_equal_scipy():
    rng = np.random.default_rng(0)
    for R in R_RANDOM.as_matrix():
        np.testing.assert_allclose(rot.matrix_to_rotvec_fast(R), Rotation.from_matrix(R).as_rotvec(), atol=1e-15, rtol=0)
    for v in np.concatenate([rng.normal(size=(64, 3)), 1e-9 * rng.normal(size=(8, 3))]):
        np.testing.assert_allclose(rot.rotvec_to_matrix_fast(v), Rotation.from_rotvec(v).as_matrix(), atol=1e-15, rtol=0)


@pytest.mark.parametrize("call, match", [
    (lambda: rot.quat_to_matrix([0, 0, 0, 0]), "zero quaternion"),
    (lambda: rot.quat_to_matrix([0, 0, 1]), "last dimension 4"),
    (lambda: rot.rotvec_to_matrix([0, np.nan, 0]), "NaN"),
    (lambda: rot.matrix_to_rotvec(np.eye(4)), r"\(\.\.\., 3, 3\)"),
    (lambda: rot.matrix_to_rpy(np.full((3, 3), np.inf)), "NaN or inf"),
    (lambda: rot.euler_to_matrix([0, 0, 0], "xYz"), "Euler sequence"),
    (lambda: rot.euler_to_matrix([0, 0, 0], "xxy"), "Euler sequence"),
    (lambda: rot.rpy_to_matrix([0.1, 0.2]), "last dimension 3"),
])
def test_hostile_input_is_named(call, match):
    with pytest.raises(InvalidInputError, match=match):
        call()


def test_callers_use_the_one_home():
    from embeval import action
    from embeval.kinematics import transforms
    from embeval.robot.ur_emulator import motion

    assert action.rpy_to_matrix is rot.rpy_to_matrix and action.matrix_to_rpy is rot.matrix_to_rpy
    for name in ("rotvec_to_matrix", "matrix_to_rotvec", "quat_to_matrix", "matrix_to_quat"):
        assert getattr(transforms, name) is getattr(rot, name)
    assert motion.rotvec_of is rot.matrix_to_rotvec_fast and motion.rotmat_of is rot.rotvec_to_matrix_fast
    # action's pose helpers: same numbers as scipy
    p = np.array([0.4, -0.1, 0.3, 2.0, -1.0, 0.5])
    np.testing.assert_array_equal(action.pose6_to_pose7(p)[3:], Rotation.from_rotvec(p[3:]).as_quat(canonical=True))
    d = np.array([0.01, 0.02, -0.03, 0.1, -0.2, 0.3])
    out = action.apply_delta(p, d)
    R = Rotation.from_euler("xyz", d[3:]).as_matrix() @ Rotation.from_rotvec(p[3:]).as_matrix()
    np.testing.assert_array_equal(out, np.concatenate([p[:3] + d[:3], Rotation.from_matrix(R).as_rotvec()]))
    np.testing.assert_allclose(action.pose_delta(p, out), d, atol=1e-12)


# ------------------------------------------------------------------ products, rotated vectors, interpolation
RV = R_RANDOM.as_rotvec()
RV2 = Rotation.random(64, random_state=4).as_rotvec()


def test_compose_equals_scipy_products_to_the_bit():
    T = rot.Turn
    for i in range(16):  # single rotations, the way the sim calls them
        a, b = RV[i], RV2[i]
        yaw = float(RV[i, 2])
        ra, rb = Rotation.from_rotvec(a), Rotation.from_rotvec(b)
        np.testing.assert_array_equal(rot.compose(T.rotvec(a), T.rotvec(b)), (ra * rb).as_rotvec())
        assert rot.compose(T.rotvec(a), T.rotvec(b).inv(), to="angle") == (ra * rb.inv()).magnitude()
        assert rot.compose(T.rotvec(a).inv(), T.rotvec(b), to="angle") == (ra.inv() * rb).magnitude()
        np.testing.assert_array_equal(rot.compose(T.euler("z", yaw), T.euler("x", math.pi)),
                                      (Rotation.from_euler("z", yaw) * Rotation.from_euler("x", math.pi)).as_rotvec())
        np.testing.assert_array_equal(rot.compose(T.euler("x", -yaw), T.rotvec(b)),
                                      (Rotation.from_euler("x", -yaw) * rb).as_rotvec())
        q = R_RANDOM[i].as_quat()
        for canonical in (True, False):
            np.testing.assert_array_equal(rot.compose(T.rotvec(a), T.quat(q), to="quat", canonical=canonical),
                                          (ra * Rotation.from_quat(q)).as_quat(canonical=canonical))
        np.testing.assert_array_equal(rot.compose(T.matrix(ra.as_matrix()), to="XYZ"), Rotation.from_matrix(ra.as_matrix()).as_euler("XYZ"))
        np.testing.assert_array_equal(rot.rotvec_to_euler(a, "ZYX"), ra.as_euler("ZYX"))
        np.testing.assert_array_equal(rot.quat_to_euler(q, "xyz"), Rotation.from_quat(q).as_euler("xyz"))
        np.testing.assert_array_equal(rot.euler_to_rotvec(a, "xyz"), Rotation.from_euler("xyz", a).as_rotvec())
        np.testing.assert_array_equal(rot.euler_to_matrix(yaw, "z"), Rotation.from_euler("z", yaw).as_matrix())
    # batches, and one rotation against a batch
    e1, e2 = R_RANDOM.as_euler("xyz"), Rotation.from_rotvec(RV2).as_euler("xyz")
    got = rot.compose(T.euler("xyz", e1).inv(), T.euler("xyz", e2), to="angle")
    assert got.shape == (64,)
    np.testing.assert_array_equal(got, (Rotation.from_euler("xyz", e1).inv() * Rotation.from_euler("xyz", e2)).magnitude())
    np.testing.assert_array_equal(rot.compose(T.rotvec(RV[0]), T.rotvec(RV2.reshape(8, 8, 3)), to="matrix"),
                                  (Rotation.from_rotvec(RV[0]) * Rotation.from_rotvec(RV2)).as_matrix().reshape(8, 8, 3, 3))
    # order: the last turn acts first, Rz(yaw) @ Rx(pi)
    np.testing.assert_allclose(rot.compose(T.euler("z", 0.4), T.euler("x", math.pi), to="matrix"), _rz(0.4) @ _rx(math.pi), atol=1e-15)


def test_canonical_false_keeps_scipys_sign():
    big = np.array([0.0, 0.0, 1.5 * math.pi])  # angle beyond pi: scipy's quaternion has w < 0
    assert rot.rotvec_to_quat(big, canonical=False)[3] < 0 < rot.rotvec_to_quat(big)[3]
    np.testing.assert_array_equal(rot.rotvec_to_quat(RV * 1.7, canonical=False), Rotation.from_rotvec(RV * 1.7).as_quat())
    R = R_RANDOM.as_matrix()
    np.testing.assert_array_equal(rot.matrix_to_quat(R, canonical=False), Rotation.from_matrix(R).as_quat())
    # the sign differs for some of them, so the option matters
    assert np.any(rot.matrix_to_quat(R, canonical=False)[:, 3] < 0) or np.any(rot.rotvec_to_quat(RV * 1.7, canonical=False)[:, 3] < 0)


def test_apply_and_slerp_equal_scipy():
    T = rot.Turn
    v = np.array([0.3, -1.2, 0.7])
    for i in range(8):
        np.testing.assert_array_equal(rot.apply(T.rotvec(RV[i]), v), Rotation.from_rotvec(RV[i]).apply(v))
        q = R_RANDOM[i].as_quat()
        np.testing.assert_array_equal(rot.apply(T.quat(q), [0.0, 0.0, 1.0]), Rotation.from_quat(q).apply([0.0, 0.0, 1.0]))
        np.testing.assert_array_equal(rot.apply(T.euler("z", RV[i, 0]), [1.0, 0.0, 0.0]),
                                      Rotation.from_euler("z", RV[i, 0]).apply([1.0, 0.0, 0.0]))
    np.testing.assert_array_equal(rot.apply(T.rotvec(RV), RV2), Rotation.from_rotvec(RV).apply(RV2))
    np.testing.assert_allclose(rot.apply(T.euler("z", math.pi / 2), [1.0, 0.0, 0.0]), [0.0, 1.0, 0.0], atol=1e-15)
    from scipy.spatial.transform import Slerp

    n = 7
    ref = Slerp([0.0, 1.0], Rotation.from_rotvec(np.stack([RV[0], RV2[0]])))
    got = rot.slerp(T.rotvec(RV[0]), T.rotvec(RV2[0]), [i / n for i in range(1, n + 1)])
    assert got.shape == (n, 3, 3)
    for i in range(1, n + 1):  # the workcell asks one fraction at a time; the batch gives the same bits
        np.testing.assert_array_equal(got[i - 1], ref([i / n]).as_matrix()[0])
    np.testing.assert_allclose(rot.slerp(T.rotvec([0, 0, 0]), T.rotvec([0, 0, 1.0]), [0.0, 0.25, 1.0], to="rotvec"),
                               [[0, 0, 0], [0, 0, 0.25], [0, 0, 1.0]], atol=1e-15)


@pytest.mark.parametrize("call, match", [
    (lambda: rot.Turn.euler("zz", [0, 0]), "Euler sequence"),
    (lambda: rot.Turn.euler("xyzx", [0, 0, 0, 0]), "1 to 3 axes"),
    (lambda: rot.Turn.euler("z", [0.1, 0.2]), "last dimension 1"),
    (lambda: rot.Turn.quat([0, 0, 0, 0]), "zero quaternion"),
    (lambda: rot.Turn.rotvec([np.inf, 0, 0]), "NaN or inf"),
    (lambda: rot.compose(rot.Turn.rotvec(np.zeros((2, 3))), rot.Turn.rotvec(np.zeros((3, 3)))), "batches of different shapes"),
    (lambda: rot.compose(rot.Turn.rotvec([0, 0, 1]), to="euler"), "rotation output 'euler'"),
    (lambda: rot.compose(rot.Turn.rotvec([0, 0, 1]), to="xy"), "rotation output 'xy'"),
    (lambda: rot.compose(), "one or more rotations"),
    (lambda: rot.compose([0, 0, 1]), "one or more rotations"),
    (lambda: rot.apply(rot.Turn.rotvec(np.zeros((2, 3))), np.zeros((3, 3))), "batches of different shapes"),
    (lambda: rot.slerp(rot.Turn.rotvec([0, 0, 0]), rot.Turn.rotvec([0, 0, 1]), [1.5]), r"in \[0, 1\]"),
    (lambda: rot.slerp(rot.Turn.rotvec(np.zeros((2, 3))), rot.Turn.rotvec([0, 0, 1]), [0.5]), "single start and end"),
])
def test_hostile_products_are_named(call, match):
    with pytest.raises(InvalidInputError, match=match):
        call()


def test_only_this_module_imports_scipy_spatial_transform():
    """Every rotation in src/, analysis/ and bench/ goes through embeval.rotations: no other module imports
    scipy.spatial.transform (nor scipy.spatial's Rotation/Slerp), not even lazily inside a function."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    home = root / "src" / "embeval" / "rotations.py"
    offenders = []
    for tree in ("src", "analysis", "bench"):
        for path in sorted((root / tree).rglob("*.py")):
            if path == home:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Attribute) and node.attr == "transform":
                    names = [ast.unparse(node)]
                if any(n.startswith("scipy.spatial.transform") or n in ("scipy.spatial.Rotation", "scipy.spatial.Slerp")
                       for n in names):
                    offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == [], "use embeval.rotations instead of scipy.spatial.transform in: " + ", ".join(offenders)
    assert len(list((root / "src").rglob("*.py"))) > 100  # the walk saw the tree
