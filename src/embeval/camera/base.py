"""The image-source protocol: every camera backend yields RGB uint8 frames with pinhole intrinsics.

Frames are RGB uint8 (H, W, 3); ``stamp_ns`` is the capture time in nanoseconds (wall clock for
live sources, the recorded header stamp for bag replay). Intrinsics follow ``sensor_msgs/CameraInfo``
(pixels; principal point from the top-left corner). Optical frame: realsense-ros's
``camera_color_optical_frame``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

#: realsense-ros names (the topics and frame the camera node publishes)
IMAGE_TOPIC = "/camera/camera/color/image_raw"
INFO_TOPIC = "/camera/camera/color/camera_info"
OPTICAL_FRAME = "camera_color_optical_frame"


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics in pixels."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float

    @classmethod
    def from_fov(cls, width: int, height: int, vfov_deg: float = 58.0) -> "Intrinsics":
        """Square pixels, principal point at the centre, vertical field of view ``vfov_deg`` (D455 colour: ~58 deg)."""
        f = 0.5 * height / np.tan(np.deg2rad(vfov_deg) / 2)
        return cls(int(width), int(height), float(f), float(f), (width - 1) / 2.0, (height - 1) / 2.0)


@dataclass(frozen=True)
class Frame:
    image: np.ndarray  # RGB uint8 (H, W, 3)
    stamp_ns: int
    intrinsics: Intrinsics
    index: int = 0  # running frame number of this source


@runtime_checkable
class ImageSource(Protocol):
    """What the camera node reads from. ``read()`` returns None when a finite source is exhausted."""

    name: str
    intrinsics: Intrinsics

    def read(self) -> Frame | None: ...

    def close(self) -> None: ...
