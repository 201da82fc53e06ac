"""UR arm kinematics: D-H forward kinematics, closed-form inverse kinematics (all 8 branches),
frames, joint limits, rotation conversions and the workcell URDFs.

Example::

    import numpy as np
    from embeval.kinematics import UR5, gripper_tcp, pose_to_matrix

    arm = UR5(tool=gripper_tcp())
    T = arm.fk([0, -1.57, 1.57, 0, 1.57, 0])         # 4x4 TCP pose in base_link
    sols = arm.ik(T)                                   # (n, 6), n <= 8
    q = arm.ik_closest(pose_to_matrix([0.4, 0.1, 0.3, np.pi, 0, 0]), q_near=np.zeros(6), frame="base")

See docs/kinematics.md for frames, conventions and the singularity policy.
"""
from embeval.kinematics.dh import JOINT_NAMES, PRESETS, DHParams, JointLimits, preset
from embeval.kinematics.tools import gripper_tcp, tcp_from_pose
from embeval.kinematics.transforms import (
    inv_transform,
    matrix_to_pose,
    matrix_to_quat,
    matrix_to_rotvec,
    pose_error,
    pose_to_matrix,
    quat_to_matrix,
    rot_x,
    rot_z,
    rotvec_to_matrix,
    trans,
    wrap_angle,
)
from embeval.kinematics.ur import BRANCHES, FRAMES, UR, UR5, Singularity, dh_matrices
from embeval.kinematics.urdf import (
    GRIPPER_STROKE,
    GRIPPER_TCP_Z,
    LINK_NAMES,
    urdf_dir,
    urdf_path,
)

__all__ = [
    "BRANCHES",
    "FRAMES",
    "GRIPPER_STROKE",
    "GRIPPER_TCP_Z",
    "JOINT_NAMES",
    "LINK_NAMES",
    "PRESETS",
    "UR",
    "UR5",
    "DHParams",
    "JointLimits",
    "Singularity",
    "dh_matrices",
    "gripper_tcp",
    "inv_transform",
    "matrix_to_pose",
    "matrix_to_quat",
    "matrix_to_rotvec",
    "pose_error",
    "pose_to_matrix",
    "preset",
    "quat_to_matrix",
    "rot_x",
    "rot_z",
    "rotvec_to_matrix",
    "tcp_from_pose",
    "trans",
    "urdf_dir",
    "urdf_path",
    "wrap_angle",
]
