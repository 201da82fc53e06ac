"""Hardware-in-the-loop tier. ``pytest -m hil`` runs against the real UR5 at ``UR_ROBOT_IP`` when it is set,
else against the UR controller emulator (``embeval ur-emulator``) on loopback through the same unmodified
ur_rtde client (fixture ``ur_robot``, tests/conftest.py): the ur_rtde backend, the arm node with
config/embeval_ur5.yaml through the graph runner, the stale-command watchdog, protective stop and recovery.
On the real robot nothing is driven into anything and the graph stays in dry run; the emulator also takes
live commands and a move into the table. The RealSense test reads a software-device recording without a camera. The
mock-hardware tier (same graph, config/embeval_hil.yaml, mock arm and synthetic camera) also runs."""
from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


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
        g.wait_for(lambda g: arm.refused == 1 and arm.backend.state().safety.stopped, 5,
                   "the arm node to refuse the stale command and stop the arm")
        assert arm.refused == 1 and "stale command" in arm.commander.stop_reason
        assert arm.backend.state().safety.stopped
        helper.destroy_node()


def _arm(ur_robot, max_tcp_speed=0.05, **limits):
    from embeval.robot.safety import SafetyLimits
    from embeval.robot.ur_rtde_backend import URRtdeArm

    return URRtdeArm(ur_robot.ip, SafetyLimits(max_tcp_speed=max_tcp_speed, **limits), **ur_robot.arm_kwargs)


@pytest.mark.hil
def test_ur_rtde_backend_state_and_refusal(ur_robot):
    """Connect, read a sane state, and check that an out-of-box target is refused before it is sent."""
    arm = _arm(ur_robot)
    try:
        arm.reset_safety()
        s = arm.state()
        assert s.joint_positions.shape == (6,) and np.all(np.isfinite(s.tcp_pose))
        assert arm.ur_safety_mode() in (1, 2), "put the robot in NORMAL safety mode before the HIL tests"
        if ur_robot.emulated:  # the emulator reports its TCP as fk(q) of the UR5 (no tool offset)
            from embeval.kinematics import UR5
            from embeval.kinematics.transforms import matrix_to_pose

            np.testing.assert_allclose(matrix_to_pose(UR5().fk(s.joint_positions, frame="base")), s.tcp_pose, atol=1e-6)
        far = s.tcp_pose.copy()
        far[0] += 5.0
        stopped = arm.move_tcp(far)
        assert stopped.safety.stopped and "workspace" in stopped.safety.reason  # refused, nothing sent
        assert arm.ur_safety_mode() == 3  # the controller's protective stop was triggered (triggerProtectiveStop)
        np.testing.assert_allclose(arm.state().tcp_pose[:3], s.tcp_pose[:3], atol=1e-3)
        assert arm.reset_safety().safety.ok and arm.ur_safety_mode() == 1
    finally:
        arm.close()


@pytest.mark.hil
def test_protective_stop_and_recovery(ur_robot):
    """A stop latched from outside (the watchdog's path) and, on the emulator, one the controller raises itself
    (a move into the table plane): both stop the arm, refuse motion, and clear through the dashboard; the
    ur_rtde control script is uploaded again and the arm moves."""
    from embeval.errors import SafetyError

    arm = _arm(ur_robot, max_tcp_speed=0.25, workspace_lower=(0.1, -0.5, -0.2))  # a box reaching below the table (z = 0)
    try:
        arm.reset_safety()
        s0 = arm.state()
        st = arm.protective_stop("operator stop (test)")
        assert st.safety.stopped and st.safety.reason == "operator stop (test)" and arm.ur_safety_mode() == 3
        with pytest.raises(SafetyError):
            arm.move_tcp(s0.tcp_pose)
        assert arm.reset_safety().safety.ok and arm.ur_safety_mode() == 1
        up = s0.tcp_pose.copy()
        up[2] += 0.01
        assert arm.move_tcp(up, speed=0.05).safety.ok
        np.testing.assert_allclose(arm.state().tcp_pose[:3], up[:3], atol=5e-4)
        if not ur_robot.emulated:
            return  # never drive the real arm into its table
        down = up.copy()
        down[2] = -0.05  # 5 cm into the table: the controller stops the arm
        st = arm.move_tcp(down, speed=0.25)
        assert st.safety.stopped and "PROTECTIVE_STOP" in st.safety.reason and arm.ur_safety_mode() == 3
        assert st.tcp_pose[2] > -1e-3  # stopped at the plane, not at the target
        assert arm.reset_safety().safety.ok and arm.ur_safety_mode() == 1
        assert arm.move_tcp(up, speed=0.25).safety.ok  # the re-uploaded script moves again
        np.testing.assert_allclose(arm.state().tcp_pose[:3], up[:3], atol=5e-4)
    finally:
        with contextlib.suppress(Exception):  # a failure above left a stop latched: clear it for the tests after this one
            if arm.ur_safety_mode() != 1:
                arm.reset_safety()
        arm.close()


def _ur5_overrides(ur_robot, tmp_path) -> list[str]:
    """--set overrides that run config/embeval_ur5.yaml here: synthetic camera (no RealSense needed), this arm,
    short episodes, results in tmp_path; live commands on the emulator, dry run on a real robot."""
    live = "false" if ur_robot.emulated else "true"
    return [f"embeval_arm.robot_ip={ur_robot.ip}", "embeval_camera.source=synthetic", "embeval_camera.width=64",
            "embeval_camera.height=48", "embeval_conductor.steps_per_episode=3", "embeval_conductor.episode_timeout_s=30",
            f"embeval_scorer.store={tmp_path / 'results.sqlite'}", f"embeval_recorder.bag_dir={tmp_path / 'bag'}",
            f"embeval_policy.dry_run={live}"]


@pytest.mark.hil
def test_ur5_execution_params_through_the_graph_runner(ur_robot, tmp_path):
    """`embeval graph --params config/embeval_ur5.yaml` (the ur5_execution launch's parameter set) against the arm:
    both episodes run, are scored and stored; on the emulator the policy's clipped actions move the arm."""
    import subprocess
    import sys

    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed: run scripts/install.sh")
    import rtde_receive

    recv = rtde_receive.RTDEReceiveInterface(ur_robot.ip)
    try:
        before = np.array(recv.getActualTCPPose())
        cmd = [sys.executable, "-m", "embeval_cli", "graph", "--params", str(ROOT / "config" / "embeval_ur5.yaml")]
        for o in _ur5_overrides(ur_robot, tmp_path):
            cmd += ["--set", o]
        r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=180, cwd=tmp_path)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        rows = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("item-0 ")]
        assert [row[1] for row in rows] == ["none", "gaussian_blur"], r.stdout
        arm_row = next(ln.split() for ln in r.stdout.splitlines() if ln.startswith("embeval_arm "))
        after = np.array(recv.getActualTCPPose())
    finally:
        recv.disconnect()
    received = int(arm_row[3])
    if ur_robot.emulated:
        assert received >= 6  # 3 commands per episode reached the arm node
        assert all(float(row[4]) > 50 for row in rows), r.stdout  # no stop (sync_to_arm: no stale command queue)
        # it moved, by at most the 6 executed actions clipped to 2 cm (no home_joints set: no move home between episodes)
        assert 1e-3 < np.linalg.norm(after[:3] - before[:3]) <= 6 * 0.02 + 1e-4
    else:
        assert received == 0  # dry run: nothing commanded
    assert (tmp_path / "results.sqlite").exists()


@pytest.mark.hil
def test_stale_command_stops_the_arm_node_and_reset_recovers(ur_robot):
    """The arm node on ur_rtde (config/embeval_ur5.yaml's arm): a command older than max_command_age_s is refused
    and latches the controller's protective stop; /embeval/arm/reset unlocks it and the arm moves again."""
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed: run scripts/install.sh")
    import time

    import rclpy
    from embeval_ros.conversions import action_to_msg
    from embeval_ros.graph import Graph, load_params
    from embeval_ros.runtime import qos_reliable
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState
    from std_srvs.srv import Trigger

    from embeval_ros import topics as T

    params = load_params(ROOT / "config" / "embeval_ur5.yaml")
    params = {"embeval_arm": {**params["embeval_arm"], "robot_ip": ur_robot.ip, "home_on_reset": False}}
    with Graph(params) as g:
        arm = g.nodes["embeval_arm"]
        arm.backend.reset_safety()
        node = rclpy.create_node("test_hil_cmd", context=g.context)
        try:
            pub = node.create_publisher(JointState, T.ACTION, qos_reliable())
            deadline = time.monotonic() + 10
            while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            p0 = arm.backend.state().tcp_pose
            pub.publish(action_to_msg([0.01, 0, 0, 0, 0, 0, 1], time.time_ns() - 2_000_000_000))  # 2 s old > 0.5 s
            g.wait_for(lambda g: arm.refused == 1 and arm.backend.ur_safety_mode() == 3, 10,
                       "the arm node to refuse the stale command and the controller to stop (safety mode 3)")
            assert arm.refused == 1 and "stale command" in arm.commander.stop_reason
            assert arm.backend.ur_safety_mode() == 3  # the controller's protective stop
            np.testing.assert_allclose(arm.backend.state().tcp_pose[:3], p0[:3], atol=1e-3)  # nothing moved
            client = node.create_client(Trigger, T.ARM_RESET)
            assert client.wait_for_service(timeout_sec=5.0)
            fut = client.call_async(Trigger.Request())
            ex = SingleThreadedExecutor(context=g.context)
            ex.add_node(node)
            ex.spin_until_future_complete(fut, timeout_sec=15.0)
            ex.remove_node(node)
            ex.shutdown()
            assert fut.result().success, fut.result().message
            assert arm.backend.ur_safety_mode() == 1 and not arm.backend.state().safety.stopped
            if ur_robot.emulated:  # a fresh command executes after the reset
                pub.publish(action_to_msg([0.01, 0, 0, 0, 0, 0, 1], time.time_ns()))
                g.spin(10, until=lambda g: arm.executed >= 1)
                assert arm.executed == 1
                np.testing.assert_allclose(arm.backend.state().tcp_pose[:3], p0[:3] + [0.01, 0, 0], atol=5e-4)
        finally:
            node.destroy_node()


@pytest.mark.hil
def test_realsense_frame(tmp_path):
    """A frame through rs.pipeline from the connected RealSense; without one, from a recording of a librealsense
    software device (the same pipeline, profiles and intrinsics path, played back)."""
    pytest.importorskip("pyrealsense2", reason="pyrealsense2 is not installed: run scripts/install.sh")
    from embeval.camera.realsense import RealSenseSource, realsense_devices

    if realsense_devices():
        src, shape = RealSenseSource(640, 480, 30), (480, 640, 3)
    else:
        from realsense_software import FX, H, W, SoftwareCamera, colour_of

        rec = SoftwareCamera().write(tmp_path / "cell.db3", 5)
        src, shape = RealSenseSource(recording=rec), (H, W, 3)
    try:
        f = src.read()
        assert f.image.shape == shape and f.image.dtype == np.uint8 and f.intrinsics.fx > 0
        if src.recording is not None:
            assert f.intrinsics.fx == FX and any(np.array_equal(f.image, colour_of(i)) for i in range(5))
    finally:
        src.close()
