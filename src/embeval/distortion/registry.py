"""The distortion registry: 30 types in 7 categories, 5 levels each.

Every type is one :class:`DistortionType` record (name, category, the five level parameters, a pure
function ``fn(img, param, rng) -> img`` on C-contiguous RGB uint8 (H, W, 3)) registered on
:data:`REGISTRY` (an :class:`embeval.registry.Registry`), usually with the :func:`register` decorator in
its category's module (``embeval/distortion/<category>.py``, imported by the package); installed packages
add types through the ``embeval.distortions`` entry-point group (``name = "pkg.module:RECORD"``, a
``DistortionType``). The function must not modify ``img`` and returns a new array. Users call
:func:`distort`, which validates the input, looks up the level's parameter, seeds a
``numpy.random.Generator`` (``rng`` is None for types not registered ``stochastic``) and checks that
shape and dtype are kept. Inputs are never modified. :data:`DISTORTIONS` is a live read-only
``name -> DistortionType`` view of the registry. See docs/contributing.md.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from embeval.action import check_image
from embeval.errors import ConfigError, InvalidInputError
from embeval.registry import Registry, RegistryView

#: the seven categories, in display order
CATEGORIES: tuple[str, ...] = ("blur", "luminance", "chrominance", "noise", "compression", "spatial", "other")
#: levels run 1 (mildest) .. N_LEVELS (most severe)
N_LEVELS = 5

DistortFn = Callable[[np.ndarray, Any, np.random.Generator], np.ndarray]


@dataclass(frozen=True)
class DistortionType:
    """One registered distortion.

    ``levels[i]`` is the parameter of level ``i + 1`` (units in ``param``).
    ``measure`` names the yardstick whose severity rises with the level: ``"psnr"`` (PSNR
    against the reference falls) unless stated otherwise (see :mod:`embeval.distortion.measures`).
    ``albumentations`` names the closest albumentations transform (for the benchmark), if any.
    """

    name: str
    category: str
    levels: tuple
    fn: DistortFn = field(repr=False, compare=False)
    param: str = ""
    description: str = ""
    stochastic: bool = False
    measure: str = "psnr"
    kadid: bool = True  # one of the 25 KADID-10k types (False: camera-specific)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier() or self.name != self.name.lower():
            raise ConfigError(f"distortion names are lower-case identifiers such as 'lens_flare', got {self.name!r}")
        if self.category not in CATEGORIES:
            raise ConfigError(f"distortion {self.name!r}: unknown category {self.category!r}; choose from {', '.join(CATEGORIES)}")
        if not isinstance(self.levels, tuple) or len(self.levels) != N_LEVELS:
            raise ConfigError(f"distortion {self.name!r} needs {N_LEVELS} level parameters (a tuple), got {self.levels!r}")
        if not callable(self.fn):
            raise ConfigError(f"distortion {self.name!r}: fn must be a function fn(img, param, rng) -> img")

    def param_for(self, level: int) -> Any:
        if not isinstance(level, (int, np.integer)) or isinstance(level, bool) or not 1 <= level <= N_LEVELS:
            raise ConfigError(f"distortion level must be an integer 1..{N_LEVELS}, got {level!r}")
        return self.levels[int(level) - 1]


#: every distortion type: name -> :class:`DistortionType`, filled by the category modules at import, then plugins
REGISTRY: Registry[DistortionType] = Registry(
    "distortion", group="embeval.distortions",
    hint="run `embeval distort list`; add one with @register in embeval/distortion/<category>.py or an entry point "
         "of group embeval.distortions naming a DistortionType; docs/contributing.md")
#: name -> DistortionType: a live read-only view of :data:`REGISTRY`
DISTORTIONS: Mapping[str, DistortionType] = RegistryView(REGISTRY)


def register_type(dt: DistortionType) -> DistortionType:
    """Register the record ``dt``; :class:`ConfigError` when its name is taken (unregister that one first)."""
    if not isinstance(dt, DistortionType):
        raise ConfigError(f"register_type takes an embeval.distortion.DistortionType, got {type(dt).__name__}")
    if dt.name in REGISTRY:
        raise ConfigError(f"distortion {dt.name!r} registered twice")
    REGISTRY.register(dt.name, dt, description=dt.description)
    return dt


def register(name: str, category: str, levels, *, param: str = "", description: str = "",
             stochastic: bool = False, measure: str = "psnr", kadid: bool = True) -> Callable[[DistortFn], DistortFn]:
    """Decorator: register ``fn(img, param, rng)`` as distortion ``name`` (its docstring's first line is the
    default description); returns ``fn`` unchanged."""

    def deco(fn: DistortFn) -> DistortFn:
        register_type(DistortionType(name, category, tuple(levels), fn, param,
                                     description or (fn.__doc__ or "").strip().split("\n")[0], stochastic, measure, kadid))
        return fn

    return deco


def unregister(name: str) -> None:
    """Remove distortion ``name`` (:class:`ConfigError` listing the types when absent)."""
    get(name)
    REGISTRY.unregister(name)


def get(name: str) -> DistortionType:
    """The registered type ``name``; :class:`ConfigError` listing the choices otherwise."""
    dt = REGISTRY.get(name)
    if not isinstance(dt, DistortionType):
        raise ConfigError(f"distortion {name!r} is a {type(dt).__name__}, not an embeval.distortion.DistortionType")
    return dt


def list_distortions(category: str | None = None) -> list[str]:
    """Names in registry order (grouped by category), optionally of one category."""
    if category is not None and category not in CATEGORIES:
        raise ConfigError(f"unknown distortion category {category!r}; choose from {', '.join(CATEGORIES)}")
    types = [get(n) for n in REGISTRY.names()]
    return [d.name for c in CATEGORIES for d in types if d.category == c and (category in (None, c))]


def categories() -> dict[str, list[str]]:
    """Category -> names."""
    return {c: list_distortions(c) for c in CATEGORIES}


def distort(img: np.ndarray, name: str, level: int, seed: int = 0) -> np.ndarray:
    """Apply distortion ``name`` at ``level`` (1..5) to an RGB uint8 (H, W, 3) image.

    Returns a new array of the same shape and dtype; ``img`` is not modified. ``seed``
    drives every random choice (same inputs and seed -> identical output).
    """
    check_image(img)
    if img.shape[0] < 8 or img.shape[1] < 8:
        raise InvalidInputError(f"image too small to distort ({img.shape[1]}x{img.shape[0]}); need at least 8x8 pixels")
    dt = get(name)
    param = dt.param_for(level)
    # deterministic types never draw: no generator for them (the seeded draws of the others are unchanged)
    rng = np.random.default_rng(int(seed)) if dt.stochastic else None
    out = dt.fn(np.ascontiguousarray(img), param, rng)  # functions leave their argument untouched
    if out.shape != img.shape or out.dtype != np.uint8:  # pragma: no cover - guards the registry's own functions
        raise AssertionError(f"distortion {name} returned {out.dtype} {out.shape} for {img.dtype} {img.shape}")
    if np.may_share_memory(out, img):  # pragma: no cover - a function that returned (a view of) its input
        out = out.copy()
    return out
