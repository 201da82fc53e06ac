"""Transitional alias: :class:`SimArmBackend` now lives in :mod:`embeval.sim.arm_backend` (robot is the lower
layer; the simulated arm is part of ``embeval.sim``). Kept only until the ROS arm node's backend registry names
``embeval.sim.arm_backend:SimArmBackend``; remove it then (tests/test_layering.py exempts this one module)."""
from embeval.sim.arm_backend import SimArmBackend, actuate_gripper, execute_action

__all__ = ["SimArmBackend", "actuate_gripper", "execute_action"]
