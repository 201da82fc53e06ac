"""The scorer files an episode with exactly the actions the conductor counted, whatever order the action and
event topics deliver in: the last counted action may reach the scorer after ``episode_stop`` or even after
``episode_end`` (separate topics have no common order)."""
from __future__ import annotations

import json

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")

pytestmark = pytest.mark.ros


class _Scorer:
    """A ScorerNode in its own context, fed by hand; its published records are captured instead of sent."""

    def __init__(self):
        from embeval_ros.scorer_node import ScorerNode
        from rclpy.context import Context

        self.ctx = Context()
        rclpy.init(context=self.ctx)
        self.node = ScorerNode(context=self.ctx)
        self.out: list[dict] = []
        self.node.pub.publish = lambda m: self.out.append(json.loads(m.data))

    def event(self, **ev) -> None:
        from std_msgs.msg import String

        self.node._on_event(String(data=json.dumps(ev)))

    def action(self, k: int) -> None:
        from embeval_ros.conversions import action_to_msg

        self.node._on_action(action_to_msg(np.full(7, k / 100.0), k * 1_000_000))

    def actions_of(self, rec: dict) -> list[float]:
        return [round(a[0] * 100) for a in rec["raw"]["distorted"]["actions"]]

    def close(self) -> None:
        self.node.destroy_node()
        rclpy.shutdown(context=self.ctx)


@pytest.fixture
def scorer():
    s = _Scorer()
    yield s
    s.close()


def test_the_last_counted_action_after_episode_end_is_the_episodes(scorer):
    scorer.event(event="episode_start", item="pick", distortion="none")
    scorer.action(1), scorer.action(2)
    scorer.event(event="episode_stop", reason="max_steps")
    scorer.event(event="episode_end", actions=3)
    assert scorer.out == []  # waits for the third action
    scorer.action(3)
    assert [scorer.actions_of(r) for r in scorer.out] == [[1, 2, 3]]


def test_actions_after_the_conductors_count_are_not_the_episodes(scorer):
    scorer.event(event="episode_start", item="pick", distortion="none")
    for k in (1, 2, 3, 4):  # the policy's fourth action crossed the conductor's stop
        scorer.action(k)
    scorer.event(event="episode_stop", reason="max_steps")
    scorer.action(5)
    scorer.event(event="episode_end", actions=3)
    assert [scorer.actions_of(r) for r in scorer.out] == [[1, 2, 3]]


def test_a_counted_action_that_never_arrives_files_the_episode_after_the_grace(scorer, monkeypatch):
    import embeval_ros.scorer_node as sn

    monkeypatch.setattr(sn, "ACTION_GRACE_S", 0.0)
    scorer.event(event="episode_start", item="pick", distortion="none")
    scorer.action(1), scorer.action(2)
    scorer.event(event="episode_end", actions=3)
    assert scorer.out == []
    scorer.node._flush_late()
    assert [scorer.actions_of(r) for r in scorer.out] == [[1, 2]]
    # and a new episode files a waiting one at once, without taking the new episode's actions
    scorer.event(event="episode_start", item="push", distortion="none")
    scorer.action(7)
    scorer.event(event="episode_end", actions=5)
    scorer.event(event="episode_start", item="place", distortion="none")
    scorer.action(8)
    scorer.event(event="episode_end", actions=1)
    assert [(r["item"], scorer.actions_of(r)) for r in scorer.out[1:]] == [("push", [7]), ("place", [8])]


def test_without_a_count_the_episode_ends_at_episode_stop(scorer):
    scorer.event(event="episode_start", item="pick", distortion="none")
    scorer.action(1), scorer.action(2)
    scorer.event(event="episode_stop", reason="max_steps")
    scorer.action(3)
    scorer.event(event="episode_end")  # a hand-written conductor: no "actions"
    assert [scorer.actions_of(r) for r in scorer.out] == [[1, 2]]
