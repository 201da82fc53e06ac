"""Judge a task's success from state: on the simulated cell itself, or on a simulated copy (a mirror) of a
cell whose objects the scorer cannot see (the UR emulator, the mock arm).

A :class:`MirrorCell` loads the episode's scene into its own pybullet :class:`~embeval.sim.workcell.Workcell`
and follows the arm it mirrors: after each executed action its TCP moves in a straight line to the arm's
measured TCP pose (frame ``base``) and then its gripper applies the gripper rule to the arm's measured
opening, the order every backend executes an action in (:func:`embeval.robot.base.execute_step`). The
objects react in the mirror (grasped, lifted, pushed), so the task's success predicate can be read from
the mirror's state: success source ``mirror`` (see :data:`embeval.scoring.execution.SUCCESS_SOURCES`).
On a real cell the mirror only knows where the objects were meant to be: use a sensing node or the
operator there.

Example::

    from embeval.sim.mirror import MirrorCell
    from embeval.sim.references import easiest_task
    scene, task = easiest_task(seed=7)
    mirror = MirrorCell(scene)
    mirror.follow(arm.state())           # after every action executed on ``arm``
    print(mirror.verdict(task))          # {"success": False, "success_source": "mirror", "detail": ...}
"""
from __future__ import annotations

from typing import Any

import numpy as np

from embeval.robot.base import ArmState
from embeval.robot.safety import SafetyLimits
from embeval.rotations import Turn, compose
from embeval.sim.arm_backend import actuate_gripper
from embeval.sim.scene import SceneSpec
from embeval.sim.tasks import TaskSpec
from embeval.sim.workcell import SimConfig, Workcell, cell_verdict

#: the mirror moves when the arm's TCP is farther than this from its own (m, rad)
FOLLOW_TOLERANCE = 1e-5


class MirrorCell:
    """A simulated copy of a cell that follows an arm's measured TCP pose and gripper (see module docstring)."""

    def __init__(self, scene: SceneSpec, limits: SafetyLimits | None = None, config: SimConfig | None = None,
                 speed: float = 0.25):
        self.scene, self.speed = scene, float(speed)
        self.cell = Workcell(config or SimConfig(render=False), limits)
        self.cell.load(scene)
        self.followed = 0  # arm states followed

    def follow(self, state: ArmState) -> None:
        """Bring the mirror to ``state``: a straight TCP move to its pose, then the gripper rule on its opening.

        A mirror that hit something (its own protective stop: the real arm would have too) stops following."""
        c = self.cell
        if c.safety.status.stopped:
            return
        target = np.asarray(state.tcp_pose, dtype=np.float64)
        here = c.tcp_pose()
        turn = compose(Turn.rotvec(target[3:]), Turn.rotvec(here[3:]).inv(), to="angle")
        if np.linalg.norm(target[:3] - here[:3]) > FOLLOW_TOLERANCE or turn > FOLLOW_TOLERANCE:
            c.move_tcp(target, speed=self.speed)
        if c.safety.status.ok:
            actuate_gripper(c, float(state.gripper))
        self.followed += 1

    def settle(self, seconds: float) -> None:
        """Run ``seconds`` of physics (released objects come to rest), unless the mirror stopped."""
        if self.cell.safety.status.ok and seconds > 0:
            self.cell.idle(seconds)

    def verdict(self, task: TaskSpec) -> dict[str, Any]:
        """:func:`cell_verdict` on the mirror (source ``mirror``)."""
        return cell_verdict(self.cell, task, self.scene, "mirror")

    def close(self) -> None:
        self.cell.close()
