"""EpisodeRecord, the one episode record: what it writes, the Execution outcome it carries, and that every runner's
record is one (the sim rollout, the ROS scorer's book, the embedded evaluation, Act2Answer)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from embeval.scoring.execution import ExecutionOutcome
from embeval.scoring.record import ALWAYS_WRITTEN, EpisodeRecord


def test_a_record_writes_its_fields_in_order_and_the_optional_ones_only_when_known():
    r = EpisodeRecord(item="Pick", seed=3, actions=[[0.0] * 7])
    assert list(r.to_dict()) == list(ALWAYS_WRITTEN)
    assert r.to_dict()["success"] is None and r.to_dict()["final_tcp"] is None
    r.steps, r.end_reason, r.extra = 12, "max_steps", {"control_steps": 60}
    d = r.to_dict()
    assert list(d) == [*ALWAYS_WRITTEN, "steps", "end_reason", "extra"]
    assert EpisodeRecord.from_dict(json.loads(json.dumps(d))) == r


def test_the_execution_outcome_survives_the_record_unchanged():
    end = ExecutionOutcome(final_tcp_pose=(0.5, 0.1, 0.2, np.pi, 0.0, 0.0), success=False, stopped=True,
                           stop_reason="workspace limit: x", n_actions=7, duration=1.25,
                           final_joint_positions=(0.1, -1.2, 1.0, 0.0, 1.5, 0.0), extra={"cube": [0.1, 0.2]},
                           success_source="mirror")
    r = EpisodeRecord.from_outcome(end, item="Pick", seed=1)
    assert r.outcome == end and r.outcome.to_dict() == end.to_dict()
    assert (r.final_tcp, r.stopped, r.steps, r.success_source) == (list(end.final_tcp_pose), True, 7, "mirror")


def test_images_stay_in_memory():
    from embeval.action import Action

    r = EpisodeRecord(item="x", first_observation=object(), first_clean_images={"cam": np.zeros((2, 2, 3))},
                      first_action=Action.hold())
    light = r.without_images()
    assert light.first_observation is None and light.first_clean_images == {} and light.first_action is r.first_action
    assert "first_observation" not in r.to_dict() and "first_action" not in r.to_dict()


def test_every_runner_makes_episode_records():
    """The pybullet rollout's record, the embedded evaluation's episodes and Act2Answer's records are EpisodeRecords;
    the sim record's outcome is the env's own."""
    from embeval.act2answer.episode import Act2AnswerRecord
    from embeval.sim.backends import SimSpec, make_episode_env, run_episode
    from embeval.subjects.embedded.evaluate import evaluate_policy

    assert issubclass(Act2AnswerRecord, EpisodeRecord)
    env = make_episode_env(SimSpec(backend="pybullet", env="Pick", width=32, height=32))
    try:
        rec = run_episode(env, _Hold(), seed=0, distortion=("gaussian_blur", 2, 0), keep_actions=True)
    finally:
        env.close()
    assert isinstance(rec, EpisodeRecord) and (rec.distortion, rec.level, rec.seed) == ("gaussian_blur", 2, 0)
    assert rec.steps == len(rec.actions) > 0 and rec.first_action is not None and rec.first_observation is not None
    assert len(rec.final_tcp) == 6 and rec.success is False and rec.success_source == "sim"
    rep = evaluate_policy(_Hold(), episodes=2, seed=0)
    assert all(isinstance(e, EpisodeRecord) for e in rep.episodes)
    rows = rep.to_dict()["per_episode"]
    assert [(r["verb"], r["success"]) for r in rows] == [("Pick", False), ("Place", False)]
    assert list(rows[0]) == ["verb", "scene_seed", "success", "steps", "reason"] and rows[0]["steps"] > 0


class _Hold:
    id = "hold"

    def reset(self, instruction):
        pass

    def act(self, obs):
        from embeval.action import Action

        return Action.hold()


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
