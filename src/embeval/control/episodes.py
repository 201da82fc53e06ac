"""Episode bookkeeping for the ROS graph's scorer: pair each distorted episode with its reference run.

An episode (:class:`embeval.scoring.record.EpisodeRecord`) is one instruction executed on one (possibly distorted) image stream. The reference
episode of an item has ``distortion == "none"``. When both exist, the Decision score compares the
first actions (:func:`embeval.scoring.decision.decision_parts`) and the Execution score compares
the final TCP positions with :func:`embeval.scoring.execution.execution_score_from_poses`
(``100 - distance_cm``, not floored, as in the paper; 100 when ``success`` is known and True; 0 after a
protective/emergency stop), docs/scoring.md, Execution score. ``success_source`` says where the success flag came
from (:data:`embeval.scoring.execution.SUCCESS_SOURCES`: sim, mirror, sensor, operator; none when unknown).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from embeval.scoring.execution import (
    ESTOP_SCORE,
    ExecutionRecord,
    execution_score_from_poses,
)
from embeval.scoring.record import EpisodeRecord


def execution_record(reference: EpisodeRecord, distorted: EpisodeRecord) -> ExecutionRecord | None:
    """The Execution score record of ``distorted`` against ``reference`` (:mod:`embeval.scoring.execution`);
    None when either episode has no final TCP pose (the arm's pose never arrived)."""
    if reference.final_tcp is None or distorted.final_tcp is None:
        return None
    return execution_score_from_poses(reference.final_tcp, distorted.final_tcp, stopped=distorted.stopped,
                                      success=distorted.success, stop_reason=distorted.stop_reason,
                                      reference_success=reference.success, success_source=distorted.success_source,
                                      reference_success_source=reference.success_source)


def score_pair(reference: EpisodeRecord, distorted: EpisodeRecord) -> dict[str, Any]:
    """The Decision (first action) and Execution scores of ``distorted`` against ``reference``.

    Decision here is the per-pair form (episodes are scored as they finish, with no corpus yet); the
    paper's corpus normalisation is :func:`embeval.scoring.decision.decision_corpus` over the recorded
    first actions of all episodes."""
    from embeval.scoring.decision import DecisionConfig, decision_corpus

    rec = execution_record(reference, distorted)
    if rec is not None:
        out: dict[str, Any] = {"execution": rec.score, "execution_reason": rec.reason, "execution_distance_cm": rec.distance_cm}
        out.update(execution_success=rec.distorted.success, execution_success_source=rec.distorted.success_source)
    else:  # no final pose: a stop still scores 0, anything else is unknown
        out = {"execution": ESTOP_SCORE if distorted.stopped else float("nan"),
               "execution_reason": "estop" if distorted.stopped else "no final TCP pose", "execution_distance_cm": float("nan")}
    if reference.actions and distorted.actions:
        pair = (np.asarray(reference.actions[0]), np.asarray(distorted.actions[0]))
        out.update(decision_corpus([pair], DecisionConfig(normalisation="per_pair"))[0].outputs())
    else:
        out["decision"] = float("nan")
    return out


class EpisodeBook:
    """Collect episodes; score each non-reference episode as soon as its reference exists."""

    def __init__(self):
        self.references: dict[str, EpisodeRecord] = {}
        self.pending: dict[str, list[EpisodeRecord]] = {}
        self.records: list[dict[str, Any]] = []

    def finish(self, ep: EpisodeRecord) -> list[dict[str, Any]]:
        """File a finished episode; return the score records it completes (maybe several)."""
        new: list[dict[str, Any]] = []
        if ep.distortion in ("", "none"):
            self.references[ep.item] = ep
            for d in self.pending.pop(ep.item, []):
                new.append(self._record(ep, d))
            new.append(self._record(ep, ep))  # the reference against itself (sanity row: execution 100)
        elif ep.item in self.references:
            new.append(self._record(self.references[ep.item], ep))
        else:
            self.pending.setdefault(ep.item, []).append(ep)
        self.records += new
        return new

    @staticmethod
    def _record(ref: EpisodeRecord, ep: EpisodeRecord) -> dict[str, Any]:
        return {"item": ep.item, "subject": ep.subject, "distortion": ep.distortion or "none", "level": ep.level,
                "seed": ep.seed, "scores": score_pair(ref, ep),
                "raw": {"reference": ref.to_dict(), "distorted": ep.to_dict()}}
