"""Image sources for the camera node and offline runs: sim render, synthetic, RealSense, image folder, bag replay.

``make_source(kind, **params)`` builds one from the registry :data:`SOURCES` (an
:class:`embeval.registry.Registry`; plugins: entry-point group ``embeval.camera_sources``); every source yields
:class:`~embeval.camera.base.Frame` (RGB uint8, stamp in ns, pinhole intrinsics).
"""
from __future__ import annotations

from typing import Any

from embeval.camera.base import (
    IMAGE_TOPIC,
    INFO_TOPIC,
    OPTICAL_FRAME,
    Frame,
    ImageSource,
    Intrinsics,
)
from embeval.errors import ConfigError
from embeval.registry import Registry

#: kind -> "module:class" (imported lazily so pyrealsense2 / rosbags load only when used)
SOURCES: Registry[type[ImageSource]] = Registry("camera source", group="embeval.camera_sources", entries={
    "sim": "embeval.camera.sim:SimSource",
    "synthetic": "embeval.camera.sim:SyntheticSource",
    "realsense": "embeval.camera.realsense:RealSenseSource",
    "folder": "embeval.camera.folder:FolderSource",
    "bag": "embeval.camera.bag:BagSource",
    "libero": "embeval.sim.libero.arm:LiberoCamera",  # LIBERO's agent view (the simulator layer; loaded lazily)
})


def make_source(kind: str, **params: Any) -> ImageSource:
    """Build the image source ``kind`` (see :data:`SOURCES`) with its keyword parameters."""
    factory = SOURCES.get(kind)
    try:
        return factory(**params)
    except TypeError as exc:
        raise ConfigError(f"bad parameters for camera source {kind!r}: {exc}") from None


__all__ = ["Frame", "IMAGE_TOPIC", "INFO_TOPIC", "ImageSource", "Intrinsics", "OPTICAL_FRAME", "SOURCES", "make_source"]
