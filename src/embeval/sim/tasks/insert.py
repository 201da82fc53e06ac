"""Insert: put a square peg into the hole of a fixed block."""
from __future__ import annotations

import numpy as np

from embeval.rotations import rotvec_to_euler
from embeval.sim.expert import CLOSED, OPEN, ScriptedExpert, Stage, fold_yaw, grasp_stages, lift, topdown, vertical
from embeval.sim.predicates import TaskSpec, object_state, xy_distance
from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
from embeval.sim.scene_generators import Layout, pick_color
from embeval.sim.task_registry import Task
from embeval.sim.task_state import WorldState


def make(rng: np.random.Generator, lay: Layout, d: int) -> tuple[list[ObjectSpec], TaskSpec]:
    """A seeded Insert scene: its objects and task spec (difficulty ``d``)."""
    pc, hc = pick_color(rng), pick_color(rng)
    peg = ObjectSpec(name="peg", kind="peg", position=lay.place(0.03), color=COLORS[pc], color_name=pc, mass=0.05)
    hole = ObjectSpec(name="hole", kind="hole", position=lay.place(0.07), color=COLORS[hc], color_name=hc, fixed=True,
                      category="block")
    return [peg, hole], TaskSpec("Insert", f"insert the {pc} peg into the hole of the {hc} block", d, "peg", reference="hole",
                                 tolerance=0.008, max_steps=110)


def success(task: TaskSpec, world: WorldState, scene: SceneSpec | None = None) -> bool:
    """Released inside the hole: centres within ``tolerance`` (default 8 mm) in xy, peg bottom below 1 cm."""
    peg, hole = object_state(world, task.target), object_state(world, task.reference)
    return (world.grasped != task.target and xy_distance(peg.position, hole.position) <= (task.tolerance or 0.008)
            and peg.bottom_z <= 0.01)


def plan(e: ScriptedExpert) -> list[Stage]:
    """Grasp the peg, lift it to 20 cm, turn it square to the hole, carry it above the hole, lower it in, release."""
    t = e.env.task
    cell = e.env.cell
    z_carry = 0.20

    def align():  # turn the held peg so its faces line up with the hole's
        p = cell.tcp_pose()
        yaw = rotvec_to_euler(p[3:], "ZYX")[0]
        d = fold_yaw(e.obj(t.reference)[1] - e.obj(t.target)[1])
        return topdown([p[0], p[1], z_carry], yaw + d)

    def above_hole():
        p = cell.tcp_pose()
        off = p[:2] - e.obj(t.target)[0][:2]  # TCP relative to the peg's centre
        xy = e.obj(t.reference)[0][:2] + off
        return np.concatenate([[xy[0], xy[1], z_carry], p[3:]])

    def lower():
        p = cell.tcp_pose()
        aabb = cell.p.getAABB(cell.bodies[t.target].body_id, -1, physicsClientId=cell.client)
        return np.concatenate([[p[0], p[1], p[2] - (aabb[0][2] - 0.004)], p[3:]])

    return [*grasp_stages(e, t.target), lift(e, z_carry), Stage("align", align, CLOSED),
            Stage("above_hole", above_hole, CLOSED), Stage("lower", lower, CLOSED), Stage("release", None, OPEN, wait=2),
            vertical(e, "retreat", OPEN, z=0.16)]


TASK = Task("Insert", difficulty=5, make=make, success=success, plan=plan,
            motion="grasp and insert",
            summary="peg released in the hole (centres within 8 mm, peg down on the table)")
