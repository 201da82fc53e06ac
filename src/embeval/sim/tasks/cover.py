"""Cover: put a plate on a bowl's rim."""
from __future__ import annotations

import numpy as np

from embeval.sim.expert import carry_to_reference
from embeval.sim.predicates import TaskSpec, object_state, xy_distance
from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
from embeval.sim.scene_generators import Layout, pick_color
from embeval.sim.task_registry import Task
from embeval.sim.task_state import WorldState


def make(rng: np.random.Generator, lay: Layout, d: int) -> tuple[list[ObjectSpec], TaskSpec]:
    """A seeded Cover scene: its objects and task spec (difficulty ``d``)."""
    bc, pc = pick_color(rng), pick_color(rng)
    bowl = ObjectSpec(name="bowl", kind="bowl", position=lay.place(0.045), size=(0.034, 0.04, 0.006), color=COLORS[bc],
                      color_name=bc, mass=0.3)
    # the plate is just narrower than the open gripper (8.5 cm) and wider than the bowl
    plate = ObjectSpec(name="plate", kind="plate", position=lay.place(0.05), size=(0.040, 0.010), color=COLORS[pc],
                       color_name=pc, mass=0.1)
    return [bowl, plate], TaskSpec("Cover", f"cover the {bc} bowl with the {pc} plate", d, "plate", reference="bowl",
                                   tolerance=0.015, max_steps=110)


def success(task: TaskSpec, world: WorldState, scene: SceneSpec | None = None) -> bool:
    """Released on top of the receptacle: centres within ``tolerance`` (1.5 cm) in xy, resting on its rim."""
    lid, rec = object_state(world, task.target), object_state(world, task.reference)
    height = 0.04
    if scene is not None and len(scene.object(task.reference).size) > 1:
        height = scene.object(task.reference).size[1]
    return (world.grasped != task.target and xy_distance(lid.position, rec.position) <= (task.tolerance or 0.015)
            and lid.bottom_z >= rec.bottom_z + height - 0.012)


TASK = Task("Cover", difficulty=4, make=make, success=success, plan=carry_to_reference,
            motion="lift and cover with",
            summary="plate released on the bowl's rim, centres within 1.5 cm")
