"""Scene-level perturbations of the pybullet workcell (LIBERO-Plus style): the world changed before the camera.

Each axis (:class:`Axis`, one file per axis in this package, registered on :data:`AXES`) declares its
quantities in physical units (cm, deg, %, K, objects, words), five severity levels with stated ranges and a
seeded sampler; :class:`Perturbations` composes them and applies them at reset
(``SimEnv(perturb=Perturbations.parse("camera_pose:3"))``, or ``embeval sim render --perturb camera_pose:3``),
reproducible from the episode seed, composable with each other and with the 30 image distortions.
ManiSkill and LIBERO apply every axis but distractors (:mod:`embeval.sim.perturb.backends`).
"""
from __future__ import annotations

from embeval.sim.perturb.axis import AXES, LEVELS, Axis, Quantity, axes, get_axis
from embeval.sim.perturb.compose import Perturbation, Perturbations, Prepared, load

__all__ = ["AXES", "LEVELS", "Axis", "Perturbation", "Perturbations", "Prepared", "Quantity", "axes", "get_axis", "load",
           "markdown_table", "table"]


def table() -> list[dict]:
    """Every axis as plain data: name, what it changes, units, the five levels' ranges in words, direction."""
    return [{"axis": a.name, "changes": a.changes, "unit": a.unit, "description": a.description,
             "direction": a.direction,
             "quantities": [{"name": q.name, "unit": q.unit, "signed": q.signed, "ranges": [list(r) for r in q.ranges]}
                            for q in a.quantities],
             "levels": {str(lv): a.level_text(lv) for lv in LEVELS}} for a in axes()]


def markdown_table() -> str:
    """The docs/sim.md axes table (``embeval perturb list --markdown``)."""
    rows = ["| axis | changes | unit | level 1 | level 2 | level 3 | level 4 | level 5 |", "|---|---|---|---|---|---|---|---|"]
    for a in axes():
        rows.append(f"| `{a.name}` | {a.changes} | {a.unit} | " + " | ".join(a.level_text(lv) for lv in LEVELS) + " |")
    return "\n".join(rows)
