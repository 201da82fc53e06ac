"""Push: slide a cube onto a target marker without grasping it."""
from __future__ import annotations

import math

import numpy as np

from embeval.errors import ConfigError
from embeval.sim.expert import CLOSED, ScriptedExpert, Stage, fold_yaw, topdown, vertical
from embeval.sim.predicates import TaskSpec, object_state, xy_distance
from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
from embeval.sim.scene_generators import Layout, pick_color, seeded_cube
from embeval.sim.task_registry import Task
from embeval.sim.task_state import WorldState


def make(rng: np.random.Generator, lay: Layout, d: int) -> tuple[list[ObjectSpec], TaskSpec]:
    """A seeded Push scene: its objects and task spec (difficulty ``d``)."""
    c = pick_color(rng)
    mc = pick_color(rng, {c})
    for _ in range(200):
        (ax0, ax1), (ay0, ay1) = lay.area
        start = (float(rng.uniform(ax0 + 0.04, ax1 - 0.06)), float(rng.uniform(ay0 + 0.06, ay1 - 0.06)))
        ang = float(rng.choice([0.0, np.pi / 2, np.pi, -np.pi / 2]))
        dist = float(rng.uniform(0.10, 0.15))
        goal = (start[0] + dist * np.cos(ang), start[1] + dist * np.sin(ang))
        if lay.inside(goal) and lay.is_free(start, 0.10) and lay.is_free(goal, 0.08):
            break
    else:
        raise ConfigError("could not lay out a Push task")
    lay.reserve(*start, 0.10)
    lay.reserve(*goal, 0.06)
    cube = seeded_cube("cube", start, c, rng)
    cube.yaw = 0.0
    marker = ObjectSpec(name="target", kind="marker", position=goal, size=(0.035,), color=COLORS[mc], color_name=mc,
                        category="target")
    return [cube, marker], TaskSpec("Push", f"push the {c} cube onto the {mc} target", d, "cube", reference="target",
                                    goal=goal, tolerance=0.04, max_steps=90)


def success(task: TaskSpec, world: WorldState, scene: SceneSpec | None = None) -> bool:
    """Within ``tolerance`` of the goal marker, never grasped (pushed, not carried), on the table."""
    t = object_state(world, task.target)
    goal = task.goal if task.goal else object_state(world, task.reference).position
    return task.target not in world.ever_grasped and xy_distance(t.position, goal) <= task.tolerance and t.bottom_z <= 0.01


def plan(e: ScriptedExpert) -> list[Stage]:
    """Closed fingers behind the cube (away from the goal), push it in a straight line to the goal, retreat up."""
    t = e.env.task
    cell = e.env.cell
    goal = np.asarray(t.goal[:2]) if t.goal else e.obj(t.reference)[0][:2]
    z_push = 0.02

    def geom():
        p, _ = e.obj(t.target)
        u = goal - p[:2]
        u = u / max(np.linalg.norm(u), 1e-9)
        aabb = cell.p.getAABB(cell.bodies[t.target].body_id, -1, physicsClientId=cell.client)
        half = 0.5 * float(np.max(np.array(aabb[1][:2]) - np.array(aabb[0][:2])))
        yaw = math.atan2(u[1], u[0])  # fingers (TCP y) across the push direction
        return p, u, half, fold_yaw(yaw, math.pi)

    def pre_above():
        p, u, half, yaw = geom()
        xy = p[:2] - u * (half + 0.035)
        return topdown([xy[0], xy[1], 0.10], yaw)

    def pre():
        p, u, half, yaw = geom()
        xy = p[:2] - u * (half + 0.035)
        return topdown([xy[0], xy[1], z_push], yaw)

    def push():
        _, u, half, yaw = geom()
        xy = goal - u * (half + 0.012)
        return topdown([xy[0], xy[1], z_push], yaw)

    return [Stage("close", None, CLOSED), Stage("pre_above", pre_above, CLOSED), Stage("pre", pre, CLOSED),
            Stage("push", push, CLOSED), vertical(e, "retreat", CLOSED, z=0.12)]


TASK = Task("Push", difficulty=2, make=make, success=success, plan=plan,
            motion="push",
            summary="within 4 cm of the target marker, never grasped")
