"""A librealsense software device for tests: colour (rgb8, or another format) and depth (z16) streams with known
intrinsics, frames of known values (colour value and depth of frame ``i``: :func:`colour_of`, :func:`depth_of`),
recorded with librealsense's own ``rs.recorder`` exactly as a camera's frames are."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

W, H, FPS = 64, 48, 30
FX, FY, PPX, PPY = 50.0, 51.0, 31.5, 23.0
T0_MS = 1_000.0  # timestamp of frame 0 (ms)


def colour_of(i: int, h: int = H, w: int = W) -> np.ndarray:
    """Frame i's colour image: a left-right ramp plus 10 * i in red, i in green, a fixed blue."""
    img = np.zeros((h, w, 3), np.uint8)
    img[:, :, 0] = (10 * i + np.arange(w)[None, :]) % 256
    img[:, :, 1] = i
    img[:, :, 2] = 200
    return img


def depth_of(i: int, h: int = H, w: int = W) -> np.ndarray:
    """Frame i's depth: a flat plane at 500 + i mm."""
    return np.full((h, w), 500 + i, np.uint16)


def stamp_ms(i: int) -> float:
    return T0_MS + i * 1000.0 / FPS


class SoftwareCamera:
    """A ``rs.software_device`` with an 'RGB Camera' sensor (colour) and, with ``depth``, a 'Stereo Module' (depth,
    units 1 mm, identity extrinsics to colour)."""

    def __init__(self, depth: bool = True, colour: bool = True, fmt: str = "rgb8", w: int = W, h: int = H, fps: int = FPS):
        import pyrealsense2 as rs

        self.rs, self.w, self.h, self.fps, self.fmt = rs, w, h, fps, fmt
        self.dev = rs.software_device()
        self.dev.register_info(rs.camera_info.name, "embeval software camera")
        self.dev.register_info(rs.camera_info.serial_number, "000000000042")
        k = rs.intrinsics()
        k.width, k.height, k.fx, k.fy, k.ppx, k.ppy = w, h, FX, FY, PPX, PPY
        k.model, k.coeffs = rs.distortion.none, [0.0] * 5
        self.streams = []  # (sensor, profile, bytes per pixel, kind)
        bpp = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "yuyv": 2, "y8": 1}[fmt]
        if colour:
            self._add("RGB Camera", rs.stream.color, getattr(rs.format, fmt), bpp, k, 0, "colour")
        if depth:
            s = self._add("Stereo Module", rs.stream.depth, rs.format.z16, 2, k, 1, "depth")
            s.add_read_only_option(rs.option.depth_units, 0.001)
        if colour and depth:
            e = rs.extrinsics()
            e.rotation, e.translation = [1, 0, 0, 0, 1, 0, 0, 0, 1], [0, 0, 0]
            self.streams[1][1].register_extrinsics_to(self.streams[0][1], e)

    def _add(self, name, stream, fmt, bpp, k, uid, kind):
        rs = self.rs
        s = self.dev.add_sensor(name)
        vs = rs.video_stream()
        vs.type, vs.index, vs.uid, vs.width, vs.height, vs.fps, vs.bpp, vs.fmt, vs.intrinsics = (
            stream, 0, uid, self.w, self.h, self.fps, bpp, fmt, k)
        self.streams.append((s, s.add_video_stream(vs), bpp, kind))
        return s

    def push(self, i: int) -> None:
        """Frame i on every stream (timestamps :func:`stamp_ms`, global time)."""
        rs = self.rs
        for s, p, bpp, kind in self.streams:
            if kind == "depth":
                px = depth_of(i, self.h, self.w)
            else:
                px = colour_of(i, self.h, self.w)
                if self.fmt == "bgr8":
                    px = np.ascontiguousarray(px[:, :, ::-1])
                elif bpp != 3:
                    px = np.zeros((self.h, self.w, bpp), np.uint8) if bpp > 1 else np.zeros((self.h, self.w), np.uint8)
            f = rs.software_video_frame()
            f.pixels, f.bpp, f.stride, f.timestamp = px, bpp, bpp * self.w, stamp_ms(i)
            f.domain, f.frame_number, f.profile = rs.timestamp_domain.global_time, i, p.as_video_stream_profile()
            s.on_video_frame(f)

    def write(self, path: str | Path, n: int = 5) -> Path:
        """Record frames 0..n-1 at the stream rate to ``path`` (.db3) with ``rs.recorder``."""
        rs = self.rs
        rec = rs.recorder(str(path), self.dev)
        q = rs.frame_queue(4 * n + 8)
        for s, p, _, _ in self.streams:
            s.open(p)
            s.start(q)
        for i in range(n):
            self.push(i)
            time.sleep(1.0 / self.fps)
        for s, _, _, _ in self.streams:
            s.stop()
            s.close()
        del rec, q
        return Path(path)

    def pushing(self):
        """A context manager: a thread pushing frames 0, 1, 2, ... at the stream rate while open (for ``record``)."""
        cam, stop = self, threading.Event()

        class _Pusher:
            def __enter__(self):
                def run():
                    i = 0
                    while not stop.is_set():
                        try:
                            cam.push(i)
                        except RuntimeError:  # sensors not started yet
                            pass
                        i += 1
                        time.sleep(1.0 / cam.fps)

                self.t = threading.Thread(target=run, daemon=True)
                self.t.start()
                return self

            def __exit__(self, *exc):
                stop.set()
                self.t.join(5)

        return _Pusher()
