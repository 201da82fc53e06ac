"""UR5 forward / inverse kinematics: exactness, branches, singularities, limits, batch forms."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import least_squares

from embeval.errors import ConfigError, InvalidInputError
from embeval.kinematics import (
    UR5,
    JointLimits,
    gripper_tcp,
    pose_error,
    pose_to_matrix,
    rot_z,
    trans,
    wrap_angle,
)

TOL = 1e-9


def angdiff(a, b):
    d = np.abs(np.asarray(a) - np.asarray(b)) % (2 * np.pi)
    return np.minimum(d, 2 * np.pi - d)


@pytest.fixture(scope="module")
def arm():
    return UR5()


@pytest.fixture(scope="module")
def random_set(arm):
    rng = np.random.default_rng(12345)
    Q = rng.uniform(-np.pi, np.pi, (10_000, 6))
    T = arm.fk_batch(Q)
    S, V = arm.ik_batch(T)
    return Q, T, S, V


def test_fk_known_values(arm):
    # UR5 at zero joints: tool0 in the controller's base frame (UR's published zero pose)
    T = arm.fk(np.zeros(6), frame="base")
    assert np.allclose(T[:3, 3], [-0.81725, -0.19145, -0.005491], atol=1e-12)
    # base_link is base turned by pi about z: x and y flip
    Tl = arm.fk(np.zeros(6))
    assert np.allclose(Tl, rot_z(np.pi) @ T, atol=1e-15)
    assert np.allclose(Tl[:3, 3], [0.81725, 0.19145, -0.005491], atol=1e-12)
    # upright arm: q2 = -pi/2 points the arm straight up
    Tu = arm.fk([0, -np.pi / 2, 0, -np.pi / 2, 0, 0], frame="base")
    assert np.allclose(Tu[:3, 3], [0, -0.19145, 0.089159 + 0.425 + 0.39225 + 0.09465], atol=1e-12)


def test_fk_batch_matches_single(arm):
    rng = np.random.default_rng(0)
    Q = rng.uniform(-2 * np.pi, 2 * np.pi, (50, 6))
    TB = arm.fk_batch(Q)
    assert TB.shape == (50, 4, 4)
    for q, T in zip(Q, TB):
        assert np.allclose(arm.fk(q), T, atol=1e-15)
    # link frames end at tool0
    F = arm.link_frames(Q[0])
    assert F.shape == (7, 4, 4) and np.allclose(F[-1], TB[0], atol=1e-15)


def test_ik_10k_random_poses_exact(arm, random_set):
    Q, T, S, V = random_set
    assert S.shape == (10_000, 8, 6) and V.shape == (10_000, 8)
    assert np.isfinite(S).all()
    dp, dr = pose_error(arm.fk(S), T[:, None])
    assert dp[V].max() < TOL and dr[V].max() < TOL
    # angles wrapped to (-pi, pi]
    assert np.all(S[V] > -np.pi) and np.all(S[V] <= np.pi)
    # every joint vector is recovered among the solutions of its own pose
    d = angdiff(S, Q[:, None]).max(axis=-1)
    d[~V] = np.inf
    assert d.min(axis=1).max() < 1e-8
    # solutions come in distinct branches: no two valid slots of a pose are equal
    counts = V.sum(axis=1)
    assert set(np.unique(counts)) <= {2, 4, 6, 8}
    # most random poses have all 8; the rest lose branches whose other-shoulder arm is out of reach
    assert (counts == 8).mean() > 0.7


def test_generic_workspace_poses_have_8_solutions(arm):
    # typical tabletop poses: tool pointing down, in front of the robot (base_link frame)
    for x, y, z in [(0.4, 0.1, 0.2), (0.5, -0.2, 0.1), (0.3, 0.3, 0.4), (-0.45, 0.2, 0.05)]:
        T = pose_to_matrix([x, y, z, np.pi, 0, 0])
        sols = arm.ik(T)
        assert sols.shape == (8, 6)
        dp, dr = pose_error(arm.fk(sols), T)
        assert dp.max() < TOL and dr.max() < TOL
        assert angdiff(sols[:, None], sols[None]).max(axis=-1)[~np.eye(8, dtype=bool)].min() > 1e-3


def _numeric_solutions(arm, T, starts):
    """Independent numeric IK: Levenberg-Marquardt from many starts; distinct converged solutions."""
    found = []
    for q0 in starts:
        def res(q):
            Tq = arm.fk(q, frame="base_link")
            return np.concatenate([Tq[:3, 3] - T[:3, 3], 0.5 * (Tq[:3, :3] - T[:3, :3]).ravel()])

        r = least_squares(res, q0, method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15)
        if np.abs(r.fun).max() < 1e-10:
            q = wrap_angle(r.x)
            if not any(angdiff(q, f).max() < 1e-5 for f in found):
                found.append(q)
    return np.array(found)


def test_ik_complete_against_numeric_multistart(arm, random_set):
    """No solution that a numeric solver finds is missing from the closed form (incl. poses with < 8)."""
    _, T, S, V = random_set
    counts = V.sum(axis=1)
    rows = list(np.flatnonzero(counts < 8)[:3]) + list(np.flatnonzero(counts == 8)[:1])
    rng = np.random.default_rng(7)
    for i in rows:
        num = _numeric_solutions(arm, T[i], rng.uniform(-np.pi, np.pi, (40, 6)))
        ours = S[i][V[i]]
        assert len(num) >= 1
        for q in num:
            assert angdiff(ours, q).max(axis=-1).min() < 1e-6, f"pose {i}: numeric solution {q} missing"


def test_unreachable_is_empty_never_nan(arm):
    far = pose_to_matrix([2.0, 0.0, 0.3, np.pi, 0, 0])
    # wrist centre inside the |d4| cylinder around the base axis: no shoulder solution
    inner = np.eye(4)
    inner[:3, 3] = [0.0, 0.0, 0.5 + 0.0823]
    inner[:3, :3] = np.diag([1.0, -1.0, -1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for T in (far, inner):
            sols = arm.ik(T)
            assert sols.shape == (0, 6)
            assert arm.ik_closest(T, np.zeros(6)) is None
        S, V = arm.ik_batch(np.stack([far, inner, arm.fk(np.full(6, 0.3))]))
    assert np.isfinite(S).all() and V[:2].sum() == 0 and V[2].sum() >= 1
    assert np.all(S[~V] == 0.0)


def _shoulder_singular_q():
    # a2 c2 + a3 c23 + d5 s234 = 0 with s234 = 0: the wrist centre on the |d4| cylinder
    a2, a3 = -0.425, -0.39225
    q2 = -1.0
    q23 = -np.arccos(-a2 * np.cos(q2) / a3)
    return np.array([0.3, q2, q23 - q2, -q23, 0.7, 0.2])


@pytest.mark.parametrize(
    "name,q",
    [
        ("wrist", np.array([0.3, -1.2, 1.4, -0.5, 0.0, 0.4])),
        ("elbow", np.array([0.3, -1.2, 0.0, -0.5, 0.9, 0.4])),
        ("shoulder", _shoulder_singular_q()),
    ],
)
def test_singularities(arm, name, q):
    assert arm.singularity(q).names() == [name]
    # the Jacobian loses rank exactly there (independent of the IK's branch logic)
    assert abs(np.linalg.det(arm.jacobian(q))) < 1e-9
    assert abs(np.linalg.det(arm.jacobian(q + 0.3))) > 1e-4
    m = arm.manipulability(np.stack([q, q + 0.3]))
    assert m[0] < 1e-9 < 1e-4 < m[1]
    T = arm.fk(q)
    sols = arm.ik(T, q6_preference=q[5])
    assert 1 <= len(sols) < 8  # the coinciding branches are reported once
    dp, dr = pose_error(arm.fk(sols), T)
    assert dp.max() < TOL and dr.max() < TOL
    assert angdiff(sols, q).max(axis=-1).min() < 1e-6
    best = arm.ik_closest(T, q)
    assert angdiff(best, q).max() < 1e-6


def test_wrist_singularity_q6_preference(arm):
    q = np.array([0.3, -1.2, 1.4, -0.5, 0.0, 0.4])
    T = arm.fk(q)
    for pref in (0.0, 1.0, -2.5):
        sols = arm.ik(T, q6_preference=pref)
        sing = np.abs(np.sin(sols[:, 4])) < 1e-9
        assert sing.sum() == 2  # one per elbow branch of the singular shoulder branch
        assert np.allclose(sols[sing, 5], pref)  # q6 as preferred, q4 absorbs the rest
        dp, dr = pose_error(arm.fk(sols), T)
        assert dp.max() < TOL and dr.max() < TOL
    S, V = arm.ik_batch(np.stack([T, T]), q6_preference=np.array([0.5, -0.5]))
    sing = np.abs(np.sin(S[..., 4])) < 1e-9
    assert np.allclose(S[0][V[0] & sing[0]][:, 5], 0.5) and np.allclose(S[1][V[1] & sing[1]][:, 5], -0.5)


def test_ik_closest_tries_2pi_and_limits(arm):
    rng = np.random.default_rng(3)
    lo, hi = np.array(arm.limits.lower), np.array(arm.limits.upper)
    for _ in range(30):
        q = rng.uniform(lo + 0.01, hi - 0.01)  # beyond +/- pi on joints with +/- 2 pi range
        got = arm.ik_closest(arm.fk(q), q + rng.normal(0, 0.05, 6))
        assert np.abs(got - q).max() < 1e-8
        assert np.all(got >= lo) and np.all(got <= hi)


def test_joint_limits_filter_and_shift():
    lim = JointLimits(lower=(0, -np.pi, -np.pi / 2, -np.pi, -np.pi, -np.pi), upper=(2 * np.pi, 0, np.pi / 2, np.pi, np.pi, np.pi))
    free = UR5(limits=JointLimits.unlimited())
    limited = UR5(limits=lim)
    rng = np.random.default_rng(5)
    Q = rng.uniform(-np.pi, np.pi, (300, 6))
    T = free.fk(Q)
    S, V = limited.ik_batch(T)
    Sf, Vf = free.ik_batch(T)
    assert np.all(lim.contains(S[V]))
    # same count as the unlimited solutions that fit after a 2 pi shift
    q1 = np.where(Sf[..., 0] < 0, Sf[..., 0] + 2 * np.pi, Sf[..., 0])
    fits = Vf & (Sf[..., 1] <= 0) & (np.abs(Sf[..., 2]) <= np.pi / 2) & (q1 <= 2 * np.pi)
    assert np.array_equal(V.sum(axis=1), fits.sum(axis=1))
    assert np.all(S[V][:, 0] >= 0)  # q1 shifted into [0, 2 pi]


def test_tool_offset(arm):
    tool = gripper_tcp()
    g = UR5(tool=tool)
    q = np.array([0.2, -1.0, 1.2, -1.6, -1.5, 0.3])
    assert np.allclose(g.fk(q), arm.fk(q) @ trans(z=0.14), atol=1e-15)
    T = g.fk(q)
    sols = g.ik(T)
    dp, dr = pose_error(g.fk(sols), T)
    assert dp.max() < TOL and dr.max() < TOL
    assert angdiff(sols, q).max(axis=-1).min() < 1e-9


def test_frames_round_trip(arm):
    q = np.array([0.5, -0.8, 1.1, -1.9, -1.2, 2.0])
    for frame in ("base", "base_link"):
        sols = arm.ik(arm.fk(q, frame=frame), frame=frame)
        assert angdiff(sols, q).max(axis=-1).min() < 1e-9
    with pytest.raises(ConfigError):
        arm.fk(q, frame="world")


def test_bad_inputs_raise(arm):
    with pytest.raises(InvalidInputError):
        arm.fk([0, 1, 2])
    with pytest.raises(InvalidInputError):
        arm.fk([0, 0, np.nan, 0, 0, 0])
    with pytest.raises(InvalidInputError):
        arm.ik(np.full((4, 4), np.nan))
    with pytest.raises(InvalidInputError):
        arm.ik(np.diag([2.0, 1, 1, 1]))  # not a rotation


def test_calibrated_arm_off_ur_structure_is_solved_exactly():
    """A calibration that breaks the parallel-axis structure (like a real robot's): closed-form seeds
    on the nominal table, refined on the full model; still exact, still all branches."""
    from embeval.kinematics import UR, DHParams

    cal = DHParams(
        a=(2e-4, -0.4252, -0.3921, -1e-4, 3e-4, 0.0),
        d=(0.0893, 1e-4, -2e-4, 0.1093, 0.0947, 0.0824),
        alpha=(np.pi / 2 + 1e-3, -2e-4, 5e-4, np.pi / 2 - 3e-4, -np.pi / 2 + 2e-4, 0.0),
        theta_offset=(1e-4, 0.0, 0.0, -2e-4, 0.0, 1e-4),
        name="calibrated",
    )
    arm = UR(cal)
    assert arm.refined and cal.structure_deviation() == pytest.approx(1e-3)
    rng = np.random.default_rng(11)
    Q = rng.uniform(-np.pi, np.pi, (1000, 6))
    T = arm.fk(Q)
    S, V = arm.ik_batch(T)
    dp, dr = pose_error(arm.fk(S), T[:, None])
    assert dp[V].max() < TOL and dr[V].max() < TOL
    assert V.any(axis=1).all()
    d = angdiff(S, Q[:, None]).max(axis=-1)
    d[~V] = np.inf
    assert (d.min(axis=1) < 1e-9).mean() > 0.995  # misses only within ~1e-3 rad of a singularity
    # same branch count as the nominal arm almost everywhere
    assert (V.sum(axis=1) == UR5().ik_batch(UR5().fk(Q))[1].sum(axis=1)).mean() > 0.95


def test_ik_closest_batch_matches_single(arm):
    rng = np.random.default_rng(8)
    Q = rng.uniform(-np.pi, np.pi, (40, 6))
    T = arm.fk(Q)
    T[5] = pose_to_matrix([2.0, 0, 0, 0, 0, 0])  # one unreachable row
    near = Q + rng.normal(0, 0.1, Q.shape)
    B, ok = arm.ik_closest_batch(T, near)
    assert not ok[5] and np.array_equal(B[5], near[5]) and ok.sum() == 39
    for i in np.flatnonzero(ok):
        assert np.allclose(B[i], arm.ik_closest(T[i], near[i]), atol=1e-12)
        assert np.abs(B[i] - Q[i]).max() < 1e-8


def test_jacobian_matches_finite_differences():
    from embeval.kinematics import matrix_to_rotvec

    g = UR5(tool=gripper_tcp())
    q = np.array([0.4, -1.1, 1.3, -1.7, -1.4, 0.8])
    J = g.jacobian(q)
    h = 1e-6
    num = np.empty((6, 6))
    T0 = g.fk(q)
    for i in range(6):
        dq = np.zeros(6)
        dq[i] = h
        Tp, Tm = g.fk(q + dq), g.fk(q - dq)
        num[:3, i] = (Tp[:3, 3] - Tm[:3, 3]) / (2 * h)
        num[3:, i] = (matrix_to_rotvec(Tp[:3, :3] @ T0[:3, :3].T) - matrix_to_rotvec(Tm[:3, :3] @ T0[:3, :3].T)) / (2 * h)
    assert np.allclose(J, num, atol=1e-8)
    assert g.jacobian(np.stack([q, q])).shape == (2, 6, 6)


def test_empty_batches(arm):
    Q, V = arm.ik_batch(np.zeros((0, 4, 4)))
    assert Q.shape == (0, 8, 6) and V.shape == (0, 8)
    B, ok = arm.ik_closest_batch(np.zeros((0, 4, 4)), np.zeros(6))
    assert B.shape == (0, 6) and ok.shape == (0,)
