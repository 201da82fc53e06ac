"""Distort a stream of frames (a camera topic, a bag, a video) with one (type, level).

Every frame gets its own seed derived from ``(seed, stream, frame index, type, level)`` with
:func:`embeval.provenance.derive_seed`, so noise changes from frame to frame like real sensor noise,
yet a replay of the same stream gives identical frames.

Episodes (:class:`EpisodeFrames`) follow the same rule with the episode's seed as ``seed``, the camera
name as ``stream`` and the index counted from the episode's first frame: the in-process Act2Answer
runner (:mod:`embeval.act2answer.evaluator`) and the ROS distortion node (an ``episode_start`` event
that carries the episode ``seed``) both distort through it, so they see the same noise on the same frame.
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


class EpisodeFrames:
    """The frames of one camera in one episode: frame ``n`` (counted from the episode's first frame,
    undistorted ones included) is distorted with ``frame_seed(seed, camera, n, name, level)``.

    ``seed`` is the episode seed (Act2Answer: ``derive_seed(run seed, item id, layout)``); call once per
    frame, ``name`` ``""``/``"none"`` passes the frame through (and still counts it). A whole stream read
    as one episode (``camera`` = the topic, ``seed`` = the base seed) is :class:`FrameDistorter`'s rule.
    """

    def __init__(self, camera: str, seed: int):
        self.camera, self.seed, self.index = camera, int(seed), 0
        self._distorters: dict[tuple[str, int], FrameDistorter] = {}

    def __call__(self, img: np.ndarray, name: str, level: int) -> np.ndarray:
        i, self.index = self.index, self.index + 1
        if name in ("", "none"):
            return img
        key = (name, int(level))
        if key not in self._distorters:
            self._distorters[key] = FrameDistorter(name, int(level), self.seed, stream=self.camera)
        return self._distorters[key](img, i)
