"""Execution score: success 100, failure 100 - distance (cm) (floored at 0 with floor=True), safety stop 0; records
keep raw poses."""
from __future__ import annotations

import math

import numpy as np
import pytest

from embeval.errors import InvalidInputError
from embeval.scoring.execution import (
    ExecutionOutcome,
    ExecutionRecord,
    execution_score,
    mean_score,
    tcp_distance_cm,
)


def outcome(xyz, success=False, stopped=False, reason=""):
    return ExecutionOutcome(final_tcp_pose=(*xyz, math.pi, 0.0, 0.0), success=success, stopped=stopped, stop_reason=reason)


REF = outcome((0.50, 0.10, 0.20), success=True)


def test_success_scores_100_even_far_away():
    rec = execution_score(REF, outcome((0.30, -0.2, 0.4), success=True))
    assert rec.score == 100.0 and rec.reason == "success"
    assert rec.distance_cm == pytest.approx(100 * np.linalg.norm([0.2, 0.3, -0.2]))


def test_failure_is_100_minus_distance_in_cm():
    rec = execution_score(REF, outcome((0.53, 0.14, 0.20)))  # 3-4-5 triangle: 5 cm
    assert rec.reason == "failure"
    assert rec.distance_cm == pytest.approx(5.0)
    assert rec.score == pytest.approx(95.0)


def test_failure_floored_at_zero():
    """The paper's 100 - d is not floored (the default: -30 here); floor=True keeps 0."""
    rec = execution_score(REF, outcome((0.50, 0.10, 1.50)), floor=True)  # 130 cm away
    assert rec.score == 0.0 and rec.reason == "failure" and rec.distance_cm == pytest.approx(130.0)
    assert execution_score(REF, outcome((0.50, 0.10, 1.50))).score == pytest.approx(-30.0)


def test_estop_scores_zero_and_keeps_reason_even_when_task_succeeded():
    dis = outcome((0.50, 0.10, 0.20), success=True, stopped=True, reason="contact: wrist_3_link with table")
    rec = execution_score(REF, dis)
    assert rec.score == 0.0 and rec.reason == "estop"
    assert rec.detail == "contact: wrist_3_link with table"
    assert rec.distance_cm == 0.0


def test_distance_ignores_rotation_and_matches_numpy():
    a = ExecutionOutcome((0.1, 0.2, 0.3, 0.0, 0.0, 0.0), False, False)
    b = ExecutionOutcome((0.4, -0.2, 0.0, 1.0, 2.0, 0.5), False, False)
    assert tcp_distance_cm(a.final_tcp_pose, b.final_tcp_pose) == pytest.approx(100 * math.dist((0.1, 0.2, 0.3), (0.4, -0.2, 0.0)))


def test_record_round_trip_and_mean():
    rec = execution_score(REF, outcome((0.52, 0.10, 0.20)))
    again = ExecutionRecord.from_dict(rec.to_dict())
    assert again == rec
    assert again.reference.final_tcp_pose == REF.final_tcp_pose  # raw poses kept
    assert mean_score([rec, execution_score(REF, outcome((0, 0, 0), stopped=True))]) == pytest.approx((98.0 + 0.0) / 2)
    assert math.isnan(mean_score([]))


def test_invalid_pose_rejected():
    with pytest.raises(InvalidInputError):
        ExecutionOutcome((0.1, 0.2, float("nan"), 0, 0, 0), False, False)
    with pytest.raises(InvalidInputError):
        ExecutionOutcome((0.1, 0.2), False, False)


def test_action_sequence_normalisation():
    from embeval.action import Action
    from embeval.sim.execute import _seq

    a = Action.hold()
    assert len(_seq(a)) == 1 and len(_seq([a] * 7)) == 7  # seven Actions are a sequence, not one action
    assert len(_seq([0.0] * 7)) == 1 and len(_seq(np.zeros(7))) == 1
    assert len(_seq(np.zeros((3, 7)))) == 3 and len(_seq([[0] * 7] * 2)) == 2


def test_score_from_raw_poses_for_real_arm_episodes():
    from embeval.scoring.execution import execution_score_from_poses

    ref = [0.5, 0.1, 0.2, np.pi, 0, 0]
    rec = execution_score_from_poses(ref, [0.5, 0.13, 0.24, np.pi, 0, 0])  # success unknown: by distance
    assert rec.reason == "failure" and rec.score == pytest.approx(95.0)
    assert execution_score_from_poses(ref, [0, 0, 0, 0, 0, 0], success=True).score == 100.0
    rec = execution_score_from_poses(ref, ref, stopped=True, stop_reason="protective stop")
    assert rec.score == 0.0 and rec.detail == "protective stop"


def test_a_stopped_reference_run_is_noted_in_the_record():
    from embeval.scoring.execution import ExecutionOutcome, execution_score

    ref = ExecutionOutcome((0.5, 0.0, 0.2, np.pi, 0, 0), False, True, "workspace limit: TCP x=5.450 not in [0.100, 0.900]")
    dis = ExecutionOutcome((0.5, 0.03, 0.24, np.pi, 0, 0), False, False)
    rec = execution_score(ref, dis)
    assert rec.reason == "failure" and rec.score == pytest.approx(95.0)  # the paper's rule is unchanged
    assert rec.detail.startswith("reference run stopped (workspace limit")
    assert execution_score(dis, dis).detail == ""


def test_success_source_is_kept_and_none_never_awards_success():
    from embeval.scoring.execution import SUCCESS_SOURCES, execution_score_from_poses

    ref, dis = [0.5, 0, 0.1, 3.14, 0, 0], [0.53, 0.04, 0.1, 3.14, 0, 0]  # 5 cm apart
    rec = execution_score_from_poses(ref, dis, success=True, success_source="operator")
    assert (rec.score, rec.reason, rec.distorted.success_source) == (100.0, "success", "operator")
    rec = execution_score_from_poses(ref, dis, success=True, success_source="none")  # a flag nobody judged
    assert (rec.score, rec.reason) == (pytest.approx(95.0), "failure") and not rec.distorted.success
    rec = execution_score_from_poses(ref, dis, success=None)
    assert rec.distorted.success_source == "none" and rec.score == pytest.approx(95.0)
    rec = execution_score_from_poses(ref, dis, success=True, stopped=True, success_source="mirror")
    assert (rec.score, rec.reason) == (0.0, "estop")
    assert set(SUCCESS_SOURCES) == {"sim", "mirror", "sensor", "operator", "none"}
    with pytest.raises(InvalidInputError, match="unknown success source 'camera'"):
        execution_score_from_poses(ref, dis, success=True, success_source="camera")
