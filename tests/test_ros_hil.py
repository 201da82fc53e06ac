"""Hardware-in-the-loop tier. ``pytest -m hil`` runs against a real UR5 (UR_ROBOT_IP) and a RealSense;
skipped without them. The mock-hardware tier (same graph, config/embeval_hil.yaml, mock arm and synthetic
camera) always runs."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mock_hardware_tier_runs_the_hil_graph(tmp_path):
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed: run scripts/install.sh")
    from embeval_ros.graph import Graph, load_params

    params = load_params(ROOT / "config" / "embeval_hil.yaml")
    params["embeval_recorder"]["bag_dir"] = str(tmp_path / "bag")
    params["embeval_camera"].update(width=64, height=48)
    params["embeval_conductor"]["steps_per_episode"] = 2
    with Graph(params) as g:
        g.spin(60, until=lambda g: g.nodes["embeval_conductor"].finished)
        assert g.nodes["embeval_conductor"].finished
        arm = g.nodes["embeval_arm"]
        assert arm.executed >= 4 and arm.refused == 0
        assert arm.backend.name == "mock"
        # every executed step stayed within the HIL limits (0.01 m policy clip, 0.05 m/s speed)
        moves = [e for e in arm.backend.log if e[0] == "move_tcp"]
        assert moves and all(speed <= 0.05 + 1e-12 for _, (_, speed) in moves)
        records = g.nodes["embeval_scorer"].book.records
        assert [r["distortion"] for r in records] == ["none", "motion_blur"]


def test_dry_run_default_and_stale_command_stop_as_nodes(tmp_path):
    """Policy node in its default dry run commands nothing; an old command makes the arm node stop."""
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed: run scripts/install.sh")
    import time

    from embeval_ros.conversions import action_to_msg
    from embeval_ros.graph import Graph, load_params
    from embeval_ros.runtime import qos_reliable

    from embeval_ros import topics as T

    params = load_params({
        "embeval_camera": {"ros__parameters": {"source": "synthetic", "width": 64, "height": 48, "rate_hz": 20.0}},
        "embeval_distortion": {"ros__parameters": {"distortion": "none"}},
        "embeval_policy": {"ros__parameters": {"subject": "image_stats", "rate_hz": 10.0}},  # dry_run left at default
        "embeval_arm": {"ros__parameters": {"backend": "mock", "max_command_age_s": 0.5}},
        "embeval_conductor": {"ros__parameters": {"items": ["x"], "instructions": ["push"], "distortions": ["none"],
                                                  "levels": [0], "steps_per_episode": 3, "start_delay_s": 0.5}},
    })
    with Graph(params) as g:
        g.spin(30, until=lambda g: g.nodes["embeval_conductor"].finished)
        arm, policy = g.nodes["embeval_arm"], g.nodes["embeval_policy"]
        assert policy.config.dry_run and policy.log.published >= 3
        assert arm.log.received == 0 and arm.backend.log[:1] == [("reset_safety", ())]
        import rclpy

        helper = rclpy.create_node("embeval_test_cmd", context=g.context)
        pub = helper.create_publisher(__import__("sensor_msgs.msg", fromlist=["JointState"]).JointState, T.ACTION, qos_reliable())
        deadline = time.monotonic() + 10
        while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        pub.publish(action_to_msg([0.01, 0, 0, 0, 0, 0, 1], time.time_ns() - 2_000_000_000))  # 2 s old
        g.spin(5, until=lambda g: arm.log.received >= 1)
        time.sleep(0.2)
        assert arm.refused == 1 and "stale command" in arm.commander.stop_reason
        assert arm.backend.state().safety.stopped
        helper.destroy_node()


needs_robot = pytest.mark.skipif(not os.environ.get("UR_ROBOT_IP"), reason="set UR_ROBOT_IP to test a real UR5")


@pytest.mark.hil
@needs_robot
def test_real_ur5_state_and_refusal():
    """Connect, read a sane state, and check that an out-of-box target is refused before it is sent."""
    from embeval.robot.safety import SafetyLimits
    from embeval.robot.ur_rtde_backend import URRtdeArm

    arm = URRtdeArm(os.environ["UR_ROBOT_IP"], SafetyLimits(max_tcp_speed=0.05))
    try:
        s = arm.state()
        assert s.joint_positions.shape == (6,) and np.all(np.isfinite(s.tcp_pose))
        assert arm.ur_safety_mode() in (1, 2), "put the robot in NORMAL safety mode before the HIL tests"
        far = s.tcp_pose.copy()
        far[0] += 5.0
        assert arm.move_tcp(far).safety.stopped  # refused, protective stop triggered, no motion
        np.testing.assert_allclose(arm.state().tcp_pose[:3], s.tcp_pose[:3], atol=1e-3)
        arm.reset_safety()
    finally:
        arm.close()


@pytest.mark.hil
def test_realsense_frame():
    from embeval.camera.realsense import RealSenseSource, realsense_devices

    if not realsense_devices():
        pytest.skip("no RealSense connected (or pyrealsense2 missing)")
    src = RealSenseSource(640, 480, 30)
    try:
        f = src.read()
        assert f.image.shape == (480, 640, 3) and f.image.dtype == np.uint8 and f.intrinsics.fx > 0
    finally:
        src.close()
