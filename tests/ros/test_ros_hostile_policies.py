"""Hostile policies through the ROS graph against ``embeval ur-emulator``: the arm node (config/embeval_ur5.yaml's
``embeval_arm``, backend ur_rtde) receives what a broken or adversarial policy node publishes on /embeval/action:
NaN, a fast oscillation, a slow creep out of the workspace in steps each under the step limit, a policy that hangs
mid-episode and then answers late, and the RTDE link dropped mid-move. Each ends in a protective stop (or, for the
oscillation, bounded motion) with a one-line reason; the TCP never leaves the workspace box; the counts of what
was already executed are kept."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed: run scripts/install.sh")
pytest.importorskip("rtde_control", reason="the ur_rtde client is missing: run scripts/install.sh")

from conftest import start_ur_emulator

ROOT = Path(__file__).resolve().parents[2]


def _params(ip: str) -> dict:
    from embeval_ros.graph import load_params

    arm = {**load_params(ROOT / "config" / "embeval_ur5.yaml")["embeval_arm"], "robot_ip": ip, "home_on_reset": False,
           "tcp_speed": 0.1}  # the yaml's max_tcp_speed: shorter steps, same limits
    return {"embeval_arm": arm}


class _Policy:
    """A test node standing in for the policy node: publishes actions stamped like the policy node stamps them."""

    def __init__(self, g):
        import rclpy
        from embeval_ros.runtime import qos_reliable
        from sensor_msgs.msg import JointState

        from embeval_ros import topics as T

        self.g, self.arm = g, g.nodes["embeval_arm"]
        self.node = rclpy.create_node("hostile_policy", context=g.context)
        self.pub = self.node.create_publisher(JointState, T.ACTION, qos_reliable())
        g.wait_for(lambda g: self.pub.get_subscription_count() > 0, 10, "the arm node to subscribe to the action topic")

    def send(self, vector, age_s: float = 0.0, timeout: float = 10.0):
        """Publish one action and wait for the arm node to execute or refuse it."""
        from embeval_ros.conversions import action_to_msg

        n = self.arm.executed + self.arm.refused
        self.pub.publish(action_to_msg(list(vector), time.time_ns() - int(age_s * 1e9)))
        self.g.wait_for(lambda g: self.arm.executed + self.arm.refused > n, timeout, "the arm node to handle the action")

    def close(self):
        self.node.destroy_node()


def _inside(p, arm) -> bool:
    lim = arm.commander.limits
    return bool(np.all(p[:3] >= np.array(lim.workspace_lower) - 1e-4) and np.all(p[:3] <= np.array(lim.workspace_upper) + 1e-4))


@pytest.fixture(scope="module")
def emu():
    target = start_ur_emulator()
    yield target
    target.process.close()


@pytest.fixture
def graph(emu):
    from embeval_ros.graph import Graph

    with Graph(_params(emu.ip)) as g:
        g.nodes["embeval_arm"].backend.reset_safety()
        p = _Policy(g)
        try:
            yield g, p
        finally:
            p.close()
            g.nodes["embeval_arm"].backend.reset_safety()  # unlocked for the next test's arm node (it refuses a stopped controller)


def test_nan_action_is_a_protective_stop_without_motion(graph):
    _, pol = graph
    arm = pol.arm
    pol.send([0.01, 0, 0, 0, 0, 0, 1])
    p0 = arm.backend.state().tcp_pose
    pol.send([np.nan, 0, 0, 0, 0, 0, 1])
    assert arm.executed == 1 and arm.refused == 1  # the executed step is still counted
    reason = arm.commander.stop_reason
    assert "invalid action" in reason and "\n" not in reason, reason
    assert arm.backend.ur_safety_mode() == 3  # the controller's protective stop
    np.testing.assert_allclose(arm.backend.state().tcp_pose[:3], p0[:3], atol=1e-3)
    pol.send([0.01, 0, 0, 0, 0, 0, 1])  # latched: a harmless step afterwards is refused until reset
    assert arm.executed == 1 and arm.refused == 2


def test_slow_creep_out_of_the_workspace_stops_at_the_box_edge(graph):
    """Steps of 1.9 cm (under the 2 cm step limit) towards +x: the step whose target leaves the box is refused."""
    _, pol = graph
    arm = pol.arm
    upper_x = arm.commander.limits.workspace_upper[0]
    x0 = arm.backend.state().tcp_pose[0]
    n = int(np.ceil((upper_x - x0) / 0.019)) + 2
    assert n < 40, f"the emulator's TCP starts {upper_x - x0:.3f} m from the box edge"
    for _ in range(n):
        pol.send([0.019, 0, 0, 0, 0, 0, 1])
        assert _inside(arm.backend.state().tcp_pose, arm)
        if arm.refused:
            break
    assert arm.refused == 1 and arm.executed >= 1
    reason = arm.commander.stop_reason
    assert "workspace" in reason and "\n" not in reason, reason
    assert arm.backend.ur_safety_mode() == 3
    p = arm.backend.state().tcp_pose
    assert upper_x - 0.019 - 1e-3 <= p[0] <= upper_x + 1e-4  # it stopped at the last step inside the box


def test_oscillating_policy_stays_within_the_step_and_speed_limits(graph):
    """A policy reversing direction every step (+-1.9 cm at the arm's 5 Hz control rate) is allowed: each step is a
    bounded move at tcp_speed, so the TCP stays within one step of where it began and nothing is refused."""
    _, pol = graph
    arm = pol.arm
    p0 = arm.backend.state().tcp_pose
    seen = []
    for i in range(6):
        pol.send([-0.019 if i % 2 == 0 else 0.019, 0, 0, 0, 0, 0, 1])  # inwards first (the creep left it at the edge)
        seen.append(arm.backend.state().tcp_pose[:3])
    assert arm.refused == 0 and arm.executed == 6
    assert max(np.linalg.norm(s - p0[:3]) for s in seen) <= 0.019 + 1e-3
    np.testing.assert_allclose(seen[-1], p0[:3], atol=1e-3)


def test_policy_that_hangs_mid_episode_then_answers_late_is_refused_as_stale(graph):
    """The policy server stalls for 2 s while the arm idles; the action it then returns belongs to an image 2 s old
    (its stamp): the arm node refuses it with a protective stop instead of acting on a stale view."""
    _, pol = graph
    arm = pol.arm
    pol.send([-0.01, 0, 0, 0, 0, 0, 1])
    p1 = arm.backend.state().tcp_pose
    time.sleep(1.0)  # the hang: nothing is published; the arm holds where it is (the backend keeps the link alive)
    np.testing.assert_allclose(arm.backend.state().tcp_pose[:3], p1[:3], atol=1e-4)
    assert not arm.backend.state().safety.stopped
    pol.send([-0.01, 0, 0, 0, 0, 0, 1], age_s=2.0)
    assert arm.executed == 1 and arm.refused == 1
    assert "stale command" in arm.commander.stop_reason and arm.backend.ur_safety_mode() == 3
    np.testing.assert_allclose(arm.backend.state().tcp_pose[:3], p1[:3], atol=1e-3)


def test_rtde_link_dropped_mid_move_latches_a_stop_and_the_node_keeps_running():
    """The controller vanishes while the arm node executes a step: that step ends with a latched stop naming the lost
    connection, later actions are refused (not crashed on), and the counts of earlier steps are kept."""
    from embeval_ros.graph import Graph

    e = start_ur_emulator()
    try:
        params = _params(e.ip)
        params["embeval_arm"].update(tcp_speed=0.01, max_tcp_speed=0.01)  # a 2 cm step lasts 2 s: time to cut it
        with Graph(params) as g:
            pol = _Policy(g)
            arm = pol.arm
            try:
                pol.send([0.005, 0, 0, 0, 0, 0, 1])
                assert arm.executed == 1
                p1 = arm.backend.state().tcp_pose
                threading.Timer(0.5, e.process.proc.kill).start()
                t = time.monotonic()
                pol.send([0.019, 0, 0, 0, 0, 0, 1], timeout=15.0)
                assert time.monotonic() - t < 0.5 + arm.backend.link_timeout_s + 2.0
                assert arm.executed == 1 and arm.refused == 1
                reason = arm.commander.stop_reason
                assert "lost the connection" in reason and "\n" not in reason, reason
                assert _inside(arm.commander.last_state.tcp_pose, arm)
                assert arm.commander.last_state.tcp_pose[0] < p1[0] + 0.019 + 1e-4
                pol.send([0.005, 0, 0, 0, 0, 0, 1])  # the node still runs and refuses
                assert arm.executed == 1 and arm.refused == 2
            finally:
                pol.close()
    finally:
        e.process.close()
