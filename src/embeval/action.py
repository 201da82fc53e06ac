"""The action vocabulary every floor shares: one 7-DoF action, what a policy sees, the gripper rule.

One home for the meaning of an action, so that it means the same on every backend (pybullet cell,
mock arm, ur_rtde / the UR emulator, ManiSkill) and for every model adapter. Imported by ``sim``,
``robot``, ``control``, ``scoring``, ``distortion``, ``camera`` and ``subjects``; imports nothing of
theirs.

Conventions:

- images: RGB uint8 numpy arrays, shape (H, W, 3) (:func:`check_image`);
- 7-DoF action: ``[dx, dy, dz, droll, dpitch, dyaw, gripper]``; translation in metres,
  rotation deltas in radians (roll-pitch-yaw, extrinsic x-y-z, i.e. ``R = Rz(yaw) Ry(pitch) Rx(roll)``),
  expressed in the frame named by the policy's :class:`ActionSpec`; gripper in [0, 1], 1 = open
  (OpenVLA's convention). Adapters convert from and to each model's own convention.
- a TCP pose is ``[x, y, z, rx, ry, rz]`` in the UR controller frame ``base`` (metres, rotation
  vector), the layout of ur_rtde's ``getActualTCPPose``; the observation state's ``tcp_pose`` is the
  7-number ``[x, y, z, qx, qy, qz, qw]`` (:func:`pose6_to_pose7`).
- a delta in frame ``base`` moves the TCP to ``p' = p + d`` and ``R' = R_delta @ R`` with
  ``R_delta = Rz(dyaw) Ry(pitch) Rx(droll)``; in frame ``tool0`` the translation and rotation are
  applied in the tool frame (``p' = p + R d``, ``R' = R @ R_delta``) (:func:`apply_delta`).
- the gripper rule (:data:`GRIPPER_CLOSED_BELOW`, :func:`gripper_closed`, :func:`gripper_command`):
  an opening below 0.5 means "closed", 0.5 and above "open". A command acts only when it lies on the
  other side of 0.5 than the gripper's current opening; then the fingers close fully (0) or open fully
  (1). Every backend executes an action in the same order: first the move (or a hold), then the gripper.
- rotation conversions (rotation vector, quaternion xyzw, rpy) are :mod:`embeval.rotations`'s;
  :func:`rpy_to_matrix` and :func:`matrix_to_rpy` are re-exported here.
- two-arm (k-arm) outputs are ``7 k`` numbers, one 7-vector per arm; :func:`arm_of_larger_motion`
  names the arm that moves most (the Embodied-IQA paper scores that arm).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embeval.errors import InvalidInputError
from embeval.rotations import matrix_to_rotvec, matrix_to_rpy, rotvec_to_matrix, rotvec_to_quat, rpy_to_matrix

__all__ = [
    "arm_of_larger_motion",
    "GRIPPER_CLOSED_BELOW", "Action", "ActionSpec", "Observation", "apply_delta", "as_pose6", "check_image",
    "gripper_closed", "gripper_command", "matrix_to_rpy", "pose6_to_pose7", "pose_delta", "rpy_to_matrix",
]

#: An opening strictly below this is "closed"; at or above it, "open" (0 = closed .. 1 = open).
GRIPPER_CLOSED_BELOW = 0.5


def gripper_closed(opening: float) -> bool:
    """Whether ``opening`` (0 closed .. 1 open) means closed under the gripper rule (``< 0.5``)."""
    return float(opening) < GRIPPER_CLOSED_BELOW


def gripper_command(opening: float, current: float) -> float | None:
    """The gripper rule: the full opening (0.0 or 1.0) to drive to, or None to leave the fingers be.

    ``opening`` is the commanded value, ``current`` the gripper's present opening (both 0 closed ..
    1 open). The fingers act only when the command lies on the other side of 0.5 than ``current``.
    """
    if gripper_closed(opening) == gripper_closed(current):
        return None
    return 0.0 if gripper_closed(opening) else 1.0


@dataclass(frozen=True)
class ActionSpec:
    """What a policy's numbers mean."""

    frame: str = "base"  # frame of the deltas: "base" (UR controller frame) or "tool0"
    translation_units: str = "m"
    rotation: str = "rpy_xyz_extrinsic_delta"  # see module docstring
    gripper_open_is_one: bool = True  # polarity as emitted by the model, before conversion
    chunk_size: int = 1  # actions returned per act() call (action chunking)
    absolute: bool = False  # True: actions are absolute TCP poses, not deltas


@dataclass(frozen=True)
class Action:
    """One 7-DoF action in embeval's convention (see module docstring)."""

    vector: np.ndarray  # shape (7,), float64

    def __post_init__(self):
        v = np.asarray(self.vector, dtype=np.float64).reshape(-1)
        if v.shape != (7,):
            raise InvalidInputError(f"action must have 7 numbers [dx,dy,dz,droll,dpitch,dyaw,gripper], got shape {v.shape}")
        if not np.all(np.isfinite(v)):
            raise InvalidInputError(f"action contains NaN or inf: {v.tolist()}; the policy output is invalid")
        if not 0.0 <= v[6] <= 1.0:
            raise InvalidInputError(f"gripper must lie in [0, 1] (1 = open), got {v[6]}")
        object.__setattr__(self, "vector", v)

    @property
    def translation(self) -> np.ndarray:
        return self.vector[:3]

    @property
    def rotation(self) -> np.ndarray:
        return self.vector[3:6]

    @property
    def gripper(self) -> float:
        return float(self.vector[6])

    @property
    def moves(self) -> bool:
        """Whether the 6-DoF part is a motion (any component beyond 1e-9); else the step is a hold."""
        return bool(np.any(np.abs(self.vector[:6]) > 1e-9))

    @classmethod
    def hold(cls, gripper: float = 1.0) -> "Action":
        """The safe hold action: no motion, gripper unchanged at ``gripper``."""
        return cls(np.array([0, 0, 0, 0, 0, 0, gripper], dtype=np.float64))


def arm_of_larger_motion(action: Sequence[float]) -> int:
    """The arm (0-based) whose 7-vector in a ``(7 k,)`` action moves most: largest translation norm,
    ties by rotation norm, then the first arm."""
    v = np.asarray(action, dtype=np.float64).reshape(-1, 7)
    t = np.round(np.linalg.norm(v[:, :3], axis=1), 12)
    r = np.round(np.linalg.norm(v[:, 3:6], axis=1), 12)
    return int(np.lexsort((np.arange(len(v)), -r, -t))[0])


@dataclass
class Observation:
    """What a policy sees at one step."""

    images: Mapping[str, np.ndarray]  # camera name -> RGB uint8 (H, W, 3), e.g. "third_person", "wrist"
    instruction: str = ""
    state: Mapping[str, np.ndarray] = field(default_factory=dict)  # e.g. "joint_positions" (6,), "tcp_pose" (7,) xyz+quat xyzw
    timestamp: float = 0.0  # seconds


def check_image(img: Any, name: str = "image") -> np.ndarray:
    """Validate an RGB uint8 (H, W, 3) image; raise :class:`InvalidInputError` naming the fix."""
    if not isinstance(img, np.ndarray):
        raise InvalidInputError(f"{name} must be a numpy array, got {type(img).__name__}")
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise InvalidInputError(
            f"{name} must be RGB uint8 with shape (H, W, 3), got dtype {img.dtype} shape {img.shape}; "
            "convert with numpy: img.astype(np.uint8) / drop the alpha channel"
        )
    if img.shape[0] == 0 or img.shape[1] == 0:
        raise InvalidInputError(f"{name} is empty (shape {img.shape}); send an image at least 1x1 pixels")
    return img


def as_pose6(pose: Sequence[float], name: str = "pose") -> np.ndarray:
    """Validate a ``[x,y,z,rx,ry,rz]`` pose; raise :class:`InvalidInputError` naming the fix."""
    p = np.asarray(pose, dtype=np.float64).reshape(-1)
    if p.shape != (6,) or not np.all(np.isfinite(p)):
        raise InvalidInputError(f"{name} must be 6 finite numbers [x, y, z, rx, ry, rz] (m, rotation vector), got {pose!r}")
    return p


def pose6_to_pose7(pose6: Sequence[float]) -> np.ndarray:
    """``[x, y, z, rx, ry, rz]`` (rotation vector) -> ``[x, y, z, qx, qy, qz, qw]`` (quaternion xyzw)."""
    p = np.asarray(pose6, dtype=np.float64).reshape(-1)
    return np.concatenate([p[:3], rotvec_to_quat(p[3:6])])


def apply_delta(pose: Sequence[float], delta: Sequence[float], frame: str = "base") -> np.ndarray:
    """Target TCP pose after a 6-DoF delta ``[dx,dy,dz,droll,dpitch,dyaw]`` (see module docstring).

    ``pose`` and the result are ``[x,y,z,rx,ry,rz]`` in frame base.
    """
    p = as_pose6(pose)
    d = np.asarray(delta, dtype=np.float64).reshape(-1)[:6]
    R = rotvec_to_matrix(p[3:])
    Rd = rpy_to_matrix(d[3:6])
    if frame == "base":
        pos, Rn = p[:3] + d[:3], Rd @ R
    elif frame == "tool0":
        pos, Rn = p[:3] + R @ d[:3], R @ Rd
    else:
        raise InvalidInputError(f"unknown action frame {frame!r}; use 'base' or 'tool0'")
    return np.concatenate([pos, matrix_to_rotvec(Rn)])


def pose_delta(pose_from: Sequence[float], pose_to: Sequence[float]) -> np.ndarray:
    """The base-frame delta ``[dx,dy,dz,droll,dpitch,dyaw]`` with ``apply_delta(pose_from, d) == pose_to``."""
    a, b = as_pose6(pose_from), as_pose6(pose_to)
    Ra = rotvec_to_matrix(a[3:])
    Rb = rotvec_to_matrix(b[3:])
    return np.concatenate([b[:3] - a[:3], matrix_to_rpy(Rb @ Ra.T)])
