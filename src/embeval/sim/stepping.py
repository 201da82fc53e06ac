"""How one 7-DoF delta action is executed on the simulated workcell: :meth:`embeval.sim.env.SimEnv.step`
(in process) runs :func:`embeval.robot.base.execute_step`, the rule every arm backend shares (the ROS arm
node's ``backend:=sim``, mock and ur_rtde through :class:`embeval.control.ArmCommander`), on a
:class:`~embeval.robot.sim_backend.SimArmBackend` view of the cell, so both give the same TCP, gripper and
object poses.

Order and timing: a step longer than ``limits.max_step_translation`` trips a protective stop and
nothing moves; otherwise the TCP moves in a straight line to the delta's target (frame ``base`` or
``tool0``; at ``speed`` m/s, default ``SimConfig.tcp_speed``, lasting at least ``1 / control_hz``
seconds) or, for a zero delta (every component within 1e-9), holds still for ``1 / control_hz``
seconds of physics; then, unless the move stopped the arm, the gripper acts by :func:`actuate_gripper`.
"""
from __future__ import annotations

from embeval.action import Action, gripper_command
from embeval.robot.base import SafetyStatus, execute_step
from embeval.robot.safety import check_step
from embeval.sim.workcell import Workcell


def actuate_gripper(cell: Workcell, opening: float) -> None:
    """The gripper rule: ``opening`` (0 closed .. 1 open) acts only when it lies on the other side of 0.5
    than the cell's current opening; then the fingers close fully (0) or open fully (1), stopping at the
    width of an object they grasp. Any other command leaves the fingers where they are."""
    target = gripper_command(opening, cell.gripper)
    if target is not None:
        cell.set_gripper(target)


def execute_action(cell: Workcell, action: Action, frame: str = "base", speed: float | None = None) -> SafetyStatus:
    """Execute one delta ``action`` on ``cell`` (see the module docstring); returns the cell's safety status.

    The caller checks first that the cell is not stopped (a stopped cell refuses motion).
    """
    from embeval.robot.sim_backend import SimArmBackend  # it imports this module

    pre = check_step(action.translation, cell.limits)
    if pre.stopped:
        return cell.safety.trip(pre)
    execute_step(SimArmBackend.view(cell), action, frame, speed)
    return cell.safety.status
