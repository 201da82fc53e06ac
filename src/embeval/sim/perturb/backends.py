"""Scene perturbations on the other simulators: which axis each backend implements, and the seeded draws sent to it.

The axes' own samplers draw (:meth:`Axis.sample` with :meth:`Axis.rng` of the episode seed, so a seed draws the same
numbers on every backend); a backend gets the drawn parameters and applies them to its own model at reset
(LIBERO: the MuJoCo model in its worker, :mod:`embeval.sim.libero.worker`; ManiSkill: the SAPIEN cameras and
lights, materials and arm, :mod:`embeval.sim.maniskill.env`). Axes whose pybullet sampler needs the pybullet
scene draw through :data:`BACKEND_SAMPLERS` from what the backend tells (:class:`SceneView`). An axis a backend
does not implement (its :class:`~embeval.sim.backend.SimBackend` record says which, and why) is refused in one
line, with why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embeval.errors import ConfigError, NotApplicableError
from embeval.sim.perturb.axis import get_axis
from embeval.sim.perturb.compose import Perturbations


def supported(backend: str) -> tuple[str, ...]:
    """The axes ``backend`` applies (registry order): its record's
    :attr:`~embeval.sim.backend.SimBackend.perturb_unsupported` says which it does not, and why."""
    from embeval.sim.backend import get_sim_backend

    return get_sim_backend(backend).supported_axes()


def check(perturb: Perturbations | None, backend: str) -> Perturbations | None:
    """``perturb`` when every axis is implemented on ``backend``; else a one-line :class:`ConfigError` naming why."""
    if not perturb:
        return perturb
    from embeval.sim.backend import SIM_BACKENDS, get_sim_backend

    unsupported = get_sim_backend(backend).perturb_unsupported
    if unsupported is None:
        with_axes = [n for n in SIM_BACKENDS.names() if get_sim_backend(n).perturb_unsupported is not None]
        raise ConfigError(f"perturb: no scene perturbations for backend {backend!r} ({', '.join(with_axes)})")
    for p in perturb:
        why = unsupported.get(p.axis)
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
    :attr:`Axis.sample`; pybullet passes its full :class:`~embeval.sim.scene.SceneSpec`), the number of arm joints
    ``initial_state`` offsets, the ``instruction`` the policy reads, ``surfaces``: the mean colour (RGB 0..1) of
    the table top (``"table"``) and of the background (``"background"``) the texture axes keep, and for
    ``distractors`` the ``table_area`` ((x0, x1), (y0, y1), m) they go in, the segments ``keep_clear`` of
    ``(ax, ay, bx, by, radius)`` (m, the same frame: the task's objects, goal and path) and the colour names the
    task's objects have (``colors``)."""

    name: str
    cameras: tuple[CameraRef, ...] = ()
    lighting: LightingRef = field(default_factory=LightingRef)
    arm_joints: int = 0
    instruction: str = ""
    surfaces: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    table_area: tuple[tuple[float, float], tuple[float, float]] | None = None
    keep_clear: tuple[tuple[float, float, float, float, float], ...] = ()
    colors: tuple[str, ...] = ()


def _surface(name: str):
    def sample(rng, level: int, view: SceneView) -> dict[str, Any]:
        from embeval.sim.perturb import _texture

        if name not in view.surfaces:
            raise NotApplicableError(f"perturb {name}_texture: scene {view.name!r} has no {name} surface to retexture")
        return {**_texture.sample(rng, level), "mean_rgb": [round(float(v), 4) for v in view.surfaces[name][:3]]}
    return sample


def _initial_state(rng, level: int, view: SceneView) -> dict[str, Any]:
    from embeval.sim.perturb.initial_state import sample_joints

    return sample_joints(rng, level, view.arm_joints)


def _instruction(rng, level: int, view: SceneView) -> dict[str, Any]:
    from embeval.sim.perturb.instruction import sample_text

    return sample_text(rng, level, view.instruction)


def _distractors(rng, level: int, view: SceneView) -> dict[str, Any]:
    import numpy as np

    from embeval.sim.perturb.distractors import place

    if view.table_area is None:
        raise NotApplicableError(f"perturb distractors: scene {view.name!r} told no table area to place distractors in")
    clear = [(np.array(c[:2]), np.array(c[2:4]), float(c[4])) for c in view.keep_clear]
    return place(rng, level, clear, set(view.colors), view.table_area, f"scene {view.name!r}")


#: texture axis -> the surface of :attr:`SceneView.surfaces` it retextures
TEXTURE_SURFACES = {"table_texture": "table", "background_texture": "background"}

#: axes whose pybullet sampler reads the pybullet scene -> ``sample(rng, level, view)`` from what a backend tells
#: (:class:`SceneView`); the other axes' own samplers draw unchanged
BACKEND_SAMPLERS = {"initial_state": _initial_state, "instruction": _instruction, "distractors": _distractors,
                    **{axis: _surface(surface) for axis, surface in TEXTURE_SURFACES.items()}}


def draw(perturb: Perturbations | None, seed: int, backend: str, view: SceneView) -> list[dict[str, Any]]:
    """The parameters every axis of ``perturb`` draws for episode ``seed`` (registry order), as
    ``[{"axis", "level", "params"}]`` (JSON-able: what the backend applies and the episode records)."""
    check(perturb, backend)
    out = []
    for p in perturb or ():
        axis = get_axis(p.axis)
        own = BACKEND_SAMPLERS.get(p.axis)
        params = (own(axis.rng(seed), p.level, view) if own is not None
                  else axis.sample(axis.rng(seed), p.level, view, None))
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


#: draw keys a backend replaces by what it applied (the recorded episode keeps the applied values only)
_CANDIDATE_KEYS = ("sign_patterns",)


def record(draws: list[dict[str, Any]], applied: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``{axis: {"level", params...}}`` (the shape :meth:`Prepared.record` gives on pybullet); ``applied``: what the
    backend chose per axis (``initial_state``: the ``offsets_deg`` that fitted), merged in place of the candidates."""
    out = {d["axis"]: {"level": d["level"], **d["params"]} for d in draws}
    for axis, extra in (applied or {}).items():
        for k in _CANDIDATE_KEYS:
            out[axis].pop(k, None)
        out[axis].update(extra)
    return out
