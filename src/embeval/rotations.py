"""Rotation conversions: the one home for quaternions, rotation vectors, Euler angles and matrices.

Conventions (docs/kinematics.md, Frames and conventions):

- radians throughout; matrices rotate column vectors (``v_parent = R @ v_child``);
- quaternions are scalar-last ``[x, y, z, w]`` (ROS's and scipy's order); inputs are normalised here
  (a zero quaternion is refused); outputs are canonical: ``w >= 0`` (for ``w == 0`` the first non-zero of
  x, y, z is positive), so ``q`` and ``-q`` (the same rotation) give the same output;
- rotation vectors are axis * angle; outputs have the angle in [0, pi] (UR's convention);
- ``rpy`` = (roll, pitch, yaw) about the fixed x, y, z axes in that order (extrinsic x-y-z):
  ``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)`` (URDF, ROS, and embeval's action deltas); the same as intrinsic
  z-y'-x''. Outputs: roll, yaw in [-pi, pi], pitch in [-pi/2, pi/2];
- other Euler sequences (:func:`euler_to_matrix`): lower-case axes are extrinsic (fixed), upper-case
  intrinsic (moving), e.g. ManiSkill's / pytorch3d's ``"XYZ"`` is ``Rx(a) @ Ry(b) @ Rz(c)``.

Every function takes one item or a batch (leading axes) and is computed by
:class:`scipy.spatial.transform.Rotation` (tests/test_rotations.py checks each against it), except the two
``*_fast`` ones: one item, no input checks, closed forms 2-12x faster than scipy's per-call overhead
(about 4 vs 50 us for a rotation vector), for per-tick control loops (the UR emulator's 2 ms tick);
tests/test_rotations.py holds them equal to scipy within 1e-15.
"""
from __future__ import annotations

import math
import re

import numpy as np
from scipy.spatial.transform import Rotation

from embeval.errors import InvalidInputError

__all__ = [
    "as_vectors",
    "euler_to_matrix",
    "matrix_to_euler",
    "matrix_to_quat",
    "matrix_to_rotvec",
    "matrix_to_rotvec_fast",
    "matrix_to_rpy",
    "quat_to_matrix",
    "quat_to_rotvec",
    "rotvec_to_matrix",
    "rotvec_to_matrix_fast",
    "rotvec_to_quat",
    "rpy_to_matrix",
]


def as_vectors(x, n: int, what: str) -> np.ndarray:
    """``x`` as float64 with last dimension ``n`` and finite values, else :class:`InvalidInputError` naming ``what``."""
    a = np.asarray(x, dtype=np.float64)
    if a.shape[-1:] != (n,):
        raise InvalidInputError(f"{what} must have last dimension {n}, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise InvalidInputError(f"{what} contains NaN or inf: {a}")
    return a


def _as_matrices(R) -> np.ndarray:
    a = np.asarray(R, dtype=np.float64)
    if a.shape[-2:] != (3, 3):
        raise InvalidInputError(f"rotation matrix must have shape (..., 3, 3), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise InvalidInputError(f"rotation matrix contains NaN or inf: {a}")
    return a


def _as_quats(q) -> np.ndarray:
    q = as_vectors(q, 4, "quaternion [x, y, z, w]")
    if np.any(np.linalg.norm(q, axis=-1) < 1e-12):
        raise InvalidInputError("zero quaternion: expected a unit quaternion [x, y, z, w] (scalar last)")
    return q


def _check_seq(seq: str) -> str:
    if not isinstance(seq, str) or not re.fullmatch(r"[xyz]{3}|[XYZ]{3}", seq) or seq[0] == seq[1] or seq[1] == seq[2]:
        raise InvalidInputError(f"Euler sequence {seq!r}: use 3 axes, all lower-case (extrinsic) or all upper-case "
                                "(intrinsic), no axis twice in a row, e.g. 'xyz' or 'XYZ'")
    return seq


def rotvec_to_matrix(rv) -> np.ndarray:
    """Rotation vector(s) ``(..., 3)`` (axis * angle, radians) -> rotation matrices ``(..., 3, 3)``."""
    rv = as_vectors(rv, 3, "rotation vector")
    return Rotation.from_rotvec(rv.reshape(-1, 3)).as_matrix().reshape(rv.shape[:-1] + (3, 3))


def matrix_to_rotvec(R) -> np.ndarray:
    """Rotation matrices ``(..., 3, 3)`` -> rotation vectors ``(..., 3)``, angle in [0, pi]."""
    R = _as_matrices(R)
    return Rotation.from_matrix(R.reshape(-1, 3, 3)).as_rotvec().reshape(R.shape[:-2] + (3,))


def quat_to_matrix(q) -> np.ndarray:
    """Quaternion(s) ``[x, y, z, w]`` (scalar last; normalised here) -> ``(..., 3, 3)``."""
    q = _as_quats(q)
    return Rotation.from_quat(q.reshape(-1, 4)).as_matrix().reshape(q.shape[:-1] + (3, 3))


def matrix_to_quat(R) -> np.ndarray:
    """Rotation matrices ``(..., 3, 3)`` -> unit quaternions ``[x, y, z, w]``, canonical (w >= 0)."""
    R = _as_matrices(R)
    return Rotation.from_matrix(R.reshape(-1, 3, 3)).as_quat(canonical=True).reshape(R.shape[:-2] + (4,))


def rotvec_to_quat(rv) -> np.ndarray:
    """Rotation vector(s) ``(..., 3)`` -> unit quaternions ``[x, y, z, w]``, canonical (w >= 0)."""
    rv = as_vectors(rv, 3, "rotation vector")
    return Rotation.from_rotvec(rv.reshape(-1, 3)).as_quat(canonical=True).reshape(rv.shape[:-1] + (4,))


def quat_to_rotvec(q) -> np.ndarray:
    """Quaternion(s) ``[x, y, z, w]`` (normalised here; ``q`` and ``-q`` alike) -> rotation vectors, angle in [0, pi]."""
    q = _as_quats(q)
    return Rotation.from_quat(q.reshape(-1, 4)).as_rotvec().reshape(q.shape[:-1] + (3,))


def euler_to_matrix(angles, seq: str) -> np.ndarray:
    """Euler angles ``(..., 3)`` (radians) about the axes of ``seq`` (lower-case extrinsic, upper-case intrinsic)
    -> ``(..., 3, 3)``."""
    seq = _check_seq(seq)
    a = as_vectors(angles, 3, f"Euler angles ({seq})")
    return Rotation.from_euler(seq, a.reshape(-1, 3)).as_matrix().reshape(a.shape[:-1] + (3, 3))


def matrix_to_euler(R, seq: str) -> np.ndarray:
    """Inverse of :func:`euler_to_matrix`: first and last angle in [-pi, pi], the middle one in [-pi/2, pi/2]
    (for sequences like ``xyz``; [0, pi] for ``xyx``-like ones). At gimbal lock scipy sets the third angle to 0
    and warns."""
    seq = _check_seq(seq)
    R = _as_matrices(R)
    return Rotation.from_matrix(R.reshape(-1, 3, 3)).as_euler(seq).reshape(R.shape[:-2] + (3,))


def rpy_to_matrix(rpy) -> np.ndarray:
    """(roll, pitch, yaw) ``(..., 3)`` -> ``Rz(yaw) @ Ry(pitch) @ Rx(roll)`` (extrinsic x-y-z), ``(..., 3, 3)``."""
    return euler_to_matrix(rpy, "xyz")


def matrix_to_rpy(R) -> np.ndarray:
    """Inverse of :func:`rpy_to_matrix`: (roll, pitch, yaw) in radians, pitch in [-pi/2, pi/2]."""
    return matrix_to_euler(R, "xyz")


def rotvec_to_matrix_fast(rv) -> np.ndarray:
    """One rotation vector (3,) -> (3, 3) by Rodrigues' formula; no input checks (see the module docstring)."""
    rv = np.asarray(rv, float)
    th = math.sqrt(float(rv @ rv))
    if th < 1e-15:
        return np.eye(3)
    k = rv / th
    K = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(th) * K + (1.0 - math.cos(th)) * (K @ K)


def matrix_to_rotvec_fast(R: np.ndarray) -> np.ndarray:
    """One (3, 3) rotation -> rotation vector (3,), angle in [0, pi], via its quaternion (Shepperd's branch on the
    largest of trace and diagonal: robust at pi); no input checks (see the module docstring)."""
    tr = R[0, 0] + R[1, 1] + R[2, 2]
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        w, x, y, z = 0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s
    elif R[0, 0] >= R[1, 1] and R[0, 0] >= R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        w, x, y, z = (R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s
    elif R[1, 1] >= R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        w, x, y, z = (R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s
    else:
        s = 2.0 * math.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        w, x, y, z = (R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s
    if w < 0:
        w, x, y, z = -w, -x, -y, -z
    n = math.sqrt(x * x + y * y + z * z)
    if n < 1e-15:
        return np.zeros(3)
    angle = 2.0 * math.atan2(n, w)
    return np.array([x, y, z]) * (angle / n)
