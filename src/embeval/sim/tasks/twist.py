"""Twist: turn a knob by at least 1.2 rad (a quarter turn is 1.57 rad)."""
from __future__ import annotations

import math

import numpy as np

from embeval.rotations import rotvec_to_euler
from embeval.sim.expert import CLOSED, OPEN, ScriptedExpert, Stage, fold_yaw, topdown, vertical
from embeval.sim.predicates import TaskSpec, object_state
from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
from embeval.sim.scene_generators import Layout, pick_color
from embeval.sim.task_registry import Task
from embeval.sim.task_state import WorldState


def make(rng: np.random.Generator, lay: Layout, d: int) -> tuple[list[ObjectSpec], TaskSpec]:
    """A seeded Twist scene: its objects and task spec (difficulty ``d``)."""
    c = pick_color(rng)
    k = ObjectSpec(name="knob", kind="knob", position=lay.place(0.06), color=COLORS[c], color_name=c, fixed=True)
    k.yaw = float(rng.uniform(-0.8, 0.8))
    return [k], TaskSpec("Twist", f"twist the {c} knob a quarter turn", d, "knob", threshold=1.2, max_steps=50)


def success(task: TaskSpec, world: WorldState, scene: SceneSpec | None = None) -> bool:
    """The knob turned by at least ``threshold`` radians (default 1.2, a quarter turn is 1.57) either way."""
    k = object_state(world, task.target)
    return k.joint is not None and abs(k.joint) >= (task.threshold or 1.2)


def plan(e: ScriptedExpert) -> list[Stage]:
    """Grasp the knob across its grip, turn it 1.45 rad towards the wrist's centre, release, retreat."""
    t = e.env.task
    cell = e.env.cell
    turn = 1.45  # rad, a bit less than a quarter turn, above the 1.2 rad success threshold

    def knob_yaw():
        return fold_yaw(e.obj(t.target)[1] + (cell.joint_value(t.target) or 0.0), math.pi)

    def above():
        g = cell.grasp_point(t.target)
        return topdown([g[0], g[1], g[2] + 0.07], knob_yaw())

    def grasp():
        g = cell.grasp_point(t.target)
        return topdown([g[0], g[1], g[2]], knob_yaw())

    def twist():
        p = cell.tcp_pose()
        yaw = rotvec_to_euler(p[3:], "ZYX")[0]
        return topdown(p[:3], yaw + (turn if yaw < 0 else -turn))  # turn towards the wrist's centre

    return [Stage("above", above, OPEN), Stage("descend", grasp, OPEN), Stage("close", None, CLOSED),
            Stage("twist", twist, CLOSED), Stage("release", None, OPEN), vertical(e, "retreat", OPEN, dz=0.08)]


TASK = Task("Twist", difficulty=4, make=make, success=success, plan=plan,
            motion="grasp and twist", goal_phrase="turn it clockwise",
            summary="knob turned >= 1.2 rad (a quarter turn is 1.57)")
