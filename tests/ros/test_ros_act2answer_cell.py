"""Act2Answer in the ROS graph, the real cell's path on mock hardware and the protective stop in simulation.

Real cell (backend mock: the UR5 stand-in, and ur_rtde against the UR emulator or the UR5 at UR_ROBOT_IP;
no cube sensing): the conductor waits for the operator (/embeval/conductor/next) before each unit, and
without a cube pose the cube is taken where the gripper opened (``cube_source: tcp``); every record says
where its success came from (``success_source``). Simulation: a policy driving into the table ends the
episode with the arm's protective stop, the same record as the in-process runner's.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")
pytestmark = pytest.mark.ros


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import export_scenes

    d = tmp_path_factory.mktemp("a2a_cell")
    items = generate_items(d / "suite", ["shape"], per_category=1, seed=3)
    return items, export_scenes(items, d / "scenes")


def _params(scenes_dir, backend, subject, subject_params, **conductor):
    from embeval_ros.graph import load_params

    return load_params({
        "embeval_camera": {"ros__parameters": {"source": "sim" if backend == "sim" else "synthetic", "rate_hz": 10.0,
                                               "width": 64, "height": 48}},
        "embeval_distortion": {"ros__parameters": {"distortion": "none"}},
        "embeval_policy": {"ros__parameters": {"subject": subject, "subject_params": json.dumps(subject_params),
                                               "dry_run": False, "rate_hz": 8.0, "max_steps": 80, "max_image_age_s": 3.0}},
        "embeval_arm": {"ros__parameters": {"backend": backend, "max_command_age_s": 10.0, "tcp_speed": 0.25,
                                            "state_rate_hz": 20.0}},
        "embeval_scorer": {"ros__parameters": {"run_id": "cell"}},
        "embeval_conductor": {"ros__parameters": {"act2answer_scenes": str(scenes_dir), "episode_timeout_s": 30.0,
                                                  "settle_s": 0.5, "start_delay_s": 0.3, **conductor}},
    })


def _operator_next(g) -> str:
    """What the operator does when the cell is set up: ros2 service call /embeval/conductor/next std_srvs/srv/Trigger."""
    import rclpy
    from embeval_ros.topics import CONDUCTOR_NEXT
    from rclpy.executors import SingleThreadedExecutor
    from std_srvs.srv import Trigger

    node = rclpy.create_node("test_operator", context=g.context)
    try:
        client = node.create_client(Trigger, CONDUCTOR_NEXT)
        assert client.wait_for_service(timeout_sec=5.0)
        future = client.call_async(Trigger.Request())
        ex = SingleThreadedExecutor(context=g.context)
        ex.add_node(node)
        ex.spin_until_future_complete(future, timeout_sec=5.0)
        ex.shutdown()
        return future.result().message
    finally:
        node.destroy_node()


def _publish_cube(g, xyz) -> None:
    """What a cube tracker or the operator does: publish the cube's position (frame base)."""
    import rclpy
    from embeval_ros.conversions import pose_msg
    from embeval_ros.runtime import qos_reliable
    from embeval_ros.topics import CUBE_POSE
    from geometry_msgs.msg import PoseStamped

    node = rclpy.create_node("test_cube_tracker", context=g.context)
    try:
        pub = node.create_publisher(PoseStamped, CUBE_POSE, qos_reliable())
        conductor = g.nodes["embeval_conductor"]
        for _ in range(100):
            if conductor.phase != "measure":
                break
            pub.publish(pose_msg([*xyz, 3.14159, 0.0, 0.0], node.get_clock().now().nanoseconds, "base"))
            g.spin(0.1)
    finally:
        node.destroy_node()


def test_real_cell_path_waits_for_the_operator_and_reads_the_cube(scenes):
    """Before each unit the conductor waits for the operator; after it, for a measured cube position
    (unit 2) or the operator's go, which keeps the TCP where the gripper opened (unit 1)."""
    from embeval_ros.graph import Graph

    _, scenes_dir = scenes
    params = _params(scenes_dir, "mock", "embeval.act2answer.reference_policies:ScriptedPlacer", {"side": "right"},
                     operator_confirm=True)
    measured = (0.565, -0.135, 0.02)
    with Graph(params) as g:
        conductor, scorer = g.nodes["embeval_conductor"], g.nodes["embeval_scorer"]
        for unit in range(2):
            g.spin(10, until=lambda g: conductor.phase == "operator")
            g.spin(1.0)  # nothing starts while the cell is being set up
            assert conductor.phase == "operator" and len(scorer.a2a_records) == unit
            assert _operator_next(g) == "next episode"
            g.spin(30, until=lambda g: conductor.phase == "measure")
            g.spin(0.5)  # the episode is not filed until the cube is measured or the estimate accepted
            assert conductor.phase == "measure" and len(scorer.a2a_records) == unit
            if unit == 0:
                assert _operator_next(g) == "estimate kept"
            else:
                _publish_cube(g, measured)
            g.spin(10, until=lambda g, n=unit + 1: len(scorer.a2a_records) == n)
        g.spin(10, until=lambda g: conductor.finished)
        assert conductor.finished
        recs = list(scorer.a2a_records)
    assert [r["layout"] for r in recs] == ["original", "swapped"]
    assert [r["cube_source"] for r in recs] == ["tcp", "measured"]
    assert [r["success_source"] for r in recs] == ["operator", "operator"]  # an estimate the operator kept; a measurement
    assert recs[0]["cube_xy"] == pytest.approx([0.55, -0.15], abs=1e-3)  # the TCP where the gripper opened
    assert recs[1]["cube_xy"] == pytest.approx(measured[:2], abs=1e-6)
    for r in recs:
        assert (r["choice"], r["end_reason"], r["steps"]) == ("right", "released", 26)  # 25 held steps, then the release
        assert r["zone"] == ("correct" if r["correct_side"] == "right" else "incorrect")
    assert {r["zone"] for r in recs} == {"correct", "incorrect"}


def test_protective_stop_ends_the_episode_as_in_process(scenes):
    from embeval_ros.graph import Graph

    from embeval.act2answer.episode import run_items
    from embeval.subjects.scripted import ConstantPolicy

    items, scenes_dir = scenes
    down = [0, 0, -0.045, 0, 0, 0, 1]  # straight down into the table
    params = _params(scenes_dir, "sim", "scripted", {"vector": down}, act2answer_items=[f"{items[0].id}@original"],
                     act2answer_distortion="gaussian_blur", act2answer_level=2)
    with Graph(params) as g:
        g.spin(40, until=lambda g: g.nodes["embeval_conductor"].finished)
        assert g.nodes["embeval_conductor"].finished
        (ros,) = g.nodes["embeval_scorer"].a2a_records
        dist = g.nodes["embeval_distortion"]
        assert (dist.distortion, dist.level) == ("gaussian_blur", 2)  # the episode's distortion reached the images
    assert (ros["distortion"], ros["level"]) == ("gaussian_blur", 2)
    (local,) = [r.to_dict() for r in run_items(ConstantPolicy(vector=down), items, layouts=("original",))]
    assert local["stopped"] and local["zone"] == "out_of_bounds" and local["end_reason"].startswith("workspace limit")
    for key in ("stopped", "zone", "choice", "end_reason"):
        assert ros[key] == local[key], key
    assert (ros["cube_source"], ros["success_source"]) == ("sim", "sim")
    assert ros["cube_xy"] == pytest.approx(local["cube_xy"], abs=0.005)  # the cube was never touched
    assert local["steps"] <= ros["steps"] <= local["steps"] + 2  # actions proposed before the stop reached the conductor


@pytest.mark.hil
def test_real_cell_unit_on_the_ur_arm_with_the_operator(scenes, ur_robot):
    """The real-cell path on the UR arm (the emulator through ur_rtde, or the UR5 at UR_ROBOT_IP): the conductor
    waits for the operator before the unit and, without cube sensing, after it; the test answers as the operator
    does (/embeval/conductor/next: the cell is set up; then keep the TCP estimate). The record's success source is
    the operator. The emulated arm executes the scripted placer (the cube is taken where the gripper opened); the
    real arm stays in dry run and the unit is filed at the step cap."""
    import numpy as np
    from embeval_ros.graph import Graph

    from embeval.kinematics import UR5
    from embeval.kinematics.transforms import pose_to_matrix

    items, scenes_dir = scenes
    params = _params(scenes_dir, "ur_rtde", "embeval.act2answer.reference_policies:ScriptedPlacer", {"side": "left"},
                     act2answer_items=[f"{items[0].id}@original"], operator_confirm=True)
    params["embeval_arm"]["robot_ip"] = ur_robot.ip
    params["embeval_policy"].update(dry_run=not ur_robot.emulated, sync_to_arm=True)  # one action per executed step
    if ur_robot.emulated:  # start at the workcell's home pose (0.45, 0, 0.30), tool down: the placer's frame
        elbow_up = [np.pi, -np.pi / 2, np.pi / 2, -np.pi / 2, -np.pi / 2, 0.0]
        home = UR5().ik_closest(pose_to_matrix([0.45, 0.0, 0.30, np.pi, 0.0, 0.0]), elbow_up, frame="base")
        params["embeval_arm"]["home_joints"] = [float(v) for v in home]
    with Graph(params) as g:
        conductor, scorer = g.nodes["embeval_conductor"], g.nodes["embeval_scorer"]
        g.spin(20, until=lambda g: conductor.phase == "operator")
        assert conductor.phase == "operator"
        assert _operator_next(g) == "next episode"
        g.spin(90, until=lambda g: conductor.phase == "measure")
        assert conductor.phase == "measure" and not scorer.a2a_records
        assert _operator_next(g) == "estimate kept"
        g.spin(20, until=lambda g: conductor.finished)
        assert conductor.finished
        (rec,) = scorer.a2a_records
        executed = g.nodes["embeval_arm"].executed
    assert (rec["cube_source"], rec["success_source"]) == ("tcp", "operator")
    if ur_robot.emulated:
        assert (rec["end_reason"], rec["choice"]) == ("released", "left"), (rec, executed)
        assert executed == rec["steps"] == 26
        assert rec["zone"] == ("correct" if rec["correct_side"] == "left" else "incorrect")
    else:
        assert executed == 0 and (rec["end_reason"], rec["steps"], rec["zone"]) == ("max_steps", 24, "out_of_bounds")


def test_policy_sync_to_arm_acts_only_on_images_after_the_arms_report():
    """sync_to_arm: after a command the policy waits for the arm's status of that command and then for an image
    captured after it (the in-process runner's observe -> act -> execute -> observe), whatever the camera rate."""
    import time

    import numpy as np
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from embeval_ros.conversions import image_to_msg
    from embeval_ros.diagnostics import diag
    from embeval_ros.graph import Graph, load_params
    from embeval_ros.runtime import qos_latched, qos_reliable
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from embeval_ros import topics as T

    params = load_params({"embeval_policy": {"ros__parameters": {
        "subject": "scripted", "subject_params": json.dumps({"vector": [0.01, 0, 0, 0, 0, 0, 1]}), "dry_run": False,
        "rate_hz": 0.0, "max_image_age_s": 30.0, "sync_to_arm": True, "image_topic": T.IMAGE_RAW}}})
    img = np.full((48, 64, 3), 90, np.uint8)
    with Graph(params) as g:
        policy = g.nodes["embeval_policy"]
        node = rclpy.create_node("test_sync", context=g.context)
        try:
            pub_img = node.create_publisher(Image, T.IMAGE_RAW, qos_reliable())
            pub_status = node.create_publisher(DiagnosticArray, T.ARM_STATUS, qos_reliable())
            node.create_publisher(String, T.INSTRUCTION, qos_latched()).publish(String(data="push the cube"))
            g.spin(5, until=lambda g: policy.stepper.instruction and pub_img.get_subscription_count()
                   and pub_status.get_subscription_count())

            def frame(stamp_ns):
                n = policy.log.received
                pub_img.publish(image_to_msg(img, stamp_ns, "camera_color_optical_frame"))
                g.wait_for(lambda g: policy.log.received > n, 10, "the policy node to take the image")
                return policy.log.published

            first = time.time_ns()
            assert frame(first) == 1  # acts
            assert frame(time.time_ns()) == 1  # the arm has not reported the command: no action
            before_report = time.time_ns()
            pub_status.publish(diag("arm", "ok", "executed", {}, first))  # the arm executed the first command
            g.wait_for(lambda g: policy._pending is None, 10, "the policy node to take the arm's report")
            assert frame(before_report) == 1  # an image captured before the report: still no action
            assert frame(time.time_ns()) == 2  # a fresh image: acts again
        finally:
            node.destroy_node()
