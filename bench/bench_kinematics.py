"""Analytic UR5 IK throughput (single pose, batched) against ikpy's numeric IK on the same poses.

All rows are measured in one run on the same machine; the ratios are what to compare across machines.
ikpy is built from urdf/ur5.urdf and solves from its default initial position (all zeros), as a user
would call it; its success rate (pose error < 1e-6) is reported with it.
"""
from __future__ import annotations

import time
import warnings

import numpy as np


def _rate(fn, n_items: int, min_time: float) -> float:
    """items per second of ``fn`` (called repeatedly for at least ``min_time`` seconds)."""
    fn()  # warm-up
    reps, t0 = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return reps * n_items / dt


def run(quick: bool = False) -> list[dict]:
    from ikpy.chain import Chain

    from embeval.kinematics import UR5, pose_error, urdf_path

    arm = UR5()
    rng = np.random.default_rng(0)
    n_batch = 2_000 if quick else 20_000
    n_single = 100 if quick else 1_000
    n_ikpy = 5 if quick else 30
    min_time = 0.3 if quick else 1.5
    Q = rng.uniform(-np.pi, np.pi, (n_batch, 6))
    T = arm.fk_batch(Q)

    rows: list[dict] = []
    # ---- ikpy on the first n_ikpy poses
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chain = Chain.from_urdf_file(str(urdf_path("ur5")), base_elements=["base_link", "shoulder_pan_joint"])
        mask = [link.joint_type == "revolute" for link in chain.links]
        chain = Chain.from_urdf_file(str(urdf_path("ur5")), base_elements=["base_link", "shoulder_pan_joint"], active_links_mask=mask)
        ok = 0
        t0 = time.perf_counter()
        for i in range(n_ikpy):
            sol = chain.inverse_kinematics_frame(T[i], orientation_mode="all")
            dp, dr = pose_error(chain.forward_kinematics(sol), T[i])
            ok += int(dp < 1e-6 and dr < 1e-6)
        ikpy_rate = n_ikpy / (time.perf_counter() - t0)
    rows.append({"method": "ikpy (numeric, 1 solution)", "poses": n_ikpy, "poses_per_s": ikpy_rate,
                 "us_per_pose": 1e6 / ikpy_rate, "vs_ikpy": 1.0, "solved": ok / n_ikpy})

    # ---- analytic, one pose per call (all 8 branches)
    idx = iter(range(10**9))
    single_rate = _rate(lambda: arm.ik(T[next(idx) % n_single]), 1, min_time)
    rows.append({"method": "analytic ik(), 1 pose/call (all branches)", "poses": n_single, "poses_per_s": single_rate,
                 "us_per_pose": 1e6 / single_rate, "vs_ikpy": single_rate / ikpy_rate})
    # ---- analytic batched
    for n in (1_000, n_batch):
        rate = _rate(lambda n=n: arm.ik_batch(T[:n]), n, min_time)
        rows.append({"method": f"analytic ik_batch, N={n}", "poses": n, "poses_per_s": rate,
                     "us_per_pose": 1e6 / rate, "vs_ikpy": rate / ikpy_rate})
    S, V = arm.ik_batch(T)
    dp, dr = pose_error(arm.fk(S), T[:, None])
    solved = V.any(axis=1).mean()
    rows[-1].update(solved=float(solved), max_err_m=float(dp[V].max()), max_err_rad=float(dr[V].max()),
                    mean_solutions=float(V.sum(axis=1).mean()))
    # ---- forward kinematics, batched (for reference)
    fk_rate = _rate(lambda: arm.fk_batch(Q), n_batch, min_time)
    rows.append({"method": f"fk_batch, N={n_batch}", "poses": n_batch, "poses_per_s": fk_rate, "us_per_pose": 1e6 / fk_rate})
    best = max(r["poses_per_s"] for r in rows if r["method"].startswith("analytic ik_batch"))
    rows.append({"method": "target: >=100000 poses/s batched and >=1000x ikpy", "poses_per_s": best,
                 "vs_ikpy": best / ikpy_rate, "target": "met" if best >= 1e5 and best / ikpy_rate >= 1000 else "missed"})
    return rows
