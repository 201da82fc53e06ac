"""Execution score (Embodied-IQA, last stage): compare the run of the distorted image's action with the
run of the reference image's action, on the same arm (simulated or real).

- the distorted run hit a protective/emergency stop (contact with table or walls, joint or
  workspace limit) -> 0;
- the distorted run achieved the task -> 100;
- otherwise -> ``100 - d``, ``d`` the Euclidean distance in centimetres between the final TCP
  positions of the reference run and the distorted run. As in the paper this is not floored:
  a run that ends more than 1 m away scores below 0, below an emergency stop. ``floor=True``
  (:func:`execution_score`) gives ``max(0, 100 - d)``, the earlier default.

Pure functions on :class:`ExecutionOutcome` records, so the simulator, the ROS arm node and the
real UR5 share one scorer. Poses: ``[x, y, z, rx, ry, rz]`` in frame base, metres + rotation vector.

Where the success flag comes from (``success_source``, :data:`SUCCESS_SOURCES`): the task's success
predicate evaluated on the simulated cell's state (``sim``), on a simulated copy that follows an arm
the scorer cannot see into, the UR emulator or the mock arm (``mirror``), on what the real cell senses
(``sensor``), or the operator's confirmation (``operator``); ``none`` when nobody knows, and then a
run can only score by distance (``100 - cm``), never 100 for success.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from embeval.errors import InvalidInputError

SUCCESS_SCORE = 100.0
ESTOP_SCORE = 0.0

#: where a run's success flag came from -> what that means
SUCCESS_SOURCES: dict[str, str] = {
    "sim": "the task's success predicate on the simulated cell's state",
    "mirror": "the predicate on a simulated copy of the cell that followed the arm's measured TCP and gripper "
              "(UR emulator, mock arm)",
    "sensor": "the predicate as the real cell senses it (a tracker or other sensing node)",
    "operator": "the operator's confirmation",
    "none": "unknown: the run scores by distance only",
}


def check_success_source(source: str) -> str:
    """``source`` when it is one of :data:`SUCCESS_SOURCES`; :class:`InvalidInputError` naming them otherwise."""
    if source not in SUCCESS_SOURCES:
        raise InvalidInputError(f"unknown success source {source!r}; use one of {', '.join(SUCCESS_SOURCES)}")
    return source


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
    success_source: str = "sim"  # where ``success`` came from (SUCCESS_SOURCES); "none": not known (success False)

    def __post_init__(self):
        check_success_source(self.success_source)
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


def execution_score(reference: ExecutionOutcome, distorted: ExecutionOutcome, floor: bool = False) -> ExecutionRecord:
    """Score the distorted run against the reference run (see module docstring); ``floor``: a failure
    scores ``max(0, 100 - d)`` instead of the paper's ``100 - d``."""
    d = tcp_distance_cm(reference.final_tcp_pose, distorted.final_tcp_pose)
    if distorted.stopped:
        return ExecutionRecord(ESTOP_SCORE, "estop", d, reference, distorted, distorted.stop_reason)
    # a reference run that itself stopped leaves the paper's rule unchanged, but the record says so
    note = f"reference run stopped ({reference.stop_reason or 'protective stop'})" if reference.stopped else ""
    if distorted.success:
        return ExecutionRecord(SUCCESS_SCORE, "success", d, reference, distorted, note)
    return ExecutionRecord(max(0.0, 100.0 - d) if floor else 100.0 - d, "failure", d, reference, distorted, note)


def execution_score_from_poses(reference_tcp: Sequence[float], distorted_tcp: Sequence[float], *, stopped: bool = False,
                               success: bool | None = None, stop_reason: str = "", reference_success: bool | None = None,
                               success_source: str | None = None, reference_success_source: str | None = None,
                               floor: bool = False) -> ExecutionRecord:
    """:func:`execution_score` from raw final TCP poses, e.g. a ROS or real-arm episode.

    ``success``: the distorted run's success flag (None: unknown, scores by distance), and
    ``success_source`` where it came from (:data:`SUCCESS_SOURCES`; default ``none`` when ``success`` is
    None, else ``sim``); a flag from source ``none`` counts as unknown. The same for the reference run.
    ``floor`` as in :func:`execution_score`."""
    def flag(value, source):
        source = check_success_source(source) if source else ("none" if value is None else "sim")
        return (source != "none" and bool(value)), source

    ref_ok, ref_src = flag(reference_success, reference_success_source)
    dis_ok, dis_src = flag(success, success_source)
    ref = ExecutionOutcome(tuple(reference_tcp), ref_ok, False, success_source=ref_src)
    dis = ExecutionOutcome(tuple(distorted_tcp), dis_ok, bool(stopped), stop_reason, success_source=dis_src)
    return execution_score(ref, dis, floor)


def mean_score(records: Sequence[ExecutionRecord]) -> float:
    """Mean Execution score over records (e.g. the 5 tasks of an image or many subjects); NaN when empty."""
    return float(np.mean([r.score for r in records])) if records else float("nan")
