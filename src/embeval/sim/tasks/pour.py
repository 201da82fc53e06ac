"""Pour: tip a cup past 80 degrees with its mouth over a bowl (a geometric proxy: no liquid is simulated)."""
from __future__ import annotations

import math

import numpy as np

from embeval.rotations import Turn, compose
from embeval.sim.expert import CLOSED, ScriptedExpert, Stage, grasp_stages, lift
from embeval.sim.predicates import TaskSpec, object_state, up_axis, xy_distance
from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
from embeval.sim.scene_generators import Layout, pick_color
from embeval.sim.task_registry import Task
from embeval.sim.task_state import WorldState


def make(rng: np.random.Generator, lay: Layout, d: int) -> tuple[list[ObjectSpec], TaskSpec]:
    """A seeded Pour scene: its objects and task spec (difficulty ``d``)."""
    cc, bc = pick_color(rng), pick_color(rng)
    cup = ObjectSpec(name="cup", kind="cup", position=lay.place(0.045), color=COLORS[cc], color_name=cc, mass=0.15)
    bowl = ObjectSpec(name="bowl", kind="bowl", position=lay.place(0.08), size=(0.075, 0.045, 0.008), color=COLORS[bc],
                      color_name=bc, mass=0.4)
    return [cup, bowl], TaskSpec("Pour", f"pour the {cc} cup into the {bc} bowl", d, "cup", reference="bowl",
                                 threshold=np.radians(80), max_steps=110)


def success(task: TaskSpec, world: WorldState, scene: SceneSpec | None = None) -> bool:
    """(No liquid is simulated.) The cup is tipped past ``threshold`` (80 deg) with its mouth over the bowl."""
    cup, bowl = object_state(world, task.target), object_state(world, task.reference)
    cup_h, bowl_r = 0.08, 0.075
    if scene is not None:
        cs, bs = scene.object(task.target).size, scene.object(task.reference).size
        cup_h = cs[1] if len(cs) > 1 else cup_h
        bowl_r = bs[0] if bs else bowl_r
    axis = up_axis(cup.orientation)
    tilt = float(np.arccos(np.clip(axis[2], -1.0, 1.0)))
    mouth = cup.position + axis * cup_h / 2
    return tilt >= (task.threshold or np.radians(80)) and xy_distance(mouth, bowl.position) <= bowl_r - 0.01


def plan(e: ScriptedExpert) -> list[Stage]:
    """Grasp the cup, lift it to 20 cm beside the bowl, tip it 100 deg towards the robot's centre line."""
    t = e.env.task
    cell = e.env.cell
    z_pour = 0.20
    tilt = math.radians(100)

    def geometry():
        bowl = e.obj(t.reference)[0]
        side = 1.0 if bowl[1] < 0 else -1.0  # tip the mouth towards the robot's centre line
        return bowl, side

    def above_bowl():
        p = cell.tcp_pose()
        bowl, side = geometry()
        return np.concatenate([[bowl[0], bowl[1] - side * 0.04, z_pour], p[3:]])

    def tip():
        p = cell.tcp_pose()
        _, side = geometry()
        return np.concatenate([p[:3], compose(Turn.euler("x", -side * tilt), Turn.rotvec(p[3:]))])

    return [*grasp_stages(e, t.target), lift(e, z_pour), Stage("above_bowl", above_bowl, CLOSED),
            Stage("tip", tip, CLOSED, wait=1)]


TASK = Task("Pour", difficulty=5, make=make, success=success, plan=plan,
            motion="grasp and tilt", goal_phrase="pour it out",
            summary="geometric proxy (no liquid is simulated): cup tipped past 80 deg with its mouth over the bowl")
