"""Pick: lift one object (a cube, a can or a bar) at least 5 cm off the table."""
from __future__ import annotations

import numpy as np

from embeval.sim.expert import ScriptedExpert, Stage, grasp_stages, lift
from embeval.sim.predicates import TaskSpec, object_state
from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
from embeval.sim.scene_generators import Layout, pick_color, seeded_cube
from embeval.sim.task_registry import Task
from embeval.sim.task_state import WorldState


def make(rng: np.random.Generator, lay: Layout, d: int) -> tuple[list[ObjectSpec], TaskSpec]:
    """A seeded Pick scene: its objects and task spec (difficulty ``d``)."""
    c = pick_color(rng)
    what = str(rng.choice(["cube", "can", "bar"]))  # main-object variety for reference images
    xy = lay.place(0.04)
    if what == "cube":
        obj = seeded_cube("cube", xy, c, rng)
    elif what == "can":
        obj = ObjectSpec(name="can", kind="cylinder", position=xy, size=(float(rng.uniform(0.02, 0.026)), 0.06),
                         color=COLORS[c], color_name=c, category="can", mass=0.08)
    else:
        obj = ObjectSpec(name="bar", kind="box", position=xy, yaw=float(rng.uniform(-1.5, 1.5)), size=(0.07, 0.03, 0.03),
                         color=COLORS[c], color_name=c, category="bar", mass=0.06)
    return [obj], TaskSpec("Pick", f"pick up the {c} {obj.category}", d, obj.name, threshold=0.05, max_steps=60)


def success(task: TaskSpec, world: WorldState, scene: SceneSpec | None = None) -> bool:
    """Lifted: the target's bottom is at least ``threshold`` (default 5 cm) above the table."""
    return object_state(world, task.target).bottom_z >= (task.threshold or 0.05)


def plan(e: ScriptedExpert) -> list[Stage]:
    """Grasp the target from above and lift the TCP to 16 cm."""
    return [*grasp_stages(e, e.env.task.target), lift(e)]


TASK = Task("Pick", difficulty=1, make=make, success=success, plan=plan,
            motion="grasp and lift", goal_phrase="raise it up",
            summary="target lifted >= 5 cm")
