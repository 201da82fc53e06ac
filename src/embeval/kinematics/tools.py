"""Tool (end-effector) transforms ``tool0 -> TCP`` for :class:`embeval.kinematics.UR`."""
from __future__ import annotations

import numpy as np

from embeval.kinematics.transforms import pose_to_matrix
from embeval.kinematics.urdf import GRIPPER_TCP_Z

__all__ = ["gripper_tcp", "tcp_from_pose"]


def gripper_tcp(length: float = GRIPPER_TCP_Z) -> np.ndarray:
    """TCP of the Robotiq-like 2-finger gripper in urdf/ur5_gripper.urdf: ``length`` metres along
    tool0's z axis (centre between the fingertip pads), same orientation as tool0."""
    T = np.eye(4)
    T[2, 3] = float(length)
    return T


def tcp_from_pose(pose) -> np.ndarray:
    """TCP offset given as a UR controller "TCP pose" ``[x, y, z, rx, ry, rz]`` (m, rotation vector)."""
    return pose_to_matrix(pose)
