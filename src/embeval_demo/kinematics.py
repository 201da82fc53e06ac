"""Demo stage "kinematics": FK/IK of a few poses, the 8 IK branches of one pose, singular and
unreachable cases, the URDF against pybullet, batched IK throughput; plots the 8 arm branches."""
from __future__ import annotations

import time

import numpy as np

from embeval.kinematics import (
    BRANCHES,
    JOINT_NAMES,
    UR5,
    gripper_tcp,
    matrix_to_pose,
    pose_error,
    pose_to_matrix,
    quat_to_matrix,
    urdf_path,
)


def _table(headers: list[str], rows: list[list], fmt: str = "{:9.4f}") -> None:
    cells = [[c if isinstance(c, str) else fmt.format(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print("  " + "  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    print("  " + "  ".join("-" * w for w in widths))
    for r in cells:
        print("  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)))


def _fk_section(arm: UR5) -> None:
    print("\nForward kinematics: tool0 in base_link (ROS) and in base (UR controller), pose = xyz (m) + rotation vector (rad)")
    named = {
        "zero": np.zeros(6),
        "upright": np.array([0, -np.pi / 2, 0, -np.pi / 2, 0, 0]),
        "home": np.array([0, -np.pi / 2, np.pi / 2, -np.pi / 2, -np.pi / 2, 0]),
        "tabletop": np.array([0.3, -1.2, 1.6, -1.97, -1.57, 0.3]),
    }
    rows = []
    for name, q in named.items():
        for frame in ("base_link", "base"):
            rows.append([name if frame == "base_link" else "", frame, *matrix_to_pose(arm.fk(q, frame=frame))])
    _table(["q", "frame", "x", "y", "z", "rx", "ry", "rz"], rows)


def _branches_section(arm: UR5) -> tuple[np.ndarray, np.ndarray]:
    T = pose_to_matrix([0.45, 0.15, 0.25, np.pi, 0, 0])
    print("\nInverse kinematics: all closed-form solutions for tool0 at [0.45, 0.15, 0.25] m pointing down (base_link)")
    Q, V = arm.ik_batch(T[None])
    rows = []
    for slot in np.flatnonzero(V[0]):
        dp, dr = pose_error(arm.fk(Q[0, slot]), T)
        rows.append(["{} {} {}".format(*BRANCHES[slot]), *Q[0, slot], f"{dp:.1e}", f"{dr:.1e}"])
    _table(["shoulder wrist elbow", *[f"q{i + 1}" for i in range(6)], "err m", "err rad"], rows)
    q_home = np.array([0, -np.pi / 2, np.pi / 2, -np.pi / 2, -np.pi / 2, 0])
    best = arm.ik_closest(T, q_home)
    print("  nearest to home " + np.array2string(q_home, precision=3) + ": " + np.array2string(best, precision=4))
    return T, Q[0][V[0]]


def _singular_section(arm: UR5) -> None:
    print("\nSingular and unreachable targets (coinciding branches are reported once; wrist: q6 = preference)")
    a2, a3 = arm.params.a[1], arm.params.a[2]
    q23 = -np.arccos(-a2 * np.cos(-1.0) / a3)
    cases = {
        "wrist (q5 = 0)": np.array([0.3, -1.2, 1.4, -0.5, 0.0, 0.4]),
        "elbow (q3 = 0)": np.array([0.3, -1.2, 0.0, -0.5, 0.9, 0.4]),
        "shoulder (wrist centre on |d4| cylinder)": np.array([0.3, -1.0, q23 + 1.0, -q23, 0.7, 0.2]),
    }
    rows = []
    for name, q in cases.items():
        T = arm.fk(q)
        sols = arm.ik(T, q6_preference=0.25)
        dp, dr = pose_error(arm.fk(sols), T)
        rows.append([name, f"{arm.singularity(q).names()}", str(len(sols)), f"{dp.max():.1e}", f"{dr.max():.1e}",
                     f"{abs(np.linalg.det(arm.jacobian(q))):.1e}"])
    for name, pose in {"unreachable: 2 m away": [2.0, 0, 0.3, np.pi, 0, 0],
                       "unreachable: inside the base cylinder": [0.0, 0.0, 0.58, np.pi, 0, 0]}.items():
        sols = arm.ik(pose_to_matrix(pose))
        rows.append([name, "-", f"{len(sols)} {sols.shape}", "-", "-", "-"])
    _table(["case", "detected", "solutions", "max err m", "max err rad", "|det J|"], rows)


def _round_trip(arm, n: int, rng) -> dict:
    """IK of the FK of n random joint vectors: throughput, worst error, branches, recovery of q."""
    Q = rng.uniform(-np.pi, np.pi, (n, 6))
    T = arm.fk_batch(Q)
    t0 = time.perf_counter()
    S, V = arm.ik_batch(T)
    dt = time.perf_counter() - t0
    dp, dr = pose_error(arm.fk(S), T[:, None])
    d = np.abs(np.angle(np.exp(1j * (S - Q[:, None])))).max(axis=-1) + np.where(V, 0, np.inf)
    return {"rate": n / dt, "err_m": float(dp[V].max()), "err_rad": float(dr[V].max()),
            "solutions": float(V.sum(axis=1).mean()), "recovered": float((d.min(axis=1) < 1e-8).mean())}


def _other_arms_section(seed: int, n: int) -> None:
    from embeval.kinematics import UR, DHParams, preset

    print(f"\nOther arms and calibrations ({n} random poses each; 'refined' = calibrated, off UR's exact structure)")
    nominal = preset("ur5")
    cal = DHParams(  # a made-up calibration of the size real robots have (1e-4 m, 1e-3 rad)
        a=(2e-4, nominal.a[1] + 2e-4, nominal.a[2] + 1e-4, -1e-4, 3e-4, 0.0), d=nominal.d,
        alpha=(np.pi / 2 + 1e-3, -2e-4, 5e-4, np.pi / 2 - 3e-4, -np.pi / 2 + 2e-4, 0.0),
        theta_offset=(1e-4, 0.0, 0.0, -2e-4, 0.0, 1e-4), name="ur5_calibrated",
    )
    rows = []
    rng = np.random.default_rng(seed)
    for arm in (UR("ur5"), UR("ur5e"), UR("ur10e"), UR(cal)):
        r = _round_trip(arm, n, rng)
        rows.append([arm.params.name, "yes" if arm.refined else "no", f"{r['solutions']:.2f}", f"{r['recovered']:.2%}",
                     f"{max(r['err_m'], r['err_rad']):.1e}", f"{r['rate']:,.0f}"])
    _table(["arm", "refined", "solutions/pose", "q recovered", "max fk err", "poses/s"], rows)


def _pybullet_section(arm: UR5, seed: int) -> float:
    import pybullet as p

    print("\nURDF against the D-H model: pybullet (DIRECT) link states of tool0 and the gripper tcp vs fk(q)")
    cid = p.connect(p.DIRECT)
    try:
        rid = p.loadURDF(str(urdf_path("ur5_gripper")), useFixedBase=True, physicsClientId=cid)
        info = [p.getJointInfo(rid, j, physicsClientId=cid) for j in range(p.getNumJoints(rid, physicsClientId=cid))]
        joints = {i[1].decode(): i[0] for i in info}
        links = {i[12].decode(): i[0] for i in info}
        tcp_arm = UR5(tool=gripper_tcp())
        rng = np.random.default_rng(seed)
        worst = {"tool0": 0.0, "tcp": 0.0}
        for _ in range(100):
            q = rng.uniform(-np.pi, np.pi, 6)
            for k, name in enumerate(JOINT_NAMES):
                p.resetJointState(rid, joints[name], q[k], physicsClientId=cid)
            for link, model in (("tool0", arm), ("tcp", tcp_arm)):
                ls = p.getLinkState(rid, links[link], computeForwardKinematics=True, physicsClientId=cid)
                T = np.eye(4)
                T[:3, :3] = quat_to_matrix(ls[5])
                T[:3, 3] = ls[4]
                worst[link] = max(worst[link], *map(float, pose_error(T, model.fk(q))))
    finally:
        p.disconnect(cid)
    _table(["link", "configurations", "max deviation (m or rad)"],
           [[k, "100", f"{v:.1e}"] for k, v in worst.items()])
    print("  (pybullet reports link states in single precision)")
    return max(worst.values())


def _plot_branches(arm: UR5, sols: np.ndarray, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(12, 6))
    for k, q in enumerate(sols[:8]):
        ax = fig.add_subplot(2, 4, k + 1, projection="3d")
        F = arm.link_frames(q)
        pts = F[:, :3, 3]
        ax.plot(pts[:, 0], pts[:, 1], pts[:, 2], "-o", color="tab:blue", markersize=3)
        ax.plot(*[[0, 0]] * 2, [0, 0], "ks")
        ax.set_xlim(-0.8, 0.8), ax.set_ylim(-0.8, 0.8), ax.set_zlim(-0.6, 1.0)
        ax.set_title("q = " + " ".join(f"{v:.1f}" for v in q), fontsize=7)
        ax.tick_params(labelsize=5)
    fig.suptitle("UR5: the IK branches reaching one pose (D-H frame origins, base_link)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(ctx) -> None:
    arm = UR5()
    _fk_section(arm)
    _T, sols = _branches_section(arm)
    _singular_section(arm)
    _other_arms_section(ctx.seed, 500 if ctx.quick else 2_000)
    worst = _pybullet_section(arm, ctx.seed)

    n = 2_000 if ctx.quick else 20_000
    r = _round_trip(arm, n, np.random.default_rng(ctx.seed))
    print(f"\nBatched IK on {n} random poses: {r['rate']:,.0f} poses/s ({n / r['rate'] * 1e3:.1f} ms), "
          f"max fk(ik) error {r['err_m']:.1e} m / {r['err_rad']:.1e} rad, "
          f"{r['solutions']:.2f} solutions per pose, original joints recovered for {r['recovered']:.1%}")
    path = ctx.out_dir / "kinematics_ik_branches.png"
    _plot_branches(arm, sols, path)
    print(f"Plot: {path}")
    ctx.shared["kinematics"] = {"ik_poses_per_s": r["rate"], "pybullet_max_dev": worst}
