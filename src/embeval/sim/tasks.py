"""Manipulation tasks for the ten Embodied-IQA verbs: instructions, difficulty, scene generators, success predicates.

A :class:`TaskSpec` is plain data (it also describes a task on the real cell). Its success
predicate reads a :class:`WorldState` (object poses and articulation joints, measured in the sim
or on the real cell), so the same definition scores both.

Implemented (predicate + scripted expert): all ten (Pour is a geometric proxy: no liquid is
simulated; the cup is tipped with its mouth over the bowl). A verb without a predicate would report
``implemented = False``.

Frame base == world; the table top is z = 0; "left" is +y and "in front of" is towards the robot (-x).

The public façade of three modules: :mod:`embeval.sim.task_state` (what predicates read),
:mod:`embeval.sim.predicates` (:class:`TaskSpec`, difficulty, success predicates) and
:mod:`embeval.sim.scene_generators` (seeded scene makers, :func:`make_task`, :func:`make_reference_scene`).
"""
from __future__ import annotations

from embeval.sim.predicates import DIFFICULTY, PREDICATES, Predicate, TaskSpec, predicate
from embeval.sim.scene_generators import (
    BACKGROUNDS,
    LEVEL_VERBS,
    MAKERS,
    REFERENCE_AREA,
    TABLE_AREA,
    TEXTURED_BACKGROUNDS,
    Layout,
    SceneMaker,
    make_reference_scene,
    make_task,
    maker,
    scene_style,
)
from embeval.sim.task_state import ObjectState, WorldState

__all__ = [
    "BACKGROUNDS", "DIFFICULTY", "LEVEL_VERBS", "MAKERS", "PREDICATES", "REFERENCE_AREA", "TABLE_AREA",
    "TEXTURED_BACKGROUNDS", "Layout", "ObjectState", "Predicate", "SceneMaker", "TaskSpec", "WorldState",
    "make_reference_scene", "make_task", "maker", "predicate", "scene_style",
]
