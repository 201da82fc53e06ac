"""The conductor's episode logic without rclpy: phases, transitions, the TCP cube estimate, verdict sources."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from embeval.act2answer.scene import EpisodeSpec
from embeval.control.conductor import (
    Conductor,
    ConductorConfig,
    CubeEstimate,
    a2a_success_source,
    cube_answer,
    public_fields,
    select_verdict,
)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class Done:
    """A finished service call answering ``message``."""

    def __init__(self, message=""):
        self.message = message

    def done(self):
        return True

    def result(self):
        return SimpleNamespace(message=self.message)


class IO:
    def __init__(self, settle_msg="", missing=()):
        self.events, self.instructions, self.logs, self.resets, self.settles = [], [], [], 0, 0
        self.settle_msg, self.missing = settle_msg, list(missing)

    def event(self, ev):
        self.events.append(ev)

    def instruction(self, text):
        self.instructions.append(text)

    def call_reset(self):
        self.resets += 1
        return Done()

    def call_settle(self):
        self.settles += 1
        return Done(self.settle_msg)

    def info(self, msg):
        self.logs.append(msg)

    def missing_nodes(self, now):
        return self.missing


def step(c: Conductor, clock: Clock, dt: float = 0.05, n: int = 1) -> None:
    for _ in range(n):
        clock.t += dt
        c.tick()


EPS = [{"item": "a", "instruction": "pick", "distortion": "none", "level": 0},
       {"item": "a", "instruction": "pick", "distortion": "gaussian_blur", "level": 3}]


def test_plain_episodes_walk_the_phases_and_end_after_the_step_budget():
    clock, io = Clock(), IO()
    c = Conductor(ConductorConfig(steps=2, settle=0.5, start_delay=1.0, subject="s"), [dict(e) for e in EPS], io, clock=clock)
    assert c.phase == "wait"
    step(c, clock, 0.5)
    assert c.phase == "wait"  # start delay 1 s not over
    step(c, clock, 0.6)
    assert c.phase == "resetting" and io.resets == 1 and c.index == 0
    step(c, clock)
    assert c.phase == "settling" and io.events[-1]["event"] == "episode_start" and io.events[-1]["subject"] == "s"
    c.on_action()  # not running yet: not counted
    step(c, clock, 0.6)
    assert c.phase == "running" and io.instructions == ["pick"] and c.actions == 0
    c.on_action()
    step(c, clock)
    assert c.phase == "running"
    c.on_action()
    step(c, clock)
    end = io.events[-1]
    assert c.phase == "ending" and end["event"] == "episode_end" and end["actions"] == 2 and end["timed_out"] is False
    assert "success" not in end  # a plain episode has no verdict
    step(c, clock, 0.25)
    assert c.index == 1 and c.phase == "resetting"
    step(c, clock)
    step(c, clock, 0.6)
    step(c, clock, 31.0)  # no actions: the timeout ends it
    assert io.events[-1]["event"] == "episode_end" and io.events[-1]["timed_out"] is True and io.events[-1]["level"] == 3
    step(c, clock, 0.25)
    assert c.phase == "done" and c.finished and io.events[-1] == {"event": "graph_done", "episodes": 2}
    n = len(io.events)
    step(c, clock, 1.0, 3)
    assert len(io.events) == n  # done stays done


def test_wait_for_nodes_holds_the_first_episode():
    clock, io = Clock(), IO(missing=["embeval_scorer"])
    c = Conductor(ConductorConfig(start_delay=0.0), [dict(EPS[0])], io, clock=clock)
    step(c, clock, 5.0, 3)
    assert c.phase == "wait"
    io.missing = []
    step(c, clock)
    assert c.phase == "resetting"


def test_operator_confirm_waits_for_the_go_and_the_operator_verdict():
    clock, io = Clock(), IO(settle_msg='{"detail": "mock cell cannot judge"}')
    c = Conductor(ConductorConfig(steps=1, settle=0.0, start_delay=0.0, confirm=True), [dict(EPS[0])], io, clock=clock)
    step(c, clock)
    assert c.phase == "operator" and io.resets == 0 and "set up the cell" in io.logs[-1]
    step(c, clock, 5.0)
    assert c.phase == "operator"
    assert c.on_next() == "next episode"
    step(c, clock)
    assert c.phase == "resetting"
    step(c, clock)
    step(c, clock)
    assert c.phase == "running"
    assert c.on_operator_verdict(True) == (False, "not waiting for a verdict (conductor is running)")
    c.on_action()
    step(c, clock)
    assert c.phase == "judging" and io.events[-1] == {"event": "episode_stop", "index": 0, "reason": "max_steps"}
    step(c, clock)
    assert c.phase == "verdict" and "did it succeed" in io.logs[-1]
    step(c, clock, 30.0)
    assert c.phase == "verdict"  # the early verdict (before the stop) does not count; waits for the operator
    ok, text = c.on_operator_verdict(False)
    assert ok and text == "recorded: failure (operator)"
    step(c, clock)
    end = io.events[-1]
    assert end["event"] == "episode_end" and end["success"] is False and end["success_source"] == "operator"
    assert end["success_detail"] == "/embeval/conductor/success"


def test_select_verdict_sources():
    arm = '{"success": true, "success_source": "mirror", "detail": "cube on plate"}'
    assert select_verdict("auto", False, arm, (False, 5.0), None, 1.0, 0.0, 10.0) == {
        "success": True, "success_source": "mirror", "success_detail": "cube on plate"}
    # sensor only: the arm's verdict is ignored, a fresh sensor verdict taken, a stale one waited on, then none
    assert select_verdict("sensor", False, arm, (False, 5.0), None, 1.0, 0.0, 10.0)["success_source"] == "sensor"
    assert select_verdict("sensor", False, arm, (False, 0.5), None, 1.0, 3.0, 10.0) is None
    assert select_verdict("sensor", False, arm, (False, 0.5), None, 1.0, 10.0, 10.0) == {
        "success": None, "success_source": "none", "success_detail": "cube on plate"}
    # auto without the arm's verdict: sensor first, then (confirm) the operator, else none at once
    assert select_verdict("auto", True, "", (True, 2.0), (False, 2.0), 1.0, 0.0, 10.0)["success_source"] == "sensor"
    assert select_verdict("auto", True, "", None, (False, 2.0), 1.0, 0.0, 10.0)["success"] is False
    assert select_verdict("auto", True, "not json", None, None, 1.0, 99.0, 10.0) is None
    assert select_verdict("auto", False, "", None, (True, 2.0), 1.0, 0.0, 10.0) == {
        "success": None, "success_source": "none", "success_detail": "success_from auto: no verdict"}
    assert select_verdict("none", False, arm, (True, 2.0), (True, 2.0), 1.0, 0.0, 10.0)["success_source"] == "none"
    assert select_verdict("arm", False, "", (True, 2.0), None, 1.0, 0.0, 10.0)["success_source"] == "none"


def test_a2a_success_source():
    assert [a2a_success_source(s, False) for s in ("sim", "tracker", "measured", "tcp")] == ["sim", "sensor", "operator", "none"]
    assert a2a_success_source("tcp", True) == "operator"
    assert a2a_success_source("sim", True) == "sim"


def test_tcp_cube_estimate_follows_the_grasp_and_ends_at_release():
    spec = EpisodeSpec(lift_m=0.02, cube_size=0.04)
    est = CubeEstimate(spec, None)
    assert est.source == "tcp" and est.z0 == pytest.approx(0.02)
    # (gripper, tcp): approach open, close at z 0.10, lift 3 cm, move, open at (0.55, -0.15)
    seq = [(1.0, [0.42, 0.0, 0.20]), (1.0, [0.42, 0.0, 0.10]), (0.0, [0.42, 0.0, 0.10]), (0.0, [0.42, 0.0, 0.115]),
           (0.0, [0.42, 0.0, 0.13]), (0.0, [0.55, -0.15, 0.13]), (1.0, [0.55, -0.15, 0.13])]
    heights, ends, prev = [], [], 1.0
    for g, tcp in seq:
        heights.append(est.height(g, prev, tcp, None))
        ends.append(est.rule.update(heights[-1], g))
        prev = g
    assert heights == pytest.approx([0.02, 0.02, 0.02, 0.035, 0.05, 0.05, 0.02])
    assert est.grasp_tcp_z == pytest.approx(0.10) and est.release_xy == [0.55, -0.15]
    assert ends == [False] * 6 + [True]  # released after the lift (>= 2 cm above the start)
    ans = cube_answer("", est, False, None, 0.0, 0.0, [0.6, 0.0, 0.2], spec.cube_xy)
    assert ans == {"cube_xyz": [0.55, -0.15, None], "cube_source": "tcp"}


def test_tcp_estimate_without_a_lift_does_not_end_and_a_pose_source_reads_the_cube():
    spec = EpisodeSpec(lift_m=0.02, start="table")  # the table start: the cube must be lifted first
    est = CubeEstimate(spec, None)
    prev = 1.0
    for g, tcp in [(0.0, [0.4, 0.0, 0.1]), (0.0, [0.4, 0.0, 0.11]), (1.0, [0.4, 0.0, 0.11])]:
        assert not est.update(g, prev, tcp, None)  # 1 cm: not lifted
        prev = g
    est = CubeEstimate(spec, [0.42, 0.0, 0.021])
    assert est.source == "pose" and est.z0 == pytest.approx(0.021)
    assert est.height(0.0, 1.0, [0, 0, 0.5], [0.42, 0.0, 0.05]) == pytest.approx(0.05)  # the pose, not the TCP
    assert est.height(0.0, 1.0, None, None) == pytest.approx(0.021)
    assert cube_answer('{"cube": [0.5, 0.1, 0.02]}', est, False, [0.4, 0, 0.02], 0, 0, None, spec.cube_xy)["cube_source"] == "sim"
    assert cube_answer("", est, False, [0.4, 0, 0.02], 0, 0, None, spec.cube_xy) == {"cube_xyz": [0.4, 0, 0.02],
                                                                                      "cube_source": "tracker"}
    tcp_est = CubeEstimate(spec, None)
    assert cube_answer("", tcp_est, True, [0.5, 0.1, 0.02], 5.0, 4.0, None, spec.cube_xy)["cube_source"] == "measured"
    assert cube_answer("", tcp_est, True, [0.5, 0.1, 0.02], 3.0, 4.0, None, spec.cube_xy) == {
        "cube_xyz": [0.42, 0.0, None], "cube_source": "tcp"}  # a pose from before the measuring phase: the default


def a2a_set(spec: EpisodeSpec):
    unit = SimpleNamespace(unit="q1@original", item="q1", layout="original", correct_side="right", category="colour",
                           scene=Path("/tmp/scene.json"), instruction="put the cube on the right card")
    return SimpleNamespace(spec=spec, unit=lambda name: unit, units={"q1@original": unit})


def test_act2answer_real_cell_episode_ends_on_release_and_the_operator_keeps_the_estimate():
    spec = EpisodeSpec(max_steps=10)
    clock, io = Clock(), IO()
    eps = [{"item": "q1@original", "instruction": "put the cube on the right card", "distortion": "none", "level": 0}]
    c = Conductor(ConductorConfig(settle=0.0, start_delay=0.0, confirm=True), eps, io, a2a_set(spec), clock=clock)
    assert c.steps == 10
    step(c, clock)
    c.on_next()
    step(c, clock, n=3)
    assert c.phase == "running" and io.events[0]["act2answer"]["correct_side"] == "right"
    assert io.events[0]["seed"] == io.events[0]["act2answer"]["seed"]
    for g, tcp in [(1.0, [0.42, 0.0, 0.1]), (0.0, [0.42, 0.0, 0.1]), (0.0, [0.55, -0.15, 0.14]), (1.0, [0.55, -0.15, 0.14])]:
        c.on_tcp(tcp)
        c.on_action()
        c.on_gripper(g)
    assert c.end_reason == "released"
    step(c, clock)
    assert io.events[-1] == {"event": "episode_stop", "index": 0, "reason": "released"} and c.phase == "answering"
    step(c, clock)
    assert c.phase == "measure" and "accept the tcp estimate [0.55, -0.15]" in io.logs[-1]
    assert c.on_next() == "estimate kept"
    step(c, clock)
    end = io.events[-1]
    assert end["event"] == "episode_end" and end["timed_out"] is False
    assert end["act2answer"]["cube_xyz"] == [0.55, -0.15, None] and end["act2answer"]["success_source"] == "operator"
    assert end["act2answer"]["end_reason"] == "released" and end["act2answer"]["steps"] == 4
    # the intent metrics: one update per executed step, each with the TCP after it (the one before the next action)
    intent = end["act2answer"]["intent"]
    assert intent["tcp_first_enter_target_t"] == 2 and intent["tcp_first_enter_wrong_t"] is None
    assert intent["tcp_dwell_target_steps"] == 3 and intent["tcp_first_choice_correct"] is True
    assert intent["released"] is True and intent["release_near_target"] is True
    assert intent["tcp_min_dist_target_xy"] == 0.0 and intent["tcp_dwell_target_3s"] is False  # 3 steps < 3 s at 10 Hz
    from embeval.act2answer.protocol import IntentTracker, intent_from_dict

    assert set(intent) == IntentTracker.KEYS and intent_from_dict(intent) == intent  # what the scorer keeps
    hostile = {**intent, "tcp_min_dist_target_xy": float("nan"), "tcp_progress_frac": "x" * 10**6, "extra": [1] * 10**5}
    kept = intent_from_dict(hostile)
    assert set(kept) == IntentTracker.KEYS - {"tcp_min_dist_target_xy", "tcp_progress_frac"}
    assert intent_from_dict(["not", "a", "dict"]) == {}


def test_act2answer_protective_stop_takes_the_arms_reason():
    spec = EpisodeSpec(max_steps=10)
    clock, io = Clock(), IO(settle_msg='{"cube": [0.5, 0.1, 0.02]}')
    eps = [{"item": "q1@original", "instruction": "x", "distortion": "none", "level": 0}]
    c = Conductor(ConductorConfig(settle=0.0, start_delay=0.0), eps, io, a2a_set(spec), clock=clock)
    step(c, clock, n=3)
    c.on_cube([0.42, 0.0, 0.02])
    assert c.phase == "running"
    c.on_safety_mode(3)
    c.on_arm_error("joint 2 limit")
    c.on_arm_error("refused: stopped")  # later refusals do not replace the first cause
    step(c, clock, n=2)
    a = io.events[-1]["act2answer"]
    assert a["stopped"] is True and a["end_reason"] == "joint 2 limit" and a["cube_source"] == "sim" and a["success_source"] == "sim"


def test_public_fields_drop_the_execution_scene():
    ep = {"item": "sim0", "execution": {"image": 0, "scene": {"big": 1}, "task": {"t": 1}, "settle_s": 0.3}}
    assert public_fields(ep) == {"item": "sim0", "execution": {"image": 0, "task": {"t": 1}}}


def test_topic_names_quoted_by_the_core_are_the_graphs():
    topics = pytest.importorskip("embeval_ros.topics")
    from embeval.control import conductor as core

    assert (core.EXECUTION_SUCCESS_TOPIC, core.CONDUCTOR_SUCCESS_SERVICE, core.CONDUCTOR_NEXT_SERVICE, core.CUBE_POSE_TOPIC) == (
        topics.EXECUTION_SUCCESS, topics.CONDUCTOR_SUCCESS, topics.CONDUCTOR_NEXT, topics.CUBE_POSE)
