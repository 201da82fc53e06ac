"""Place: put a cube into a bowl or onto a plate."""
from __future__ import annotations

import numpy as np

from embeval.sim.expert import carry_to_reference
from embeval.sim.predicates import TaskSpec, object_state, xy_distance
from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
from embeval.sim.scene_generators import Layout, pick_color, seeded_cube
from embeval.sim.task_registry import Task
from embeval.sim.task_state import WorldState


def make(rng: np.random.Generator, lay: Layout, d: int) -> tuple[list[ObjectSpec], TaskSpec]:
    """A seeded Place scene: its objects and task spec (difficulty ``d``)."""
    c = pick_color(rng)
    rc = pick_color(rng, {c})
    kind = str(rng.choice(["bowl", "plate"]))
    size = (0.075, 0.045, 0.008) if kind == "bowl" else (0.075, 0.012)
    rec = ObjectSpec(name=kind, kind=kind, position=lay.place(0.08), size=size, color=COLORS[rc], color_name=rc, mass=0.4)
    cube = seeded_cube("cube", lay.place(0.035), c, rng)
    prep = "in" if kind == "bowl" else "on"
    return [cube, rec], TaskSpec("Place", f"place the {c} cube {prep} the {rc} {kind}", d, "cube", reference=kind,
                                 tolerance=0.03, max_steps=110)


def success(task: TaskSpec, world: WorldState, scene: SceneSpec | None = None) -> bool:
    """Released inside/on the receptacle: xy within its radius minus ``tolerance``/2, not held, resting low."""
    t, r = object_state(world, task.target), object_state(world, task.reference)
    radius = 0.07
    if scene is not None:
        spec = scene.object(task.reference)
        radius = spec.size[0] if spec.size else radius
    return (world.grasped != task.target and xy_distance(t.position, r.position) <= radius - task.tolerance / 2
            and t.bottom_z <= r.bottom_z + 0.06)


TASK = Task("Place", difficulty=2, make=make, success=success, plan=carry_to_reference,
            motion="grasp and carry",
            summary="released inside the bowl / on the plate")
