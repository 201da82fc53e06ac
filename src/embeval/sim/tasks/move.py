"""Move: carry a cube to a side (left of, right of, behind, in front of) of an anchor block."""
from __future__ import annotations

import numpy as np

from embeval.errors import ConfigError
from embeval.sim.expert import ScriptedExpert, Stage, grasp_stages, lift, place_at
from embeval.sim.predicates import TaskSpec, object_state, xy_distance
from embeval.sim.scene import ObjectSpec, SceneSpec
from embeval.sim.scene_generators import Layout, pick_color, seeded_cube
from embeval.sim.task_registry import Task
from embeval.sim.task_state import WorldState

_RELATIONS = {"left of": (0.0, 1.0), "right of": (0.0, -1.0), "behind": (1.0, 0.0), "in front of": (-1.0, 0.0)}


def make(rng: np.random.Generator, lay: Layout, d: int) -> tuple[list[ObjectSpec], TaskSpec]:
    """A seeded Move scene: its objects and task spec (difficulty ``d``)."""
    c = pick_color(rng)
    ac = pick_color(rng, {c})
    for _ in range(200):
        rel = str(rng.choice(list(_RELATIONS)))
        anchor_xy = (float(rng.uniform(*lay.area[0])), float(rng.uniform(*lay.area[1])))
        off = 0.10 * np.array(_RELATIONS[rel])
        goal = (anchor_xy[0] + off[0], anchor_xy[1] + off[1])
        if lay.inside(goal) and lay.is_free(anchor_xy, 0.06) and lay.is_free(goal, 0.05):
            break
    else:
        raise ConfigError("could not lay out a Move task")
    lay.reserve(*anchor_xy, 0.03)
    lay.reserve(*goal, 0.03)
    anchor = seeded_cube("anchor", anchor_xy, ac, rng, category="block")
    cube = seeded_cube("cube", lay.place(0.035), c, rng)
    word = "the left of" if rel == "left of" else "the right of" if rel == "right of" else rel.replace(" of", "")
    text = f"move the {c} cube to {word} the {ac} block" if "of" in rel else f"move the {c} cube {rel} the {ac} block"
    return [cube, anchor], TaskSpec("Move", text, d, "cube", reference="anchor", goal=goal, tolerance=0.04, max_steps=110)


def success(task: TaskSpec, world: WorldState, scene: SceneSpec | None = None) -> bool:
    """Released on the table within ``tolerance`` of ``goal`` (x, y)."""
    t = object_state(world, task.target)
    return world.grasped != task.target and xy_distance(t.position, task.goal) <= task.tolerance and t.bottom_z <= 0.01


def plan(e: ScriptedExpert) -> list[Stage]:
    """Grasp the cube, lift it, carry it above the goal, set it down on the table, release and retreat."""
    t = e.env.task
    return [*grasp_stages(e, t.target), lift(e), *place_at(e, t.target, lambda: np.asarray(t.goal[:2]), lambda: 0.0)]


TASK = Task("Move", difficulty=3, make=make, success=success, plan=plan,
            motion="grasp and carry",
            summary="released on the table within 4 cm of the goal beside an anchor block")
