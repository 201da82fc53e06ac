"""Scene perturbations on the other simulators: which axis each backend implements, and the seeded draws sent to it.

The axes' own samplers draw (:meth:`Axis.sample` with :meth:`Axis.rng` of the episode seed, so a seed draws the same
numbers on every backend); a backend gets the drawn parameters and applies them to its own model at reset
(LIBERO: the MuJoCo model in its worker, :mod:`embeval.sim.libero.worker`; ManiSkill: the SAPIEN cameras and
lights, :mod:`embeval.sim.maniskill.env`). An axis a backend does not implement is refused in one line, with why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embeval.errors import ConfigError
from embeval.sim.perturb.axis import get_axis
from embeval.sim.perturb.compose import Perturbations

#: the image axes LIBERO and ManiSkill apply to their own cameras and lights
IMAGE_AXES = ("camera_pose", "fov", "light_color", "light_direction", "light_intensity")
#: backend -> axis -> why it is not implemented there (axes absent here: implemented)
UNSUPPORTED: dict[str, dict[str, str]] = {
    "libero": {
        "table_texture": "LIBERO's table and floor materials come from its scene XML per task; swapping them needs "
                         "per-scene texture names (LIBERO-PRO's _env suites change the environment instead)",
        "background_texture": "LIBERO's wall materials come from its scene XML per task (LIBERO-PRO's _env suites "
                              "change the environment instead)",
        "distractors": "adding bodies means rebuilding LIBERO's MJCF from the BDDL (LIBERO-PRO's _object suites "
                       "add or change objects instead)",
        "initial_state": "LIBERO episodes start from its fixed initial states (the episode seed picks one); "
                         "LIBERO-PRO's _swap suites move the objects instead",
        "instruction": "LIBERO's instructions come from the BDDL, not embeval's templates (LIBERO-PRO's _lan suites "
                       "reword them)",
    },
    "maniskill": {
        "table_texture": "ManiSkill's table scene builder loads its own textured model; not implemented",
        "background_texture": "ManiSkill's tabletop scenes have no wall; not implemented",
        "distractors": "adding actors means a ManiSkill scene rebuild (reconfigure) per episode; not implemented",
        "initial_state": "ManiSkill draws its own seeded initial state per task; not implemented",
        "instruction": "ManiSkill tasks carry no instruction (embeval's defaults are fixed); not implemented",
    },
}


def supported(backend: str) -> tuple[str, ...]:
    """The axes ``backend`` (libero, maniskill) applies."""
    return tuple(a for a in IMAGE_AXES if a not in UNSUPPORTED.get(backend, {}))


def check(perturb: Perturbations | None, backend: str) -> Perturbations | None:
    """``perturb`` when every axis is implemented on ``backend``; else a one-line :class:`ConfigError` naming why."""
    if not perturb:
        return perturb
    if backend not in UNSUPPORTED:
        raise ConfigError(f"perturb: no scene perturbations for backend {backend!r} (libero, maniskill, pybullet)")
    for p in perturb:
        why = UNSUPPORTED[backend].get(p.axis)
        if why is not None:
            raise ConfigError(f"perturb {p}: not implemented on {backend}: {why}; {backend} implements "
                              f"{', '.join(supported(backend))}")
    return perturb


@dataclass(frozen=True)
class CameraRef:
    """A backend camera as the samplers see it (``mount``: ``world`` or a moving link)."""

    name: str
    mount: str = "world"


@dataclass(frozen=True)
class LightingRef:
    """The backend's key light as the samplers see it: ``direction`` (3,), the way the light points."""

    direction: tuple[float, float, float] = (0.0, 0.0, -1.0)


@dataclass(frozen=True)
class SceneView:
    """What a backend tells the samplers about its scene: its cameras and key light (the ``scene`` argument of
    :attr:`Axis.sample`; pybullet passes its full :class:`~embeval.sim.scene.SceneSpec`)."""

    name: str
    cameras: tuple[CameraRef, ...] = ()
    lighting: LightingRef = field(default_factory=LightingRef)


def draw(perturb: Perturbations | None, seed: int, backend: str, view: SceneView) -> list[dict[str, Any]]:
    """The parameters every axis of ``perturb`` draws for episode ``seed`` (registry order), as
    ``[{"axis", "level", "params"}]`` (JSON-able: what the backend applies and the episode records)."""
    check(perturb, backend)
    out = []
    for p in perturb or ():
        axis = get_axis(p.axis)
        params = axis.sample(axis.rng(seed), p.level, view, None)
        if p.axis == "light_color":  # the backends multiply their light colours by this gain
            from embeval.sim.perturb.light_color import tint

            params["rgb_gain"] = tint(params["temperature_k"]).tolist()
        out.append({"axis": p.axis, "level": p.level, "params": params})
    return out


def parse_option(value: Any, backend: str) -> Perturbations | None:
    """``sim.options.perturb`` (``"camera_pose:3,fov:2"``, a list of such words, or a :class:`Perturbations`) ->
    checked :class:`Perturbations` for ``backend`` (None when empty)."""
    if value is None or isinstance(value, Perturbations):
        return check(value or None, backend)
    if not isinstance(value, (str, list, tuple)):
        raise ConfigError(f"sim.options.perturb: give AXIS:LEVEL words such as ['camera_pose:3'], got {value!r}")
    return check(Perturbations.parse(value) or None, backend)


def record(draws: list[dict[str, Any]]) -> dict[str, Any]:
    """``{axis: {"level", params...}}`` (the shape :meth:`Prepared.record` gives on pybullet)."""
    return {d["axis"]: {"level": d["level"], **d["params"]} for d in draws}
