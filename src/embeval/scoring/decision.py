"""Decision score: how much a policy's 7-DoF action changes when the image is distorted.

Action convention (:mod:`embeval.action`): ``[dx, dy, dz, droll, dpitch, dyaw, gripper]``, metres,
radians (roll-pitch-yaw, extrinsic x-y-z), gripper in [0, 1] (1 = open). Two-arm (or k-arm) actions
are ``(N, 7 k)`` rows, one 7-vector per arm: each pair is scored on one arm, ``DecisionConfig.arm``
when given, else the arm with the larger motion in the reference action (translation norm; ties by
rotation norm, then the first arm), the same arm for both actions.

Per task, comparing the distorted-image action ``b`` with the reference-image action ``a``:

``normalisation="corpus"`` (default, the Embodied-IQA paper's, §3.4: position from the Euclidean
distance, "the rotation score is based on the cosine similarity of directional vectors", state from
the absolute difference, each normalised to 0..1 over the data):
the position distance ``d_t = |t_a - t_b|`` (metres) and a rotation distance ``d_r`` are min-max
normalised over the scored corpus (every task pair scored together, see :func:`decision_corpus` and
:class:`DecisionRange`): ``position = 1 - (d_t - min) / (max - min)``, the same for rotation; a corpus
whose distances are all equal has no spread and scores 1. The rotation distance (``rotation``):

- ``"cosine"`` (default, the paper's): ``d_r = 1 - cos(u_a, u_b)`` (unitless, 0..2), ``u`` the rotation
  direction vectors (``rotation_direction``: the rotation vectors of the roll-pitch-yaw rotations,
  ``"rotvec"``, or the raw (droll, dpitch, dyaw) triples, ``"rpy"``); so ``rotation`` is the cosine
  similarity min-max normalised over the corpus. A rotation shorter than ``zero_rotation`` has no
  direction: both none -> cos 1, only one -> cos 0 (as in the per-pair form);
- ``"angle"`` (the earlier corpus default, kept as an option): ``d_r`` in radians, the angle of the
  relative rotation ``R_a^T R_b`` with ``rotation_direction="rotvec"``, ``|rpy_a - rpy_b|`` with ``"rpy"``.
  It also counts a change of rotation *magnitude* about the same axis, which the cosine ignores.

``normalisation="per_pair"`` (the earlier form, for streaming use where no corpus exists):

- position: ``1 - |t_a - t_b| / max(|t_a| + |t_b|, floor)`` (scale-free, 0..1 by the triangle
  inequality; ``floor = position_floor_m`` = 1 mm keeps two near-zero translations from counting as
  opposite), or with ``position_scale_m = s``: ``1 - min(|t_a - t_b| / s, 1)``;
- rotation: ``(1 + cos) / 2`` of the angle between the rotation *directions*: by default the
  rotation vectors (axis * angle) of the two roll-pitch-yaw rotations (``rotation_direction="rotvec"``),
  or the raw (droll, dpitch, dyaw) triples (``"rpy"``). Zero rotations (norm below ``zero_rotation``
  = 1e-3 rad, so that numerical noise has no direction): both zero -> 1, only one zero -> 0.5 (no
  direction to agree with). ``rotation`` does not apply.

State (both): ``1 - |g_a - g_b|`` (gripper in [0, 1]).

The task score is the mean of the three (0..1); an image's score is the sum over its tasks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from embeval.action import Action, arm_of_larger_motion
from embeval.errors import ConfigError, InvalidInputError


NORMALISATIONS = ("corpus", "per_pair")
#: the names of a Decision score's total and parts wherever one is reported (records, run outputs, tables)
OUTPUTS = ("decision", "position", "rotation", "state")
#: the corpus form's rotation distance: "cosine" (the paper's) or "angle" (relative rotation angle, option)
ROTATIONS = ("cosine", "angle")
#: the instructions a policy is scored on when an image source or run carries none (rising difficulty): the
#: Decision score compares the actions for each of them (the run evaluator ``policy_decision`` and the IQA database)
DEFAULT_TASKS = (
    "press the red button",
    "pick up the green block",
    "push the blue box to the left",
    "place the yellow cube on the plate",
    "pour the cup into the bowl",
)


@dataclass(frozen=True)
class DecisionConfig:
    normalisation: str = "corpus"  # "corpus" (paper: min-max over the scored corpus) or "per_pair"
    position_scale_m: float | None = None  # per_pair only; None: scale-free (see module docstring)
    position_floor_m: float = 1e-3  # metres; per_pair only: lower bound of the scale-free denominator
    rotation: str = "cosine"  # corpus only: "cosine" (paper §3.4) or "angle" (relative rotation angle); see module doc
    rotation_direction: str = "rotvec"  # "rotvec" or "rpy"
    zero_rotation: float = 1e-3  # radians; shorter rotation vectors count as no rotation (per_pair, corpus "cosine")
    arm: int | None = None  # multi-arm actions: the arm to score (0-based); None: the larger motion


@dataclass(frozen=True)
class DecisionRange:
    """Min and max of the position (metres) and rotation distances over a scored corpus (rotation
    ``"cosine"``: ``1 - cos``, unitless; ``"angle"``: radians)."""

    position: tuple[float, float]
    rotation: tuple[float, float]

    @classmethod
    def fit(cls, pairs: Sequence[tuple[Any, Any]], config: "DecisionConfig | None" = None) -> "DecisionRange":
        """The range over every task pair of ``pairs`` (``(reference, distorted)`` actions each)."""
        cfg = config or DecisionConfig()
        ds = [corpus_distances(a, b, cfg) for a, b in pairs]
        if not ds:
            raise InvalidInputError("DecisionRange.fit: the corpus is empty")
        dt, dr = np.concatenate([d[0] for d in ds]), np.concatenate([d[1] for d in ds])
        return cls((float(dt.min()), float(dt.max())), (float(dr.min()), float(dr.max())))

    def normalise(self, d_pos: np.ndarray, d_rot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``1 - (d - min) / (max - min)`` clipped to 0..1 (1 everywhere when max == min)."""
        def one(d, lo_hi):
            lo, hi = lo_hi
            if hi <= lo:
                return np.ones_like(d)
            return 1.0 - np.clip((d - lo) / (hi - lo), 0.0, 1.0)
        return one(d_pos, self.position), one(d_rot, self.rotation)


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

    def outputs(self) -> dict[str, float]:
        """The score under the names every report of Decision uses (:data:`OUTPUTS`)."""
        return dict(zip(OUTPUTS, (self.total, self.position, self.rotation, self.state)))


def _as_matrix(actions) -> np.ndarray:
    """(N, 7 k) float rows: k = 1 for single-arm actions, one 7-vector per arm otherwise."""
    if isinstance(actions, Action):
        return actions.vector[None]
    if isinstance(actions, (list, tuple)) and actions and isinstance(actions[0], Action):
        return np.stack([a.vector for a in actions])
    m = np.asarray(actions, dtype=np.float64)
    if m.ndim == 1:
        m = m[None]
    if m.ndim != 2 or m.shape[1] == 0 or m.shape[1] % 7:
        raise InvalidInputError(f"actions must be Action objects or arrays of shape (7,), (N, 7) or (N, 7 k) for k arms, "
                                f"got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise InvalidInputError("actions contain NaN or inf; the policy output is invalid")
    g = m[:, 6::7]
    if np.any((g < 0) | (g > 1)):
        raise InvalidInputError("gripper values must lie in [0, 1] (1 = open); convert the policy's convention first")
    return m


def select_arm(reference, distorted, config: "DecisionConfig") -> tuple[np.ndarray, np.ndarray]:
    """(N, 7) reference and distorted actions on the scored arm of each pair (see module docstring)."""
    a, b = _as_matrix(reference), _as_matrix(distorted)
    if a.shape != b.shape:
        raise InvalidInputError(f"{len(a)} reference actions of {a.shape[1]} values but {len(b)} distorted actions of "
                                f"{b.shape[1]}; they must pair up")
    k = a.shape[1] // 7
    if k == 1 and config.arm in (None, 0):
        return a, b
    if config.arm is not None:
        if not 0 <= config.arm < k:
            raise ConfigError(f"DecisionConfig.arm = {config.arm}, but the actions have {k} arm(s) (0..{k - 1})")
        arms = np.full(len(a), config.arm)
    else:
        arms = np.array([arm_of_larger_motion(row) for row in a])
    rows = np.arange(len(a))[:, None]
    cols = arms[:, None] * 7 + np.arange(7)[None]
    return a[rows, cols], b[rows, cols]


def decision_distances(reference, distorted, config: "DecisionConfig | None" = None) -> tuple[np.ndarray, np.ndarray]:
    """Per task pair, the physical distances: position ``|t_a - t_b|`` (metres) and rotation (radians: the
    relative rotation's angle for ``rotation_direction="rotvec"``, ``|rpy_a - rpy_b|`` for ``"rpy"``),
    whatever ``config.rotation``; what the corpus form normalises is :func:`corpus_distances`."""
    from dataclasses import replace

    cfg = replace(config or DecisionConfig(), rotation="angle")
    return _distances(*select_arm(reference, distorted, cfg), cfg)


def corpus_distances(reference, distorted, config: "DecisionConfig | None" = None) -> tuple[np.ndarray, np.ndarray]:
    """Per task pair, the distances the corpus form min-max normalises: position ``|t_a - t_b|`` (metres)
    and the rotation distance of ``config.rotation`` (``"cosine"``: ``1 - cos`` of the rotation directions,
    unitless 0..2; ``"angle"``: as :func:`decision_distances`, radians)."""
    cfg = config or DecisionConfig()
    return _distances(*select_arm(reference, distorted, cfg), cfg)


def _distances(a: np.ndarray, b: np.ndarray, cfg: "DecisionConfig") -> tuple[np.ndarray, np.ndarray]:
    dt = np.linalg.norm(a[:, :3] - b[:, :3], axis=1)
    if cfg.rotation == "cosine":
        return dt, 1.0 - _cosine(a, b, cfg)
    if cfg.rotation != "angle":
        raise ConfigError(f"unknown Decision rotation {cfg.rotation!r}; choose one of {', '.join(ROTATIONS)}")
    if cfg.rotation_direction == "rotvec":
        from embeval.rotations import Turn, compose

        dr = compose(Turn.euler("xyz", a[:, 3:6]).inv(), Turn.euler("xyz", b[:, 3:6]), to="angle")
    elif cfg.rotation_direction == "rpy":
        dr = np.linalg.norm(a[:, 3:6] - b[:, 3:6], axis=1)
    else:
        raise ConfigError(f"unknown rotation_direction {cfg.rotation_direction!r}; choose 'rotvec' or 'rpy'")
    return dt, np.asarray(dr, dtype=np.float64)


def _cosine(a: np.ndarray, b: np.ndarray, cfg: "DecisionConfig") -> np.ndarray:
    """Cosine similarity of the rotation direction vectors per pair; a rotation shorter than
    ``zero_rotation`` has no direction: both none -> 1, only one -> 0."""
    ua, ub = _directions(a[:, 3:6], cfg.rotation_direction), _directions(b[:, 3:6], cfg.rotation_direction)
    na, nb = np.linalg.norm(ua, axis=1), np.linalg.norm(ub, axis=1)
    za, zb = na < cfg.zero_rotation, nb < cfg.zero_rotation
    cos = np.clip(np.einsum("ij,ij->i", ua, ub) / np.where(za | zb, 1.0, na * nb), -1.0, 1.0)
    return np.where(za & zb, 1.0, np.where(za | zb, 0.0, cos))


def _directions(rpy: np.ndarray, mode: str) -> np.ndarray:
    if mode == "rpy":
        return rpy
    if mode == "rotvec":
        from embeval.rotations import euler_to_rotvec

        return euler_to_rotvec(rpy, "xyz")
    raise ConfigError(f"unknown rotation_direction {mode!r}; choose 'rotvec' or 'rpy'")


def decision_parts(reference, distorted, config: DecisionConfig = DecisionConfig(),
                   corpus: DecisionRange | None = None) -> list[DecisionScore]:
    """Per-task decision scores for actions given as :class:`Action`, (7,), (N, 7) or (N, 7 k) arrays.

    With ``normalisation="corpus"`` the distances are normalised by ``corpus`` (the range fitted over
    the whole scored corpus); without one the given pairs are the corpus. Score many images at once
    with :func:`decision_corpus`."""
    if config.normalisation not in NORMALISATIONS:
        raise ConfigError(f"unknown Decision normalisation {config.normalisation!r}; choose one of {', '.join(NORMALISATIONS)}")
    if config.rotation not in ROTATIONS:
        raise ConfigError(f"unknown Decision rotation {config.rotation!r}; choose one of {', '.join(ROTATIONS)}")
    a, b = select_arm(reference, distorted, config)
    state = 1.0 - np.abs(a[:, 6] - b[:, 6])
    if config.normalisation == "corpus":
        dt, dr = _distances(a, b, config)
        rng = corpus or DecisionRange((float(dt.min()), float(dt.max())), (float(dr.min()), float(dr.max())))
        pos, rot = rng.normalise(dt, dr)
        score = (pos + rot + state) / 3.0
        return [DecisionScore(float(p), float(r), float(s), float(t)) for p, r, s, t in zip(pos, rot, state, score)]
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
    rot = (1.0 + _cosine(a, b, config)) / 2.0  # both without rotation: 1; only one: 0.5
    score = (pos + rot + state) / 3.0
    return [DecisionScore(float(p), float(r), float(s), float(t)) for p, r, s, t in zip(pos, rot, state, score)]


def decision_score(reference: Sequence, distorted: Sequence, config: DecisionConfig = DecisionConfig(),
                   corpus: DecisionRange | None = None) -> ImageDecisionScore:
    """An image's decision score: the sum over its tasks (one action pair per task); ``corpus`` as in
    :func:`decision_parts`."""
    parts = tuple(decision_parts(reference, distorted, config, corpus))
    return ImageDecisionScore(sum(p.score for p in parts), sum(p.position for p in parts),
                              sum(p.rotation for p in parts), sum(p.state for p in parts), parts)


def decision_corpus(pairs: Sequence[tuple[Any, Any]], config: DecisionConfig = DecisionConfig()) -> list[ImageDecisionScore]:
    """The Decision scorer (every module that reports Decision calls this one): the scores of many images at
    once, ``pairs[i] = (reference_actions, distorted_actions)`` of image i (one action per task). With
    ``normalisation="corpus"`` the distance range is fitted over every task pair of every image, so each
    image's score depends on the corpus (score the whole corpus in one call); ``"per_pair"`` scores each
    image alone (streaming use, where no corpus exists yet). Report with :meth:`ImageDecisionScore.outputs`."""
    rng = DecisionRange.fit(pairs, config) if config.normalisation == "corpus" else None
    return [decision_score(a, b, config, rng) for a, b in pairs]
