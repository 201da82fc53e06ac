"""Supervision for the tiny VLM: what a good ~10-word answer to "how do I do this task?" says
about a simulated scene, as slot values computed from the scene and task specs (ground truth).

Answer template (:data:`TEMPLATE`)::

    "{motion} the {color} {category} at the {depth} {side}, then {goal}"
    e.g. "grasp and lift the red cube at the far left, then raise it up"

``motion`` follows from the verb, ``color``/``category`` name the target, ``depth``/``side``
locate it on the table (robot frame: near = small x, left = +y), ``goal`` says where it goes
(the reference object's side, or a verb-specific ending). Location slots need the image.
"""
from __future__ import annotations

from collections.abc import Mapping

from embeval.sim.scene import COLORS, SceneSpec
from embeval.sim.task_registry import TaskTable
from embeval.sim.tasks import TaskSpec

TEMPLATE = "{motion} the {color} {category} at the {depth} {side}, then {goal}"

#: verb -> the answer's motion words ("grasp and lift"): a live view of the task records (embeval.sim.tasks)
MOTIONS: Mapping[str, str] = TaskTable("motion")
#: verb -> a fixed ending ("raise it up") for verbs that have one (the others say a direction); live view
VERB_GOALS: Mapping[str, str] = TaskTable("goal_phrase")
SIDES = ("left", "center", "right")
DEPTHS = ("near", "far")
DIRECTIONS = ("move it left", "move it right", "move it forward", "move it back")


def goals() -> tuple[str, ...]:
    """Every ``goal`` slot value: the four directions, then the verbs' fixed endings (sorted)."""
    return DIRECTIONS + tuple(sorted(set(VERB_GOALS.values())))

#: Prompt wrappers used in training (the task instruction is inserted); inference accepts any prompt.
PROMPTS = ("{instruction}", "How do I {instruction}? Answer in about 10 words.",
           "Task: {instruction}. Describe how to do it.")


def side_of(y: float) -> str:
    """Robot-frame side of a table position: left is +y (|y| < 0.08 m is center)."""
    return "left" if y > 0.08 else "right" if y < -0.08 else "center"


def depth_of(x: float) -> str:
    """near (x < 0.52 m from the base) or far."""
    return "near" if x < 0.52 else "far"


def direction(dx: float, dy: float) -> str:
    """The dominant direction of a table-plane displacement (robot frame)."""
    if abs(dy) >= abs(dx):
        return "move it left" if dy > 0 else "move it right"
    return "move it back" if dx > 0 else "move it forward"


def task_slots(scene: SceneSpec, task: TaskSpec) -> dict[str, str]:
    """Ground-truth slot values for ``task`` in ``scene``."""
    tgt = scene.object(task.target)
    x, y = tgt.xy
    if task.verb in VERB_GOALS:
        goal = VERB_GOALS[task.verb]
    elif task.goal:
        goal = direction(task.goal[0] - x, task.goal[1] - y)
    elif task.reference:
        rx, ry = scene.object(task.reference).xy
        goal = direction(rx - x, ry - y)
    else:
        goal = "raise it up"
    return {"motion": MOTIONS[task.verb], "color": tgt.color_name or "grey", "category": tgt.category,
            "depth": depth_of(x), "side": side_of(y), "goal": goal}


def slot_vocabulary(categories) -> dict[str, list[str]]:
    """Fixed vocabularies (every VLM trained on the same data shares label ids); ``categories``
    are the target categories seen in the data."""
    return {
        "motion": sorted(set(MOTIONS.values())), "color": sorted(COLORS) + ["grey"],
        "category": sorted(set(categories)), "depth": list(DEPTHS), "side": list(SIDES), "goal": list(goals()),
    }
