"""Intel RealSense colour stream via ``pyrealsense2`` (imported lazily), RGB8 like realsense-ros."""
from __future__ import annotations

import time

import numpy as np

from embeval.camera.base import Frame, Intrinsics
from embeval.errors import MissingFileError, ServerUnavailableError


def _rs():
    try:
        import pyrealsense2 as rs  # noqa: PLC0415
    except ImportError as exc:
        raise MissingFileError(
            f"pyrealsense2 is not importable ({exc}); install it with `pip install pyrealsense2` "
            "(Debian/Ubuntu also need `apt-get install libusb-1.0-0`)"
        ) from None
    return rs


def realsense_devices() -> list[str]:
    """Serial numbers of connected RealSense devices ([] when none or pyrealsense2 is missing)."""
    try:
        rs = _rs()
        return [d.get_info(rs.camera_info.serial_number) for d in rs.context().query_devices()]
    except Exception:  # noqa: BLE001
        return []


class RealSenseSource:
    """Colour frames ``width`` x ``height`` at ``fps`` from the device ``serial`` (default: the first one)."""

    name = "realsense"

    def __init__(self, width: int = 640, height: int = 480, fps: int = 30, serial: str = "", timeout_ms: int = 5000):
        rs = _rs()
        self._rs, self.timeout_ms = rs, int(timeout_ms)
        self._pipe = rs.pipeline()
        cfg = rs.config()
        if serial:
            cfg.enable_device(serial)
        cfg.enable_stream(rs.stream.color, int(width), int(height), rs.format.rgb8, int(fps))
        try:
            profile = self._pipe.start(cfg)
        except RuntimeError as exc:
            raise ServerUnavailableError(
                f"cannot start the RealSense colour stream {width}x{height}@{fps} ({exc}); check the USB 3 cable, "
                f"`rs-enumerate-devices`, and that no other process (realsense-ros) holds the camera"
            ) from None
        intr = profile.get_stream(rs.stream.color).as_video_stream_profile().get_intrinsics()
        self.intrinsics = Intrinsics(intr.width, intr.height, intr.fx, intr.fy, intr.ppx, intr.ppy)
        self._n = 0

    def read(self) -> Frame | None:
        try:
            frames = self._pipe.wait_for_frames(self.timeout_ms)
        except RuntimeError as exc:
            raise ServerUnavailableError(f"RealSense delivered no frame within {self.timeout_ms} ms ({exc})") from None
        color = frames.get_color_frame()
        img = np.asanyarray(color.get_data()).copy()
        self._n += 1
        # the device's timestamp is in ms on its own clock; publish receive time like realsense-ros's default
        return Frame(img, time.time_ns(), self.intrinsics, self._n - 1)

    def close(self) -> None:
        try:
            self._pipe.stop()
        except Exception:  # noqa: BLE001
            pass
