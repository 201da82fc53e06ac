"""The simulated arm backend (what the ROS arm node drives with ``backend:=sim``) acts like the in-process
:class:`embeval.sim.env.SimEnv` for the same commands: gripper rule included, so a policy that reads the
gripper opening sees the same number in the graph as in process."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.control import ArmCommander
from embeval.errors import SafetyError
from embeval.sim.arm_backend import SimArmBackend
from embeval.sim import SimEnv

#: after the expert's pick: hold and move with closed (0, 0.1, 0.3) and half-open (0.49) commands,
#: open (0.8 crosses 0.5), then a closing command far from any object
AFTER_PICK = [[0, 0, 0.03, 0, 0, 0, 0.0], [0.02, 0, 0, 0, 0, 0, 0.1], [0, 0.02, 0, 0, 0, 0, 0.3],
              [0, 0, 0, 0, 0, 0, 0.49], [0, 0, 0, 0, 0, 0, 0.8], [0, 0, 0.05, 0, 0, 0, 0.8], [0, 0, 0, 0, 0, 0, 0.2]]


def _in_process(seed: int):
    """The expert's Pick episode in process plus :data:`AFTER_PICK`: (actions, gripper after each, held object)."""
    env = SimEnv()
    try:
        obs = env.reset(seed=seed, task="Pick", render=False)
        expert = env.expert()
        actions, grip, held = [], [], []
        while not env.done:
            actions.append(np.asarray(expert.act(obs).vector, dtype=float))
            obs = env.step(actions[-1], render=False).observation
            grip.append(env.cell.gripper)
            held.append(env.cell.grasp.body.name if env.cell.grasp else None)
        for a in AFTER_PICK:
            actions.append(np.asarray(a, dtype=float))
            env.step(actions[-1], render=False)
            grip.append(env.cell.gripper)
            held.append(env.cell.grasp.body.name if env.cell.grasp else None)
        return env.scene, actions, grip, held
    finally:
        env.close()


@pytest.mark.parametrize("seed", [0, 3])
def test_gripper_state_while_holding_equals_the_in_process_env(seed):
    scene, actions, grip_env, held_env = _in_process(seed)
    n_held = sum(h is not None for h in held_env)
    assert n_held >= 4, "the expert must grasp and hold for a few steps, else this test checks nothing"
    width = next(g for g, h in zip(grip_env, held_env) if h is not None)
    assert 0.2 < width < 0.5  # in process a held object stops the fingers at its width
    arm = SimArmBackend(scene=scene)
    try:
        cmd = ArmCommander(arm)  # what the arm node does with each /embeval/action
        for k, (a, g_env, h_env) in enumerate(zip(actions, grip_env, held_env)):
            res = cmd.step(a)
            assert res.executed, (k, res.reason)
            held = arm.cell.grasp.body.name if arm.cell.grasp else None
            assert held == h_env, f"step {k}: backend holds {held}, in process {h_env}"
            assert res.state.gripper == pytest.approx(g_env, abs=1e-3), f"step {k} (command {a[6]:.2f})"
        assert arm.state().gripper == 0.0  # the last command closed the empty gripper fully
    finally:
        arm.close()


def test_set_gripper_acts_only_across_half_open():
    arm = SimArmBackend()
    try:
        assert arm.state().gripper == 1.0
        assert arm.set_gripper(0.7).gripper == 1.0  # same side of 0.5: nothing moves
        assert arm.set_gripper(0.3).gripper == 0.0  # crosses: closes fully (nothing between the fingers)
        assert arm.set_gripper(0.45).gripper == 0.0
        assert arm.set_gripper(0.5).gripper == 1.0  # 0.5 counts as open, as in SimEnv.step
        arm.protective_stop("test")
        with pytest.raises(SafetyError):
            arm.set_gripper(1.0)  # a stopped arm refuses even a no-op gripper command
    finally:
        arm.close()


#: hand-written steps after the pick: rotations, a zero move while holding, a release, tiny moves (< 1e-9 is zero)
TURNS = [[0, 0, 0.02, 0.1, 0, 0, 0.0], [0, 0, 0, 0, 0, -0.2, 0.0], [0, 0, 0, 0, 0, 0, 0.0], [0.01, -0.01, 0, 0, 0.05, 0, 1.0],
         [1e-10, 0, 0, 0, 0, 0, 1.0], [0, 0, -0.003, 0, 0, 0, 0.6]]


def _world(cell) -> dict:
    """Everything one step changes: sim time (s), joints (rad), TCP pose, gripper, every object's position and quaternion."""
    w = {"time": np.array([cell.time]), "q": cell.q.copy(), "tcp": cell.tcp_pose(), "gripper": np.array([cell.gripper])}
    for name in cell.bodies:
        pos, orn = cell.object_pose(name)
        w[name] = np.concatenate([pos, orn])
    return w


@pytest.mark.parametrize("seed,speed", [(0, 0.25), (3, 0.5)])
def test_commander_on_the_sim_backend_steps_exactly_like_simenv(seed, speed):
    """The arm node's path (ArmCommander -> SimArmBackend.apply_action) and SimEnv.step give the same world after
    every step of a recorded sequence (the expert's pick, holding, turning, releasing) to 1e-6, sim time included:
    move first lasting at least 1 / control_hz, hold still that long on a zero move, then the gripper."""
    from embeval.sim import SimConfig

    env = SimEnv(SimConfig(tcp_speed=speed))
    arm = None
    try:
        obs = env.reset(seed=seed, task="Pick", render=False)
        expert, actions, worlds = env.expert(), [], []
        while not env.done:
            actions.append(np.asarray(expert.act(obs).vector, dtype=float))
            obs = env.step(actions[-1], render=False).observation
            worlds.append(_world(env.cell))
        for a in AFTER_PICK + TURNS:
            actions.append(np.asarray(a, dtype=float))
            env.step(actions[-1], render=False)
            worlds.append(_world(env.cell))
        assert env.reason == "success" and not env.cell.safety.status.stopped
        zero = [k for k, a in enumerate(actions) if not np.any(np.abs(a[:6]) > 1e-9)]
        assert len(zero) >= 5 and len(set(worlds[-1]) - {"time", "q", "tcp", "gripper"}) >= 1

        arm = SimArmBackend(scene=env.scene)
        cmd = ArmCommander(arm, speed=speed)
        assert cmd.speed == speed
        before, n_zero_checked = _world(arm.cell), 0
        for k, (a, w_env) in enumerate(zip(actions, worlds)):
            res = cmd.step(a)
            assert res.executed, (k, res.reason)
            w = _world(arm.cell)
            for key, v in w_env.items():
                np.testing.assert_allclose(w[key], v, atol=1e-6, rtol=0, err_msg=f"step {k} ({a.round(3).tolist()}): {key}")
            if k in zero:  # a zero move lasts one control period, the arm holding still, plus the gripper's travel
                grips = (a[6] < 0.5) != (before["gripper"][0] < 0.5)
                assert w["time"][0] - before["time"][0] == pytest.approx(0.1 + grips * env.config.gripper_time, abs=1e-6)
                n_zero_checked += 1
            before = w
        assert n_zero_checked == len(zero)
        np.testing.assert_allclose(res.state.tcp_pose, worlds[-1]["tcp"], atol=1e-6)
    finally:
        env.close()
        if arm is not None:
            arm.close()


def test_commander_on_the_sim_backend_in_tool_frame_equals_simenv():
    """frame tool0 (deltas in the TCP's own axes) reaches the backend: same poses as SimEnv(action_frame='tool0')."""
    steps = [[0.02, 0, 0, 0, 0, 0.3, 1.0], [0, 0.02, 0.01, 0.1, 0, 0, 1.0], [0, 0, 0, 0, 0, 0, 0.0], [0.01, 0, 0.02, 0, -0.1, 0, 0.0]]
    env = SimEnv(action_frame="tool0")
    arm = None
    try:
        env.reset(seed=1, task="Push", render=False)
        arm = SimArmBackend(scene=env.scene)
        cmd = ArmCommander(arm, frame="tool0", speed=env.config.tcp_speed)
        for k, a in enumerate(steps):
            env.step(a, render=False)
            assert cmd.step(a).executed
            w, w_env = _world(arm.cell), _world(env.cell)
            for key in w_env:
                np.testing.assert_allclose(w[key], w_env[key], atol=1e-6, rtol=0, err_msg=f"step {k}: {key}")
        # in frame base the same deltas end elsewhere: the frame really matters here
        with SimEnv() as base_env:
            base_env.reset(seed=1, task="Push", render=False)
            for a in steps:
                base_env.step(a, render=False)
            assert np.linalg.norm(base_env.cell.tcp_pose()[:3] - env.cell.tcp_pose()[:3]) > 0.01
    finally:
        env.close()
        if arm is not None:
            arm.close()


def test_scene_operations_of_the_backend_and_the_mirror(tmp_path):
    """The public scene operations the arm node and the render mirror use (no reaching into the workcell)."""
    from embeval.act2answer.mirror import CellMirror
    from embeval.sim.tasks import make_task

    scene, _task = make_task("Pick", 3)
    name = scene.objects[0].name
    arm = SimArmBackend()
    assert arm.object_pose(name) is None  # the empty scene has no such object
    home = arm.load_scene(scene)
    assert np.array_equal(home, arm.state().joint_positions)
    pos0, _ = arm.object_pose(name)
    arm.settle(0.2)
    pos1, orn1 = arm.object_pose(name)
    assert np.linalg.norm(pos1 - pos0) < 1e-3 and orn1.shape == (4,)  # settled at load: it stays put
    arm.protective_stop("test")
    t = arm.state().timestamp
    arm.settle(0.2)  # nothing while stopped
    assert arm.state().timestamp == t
    yaml_path = tmp_path / "scene.yaml"
    scene.to_yaml(yaml_path)
    mirror = CellMirror()
    try:
        assert not mirror.set_object(name, [0.5, 0.0, 0.1])
        mirror.load(yaml_path)
        q = home + np.array([0.1, -0.05, 0.05, 0.0, 0.1, 0.0])
        mirror.set_robot(q, 0.2)
        assert np.allclose(mirror.cell.q, q) and mirror.cell.gripper == pytest.approx(0.2)
        assert np.allclose(mirror.cell.tcp_pose()[:3], mirror.cell.tcp_matrix(q)[:3, 3])
        mirror.set_robot(home)  # gripper unchanged
        assert mirror.cell.gripper == pytest.approx(0.2)
        assert mirror.set_object(name, [0.5, 0.05, 0.1], [0, 0, 0.38268343, 0.92387953])
        p, o = mirror.cell.object_pose(name)
        assert np.allclose(p, [0.5, 0.05, 0.1]) and np.allclose(o, [0, 0, 0.38268343, 0.92387953], atol=1e-6)
    finally:
        mirror.close()
        arm.close()
