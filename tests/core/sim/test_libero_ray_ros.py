"""LIBERO on the Ray backend (the same episode records as the local backend) and in the ROS graph (the ``libero``
arm backend and camera source: the camera shows LIBERO's agent view, the arm steps LIBERO through the libero_osc
convention, the episode ends on LIBERO's own success check). LIBERO runs in .venv-libero (skipped without it)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from embeval.sim.libero import libero_python

pytestmark = pytest.mark.skipif(not libero_python().is_file(),
                                reason=f"LIBERO's interpreter {libero_python()} is missing: run scripts/install_libero.sh")
TASK = "libero_spatial:0"


# ---- Ray ---------------------------------------------------------------------------------------------------------
def test_ray_gives_the_same_libero_episodes_as_local(tmp_path):
    ray = pytest.importorskip("ray")
    from embeval.runs.runner import run
    from embeval.runs.store import ResultsStore

    spec = {"name": "libero-ray", "evaluator": "sim-iqa",
            "sim": {"backend": "libero", "env": TASK, "width": 32, "height": 32, "max_steps": 3,
                    "options": {"render_mode": "fast", "hard_reset": False}},
            "subjects": [{"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}}],
            "items": {"source": "synthetic", "count": 1}, "distortions": ["none", "darken"], "levels": [5],
            "backend": {"num_workers": 1, "progress": False}}
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        remote = run(p, tmp_path / "ray", backend="ray")
    finally:
        ray.shutdown()
    local = run(p, tmp_path / "local", backend="local")
    assert local.run_id == remote.run_id and (local.done, remote.done, local.failed, remote.failed) == (2, 2, 0, 0)
    with ResultsStore(tmp_path / "local" / "results.sqlite") as a, ResultsStore(tmp_path / "ray" / "results.sqlite") as b:
        res_local, res_ray = a.results(local.run_id), b.results(remote.run_id)
        workers = {r["worker"] for r in b.rows(remote.run_id, "done")}
    assert res_local == res_ray and len(res_local) == 2  # every number of both episode records
    assert all(w.startswith("ray:") for w in workers)
    dark = next(v for k, v in res_ray.items() if k[2] == "darken")
    assert dark["reference_steps"] == dark["distorted_steps"] == 3 and dark["decision"] < 1.0
    assert np.isfinite(dark["execution"]) and 0.0 < dark["distance_cm"]  # a darker image moves the hand elsewhere


# ---- the ROS graph's LIBERO backend and camera source (no rclpy) --------------------------------------------------
#: a workspace box around LIBERO's Panda hand (its world frame: the hand starts near (-0.21, -0.01, 1.17) m)
LIMITS = {"workspace_lower": (-0.6, -0.5, 0.9), "workspace_upper": (0.3, 0.5, 1.5)}


@pytest.fixture(scope="module")
def arm():
    """One LIBERO arm for the module (fast renderer, soft resets, 5 steps per episode), agent view and wrist."""
    from embeval.sim.libero.arm import LiberoArm

    a = LiberoArm(task=TASK, seed=0, width=48, height=48, cameras=("agentview", "wrist"), render_mode="fast",
                  hard_reset=False, max_steps=5)
    yield a
    a.close()


def _commander(arm):
    from embeval.control import ArmCommander
    from embeval.robot.safety import SafetyLimits

    return ArmCommander(arm, SafetyLimits(**LIMITS))


def test_arm_backend_is_registered_and_steps_libero_through_the_commander(arm):
    import embeval.sim  # noqa: F401 - registers the simulator layer's arm backends
    from embeval.robot.backends import ARM_BACKENDS
    from embeval.robot.base import ArmBackend
    from embeval.sim.libero import to_libero
    from embeval.sim.libero.arm import JOINT_NAMES, LiberoArm

    assert ARM_BACKENDS.get("libero") is LiberoArm and isinstance(arm, ArmBackend)
    arm.reset_episode(0)
    cmd = _commander(arm)
    s0 = arm.state()
    assert s0.safety.ok and s0.gripper == 1.0 and len(s0.joint_positions) == len(JOINT_NAMES) == 7
    assert arm.control_hz == pytest.approx(20.0)
    # +2 cm x, -1 cm y, gripper open: ONE LIBERO control step with the libero_osc conversion of that delta
    sent = []
    real = arm.env.step_libero
    arm.env.step_libero = lambda vec: sent.append(np.asarray(vec)) or real(vec)
    try:
        r = cmd.step([0.02, -0.01, 0.0, 0.0, 0.0, 0.0, 1.0])
        assert r.executed and arm.env.steps == 1 and len(sent) == 1
        from embeval.action import Action

        np.testing.assert_allclose(sent[0], to_libero(Action(np.array([0.02, -0.01, 0, 0, 0, 0, 1.0]))), atol=1e-6)
        assert sent[0][0] == pytest.approx(0.4) and sent[0][6] == -1.0  # 2 cm / 5 cm; LIBERO's open
        d = r.state.tcp_pose[:3] - s0.tcp_pose[:3]
        assert d[0] > 0.001 and d[1] < 0, d  # the hand went +x / -y (about 2 of 20 mm in one step: OSC set-point)
        # closing, no move: a hold step, then the gripper step (the rule every backend shares); the next action
        # that keeps the gripper closed costs one step
        r = cmd.step([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        assert r.executed and arm.env.steps == 3 and r.state.gripper == 0.0 and [v[6] for v in sent] == [-1, -1, 1]
        r = cmd.step([0.0, 0.0, -0.01, 0.0, 0.0, 0.0, 0.0])
        assert r.executed and arm.env.steps == 4 and sent[-1][6] == 1.0 and sent[-1][2] == pytest.approx(-0.2)
    finally:
        arm.env.step_libero = real
    # the step limit (5) ends the episode: a latched stop that names it; later actions are refused
    r = cmd.step([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert not r.executed and "step limit 5 reached" in r.reason and arm.done
    r = cmd.step([0.01, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert not r.executed and arm.env.steps == 5
    # reset: the next episode from initial state 0
    n = arm.episodes
    s = cmd.reset()
    assert s.safety.ok and arm.env.steps == 0 and s.gripper == 1.0 and arm.episodes == n + 1
    np.testing.assert_allclose(s.tcp_pose[:3], s0.tcp_pose[:3], atol=2e-3)
    with pytest.raises(Exception, match="end-effector deltas"):
        arm.move_joints([0.0] * 7)


def test_episode_ends_on_libero_own_success_check(arm):
    from embeval.errors import SafetyError

    arm.reset_episode(0)
    env = arm.env
    plate, _, _ = env.object_pose("plate_1")
    _, _, i = env.object_pose("akita_black_bowl_1")
    state = env.get_state()
    state[i:i + 3] = plate + np.array([0.0, 0.0, 0.02])  # the goal (On bowl plate) once the bowl comes to rest
    state[i + 3:i + 7] = [1, 0, 0, 0]
    env.set_state(state)
    cmd = _commander(arm)
    reasons = [cmd.step([0.0] * 6 + [1.0]).reason for _ in range(4)]
    assert arm.success and any("success (LIBERO's check_success)" in r for r in reasons), reasons
    with pytest.raises(SafetyError, match="LIBERO episode over"):
        arm.hold(0.05)
    arm.reset_safety()  # the next episode
    assert not arm.success and arm.state().safety.ok


def test_camera_source_shows_libero_agent_view(arm):
    from embeval.camera import make_source

    obs = arm.reset_episode(0)
    src = make_source("libero", arm=arm)
    f = src.read()
    assert f.image.shape == (48, 48, 3) and np.array_equal(f.image, arm.obs.images["agentview"])
    assert np.array_equal(arm.render("third_person"), f.image) and obs.safety.ok
    # intrinsics from LIBERO's own agentview field of view (the model's cam_fovy)
    fovy = arm.fovy("agentview")
    assert 20 < fovy < 100 and f.intrinsics.fy == pytest.approx(0.5 * 48 / np.tan(np.deg2rad(fovy) / 2))
    assert not np.array_equal(arm.render("wrist"), f.image)
    _commander(arm).step([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # the gripper closes: the wrist camera sees it
    assert src.read().index == 1
    with pytest.raises(Exception, match="choose from agentview, wrist"):
        make_source("libero", arm=arm, camera="top")
    src.close()  # the shared arm is not closed by the source
    assert arm.state().safety.ok


# ---- one composed graph on LIBERO (rclpy) ---------------------------------------------------------------------------
def test_graph_runs_a_policy_against_libero(tmp_path):
    pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")
    from std_msgs.msg import String

    from embeval.robot.safety import SafetyLimits
    from embeval.sim.libero.arm import graph_shared
    from embeval_ros import topics as T
    from embeval_ros.graph import Graph, load_params
    from embeval_ros.runtime import qos_latched

    cam = {"source": "sim", "rate_hz": 5.0, "width": 48, "height": 48}  # sim: the composed graph's LIBERO renderer
    arm_p = {"backend": "libero", "sim_task": TASK, "sim_seed": 1, "max_command_age_s": 10.0, "state_rate_hz": 5.0,
             "workspace_lower": list(LIMITS["workspace_lower"]), "workspace_upper": list(LIMITS["workspace_upper"])}
    params = load_params({
        "embeval_camera": {"ros__parameters": cam},
        "embeval_policy": {"ros__parameters": {"subject": "config/subjects/image_stats_policy.yaml", "dry_run": False,
                                               "rate_hz": 5.0, "max_image_age_s": 5.0, "image_topic": T.IMAGE_RAW}},
        "embeval_arm": {"ros__parameters": arm_p}})
    # what `embeval graph` builds for backend libero, here with the fast renderer, soft resets and a 3-step episode
    shared = graph_shared(arm_p, cam, SafetyLimits(**LIMITS), render_mode="fast", hard_reset=False, max_steps=3)
    lib = shared["arm"]
    try:
        with Graph(params, shared=shared) as g:
            node = g.nodes["embeval_arm"]
            assert node.backend is lib and lib.seed == 1
            pub = node.create_publisher(String, T.INSTRUCTION, qos_latched())
            pub.publish(String(data=lib.instruction))
            g.wait_for(lambda g: lib.done, 90, "the LIBERO episode to reach its 3-step limit")
            frames, acted = g.nodes["embeval_camera"].frames, node.log.received
        assert lib.env.steps == 3 and not lib.success and "step limit 3 reached" in lib.state().safety.reason
        assert frames >= 1 and acted >= 1
    finally:
        lib.close()


def test_graph_libero_parameters_are_checked_before_libero_starts():
    from embeval.errors import ConfigError
    from embeval.robot.safety import SafetyLimits
    from embeval.sim.libero.arm import graph_shared

    with pytest.raises(ConfigError, match=r"embeval_arm.sim_task: backend libero runs a LIBERO task SUITE:TASK_ID .*'Pick'"):
        graph_shared({"sim_task": "Pick"}, {}, SafetyLimits())
    with pytest.raises(ConfigError, match="embeval_camera camera 'top': LIBERO has agentview, wrist"):
        graph_shared({"sim_task": TASK}, {"sim_camera": "top"}, SafetyLimits())
