"""Rigid transforms and rotation conversions used across embeval.

Conventions (docs/kinematics.md, Frames and conventions): metres and radians; homogeneous 4x4 matrices map child-frame
coordinates to parent-frame coordinates (``p_parent = T @ p_child``); rotation vectors are
axis * angle (UR's convention, angle in [0, pi]); quaternions are scalar-last ``[x, y, z, w]``
(ROS's convention); a UR pose is ``[x, y, z, rx, ry, rz]`` (position + rotation vector).
All functions accept a single item or a batch (leading axes) unless stated. The rotation conversions
(``rotvec_to_matrix``, ``matrix_to_rotvec``, ``quat_to_matrix``, ``matrix_to_quat``) live in
:mod:`embeval.rotations` and are re-exported here.
"""
from __future__ import annotations

import numpy as np

from embeval.rotations import as_vectors, matrix_to_quat, matrix_to_rotvec, quat_to_matrix, rotvec_to_matrix

__all__ = [
    "inv_transform",
    "matrix_to_pose",
    "matrix_to_quat",
    "matrix_to_rotvec",
    "pose_error",
    "pose_to_matrix",
    "quat_to_matrix",
    "rot_x",
    "rot_z",
    "rotvec_to_matrix",
    "trans",
    "wrap_angle",
]


def wrap_angle(q):
    """Wrap angles (radians) into (-pi, pi]."""
    q = np.asarray(q, dtype=float)
    w = q - (2.0 * np.pi) * np.round(q / (2.0 * np.pi))  # [-pi, pi] (rounding is faster than mod)
    w = np.where(w <= -np.pi, w + 2.0 * np.pi, w)
    return np.where(w > np.pi, w - 2.0 * np.pi, w)


def rot_x(angle: float) -> np.ndarray:
    """4x4 homogeneous rotation about x by ``angle`` radians."""
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[1, 0, 0, 0], [0, c, -s, 0], [0, s, c, 0], [0, 0, 0, 1.0]])


def rot_z(angle: float) -> np.ndarray:
    """4x4 homogeneous rotation about z by ``angle`` radians."""
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0, 0], [s, c, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])


def trans(x: float = 0.0, y: float = 0.0, z: float = 0.0) -> np.ndarray:
    """4x4 homogeneous translation (metres)."""
    T = np.eye(4)
    T[:3, 3] = (x, y, z)
    return T


def inv_transform(T):
    """Inverse of rigid transform(s) ``(..., 4, 4)`` without a general matrix inverse."""
    T = np.asarray(T, dtype=float)
    out = np.zeros_like(T)
    Rt = np.swapaxes(T[..., :3, :3], -1, -2)
    out[..., :3, :3] = Rt
    out[..., :3, 3] = -np.einsum("...ij,...j->...i", Rt, T[..., :3, 3])
    out[..., 3, 3] = 1.0
    return out


def pose_to_matrix(pose) -> np.ndarray:
    """UR pose(s) ``[x, y, z, rx, ry, rz]`` (metres, rotation vector) -> ``(..., 4, 4)``."""
    pose = as_vectors(pose, 6, "pose [x, y, z, rx, ry, rz]")
    T = np.zeros(pose.shape[:-1] + (4, 4))
    T[..., :3, :3] = rotvec_to_matrix(pose[..., 3:])
    T[..., :3, 3] = pose[..., :3]
    T[..., 3, 3] = 1.0
    return T


def matrix_to_pose(T) -> np.ndarray:
    """``(..., 4, 4)`` -> UR pose(s) ``[x, y, z, rx, ry, rz]`` (rotation vector angle in [0, pi])."""
    T = np.asarray(T, dtype=float)
    return np.concatenate([T[..., :3, 3], matrix_to_rotvec(T[..., :3, :3])], axis=-1)


def pose_error(T_a, T_b) -> tuple[np.ndarray, np.ndarray]:
    """Position error (metres) and rotation error (radians, angle of ``R_a^T R_b``) between poses."""
    T_a = np.asarray(T_a, dtype=float)
    T_b = np.asarray(T_b, dtype=float)
    dp = np.linalg.norm(T_a[..., :3, 3] - T_b[..., :3, 3], axis=-1)
    R = np.einsum("...ji,...jk->...ik", T_a[..., :3, :3], T_b[..., :3, :3])
    # angle from the skew part (accurate for small angles) and the trace (for large ones)
    s = 0.5 * np.linalg.norm(
        np.stack([R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]], -1), axis=-1
    )
    c = 0.5 * (np.trace(R, axis1=-2, axis2=-1) - 1.0)
    return dp, np.arctan2(s, c)
