"""Execution score (Embodied-IQA, last stage): compare the run of the distorted image's action with the
run of the reference image's action, on the same arm (simulated or real).

- the distorted run hit a protective/emergency stop (contact with table or walls, joint or
  workspace limit) -> 0;
- the distorted run achieved the task -> 100;
- otherwise -> ``100 - d``, ``d`` the Euclidean distance in centimetres between the final TCP
  positions of the reference run and the distorted run, floored at 0.

Pure functions on :class:`ExecutionOutcome` records, so the simulator, the ROS arm node and the
real UR5 share one scorer. Poses: ``[x, y, z, rx, ry, rz]`` in frame base, metres + rotation vector.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from embeval.errors import InvalidInputError

SUCCESS_SCORE = 100.0
ESTOP_SCORE = 0.0


@dataclass(frozen=True)
class ExecutionOutcome:
    """How one run ended (one action or an action sequence executed from the task's start state)."""

    final_tcp_pose: tuple[float, ...]  # [x, y, z, rx, ry, rz], frame base
    success: bool  # the task's success predicate at the end
    stopped: bool  # a protective / emergency stop happened
    stop_reason: str = ""  # e.g. "contact: wrist_3_link with table", "workspace limit: ..."
    n_actions: int = 0
    duration: float = 0.0  # seconds of (sim) time
    final_joint_positions: tuple[float, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # backend-specific raw data (object poses, ...)

    def __post_init__(self):
        p = np.asarray(self.final_tcp_pose, dtype=np.float64).reshape(-1)
        if p.shape != (6,) or not np.all(np.isfinite(p)):
            raise InvalidInputError(f"final_tcp_pose must be 6 finite numbers [x,y,z,rx,ry,rz], got {self.final_tcp_pose!r}")
        object.__setattr__(self, "final_tcp_pose", tuple(float(v) for v in p))
        object.__setattr__(self, "final_joint_positions", tuple(float(v) for v in self.final_joint_positions))

    @property
    def position(self) -> np.ndarray:
        return np.asarray(self.final_tcp_pose[:3])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["final_tcp_pose"] = list(self.final_tcp_pose)
        d["final_joint_positions"] = list(self.final_joint_positions)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExecutionOutcome:
        return cls(**dict(d))


@dataclass(frozen=True)
class ExecutionRecord:
    """The Execution score of one (reference, distorted) pair, with everything that produced it."""

    score: float  # 0..100
    reason: str  # "success" | "failure" | "estop"
    distance_cm: float  # between the final TCP positions (reported in every case)
    reference: ExecutionOutcome
    distorted: ExecutionOutcome
    detail: str = ""  # the stop reason for "estop"; a note when the reference run itself stopped

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "reason": self.reason, "distance_cm": self.distance_cm, "detail": self.detail,
                "reference": self.reference.to_dict(), "distorted": self.distorted.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExecutionRecord:
        d = dict(d)
        d["reference"] = ExecutionOutcome.from_dict(d["reference"])
        d["distorted"] = ExecutionOutcome.from_dict(d["distorted"])
        return cls(**d)


def tcp_distance_cm(a: Sequence[float], b: Sequence[float]) -> float:
    """Euclidean distance (cm) between the positions of two ``[x,y,z,...]`` poses given in metres."""
    pa = np.asarray(a, dtype=np.float64)[:3]
    pb = np.asarray(b, dtype=np.float64)[:3]
    return float(np.linalg.norm(pa - pb) * 100.0)


def execution_score(reference: ExecutionOutcome, distorted: ExecutionOutcome) -> ExecutionRecord:
    """Score the distorted run against the reference run (see module docstring)."""
    d = tcp_distance_cm(reference.final_tcp_pose, distorted.final_tcp_pose)
    if distorted.stopped:
        return ExecutionRecord(ESTOP_SCORE, "estop", d, reference, distorted, distorted.stop_reason)
    # a reference run that itself stopped leaves the paper's rule unchanged, but the record says so
    note = f"reference run stopped ({reference.stop_reason or 'protective stop'})" if reference.stopped else ""
    if distorted.success:
        return ExecutionRecord(SUCCESS_SCORE, "success", d, reference, distorted, note)
    return ExecutionRecord(max(0.0, 100.0 - d), "failure", d, reference, distorted, note)


def execution_score_from_poses(reference_tcp: Sequence[float], distorted_tcp: Sequence[float], *, stopped: bool = False,
                               success: bool | None = None, stop_reason: str = "",
                               reference_success: bool | None = None) -> ExecutionRecord:
    """:func:`execution_score` from raw final TCP poses (e.g. a real-arm episode whose success is
    unknown: ``success=None`` scores by distance)."""
    ref = ExecutionOutcome(tuple(reference_tcp), bool(reference_success), False)
    dis = ExecutionOutcome(tuple(distorted_tcp), bool(success), bool(stopped), stop_reason)
    return execution_score(ref, dis)


def mean_score(records: Sequence[ExecutionRecord]) -> float:
    """Mean Execution score over records (e.g. the 5 tasks of an image or many subjects); NaN when empty."""
    return float(np.mean([r.score for r in records])) if records else float("nan")
