"""Forward and closed-form inverse kinematics of UR arms (UR5 by default), vectorised in numpy.

Frames (UR driver names): ``base_link`` (ROS/URDF root), ``base`` = ``base_link`` rotated by
``Rz(pi)`` (the controller's and ur_rtde's frame, D-H frame 0), ``tool0`` = D-H frame 6 (flange).
With a tool transform set, poses refer to the tool's TCP: ``T_tcp = T_tool0 @ tool``.

Inverse kinematics follows the standard geometric decomposition for UR arms (three parallel
middle axes, wrist offsets): q1 from the wrist centre, q5 and q6 from the orientation, q2..q4 from
a planar two-link problem. Solutions are indexed by branch ``4*shoulder + 2*wrist + elbow``
(see :data:`BRANCHES`), so batch results keep a stable branch per slot.

Singularity policy (documented in docs/kinematics.md):

- shoulder: the wrist centre ``p05`` lies on the cylinder of radius ``|d4|`` around the base z axis
  (equivalently the point of the wrist-1 axis nearest the base axis lies on it): the two shoulder
  branches coincide and duplicates are removed;
- elbow: arm stretched (``sin q3 = 0``): the two elbow branches coincide, duplicates removed;
- wrist: ``sin q5 = 0`` (wrist-2 and base... axes 2-4 and 6 parallel): q4 and q6 form a one-parameter
  family; q6 is set to the preference ``q6_preference`` (default 0, :meth:`UR.ik_closest` passes the
  current q6) and q4 solves the rest;
- unreachable targets give an empty ``(0, 6)`` result, never NaN and never an exception.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embeval.errors import ConfigError, InvalidInputError
from embeval.kinematics.dh import DHParams, JointLimits, preset
from embeval.kinematics.transforms import inv_transform, pose_error, rot_z, wrap_angle

__all__ = ["BRANCHES", "FRAMES", "UR", "UR5"]

#: branch signs per solution slot ``4*s + 2*w + e``: (shoulder, wrist, elbow) where shoulder is the sign
#: of the arccos term of q1, wrist the sign of sin(q5), elbow the sign of sin(q3) (D-H angles).
BRANCHES: tuple[tuple[str, str, str], ...] = tuple(
    (sh, wr, el) for sh in ("+", "-") for wr in ("+", "-") for el in ("+", "-")
)
#: frames a pose may be expressed in.
FRAMES = ("base_link", "base")

_BASE_LINK_T_BASE = rot_z(np.pi)


def dh_matrices(theta, a, d, alpha) -> np.ndarray:
    """D-H transforms ``Rz(theta) Tz(d) Tx(a) Rx(alpha)``; theta ``(...)`` radians -> ``(..., 4, 4)``."""
    theta = np.asarray(theta, dtype=float)
    ct, st = np.cos(theta), np.sin(theta)
    ca, sa = np.cos(alpha), np.sin(alpha)
    T = np.zeros(theta.shape + (4, 4))
    T[..., 0, 0] = ct
    T[..., 0, 1] = -st * ca
    T[..., 0, 2] = st * sa
    T[..., 0, 3] = a * ct
    T[..., 1, 0] = st
    T[..., 1, 1] = ct * ca
    T[..., 1, 2] = -ct * sa
    T[..., 1, 3] = a * st
    T[..., 2, 1] = sa
    T[..., 2, 2] = ca
    T[..., 2, 3] = d
    T[..., 3, 3] = 1.0
    return T


def _jacobian_from_frames(F) -> np.ndarray:
    """Geometric Jacobian from frames 0..6 ``(..., 7, 4, 4)``: column i = [z_i x (p_6 - p_i); z_i]."""
    z = F[..., :6, :3, 2]
    p = F[..., :6, :3, 3]
    pe = F[..., 6:7, :3, 3]
    J = np.concatenate([np.cross(z, pe - p), z], axis=-1)  # (..., 6 joints, 6)
    return np.swapaxes(J, -1, -2)


def _twist_error(T_cur, T_target) -> np.ndarray:
    """``[dp; omega]`` that moves ``T_cur`` towards ``T_target`` (base frame; small-angle rotation part)."""
    dp = T_target[..., :3, 3] - T_cur[..., :3, 3]
    Re = T_target[..., :3, :3] @ np.swapaxes(T_cur[..., :3, :3], -1, -2)
    w = 0.5 * np.stack([Re[..., 2, 1] - Re[..., 1, 2], Re[..., 0, 2] - Re[..., 2, 0], Re[..., 1, 0] - Re[..., 0, 1]], -1)
    return np.concatenate([dp, w], axis=-1)


@dataclass(frozen=True)
class Singularity:
    """Distances of a joint configuration from the three singularities (0 = singular)."""

    shoulder: float  # metres: horizontal wrist-centre distance from the |d4| cylinder
    elbow: float  # |sin q3|
    wrist: float  # |sin q5|

    def names(self, tol: float = 1e-6) -> list[str]:
        return [n for n in ("shoulder", "elbow", "wrist") if abs(getattr(self, n)) < tol]


class UR:
    """Kinematics of a UR arm.

    Args:
        params: :class:`DHParams`, or a preset name (``"ur5"``, ``"ur5e"``, ...); default UR5.
        tool: 4x4 transform ``tool0 -> TCP`` (e.g. :func:`embeval.kinematics.gripper_tcp`); None = tool0.
        limits: joint limits used to filter IK solutions; default ``params.limits``.
    """

    #: |sin q5| below which the wrist is treated as singular (q6 taken from the preference)
    wrist_tol: float = 1e-10
    #: solutions closer than this (radians, max over joints) are duplicates
    dedup_tol: float = 1e-6
    #: IK solutions whose FK misses the target by more than this (m / rad) are dropped
    verify_tol: float = 1e-7

    def __init__(self, params: DHParams | str | None = None, tool=None, limits: JointLimits | None = None):
        if params is None:
            params = preset("ur5")
        elif isinstance(params, str):
            params = preset(params)
        if not isinstance(params, DHParams):
            raise ConfigError(f"UR(params) expects DHParams or a preset name, got {type(params).__name__}")
        self.params = params
        self.limits = limits if limits is not None else params.limits
        self._a = np.asarray(params.a)
        self._d = np.asarray(params.d)
        self._alpha = np.asarray(params.alpha)
        self._off = np.asarray(params.theta_offset)
        # calibrated arms deviate slightly from UR's structure: the closed form solves the nearest
        # nominal table and Newton steps on the full model make the result exact
        self.refined = params.structure_deviation() > 1e-12
        cf = params.nominal_structure() if self.refined else params
        self._ca, self._cd, self._calpha = np.asarray(cf.a), np.asarray(cf.d), np.asarray(cf.alpha)
        self.tool = None
        if tool is not None:
            tool = np.asarray(tool, dtype=float)
            if tool.shape != (4, 4) or not np.all(np.isfinite(tool)):
                raise ConfigError(f"tool must be a finite 4x4 transform (tool0 -> TCP), got shape {tool.shape}")
            self.tool = tool
            self._tool_inv = inv_transform(tool)
        # frame 6 carries Tx(a6) Rx(alpha6) at its end; IK removes it from the target first
        F6 = dh_matrices(0.0, self._a[5], 0.0, self._alpha[5])
        self._flange_inv = None if np.allclose(F6, np.eye(4), atol=0, rtol=0) else inv_transform(F6)
        self._lo = np.asarray(self.limits.lower)
        self._hi = np.asarray(self.limits.upper)

    def __repr__(self) -> str:
        return f"UR({self.params.name!r}, tool={'set' if self.tool is not None else None})"

    # ------------------------------------------------------------------ frames
    @staticmethod
    def _frame(frame: str) -> np.ndarray | None:
        if frame == "base_link":
            return _BASE_LINK_T_BASE
        if frame == "base":
            return None
        raise ConfigError(f"unknown frame {frame!r}; use one of {', '.join(FRAMES)}")

    # ------------------------------------------------------------------ forward kinematics
    def _check_q(self, q) -> np.ndarray:
        q = np.asarray(q, dtype=float)
        if q.shape[-1:] != (6,):
            raise InvalidInputError(f"joint vector must have 6 values (radians), got shape {q.shape}")
        if not np.all(np.isfinite(q)):
            raise InvalidInputError(f"joint vector contains NaN or inf: {q}")
        return q

    def link_frames(self, q, frame: str = "base_link") -> np.ndarray:
        """Poses of D-H frames 0..6 (base .. tool0) for ``q (..., 6)``: ``(..., 7, 4, 4)`` in ``frame``."""
        out = self._frames_base(self._check_q(q))
        F = self._frame(frame)
        return out if F is None else F @ out

    def fk(self, q, frame: str = "base_link") -> np.ndarray:
        """Pose of tool0 (or of the TCP when a tool is set) for joints ``q`` (radians).

        ``q`` may be ``(6,)`` -> ``(4, 4)`` or batched ``(..., 6)`` -> ``(..., 4, 4)``.
        """
        q = self._check_q(q)
        Ti = dh_matrices(q + self._off, self._a, self._d, self._alpha)
        T = Ti[..., 0, :, :]
        for i in range(1, 6):
            T = T @ Ti[..., i, :, :]
        if self.tool is not None:
            T = T @ self.tool
        F = self._frame(frame)
        return T if F is None else F @ T

    def fk_batch(self, Q, frame: str = "base_link") -> np.ndarray:
        """``(N, 6)`` joint vectors -> ``(N, 4, 4)`` poses (same as :meth:`fk` on a batch)."""
        Q = np.asarray(Q, dtype=float)
        if Q.ndim != 2:
            raise InvalidInputError(f"fk_batch expects (N, 6) joint vectors, got shape {Q.shape}")
        return self.fk(Q, frame)

    def jacobian(self, q, frame: str = "base_link") -> np.ndarray:
        """Geometric Jacobian of the TCP for ``q (..., 6)``: ``(..., 6, 6)``, rows ``[v; omega]`` in ``frame``
        (m/s and rad/s per rad/s of each joint)."""
        q = self._check_q(q)
        F = self.link_frames(q, frame)
        if self.tool is not None:
            F = F.copy()
            F[..., 6, :, :] = F[..., 6, :, :] @ self.tool
        return _jacobian_from_frames(F)

    def manipulability(self, q) -> np.ndarray:
        """Yoshikawa's manipulability ``|det J|`` for ``q (..., 6)`` (0 at a singularity; UR5 typical 0.01-0.1)."""
        return np.abs(np.linalg.det(self.jacobian(q)))

    def singularity(self, q) -> Singularity:
        """How far ``q (6,)`` is from each singularity (see module docstring)."""
        q = self._check_q(q)
        F = self.link_frames(q, "base")
        p05 = F[5, :3, 3]
        th = q + self._off
        return Singularity(
            shoulder=float(np.hypot(p05[0], p05[1]) - abs(self._d[3])),
            elbow=float(abs(np.sin(th[2]))),
            wrist=float(abs(np.sin(th[4]))),
        )

    # ------------------------------------------------------------------ inverse kinematics
    def _targets(self, T, frame: str) -> np.ndarray:
        T = np.asarray(T, dtype=float)
        if T.shape[-2:] != (4, 4):
            raise InvalidInputError(f"target pose must be a 4x4 homogeneous transform, got shape {T.shape}")
        if not np.all(np.isfinite(T)):
            raise InvalidInputError("target pose contains NaN or inf")
        R = T[..., :3, :3]
        orth = np.abs(np.einsum("...ji,...jk->...ik", R, R) - np.eye(3)).max() if R.size else 0.0
        if orth > 1e-6:
            raise InvalidInputError(
                f"target rotation is not orthonormal (max |R^T R - I| = {orth:.2e}); build poses with "
                "embeval.kinematics.pose_to_matrix or re-orthonormalise"
            )
        F = self._frame(frame)
        if F is not None:
            T = inv_transform(F) @ T  # -> base frame
        if self.tool is not None:
            T = T @ self._tool_inv  # TCP -> tool0
        return T

    def ik_batch(self, T, frame: str = "base_link", q6_preference=0.0, limits: bool = True):
        """All closed-form solutions for N target poses.

        Args:
            T: ``(N, 4, 4)`` target poses of tool0/TCP in ``frame``.
            q6_preference: q6 (radians) used at the wrist singularity; scalar or ``(N,)``.
            limits: filter (and shift by 2 pi into) the joint limits.
        Returns:
            ``(Q, valid)``: ``Q (N, 8, 6)`` joint solutions in (-pi, pi] (shifted by 2 pi where the
            limits require), slot ``4*shoulder + 2*wrist + elbow`` (:data:`BRANCHES`);
            ``valid (N, 8)`` bool. Invalid slots (unreachable, duplicate, outside limits) hold 0.
        """
        T = np.asarray(T, dtype=float)
        if T.ndim != 3:
            raise InvalidInputError(f"ik_batch expects (N, 4, 4) poses, got shape {T.shape}")
        T06 = self._targets(T, frame)
        # remove Tx(a6) Rx(alpha6) so that the solved frame sits on the wrist-3 axis
        T_w = T06 if self._flange_inv is None else T06 @ self._flange_inv
        if self.refined:
            Q, valid = self._refine(*self._virtual_targets(T06, q6_preference), T06)
            suspect = np.ones(len(Q), dtype=bool)
        else:
            Q, valid, suspect = self._solve(T_w, q6_preference)
        if limits:
            Q, in_lim = self._apply_limits(Q)
            valid = valid & in_lim
        Q = np.where(valid[..., None], Q, 0.0)
        # poses at a reachability boundary were clamped: keep only what FK confirms
        rows = np.flatnonzero(suspect & np.any(valid, axis=1))
        if rows.size:
            dp, dr = pose_error(self._fk_base_tool0(Q[rows]), T06[rows, None])
            valid[rows] &= (dp < self.verify_tol) & (dr < self.verify_tol)
        # duplicates only arise at (near-)singular poses
        rows = np.flatnonzero(suspect & (valid.sum(axis=1) > 1))
        if rows.size:
            valid[rows] &= ~self._duplicates(Q[rows], valid[rows])
        Q = np.where(valid[..., None], Q, 0.0)
        return Q, valid

    def _solve(self, T06, q6_preference):
        """Closed-form branches for base->frame-6 targets ``(N, 4, 4)``: ``(Q (N,8,6), valid, suspect (N,))``."""
        N = T06.shape[0]
        a2, a3 = self._ca[1], self._ca[2]
        d1, d4, d5, d6 = self._cd[0], self._cd[3], self._cd[4], self._cd[5]
        ca1, sa1 = np.cos(self._calpha[0]), np.sin(self._calpha[0])
        ca5, sa5 = np.cos(self._calpha[4]), np.sin(self._calpha[4])
        off = self._off
        R06 = T06[:, :3, :3]
        o6 = T06[:, :3, 3]

        # ---- q1 (shoulder branches) from the wrist centre p05 = p06 - d6 z6
        p05 = o6 - d6 * R06[:, :, 2]
        R_wc = np.hypot(p05[:, 0], p05[:, 1])
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(R_wc > 0, d4 / R_wc, np.inf)
        slack = 1e-2 if self.refined else 1e-12  # calibrated arms: seed near-boundary branches, Newton decides
        ok1 = np.abs(ratio) <= 1.0 + slack
        phi = np.arccos(np.clip(ratio, -1.0, 1.0))
        psi = np.arctan2(p05[:, 1], p05[:, 0])
        th1 = psi[:, None] + np.stack([phi, -phi], axis=1) + np.pi / 2  # (N, 2)
        s1, c1 = np.sin(th1), np.cos(th1)

        # ---- q5, q6 (wrist branches): v = R06^T z1 = (s5 c6, -s5 s6, c5), z1 = (s1, -c1, 0)
        v = R06[:, None, 0, :] * s1[..., None] - R06[:, None, 1, :] * c1[..., None]  # (N, 2, 3)
        sin5 = np.hypot(v[..., 0], v[..., 1])
        th5_up = np.arctan2(sin5, v[..., 2])
        th5 = np.stack([th5_up, -th5_up], axis=-1)  # (N, 2 shoulder, 2 wrist)
        sgn = np.array([1.0, -1.0])
        th6 = np.arctan2(-sgn * v[..., 1, None], sgn * v[..., 0, None])
        singular_w = sin5 < self.wrist_tol
        pref = np.broadcast_to(np.asarray(q6_preference, dtype=float), (N,)) + off[5]
        th6 = np.where(singular_w[..., None], pref[:, None, None], th6)

        # ---- frame 4 from frame 6: R46 = Rz(q5) Rx(alpha5) Rz(q6), p46 = (s5 sa5 d6, -c5 sa5 d6, d5 + ca5 d6)
        s5, c5, s6, c6 = np.sin(th5), np.cos(th5), np.sin(th6), np.cos(th6)
        row0 = np.stack([c5 * c6 - s5 * ca5 * s6, -c5 * s6 - s5 * ca5 * c6, s5 * sa5 * np.ones_like(c6)], -1)
        row1 = np.stack([s5 * c6 + c5 * ca5 * s6, -s5 * s6 + c5 * ca5 * c6, -c5 * sa5 * np.ones_like(c6)], -1)
        row2 = np.stack([sa5 * s6, sa5 * c6, ca5 * np.ones_like(c6)], -1)
        w = (s5 * sa5 * d6)[..., None] * row0 + (-c5 * sa5 * d6)[..., None] * row1 + (d5 + ca5 * d6) * row2
        Rb = R06[:, None, None]  # (N, 1, 1, 3, 3): R06 @ vector, written out (faster than einsum here)
        o4 = o6[:, None, None, :] - (Rb[..., 0] * w[..., 0:1] + Rb[..., 1] * w[..., 1:2] + Rb[..., 2] * w[..., 2:3])
        x4 = Rb[..., 0] * row0[..., 0:1] + Rb[..., 1] * row0[..., 1:2] + Rb[..., 2] * row0[..., 2:3]
        # ---- planar 2-link in frame 1: p14 = (x1 . (o4 - o1), y1 . (o4 - o1)); x1 = (c1, s1, 0), y1 = (-s1 ca1, c1 ca1, sa1)
        c1b, s1b = c1[..., None], s1[..., None]
        dz = o4[..., 2] - d1
        px = c1b * o4[..., 0] + s1b * o4[..., 1]
        py = ca1 * (-s1b * o4[..., 0] + c1b * o4[..., 1]) + sa1 * dz
        c234 = c1b * x4[..., 0] + s1b * x4[..., 1]
        s234 = ca1 * (-s1b * x4[..., 0] + c1b * x4[..., 1]) + sa1 * x4[..., 2]
        r2 = px * px + py * py
        c3 = (r2 - a2 * a2 - a3 * a3) / (2.0 * a2 * a3)
        ok3 = np.abs(c3) <= 1.0 + slack
        th3_up = np.arccos(np.clip(c3, -1.0, 1.0))
        th3 = np.stack([th3_up, -th3_up], axis=-1)  # (N, 2, 2, 2)
        th2 = np.arctan2(py, px)[..., None] - np.arctan2(a3 * np.sin(th3), a2 + a3 * np.cos(th3))
        th4 = np.arctan2(s234, c234)[..., None] - th2 - th3

        shape = (N, 2, 2, 2)
        TH = np.stack(
            [
                np.broadcast_to(th1[:, :, None, None], shape),
                th2,
                th3,
                th4,
                np.broadcast_to(th5[..., None], shape),
                np.broadcast_to(th6[..., None], shape),
            ],
            axis=-1,
        ).reshape(N, 8, 6)
        valid = (ok1[:, None, None, None] & ok3[..., None] & np.ones(shape, dtype=bool)).reshape(N, 8)
        Q = wrap_angle(TH - off)
        near = 1e-6
        suspect = (
            (np.abs(np.abs(ratio) - 1.0) < near)
            | np.any(sin5 < near, axis=1)
            | np.any(np.abs(np.abs(c3) - 1.0) < near, axis=(1, 2))
        )
        return Q, valid, suspect

    def _virtual_targets(self, T06, q6_preference, iters: int = 4):
        """Calibrated arms, per branch: solve the nominal closed form for a corrected target
        ``T' = T D^-1`` with ``D = fk_nom(q)^-1 fk(q)`` the calibration's pose distortion at the current
        solution; converges at a rate ~ the calibration's size and keeps every branch its identity."""
        N = T06.shape[0]
        diag = np.arange(8)
        Tp = np.repeat(T06[:, None], 8, axis=1)  # (N, 8, 4, 4): one virtual target per branch
        pref = np.repeat(np.broadcast_to(np.asarray(q6_preference, dtype=float), (N,)), 8)
        for _ in range(iters):
            Tw = Tp.reshape(-1, 4, 4)
            if self._flange_inv is not None:
                Tw = Tw @ self._flange_inv
            Qa, Va, _ = self._solve(Tw, pref)
            Q = Qa.reshape(N, 8, 8, 6)[:, diag, diag]
            V = Va.reshape(N, 8, 8)[:, diag, diag]
            D = inv_transform(self._fk_base_tool0(Q, nominal=True)) @ self._fk_base_tool0(Q)
            Tp = T06[:, None] @ inv_transform(D)
        return Q, V

    def _refine(self, Q, valid, T06, iters: int = 30):
        """Newton steps (damped least squares) on the full model from the nominal closed-form solutions."""
        N = Q.shape[0]
        flat = Q.reshape(-1, 6).copy()
        ok = valid.reshape(-1).copy()
        idx = np.flatnonzero(ok)
        q = flat[idx]
        Tt = np.broadcast_to(T06[:, None], (N, 8, 4, 4)).reshape(-1, 4, 4)[idx]
        lam2 = 1e-18
        err = np.full(len(idx), np.inf)
        act = np.arange(len(idx))  # still iterating
        for it in range(iters):
            F = self._frames_base(q[act])
            e = _twist_error(F[:, 6], Tt[act])
            new = np.abs(e).max(axis=1)
            # stop when converged, diverged, or no longer improving (rounding floor reached)
            keep = (new > 1e-14) & (new < 1.0) & ((new < 0.5 * err[act]) | (it < 5))
            err[act] = new
            act, F, e = act[keep], F[keep], e[keep]
            if act.size == 0:
                break
            J = _jacobian_from_frames(F)
            JJt = J @ np.swapaxes(J, -1, -2) + lam2 * np.eye(6)
            q[act] += np.einsum("mji,mj->mi", J, np.linalg.solve(JJt, e[..., None])[..., 0])
        ok[idx] = err < 1e-11
        flat[idx] = wrap_angle(q)
        return flat.reshape(N, 8, 6), ok.reshape(N, 8)

    def _frames_base(self, Q) -> np.ndarray:
        """D-H frames 0..6 in ``base`` for ``Q (..., 6)``: ``(..., 7, 4, 4)`` (full model)."""
        Ti = dh_matrices(Q + self._off, self._a, self._d, self._alpha)
        out = np.empty(Q.shape[:-1] + (7, 4, 4))
        out[..., 0, :, :] = np.eye(4)
        for i in range(6):
            out[..., i + 1, :, :] = out[..., i, :, :] @ Ti[..., i, :, :]
        return out

    def _fk_base_tool0(self, Q, nominal: bool = False) -> np.ndarray:
        if nominal:
            Ti = dh_matrices(Q + self._off, self._ca, self._cd, self._calpha)
        else:
            Ti = dh_matrices(Q + self._off, self._a, self._d, self._alpha)
        T = Ti[..., 0, :, :]
        for i in range(1, 6):
            T = T @ Ti[..., i, :, :]
        return T

    def _apply_limits(self, Q):
        """Shift each joint by +/- 2 pi into the limits where the wrapped value lies outside."""
        lo, hi = self._lo, self._hi
        if np.all(lo <= -np.pi) and np.all(hi >= np.pi):  # (-pi, pi] lies inside: nothing to do
            return Q, np.ones(Q.shape[:-1], dtype=bool)
        inside = (Q >= lo) & (Q <= hi)
        for shift in (2 * np.pi, -2 * np.pi):
            Qs = Q + shift
            ok = ~inside & (Qs >= lo) & (Qs <= hi)
            Q = np.where(ok, Qs, Q)
            inside |= ok
        return Q, np.all(inside, axis=-1)

    def _duplicates(self, Q, valid) -> np.ndarray:
        """Mark a solution duplicate when an earlier valid slot equals it (mod 2 pi, within dedup_tol)."""
        diff = np.abs(Q[:, :, None, :] - Q[:, None, :, :]) % (2 * np.pi)
        diff = np.minimum(diff, 2 * np.pi - diff).max(axis=-1)  # (N, 8, 8)
        same = (diff < self.dedup_tol) & valid[:, :, None] & valid[:, None, :]
        earlier = np.tril(np.ones((8, 8), dtype=bool), k=-1)  # [j, i] with i < j
        return np.any(same & earlier, axis=-1)

    def ik(self, T, frame: str = "base_link", q6_preference: float = 0.0) -> np.ndarray:
        """All closed-form solutions ``(n, 6)``, n in 0..8, for one target pose ``T (4, 4)``.

        Angles in (-pi, pi] (shifted by 2 pi only where the joint limits require), within the joint
        limits, in branch order. Unreachable -> ``(0, 6)``. At the wrist singularity q6 is
        ``q6_preference``.
        """
        T = np.asarray(T, dtype=float)
        if T.shape != (4, 4):
            raise InvalidInputError(f"ik expects one (4, 4) pose, got shape {T.shape}; use ik_batch for many")
        Q, valid = self.ik_batch(T[None], frame, q6_preference)
        return Q[0][valid[0]]

    def ik_closest(self, T, q_near, frame: str = "base_link", weights=None) -> np.ndarray | None:
        """The IK solution nearest ``q_near`` (weighted Euclidean distance in joint space).

        Each joint may be shifted by +/- 2 pi (within the limits) to come nearer; at the wrist
        singularity q6 = ``q_near[5]``. Returns ``(6,)`` or None when the pose is unreachable.
        """
        T = np.asarray(T, dtype=float)
        if T.shape != (4, 4):
            raise InvalidInputError(f"ik_closest expects one (4, 4) pose, got shape {T.shape}; use ik_closest_batch")
        Q, ok = self.ik_closest_batch(T[None], np.asarray(q_near, dtype=float)[None], frame, weights)
        return Q[0] if ok[0] else None

    def ik_closest_batch(self, T, q_near, frame: str = "base_link", weights=None):
        """Nearest solution per pose: ``T (N, 4, 4)``, ``q_near (N, 6)`` or ``(6,)`` ->
        ``(Q (N, 6), ok (N,))``; rows with ``ok`` False (unreachable) hold ``q_near``."""
        T = np.asarray(T, dtype=float)
        q_near = self._check_q(np.broadcast_to(np.asarray(q_near, dtype=float), (len(T), 6)))
        S, V = self.ik_batch(T, frame, q6_preference=q_near[:, 5])
        w = np.ones(6) if weights is None else np.asarray(weights, dtype=float)
        cand = S[:, :, None, :] + 2 * np.pi * np.arange(-2, 3)[None, None, :, None]  # (N, 8, 5, 6)
        inside = (cand >= self._lo - 1e-12) & (cand <= self._hi + 1e-12)
        dist = np.where(inside, np.abs(cand - q_near[:, None, None, :]), np.inf)
        k = np.argmin(dist, axis=2)  # (N, 8, 6): best 2 pi shift per joint
        best = np.take_along_axis(cand, k[:, :, None, :], axis=2)[:, :, 0, :]
        cost = np.where(V, np.sqrt(np.sum(w * (best - q_near[:, None, :]) ** 2, axis=-1)), np.inf)
        i = np.argmin(cost, axis=1)
        ok = V.any(axis=1)
        Q = np.where(ok[:, None], best[np.arange(len(T)), i], q_near)
        return Q, ok


class UR5(UR):
    """UR5 kinematics (``UR5()`` = nominal UR5, docs/kinematics.md; ``UR5(params)`` for others)."""
