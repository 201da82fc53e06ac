"""Press: push a spring-loaded button's cap down by at least 7 mm."""
from __future__ import annotations

import numpy as np

from embeval.sim.expert import CLOSED, ScriptedExpert, Stage, topdown
from embeval.sim.predicates import TaskSpec, object_state
from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
from embeval.sim.scene_generators import Layout, pick_color
from embeval.sim.task_registry import Task
from embeval.sim.task_state import WorldState


def make(rng: np.random.Generator, lay: Layout, d: int) -> tuple[list[ObjectSpec], TaskSpec]:
    """A seeded Press scene: its objects and task spec (difficulty ``d``)."""
    c = pick_color(rng)
    b = ObjectSpec(name="button", kind="button", position=lay.place(0.06), color=COLORS[c], color_name=c, fixed=True)
    return [b], TaskSpec("Press", f"press the {c} button", d, "button", threshold=0.007, max_steps=50)


def success(task: TaskSpec, world: WorldState, scene: SceneSpec | None = None) -> bool:
    """The button cap went down by at least ``threshold`` (default 7 mm) at some point of the episode."""
    b = object_state(world, task.target)
    low = b.joint_min if b.joint_min is not None else b.joint
    return low is not None and -low >= (task.threshold or 0.007)


def plan(e: ScriptedExpert) -> list[Stage]:
    """Close the fingers, hover above the cap, push it down 90 % of its travel, back up."""
    t = e.env.task
    cell = e.env.cell

    def above():
        g = cell.grasp_point(t.target)
        return topdown([g[0], g[1], g[2] + 0.07])

    def press():
        g = cell.grasp_point(t.target)
        b = cell.bodies[t.target]
        travel = -b.joint_range[0]
        return topdown([g[0], g[1], g[2] + 0.01 - travel * 0.9])  # fingertips 1 cm below the TCP

    return [Stage("close", None, CLOSED), Stage("above", above, CLOSED), Stage("press", press, CLOSED, wait=1),
            Stage("release", above, CLOSED)]


TASK = Task("Press", difficulty=1, make=make, success=success, plan=plan,
            motion="press down on", goal_phrase="release it",
            summary="button cap went down >= 7 mm during the episode")
