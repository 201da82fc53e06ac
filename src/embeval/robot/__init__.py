"""embeval.robot: arm backends behind one protocol, and the safety logic they share.

- :mod:`embeval.robot.base`: :class:`ArmBackend` protocol, :class:`ArmState`, :class:`SafetyStatus`,
  pose/delta helpers (frame ``base``, ``[x,y,z,rx,ry,rz]`` rotation-vector poses).
- :mod:`embeval.robot.safety`: :class:`SafetyLimits`, pre-motion checks, :class:`ProtectiveStop`.
- the pybullet workcell as an :class:`ArmBackend` is :mod:`embeval.sim.arm_backend` (sim builds on robot).
"""
from embeval.robot.base import (
    JOINT_NAMES,
    ArmBackend,
    ArmState,
    SafetyMode,
    SafetyStatus,
    apply_delta,
    pose_delta,
)
from embeval.robot.safety import ProtectiveStop, SafetyLimits, check_command

__all__ = [
    "JOINT_NAMES",
    "ArmBackend",
    "ArmState",
    "ProtectiveStop",
    "SafetyLimits",
    "SafetyMode",
    "SafetyStatus",
    "apply_delta",
    "check_command",
    "pose_delta",
]
