"""Decision score: how much a policy's 7-DoF action changes when the image is distorted.

Action convention (embeval.subjects.protocols): ``[dx, dy, dz, droll, dpitch, dyaw, gripper]``,
metres, radians (roll-pitch-yaw, extrinsic x-y-z), gripper in [0, 1] (1 = open).

Per task, comparing the distorted-image action ``b`` with the reference-image action ``a``:

- position: ``1 - |t_a - t_b| / max(|t_a| + |t_b|, floor)`` (scale-free, 0..1 by the triangle
  inequality; ``floor = position_floor_m`` = 1 mm keeps two near-zero translations from counting as
  opposite), or with ``position_scale_m = s``: ``1 - min(|t_a - t_b| / s, 1)``;
- rotation: ``(1 + cos) / 2`` of the angle between the rotation *directions*: by default the
  rotation vectors (axis * angle) of the two roll-pitch-yaw rotations (``rotation_direction="rotvec"``),
  or the raw (droll, dpitch, dyaw) triples (``"rpy"``). Zero rotations (norm below ``zero_rotation``
  = 1e-3 rad, so that numerical noise has no direction): both zero -> 1, only one zero -> 0.5 (no
  direction to agree with);
- state: ``1 - |g_a - g_b|`` (gripper in [0, 1]).

The task score is the mean of the three (0..1); an image's score is the sum over its tasks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from embeval.action import Action
from embeval.errors import ConfigError, InvalidInputError


@dataclass(frozen=True)
class DecisionConfig:
    position_scale_m: float | None = None  # None: scale-free normalisation (see module docstring)
    position_floor_m: float = 1e-3  # metres; lower bound of the scale-free denominator
    rotation_direction: str = "rotvec"  # "rotvec" or "rpy"
    zero_rotation: float = 1e-3  # radians; shorter rotation vectors count as no rotation


@dataclass(frozen=True)
class DecisionScore:
    """Per-task parts (each 0..1) and their mean."""

    position: float
    rotation: float
    state: float
    score: float


@dataclass(frozen=True)
class ImageDecisionScore:
    total: float
    position: float
    rotation: float
    state: float
    tasks: tuple[DecisionScore, ...]


def _as_matrix(actions) -> np.ndarray:
    if isinstance(actions, Action):
        return actions.vector[None]
    if isinstance(actions, (list, tuple)) and actions and isinstance(actions[0], Action):
        return np.stack([a.vector for a in actions])
    m = np.asarray(actions, dtype=np.float64)
    if m.ndim == 1:
        m = m[None]
    if m.ndim != 2 or m.shape[1] != 7:
        raise InvalidInputError(f"actions must be Action objects or arrays of shape (7,) or (N, 7), got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise InvalidInputError("actions contain NaN or inf; the policy output is invalid")
    if np.any((m[:, 6] < 0) | (m[:, 6] > 1)):
        raise InvalidInputError("gripper values must lie in [0, 1] (1 = open); convert the policy's convention first")
    return m


def _directions(rpy: np.ndarray, mode: str) -> np.ndarray:
    if mode == "rpy":
        return rpy
    if mode == "rotvec":
        from scipy.spatial.transform import Rotation

        return Rotation.from_euler("xyz", rpy).as_rotvec()
    raise ConfigError(f"unknown rotation_direction {mode!r}; choose 'rotvec' or 'rpy'")


def decision_parts(reference, distorted, config: DecisionConfig = DecisionConfig()) -> list[DecisionScore]:
    """Per-task decision scores for actions given as :class:`Action`, (7,) or (N, 7) arrays."""
    a, b = _as_matrix(reference), _as_matrix(distorted)
    if a.shape != b.shape:
        raise InvalidInputError(f"{len(a)} reference actions but {len(b)} distorted actions; they must pair up")
    d = np.linalg.norm(a[:, :3] - b[:, :3], axis=1)
    if config.position_scale_m is None:
        if config.position_floor_m <= 0:
            raise ConfigError(f"position_floor_m must be > 0 metres, got {config.position_floor_m}")
        denom = np.maximum(np.linalg.norm(a[:, :3], axis=1) + np.linalg.norm(b[:, :3], axis=1), config.position_floor_m)
        pos = 1.0 - d / denom
    else:
        if config.position_scale_m <= 0:
            raise ConfigError(f"position_scale_m must be > 0 metres, got {config.position_scale_m}")
        pos = 1.0 - np.minimum(d / config.position_scale_m, 1.0)
    ua, ub = _directions(a[:, 3:6], config.rotation_direction), _directions(b[:, 3:6], config.rotation_direction)
    na, nb = np.linalg.norm(ua, axis=1), np.linalg.norm(ub, axis=1)
    za, zb = na < config.zero_rotation, nb < config.zero_rotation
    cos = np.einsum("ij,ij->i", ua, ub) / np.where(za | zb, 1.0, na * nb)
    rot = np.where(za & zb, 1.0, np.where(za | zb, 0.5, (1.0 + np.clip(cos, -1.0, 1.0)) / 2.0))
    state = 1.0 - np.abs(a[:, 6] - b[:, 6])
    score = (pos + rot + state) / 3.0
    return [DecisionScore(float(p), float(r), float(s), float(t)) for p, r, s, t in zip(pos, rot, state, score)]


def decision_score(reference: Sequence, distorted: Sequence, config: DecisionConfig = DecisionConfig()) -> ImageDecisionScore:
    """An image's decision score: the sum over its tasks (one action pair per task)."""
    parts = tuple(decision_parts(reference, distorted, config))
    return ImageDecisionScore(sum(p.score for p in parts), sum(p.position for p in parts),
                              sum(p.rotation for p in parts), sum(p.state for p in parts), parts)
