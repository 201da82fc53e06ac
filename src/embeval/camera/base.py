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
    depth: np.ndarray | None = None  # uint16 (H, W) aligned to the colour image, in units of depth_scale; None: no depth
    depth_scale: float = 0.0  # metres per depth unit (RealSense: 0.001)


#: bytes per pixel of the image encodings we read
CHANNELS = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4, "bgra8": 4}


def image_from_msg(msg) -> np.ndarray:
    """A ``sensor_msgs/Image`` (rclpy or rosbags object; rgb8, bgr8, mono8, rgba8, bgra8; any row padding)
    -> RGB uint8 (H, W, 3), without cv_bridge."""
    from embeval.errors import InvalidInputError

    ch = CHANNELS.get(msg.encoding)
    if ch is None:
        raise InvalidInputError(f"unsupported image encoding {msg.encoding!r}; publish rgb8 "
                                "(realsense-ros: rgb_camera.color_format RGB8)")
    from embeval.image_io import MAX_IMAGE_SIDE

    if not (0 < msg.width <= MAX_IMAGE_SIDE and 0 < msg.height <= MAX_IMAGE_SIDE):
        raise InvalidInputError(f"image message of {msg.width}x{msg.height} pixels; a camera image is 1..{MAX_IMAGE_SIDE} "
                                "pixels a side (a bag or publisher that wrote a wrong header)")
    buf = np.frombuffer(msg.data, dtype=np.uint8) if not isinstance(msg.data, np.ndarray) else msg.data.view(np.uint8)
    if buf.size < msg.step * msg.height or msg.step < msg.width * ch:
        raise InvalidInputError(f"image data too short: {buf.size} bytes for {msg.width}x{msg.height} {msg.encoding} "
                                f"step {msg.step}")
    img = buf[: msg.step * msg.height].reshape(msg.height, msg.step)[:, : msg.width * ch].reshape(msg.height, msg.width, ch)
    if ch == 1:
        return np.repeat(img, 3, axis=2)
    if msg.encoding.startswith("bgr"):
        img = img[:, :, 2::-1]
    return np.ascontiguousarray(img[:, :, :3])


@runtime_checkable
class ImageSource(Protocol):
    """What the camera node reads from. ``read()`` returns None when a finite source is exhausted."""

    name: str
    intrinsics: Intrinsics

    def read(self) -> Frame | None: ...

    def close(self) -> None: ...
