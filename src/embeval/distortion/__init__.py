"""embeval.distortion: the distortion registry (30 types in 7 categories, 5 levels each).

>>> from embeval.distortion import distort, list_distortions
>>> out = distort(img, "jpeg", level=3, seed=0)   # RGB uint8 (H, W, 3) in and out

Each category's module (``embeval/distortion/<category>.py``, one per name in :data:`CATEGORIES`) registers
its types when the package is imported; a new type is one ``@register`` function there (docs/contributing.md).
"""
import importlib

from embeval.distortion.registry import (
    CATEGORIES,
    DISTORTIONS,
    N_LEVELS,
    REGISTRY,
    DistortionType,
    categories,
    distort,
    get,
    list_distortions,
    register,
    register_type,
    unregister,
)
from embeval.distortion.stream import EpisodeFrames, FrameDistorter, frame_seed  # noqa: E402

for _category in CATEGORIES:  # fill the registry, category by category (the display order)
    importlib.import_module(f"{__name__}.{_category}")
del _category

__all__ = ["EpisodeFrames", "FrameDistorter", "frame_seed", "CATEGORIES", "DISTORTIONS", "N_LEVELS", "REGISTRY",
           "DistortionType", "categories", "distort", "get", "list_distortions", "register", "register_type", "unregister"]
