"""The simulated arm backend (what the ROS arm node drives with ``backend:=sim``) acts like the in-process
:class:`embeval.sim.env.SimEnv` for the same commands: gripper rule included, so a policy that reads the
gripper opening sees the same number in the graph as in process."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.control import ArmCommander
from embeval.errors import SafetyError
from embeval.robot.sim_backend import SimArmBackend
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
