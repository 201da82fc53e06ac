"""Pull: open a drawer by at least 8 cm."""
from __future__ import annotations

import numpy as np

from embeval.errors import ConfigError
from embeval.rotations import Turn, apply
from embeval.sim.expert import CLOSED, OPEN, ScriptedExpert, Stage, topdown, vertical
from embeval.sim.predicates import TaskSpec, object_state
from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
from embeval.sim.scene_generators import Layout, pick_color
from embeval.sim.task_registry import Task
from embeval.sim.task_state import WorldState


def make(rng: np.random.Generator, lay: Layout, d: int) -> tuple[list[ObjectSpec], TaskSpec]:
    """A seeded Pull scene: its objects and task spec (difficulty ``d``)."""
    c = pick_color(rng)
    for _ in range(200):
        x = float(rng.uniform(max(0.52, lay.area[0][0] + 0.16), lay.area[0][1] - 0.08))
        y = float(rng.uniform(lay.area[1][0] + 0.12, lay.area[1][1] - 0.12))
        if lay.is_free((x, y), 0.14) and lay.is_free((x - 0.14, y), 0.08):
            break
    else:
        raise ConfigError("could not lay out a Pull task")
    lay.reserve(x, y, 0.12)
    lay.reserve(x - 0.14, y, 0.06)  # where the drawer opens to
    dr = ObjectSpec(name="drawer", kind="drawer", position=(x, y), color=COLORS[c], color_name=c, fixed=True)
    return [dr], TaskSpec("Pull", f"pull the {c} drawer open", d, "drawer", threshold=0.08, max_steps=70)


def success(task: TaskSpec, world: WorldState, scene: SceneSpec | None = None) -> bool:
    """The drawer is open by at least ``threshold`` (default 8 cm)."""
    d = object_state(world, task.target)
    return d.joint is not None and -d.joint >= (task.threshold or 0.08)


def plan(e: ScriptedExpert) -> list[Stage]:
    """Grasp the drawer's knob, pull along the drawer's axis 1.4x the success distance, release, retreat."""
    t = e.env.task
    cell = e.env.cell
    _, yaw = e.obj(t.target)

    def above():
        g = cell.grasp_point(t.target)
        return topdown([g[0], g[1], g[2] + 0.07], yaw)

    def grasp():
        g = cell.grasp_point(t.target)
        return topdown([g[0], g[1], g[2]], yaw)

    def pull():
        p = cell.tcp_pose()
        axis = apply(Turn.euler("z", yaw), [1.0, 0.0, 0.0])
        xy = p[:2] - axis[:2] * (t.threshold or 0.08) * 1.4
        return np.concatenate([[xy[0], xy[1], p[2]], p[3:]])

    return [Stage("above", above, OPEN), Stage("descend", grasp, OPEN), Stage("close", None, CLOSED),
            Stage("pull", pull, CLOSED), Stage("release", None, OPEN), vertical(e, "retreat", OPEN, dz=0.08)]


TASK = Task("Pull", difficulty=3, make=make, success=success, plan=plan,
            motion="grasp and pull", goal_phrase="pull it open",
            summary="drawer open >= 8 cm")
