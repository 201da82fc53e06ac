"""Distort a stream of frames (a camera topic, a bag, a video) with one (type, level).

Every frame gets its own seed derived from ``(seed, stream, frame index, type, level)`` with
:func:`embeval.provenance.derive_seed`, so noise changes from frame to frame like real sensor noise,
yet a replay of the same stream gives identical frames.
"""
from __future__ import annotations

import numpy as np

from embeval.distortion.registry import distort, get
from embeval.provenance import derive_seed


def frame_seed(seed: int, stream: str, index: int, name: str, level: int) -> int:
    """The seed of frame ``index`` of ``stream`` (e.g. a topic name)."""
    return derive_seed(seed, stream, int(index), name, int(level))


class FrameDistorter:
    """Callable ``(img, index=None) -> img``; ``index`` defaults to a running frame counter.

    >>> d = FrameDistorter("white_noise", 3, seed=0, stream="/camera/camera/color/image_raw")
    >>> out = d(frame)            # doctest: +SKIP
    """

    def __init__(self, name: str, level: int, seed: int = 0, stream: str = ""):
        get(name).param_for(level)  # validate now, not at the first frame
        self.name, self.level, self.seed, self.stream = name, int(level), int(seed), stream
        self.count = 0

    def __call__(self, img: np.ndarray, index: int | None = None) -> np.ndarray:
        i = self.count if index is None else int(index)
        self.count += 1
        return distort(img, self.name, self.level, frame_seed(self.seed, self.stream, i, self.name, self.level))
