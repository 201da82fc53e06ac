"""The episode record: one episode as every scorer reads it, whoever ran it.

An in-process rollout (:func:`embeval.sim.backends.run_episode`), an environment worker (its reply, without
images), the ROS graph's scorer (:mod:`embeval_ros.scorer_node`, from the graph's topics) and the embedded
policies' evaluation (:func:`embeval.subjects.embedded.evaluate.evaluate_policy`) all produce an
:class:`EpisodeRecord`; Decision (:func:`embeval.scoring.decision.decision_corpus` on the first actions),
Execution (:func:`embeval.scoring.execution.execution_score` on :attr:`EpisodeRecord.outcome`) and success rates
read it.

Conventions: metres and radians, frame base; ``actions`` are the policy's actions in order, one row of 7 numbers
per arm ``[dx, dy, dz, droll, dpitch, dyaw, gripper]`` (:mod:`embeval.action`); ``final_tcp`` is
``[x, y, z, rx, ry, rz]`` (rotation vector) at the episode's end.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from embeval.scoring.execution import ExecutionOutcome

#: the fields every record writes (:meth:`EpisodeRecord.to_dict`), in this order; the others only when known
ALWAYS_WRITTEN = ("item", "distortion", "level", "instruction", "subject", "seed", "actions", "final_tcp", "stopped",
                  "stop_reason", "success", "success_source")
#: kept in memory with a record made in this process, never written or sent (images, the first action object)
IN_MEMORY = ("first_observation", "first_clean_images", "first_action")


@dataclass
class EpisodeRecord:
    """One episode: what ran (``item``: a benchmark item, a simulator task or a verb; the image ``distortion`` and
    its ``level``, ``"none"``: the clean reference), who acted, what it did and how it ended."""

    item: str = ""
    distortion: str = "none"
    level: int = 0
    instruction: str = ""
    subject: str = ""
    seed: int = 0
    actions: list[list[float]] = field(default_factory=list)  # in order (empty when the runner kept none)
    final_tcp: list[float] | None = None  # None: the arm's pose at the end never arrived
    stopped: bool = False  # a protective or emergency stop happened
    stop_reason: str = ""
    success: bool | None = None  # the task's success predicate at the end; None: unknown
    success_source: str = ""  # who judged ``success`` (embeval.scoring.execution.SUCCESS_SOURCES); "": nobody
    # known to some runners only (written when set)
    steps: int | None = None  # actions executed (the actions may not have been kept)
    end_reason: str = ""  # what ended it: "success", "max_steps", a stop's reason, ...
    duration: float | None = None  # seconds of (sim) time
    final_joints: list[float] | None = None  # rad, the arm's joints at the end
    extra: dict[str, Any] = field(default_factory=dict)  # the backend's own outcome data (object poses, ...)
    # in memory only (see IN_MEMORY)
    first_observation: Any = field(default=None, repr=False, compare=False)  # embeval.action.Observation
    first_clean_images: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # before distortion
    first_action: Any = field(default=None, repr=False, compare=False)  # embeval.action.Action

    @classmethod
    def from_outcome(cls, outcome: ExecutionOutcome, **kw: Any) -> EpisodeRecord:
        """The record of a run that ended as ``outcome`` (``kw``: the other fields)."""
        return cls(final_tcp=list(outcome.final_tcp_pose), stopped=outcome.stopped, stop_reason=outcome.stop_reason,
                   success=outcome.success, success_source=outcome.success_source, steps=outcome.n_actions,
                   duration=outcome.duration, final_joints=list(outcome.final_joint_positions), extra=outcome.extra,
                   **kw)

    @property
    def outcome(self) -> ExecutionOutcome:
        """How the run ended, as the Execution score reads it (needs ``final_tcp``)."""
        return ExecutionOutcome(final_tcp_pose=tuple(self.final_tcp or ()), success=bool(self.success),
                                stopped=self.stopped, stop_reason=self.stop_reason, n_actions=self.steps or 0,
                                duration=self.duration or 0.0, final_joint_positions=tuple(self.final_joints or ()),
                                extra=self.extra, success_source=self.success_source or "sim")

    def without_images(self) -> EpisodeRecord:
        """This record without its in-memory images (what a worker sends back)."""
        return replace(self, first_observation=None, first_clean_images={})

    def to_dict(self) -> dict[str, Any]:
        """The fields in :data:`ALWAYS_WRITTEN`, then the other written fields that are set."""
        out = {k: getattr(self, k) for k in ALWAYS_WRITTEN}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name not in ALWAYS_WRITTEN and f.name not in IN_MEMORY and v not in (None, "", {}):
                out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeRecord:
        known = {f.name for f in fields(cls)} - set(IN_MEMORY)
        return cls(**{k: v for k, v in d.items() if k in known})
