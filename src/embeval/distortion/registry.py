"""The distortion registry: 30 types in 7 categories, 5 levels each.

Every type is a pure function ``fn(img, param, rng) -> img`` on C-contiguous RGB uint8 (H, W, 3)
registered with :func:`register`; it must not modify ``img`` and returns a new array. Users call
:func:`distort`, which validates the input, looks up the level's parameter, seeds a
``numpy.random.Generator`` (``rng`` is None for types not registered ``stochastic``) and checks
that shape and dtype are kept. Inputs are never modified.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from embeval.action import check_image
from embeval.errors import ConfigError, InvalidInputError

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

    def param_for(self, level: int) -> Any:
        if not isinstance(level, (int, np.integer)) or isinstance(level, bool) or not 1 <= level <= N_LEVELS:
            raise ConfigError(f"distortion level must be an integer 1..{N_LEVELS}, got {level!r}")
        return self.levels[int(level) - 1]


#: name -> DistortionType, filled by the category modules at import
DISTORTIONS: dict[str, DistortionType] = {}


def register(name: str, category: str, levels, *, param: str = "", description: str = "",
             stochastic: bool = False, measure: str = "psnr", kadid: bool = True) -> Callable[[DistortFn], DistortFn]:
    """Decorator: add ``fn(img, param, rng)`` to :data:`DISTORTIONS`."""
    if category not in CATEGORIES:
        raise ConfigError(f"unknown distortion category {category!r}; choose from {', '.join(CATEGORIES)}")
    levels = tuple(levels)
    if len(levels) != N_LEVELS:
        raise ConfigError(f"distortion {name!r} needs {N_LEVELS} level parameters, got {len(levels)}")

    def deco(fn: DistortFn) -> DistortFn:
        if name in DISTORTIONS:
            raise ConfigError(f"distortion {name!r} registered twice")
        DISTORTIONS[name] = DistortionType(name, category, levels, fn, param, description or (fn.__doc__ or "").strip().split("\n")[0],
                                           stochastic, measure, kadid)
        return fn

    return deco


def get(name: str) -> DistortionType:
    """The registered type ``name``; :class:`ConfigError` listing the choices otherwise."""
    try:
        return DISTORTIONS[name]
    except KeyError:
        raise ConfigError(f"unknown distortion {name!r}; run `embeval distort list` or choose from: "
                          + ", ".join(sorted(DISTORTIONS))) from None


def list_distortions(category: str | None = None) -> list[str]:
    """Names in registry order (grouped by category), optionally of one category."""
    if category is not None and category not in CATEGORIES:
        raise ConfigError(f"unknown distortion category {category!r}; choose from {', '.join(CATEGORIES)}")
    return [n for c in CATEGORIES for n, d in DISTORTIONS.items() if d.category == c and (category in (None, c))]


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
