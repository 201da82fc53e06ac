"""The project's UR5 + 2-finger gripper (``urdf/ur5_gripper.urdf``, generated from the D-H table by
:mod:`embeval.kinematics.urdf`) as a ManiSkill3 agent, so the UR5 cell's robot also runs in SAPIEN.

``register_ur5()`` registers robot uid ``embeval_ur5`` (idempotent); use it with tasks that accept any
robot, e.g. ``gym.make("Empty-v1", robot_uids="embeval_ur5")``. Links: the root is ``base_link``; the
TCP link is ``tcp`` (0.14 m along tool0's z, :func:`embeval.kinematics.gripper_tcp`), so the TCP pose
relative to the root equals ``UR5(tool=gripper_tcp()).fk(q)`` (frame ``base_link``; tested to 1e-4 m).
Controllers: ``pd_joint_pos`` (absolute joint targets) and ``pd_ee_delta_pose`` (the same
normalisation as the Panda's: 0.1 m, 0.1 rad) for the arm; the fingers (0 .. 0.0425 m each, the right
one mimicking the left) through a normalised joint-position controller (-1 closed, +1 open).
"""
from __future__ import annotations

UID = "embeval_ur5"
ARM_JOINTS = ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint",
              "wrist_3_joint")
FINGERS = ("left_finger_joint", "right_finger_joint")
#: a pose above the table, elbow up, tool pointing down (rad)
HOME = (0.0, -1.9, 1.9, -1.571, -1.571, 0.0)

_registered = False


def register_ur5() -> str:
    """Register the ``embeval_ur5`` agent with ManiSkill (once per process); returns its uid."""
    global _registered
    if _registered:
        return UID
    from embeval.sim.maniskill.runtime import import_sapien

    sapien = import_sapien()
    import numpy as np
    from mani_skill.agents.base_agent import BaseAgent, Keyframe
    from mani_skill.agents.controllers import (
        PDEEPoseControllerConfig,
        PDJointPosControllerConfig,
        PDJointPosMimicControllerConfig,
    )
    from mani_skill.agents.registration import register_agent

    from embeval.kinematics.urdf import urdf_path as _urdf_path

    class EmbevalUR5(BaseAgent):
        uid = UID
        urdf_path = str(_urdf_path("ur5_gripper"))
        urdf_config = dict()
        fix_root_link = True
        disable_self_collisions = True  # the generated gripper's finger and palm boxes touch
        keyframes = dict(home=Keyframe(qpos=np.array([*HOME, 0.0425, 0.0425]), pose=sapien.Pose()))
        arm_joint_names = list(ARM_JOINTS)
        gripper_joint_names = list(FINGERS)
        ee_link_name = "tcp"

        @property
        def _controller_configs(self):
            stiffness, damping, force = 1e4, 1e3, 300
            arm_joint = PDJointPosControllerConfig(self.arm_joint_names, None, None, stiffness, damping, force,
                                                   normalize_action=False)
            arm_ee = PDEEPoseControllerConfig(joint_names=self.arm_joint_names, pos_lower=-0.1, pos_upper=0.1,
                                              rot_lower=-0.1, rot_upper=0.1, stiffness=stiffness, damping=damping,
                                              force_limit=force, ee_link=self.ee_link_name, urdf_path=self.urdf_path)
            gripper = PDJointPosMimicControllerConfig(self.gripper_joint_names, lower=0.0, upper=0.0425, stiffness=1e3,
                                                      damping=1e2, force_limit=100,
                                                      mimic={FINGERS[1]: {"joint": FINGERS[0]}})
            return dict(pd_joint_pos=dict(arm=arm_joint, gripper=gripper),
                        pd_ee_delta_pose=dict(arm=arm_ee, gripper=gripper))

        def _after_init(self):
            self.tcp = self.robot.links_map[self.ee_link_name]

    register_agent()(EmbevalUR5)
    _registered = True
    return UID
