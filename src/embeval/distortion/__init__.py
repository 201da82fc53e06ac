"""embeval.distortion: the distortion registry (30 types in 7 categories, 5 levels each).

>>> from embeval.distortion import distort, list_distortions
>>> out = distort(img, "jpeg", level=3, seed=0)   # RGB uint8 (H, W, 3) in and out
"""
from embeval.distortion.registry import (
    CATEGORIES,
    DISTORTIONS,
    N_LEVELS,
    DistortionType,
    categories,
    distort,
    get,
    list_distortions,
    register,
)
from embeval.distortion.stream import EpisodeFrames, FrameDistorter, frame_seed  # noqa: E402
from embeval.distortion import blur, luminance, chrominance, noise, compression, spatial, other  # noqa: E402,F401  (fill the registry)

__all__ = ["EpisodeFrames", "FrameDistorter", "frame_seed", "CATEGORIES", "DISTORTIONS", "N_LEVELS", "DistortionType", "categories", "distort", "get",
           "list_distortions", "register"]
