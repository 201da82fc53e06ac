"""One action, one meaning: the same 7-DoF actions give the same arm on every backend.

The scripted expert's Pick (seed 3) is recorded in process; its last approach step carries the close
command (move down 4 cm, *then* close: closing first, 4 cm higher, misses the cube), then the cube is lifted, carried
sideways with a turn, and released by an open command combined with a small move. The sequence is
replayed through :class:`embeval.control.ArmCommander` on the simulated arm, the mock arm and (through the
unmodified ur_rtde client) the UR emulator: after every step the TCP agrees with the simulated arm within
1 mm and the gripper is on the same side of 0.5.
"""
from __future__ import annotations

import numpy as np
import pytest

from embeval.action import gripper_closed
from embeval.control import ArmCommander
from embeval.robot.mock_backend import MockArm
from embeval.robot.safety import SafetyLimits
from embeval.sim.arm_backend import SimArmBackend
from embeval.sim import SimEnv

SEED = 3
#: after the grasp: lift, carry (with a yaw turn), open while rising 1 cm, a zero move
AFTER_GRASP = [[0, 0, 0.05, 0, 0, 0, 0.0], [0, 0, 0.05, 0, 0, 0, 0.0], [0.03, -0.03, 0, 0, 0, 0.2, 0.0],
               [0.03, -0.03, 0, 0, 0, 0, 0.1], [0, 0, 0.01, 0, 0, 0, 1.0], [0, 0, 0, 0, 0, 0, 0.8]]


@pytest.fixture(scope="module")
def pick():
    """(scene, actions): the expert's approach with the close folded into its last downward step, then AFTER_GRASP."""
    with SimEnv() as env:
        obs = env.reset(seed=SEED, task="Pick", render=False)
        expert, acts = env.expert(), []
        while not env.done:
            acts.append(np.asarray(expert.act(obs).vector, dtype=float))
            obs = env.step(acts[-1], render=False).observation
        scene = env.scene
    close = next(k for k, a in enumerate(acts) if gripper_closed(a[6]))
    assert close >= 3 and not np.any(acts[close][:6])  # a zero-move close after the descent
    last = acts[close - 2][:6] + acts[close - 1][:6]  # the last two descent steps ...
    assert -0.05 <= last[2] < -0.035 and np.allclose(last[:2], 0, atol=1e-3)
    approach = acts[:close - 2] + [np.concatenate([last, [0.0]])]  # ... and the close, in one action
    return scene, approach + [np.asarray(a, dtype=float) for a in AFTER_GRASP], len(approach) - 1


def _replay(arm, actions, speed=0.25):
    c = ArmCommander(arm, SafetyLimits(max_tcp_speed=0.25), speed=speed)
    states = []
    for k, a in enumerate(actions):
        r = c.step(a)
        assert r.executed, (k, r.reason)
        states.append(r.state)
    return states


@pytest.fixture(scope="module")
def sim_run(pick):
    scene, actions, _ = pick
    arm = SimArmBackend(scene=scene)
    try:
        cube_z0 = arm.cell.object_pose("cube")[0][2]
        start, states, cube_z = arm.state(), [], []
        c = ArmCommander(arm, SafetyLimits(max_tcp_speed=0.25), speed=0.25)
        for k, a in enumerate(actions):
            r = c.step(a)
            assert r.executed, (k, r.reason)
            states.append(r.state)
            cube_z.append(arm.cell.object_pose("cube")[0][2])
        return start, states, cube_z0, cube_z
    finally:
        arm.close()


def test_sim_moves_before_closing_so_the_cube_is_grasped(pick, sim_run):
    """The folded action closes at the *new* height: the cube rises with the lift and drops after the open."""
    _, _, grasp_step = pick
    _, states, z0, cube_z = sim_run
    assert gripper_closed(states[grasp_step].gripper) and states[grasp_step].gripper > 0.2  # fingers stopped on the cube
    lifted = grasp_step + 2
    assert cube_z[lifted] - z0 > 0.08  # carried up with the TCP (two 5 cm lifts)
    assert not gripper_closed(states[-1].gripper) and cube_z[-1] - z0 < 0.01  # released: back on the table


def _compare(states, ref_states, name):
    for k, (s, r) in enumerate(zip(states, ref_states)):
        d = float(np.linalg.norm(s.tcp_position - r.tcp_position))
        assert d < 1e-3, f"{name} step {k}: TCP {d * 1000:.2f} mm from the simulated arm's"
        assert gripper_closed(s.gripper) == gripper_closed(r.gripper), f"{name} step {k}: gripper {s.gripper} vs {r.gripper}"
    # the orientation too (rotation angle between the TCP frames)
    from scipy.spatial.transform import Rotation

    angles = [(Rotation.from_rotvec(s.tcp_pose[3:]) * Rotation.from_rotvec(r.tcp_pose[3:]).inv()).magnitude()
              for s, r in zip(states, ref_states)]
    # the ur_rtde backend reads the pose from the receive interface, which may lag the end of a move by a packet
    assert max(angles) < 5e-3, f"{name}: TCP orientation up to {max(angles):.4f} rad from the simulated arm's"


def test_mock_ends_where_the_sim_does(pick, sim_run):
    _, actions, grasp_step = pick
    start, sim_states, _, _ = sim_run
    arm = MockArm(SafetyLimits(max_tcp_speed=0.25), home_tcp=start.tcp_pose, home_q=start.joint_positions)
    states = _replay(arm, actions)
    _compare(states, sim_states, "mock")
    kinds = [e[0] for e in arm.log]
    k = kinds.index("set_gripper")
    assert arm.log[k][1] == (0.0,) and kinds[k - 1] == "move_tcp"  # the folded action: the move down, then the close
    assert arm.log[k - 1][1][0][2] == pytest.approx(states[grasp_step].tcp_pose[2], abs=1e-9)  # at the grasp height
    assert kinds.count("set_gripper") == 2  # close once, open once: the other commands stay on their side of 0.5


def _joints_at(tcp_pose, near_q):
    """UR5 joints (no tool offset: the controller's TCP is tool0 here; the sim's gripper TCP is 14 cm further)
    that put the controller's TCP at ``tcp_pose``."""
    from embeval.kinematics import UR5
    from embeval.kinematics.transforms import pose_to_matrix

    return np.asarray(UR5().ik_closest(pose_to_matrix(tcp_pose), near_q, frame="base"), dtype=float)


def test_emulated_ur_rtde_ends_where_the_sim_does(pick, sim_run, ur_emulator):
    """The ur_rtde backend through the unmodified client against the UR emulator on loopback."""
    from embeval.robot.ur_rtde_backend import URRtdeArm

    _, actions, _ = pick
    start, sim_states, _, _ = sim_run
    arm = URRtdeArm(ur_emulator.ip, SafetyLimits(max_tcp_speed=0.25), acceleration=2.0, **ur_emulator.arm_kwargs)
    try:
        arm.move_joints(_joints_at(start.tcp_pose, start.joint_positions), speed=1.0)
        np.testing.assert_allclose(arm.state().tcp_pose, start.tcp_pose, atol=1e-4)  # the sim arm's start pose
        states = _replay(arm, actions)
    finally:
        arm.close()
    _compare(states, sim_states, "ur_rtde (emulated)")
