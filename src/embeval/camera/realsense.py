"""Intel RealSense through ``pyrealsense2`` (imported lazily): a connected camera or a librealsense recording.

:class:`RealSenseSource` reads colour (RGB8, like realsense-ros) and, where enabled or recorded, depth aligned to
colour (``rs.align``; uint16 in the device's depth units, ``Frame.depth_scale`` metres per unit) through
``rs.pipeline``; a recording (``.db3`` from librealsense 2.59, ``.bag`` from older SDKs) plays back through
librealsense's own playback, in real time or as fast as it is read, with the intrinsics and timestamps recorded.
:func:`record` writes a recording of any device (a connected camera, or a ``rs.software_device`` in tests) with
librealsense's ``rs.recorder``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from embeval.camera.base import Frame, Intrinsics
from embeval.errors import ConfigError, InvalidInputError, MissingFileError, ServerUnavailableError

#: recording file types librealsense plays back (2.59 records .db3 only)
RECORDING_SUFFIXES = (".db3", ".bag")
#: colour formats read (anything else is refused in one line)
COLOUR_FORMATS = ("rgb8", "bgr8", "rgba8", "bgra8", "y8")
#: the longest single wait on the pipeline (ms): end of file and timeouts are checked between waits
POLL_MS = 100


def _rs():
    try:
        import pyrealsense2 as rs  # noqa: PLC0415
    except ImportError as exc:
        raise MissingFileError(
            f"pyrealsense2 is not importable ({exc}); install it with `pip install pyrealsense2` "
            "(Debian/Ubuntu also need `apt-get install libusb-1.0-0`)"
        ) from None
    return rs


def _reason(exc: Exception) -> str:
    """librealsense's message, on one line, without its request preamble."""
    msg = " ".join(str(exc).split())
    return msg.split("Reason: ", 1)[-1]


def realsense_devices() -> list[str]:
    """Serial numbers of connected RealSense devices ([] when none or pyrealsense2 is missing)."""
    try:
        rs = _rs()
        return [d.get_info(rs.camera_info.serial_number) for d in rs.context().query_devices()]
    except Exception:  # noqa: BLE001
        return []


def check_recording(path: str | Path) -> Path:
    """The recording's path, or a one-line error: missing file, not a librealsense file type, empty."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise MissingFileError(f"RealSense recording {p} not found; record one with `embeval camera record --out {p.name}`")
    if p.suffix.lower() not in RECORDING_SUFFIXES:
        raise InvalidInputError(f"{p} is not a librealsense recording (.db3, or .bag from older SDKs); record one with "
                                "`embeval camera record` or realsense-viewer")
    if p.stat().st_size == 0:
        raise InvalidInputError(f"RealSense recording {p} is empty (0 bytes); record it again")
    return p


def _profile_text(p) -> str:
    v = p.as_video_stream_profile()
    return f"{p.stream_name() or p.stream_type().name} {p.format().name} {v.width()}x{v.height()}@{p.fps()}"


def intrinsics_of(profile) -> Intrinsics:
    """:class:`Intrinsics` of a librealsense video stream profile (pixels)."""
    k = profile.as_video_stream_profile().get_intrinsics()
    return Intrinsics(int(k.width), int(k.height), float(k.fx), float(k.fy), float(k.ppx), float(k.ppy))


class RealSenseSource:
    """Colour frames (and depth aligned to colour) from a RealSense camera or a librealsense recording.

    Live (``recording`` empty): the device ``serial`` (default: the first), colour ``width`` x ``height`` (default
    640 x 480) at ``fps`` (default 30), depth too when ``depth`` is true; frames are stamped with the receive time
    (realsense-ros's default). Recording: its own streams; ``width`` / ``height`` / ``fps``, when given, must match
    the recorded colour stream; ``depth`` None takes depth when recorded, True requires it, False ignores it;
    stamps are the recorded frame timestamps (ms -> ns); ``realtime`` False plays the file as fast as librealsense
    reads it (its pipeline keeps only the latest frames: a reader slower than that misses frames; in real time the
    reader keeps pace and only the first frames can be lost while the pipeline starts);
    ``loop`` starts again at the end, else ``read()`` returns None at the end; ``restamp`` stamps a recording's
    frames with the playback time instead (a rehearsal whose policy checks image age). Every wait is bounded by
    ``timeout_ms``.
    """

    name = "realsense"

    def __init__(self, width: int | None = None, height: int | None = None, fps: int | None = None, serial: str = "",
                 recording: str | Path = "", realtime: bool = True, depth: bool | None = None, loop: bool = False,
                 restamp: bool = False, timeout_ms: int = 5000):
        rs = _rs()
        self._rs, self.timeout_ms, self.loop, self.realtime = rs, int(timeout_ms), bool(loop), bool(realtime)
        self.restamp = bool(restamp)
        self.recording = check_recording(recording) if recording else None
        self._want = (width, height, fps)
        self._serial, self._depth_wanted = serial, depth
        self._n = 0
        self._start()

    # -- start / restart ------------------------------------------------------------------------------------------
    def _start(self) -> None:
        rs = self._rs
        width, height, fps = self._want
        self._pipe = rs.pipeline()
        cfg = rs.config()
        if self.recording is not None:
            cfg.enable_device_from_file(str(self.recording), repeat_playback=False)
        else:
            if self._serial:
                cfg.enable_device(self._serial)
            w, h, f = int(width or 640), int(height or 480), int(fps or 30)
            cfg.enable_stream(rs.stream.color, w, h, rs.format.rgb8, f)
            if self._depth_wanted:
                cfg.enable_stream(rs.stream.depth, w, h, rs.format.z16, f)
        self._playback = None
        try:
            if self.recording is not None:
                # check the streams and set the playback mode on the device the pipeline will start, before its
                # first frame: the pipeline keeps only the latest frames, so reading starts right after start()
                resolved = cfg.resolve(rs.pipeline_wrapper(self._pipe))
                self._check_streams(resolved)
                self._playback = resolved.get_device().as_playback()
                self._playback.set_real_time(self.realtime)
            profile = self._pipe.start(cfg)
        except RuntimeError as exc:
            if self.recording is not None:
                raise InvalidInputError(f"cannot play RealSense recording {self.recording}: {_reason(exc)}; it is "
                                        "truncated, corrupted or not a librealsense recording: record it again") from None
            raise ServerUnavailableError(
                f"cannot start the RealSense streams {width or 640}x{height or 480}@{fps or 30} ({_reason(exc)}); check "
                "the USB 3 cable, `rs-enumerate-devices`, and that no other process (realsense-ros) holds the camera"
            ) from None
        if self.recording is None:
            try:
                self._check_streams(profile)
            except Exception:
                self._stop()
                raise
        self._align = rs.align(rs.stream.color) if self.has_depth else None
        self._last = -1  # colour frame number last emitted or pending
        self._pending: Frame | None = None
        self._ended = False

    def _check_streams(self, profile) -> None:
        rs = self._rs
        streams = list(profile.get_streams())
        colour = [s for s in streams if s.stream_type() == rs.stream.color]
        depth = [s for s in streams if s.stream_type() == rs.stream.depth]
        what = self.recording or "the camera"
        have = ", ".join(_profile_text(s) for s in streams) or "no streams"
        if not colour:
            raise InvalidInputError(f"{what} has no colour stream (it has: {have}); record colour too "
                                    "(`embeval camera record` records colour + depth)")
        c = colour[0].as_video_stream_profile()
        fmt = c.format().name
        if fmt not in COLOUR_FORMATS:
            raise InvalidInputError(f"{what}: colour stream format {fmt} is not read (readable: {', '.join(COLOUR_FORMATS)}); "
                                    "record colour as rgb8 (`embeval camera record` does)")
        width, height, fps = self._want
        got = (c.width(), c.height(), c.fps())
        for name, want, val in (("width", width, got[0]), ("height", height, got[1]), ("fps", fps, got[2])):
            if want and int(want) != val:
                raise ConfigError(f"{what}: colour is {got[0]}x{got[1]}@{got[2]}, asked for {name} {want}; leave "
                                  f"{name} unset to take the recording's, or record at the size the run needs")
        if self._depth_wanted and not depth:
            raise InvalidInputError(f"{what} has no depth stream (it has: {have}); record with depth, or read colour only "
                                    "(depth unset)")
        self.has_depth = bool(depth) and self._depth_wanted is not False
        self._fmt, self._fps = fmt, got[2]
        self.intrinsics = intrinsics_of(colour[0])
        self.depth_scale = 0.0
        if self.has_depth:
            try:
                self.depth_scale = float(profile.get_device().first_depth_sensor().get_depth_scale())
            except RuntimeError:
                self.depth_scale = 0.001  # librealsense's default depth unit
        self.profile_text = have

    # -- reading --------------------------------------------------------------------------------------------------
    def _colour(self, frame) -> np.ndarray:
        a = np.asanyarray(frame.get_data())
        want = (self.intrinsics.height, self.intrinsics.width)
        if a.shape[:2] != want:
            raise InvalidInputError(f"RealSense colour frame is {a.shape[1::-1]}, its stream says "
                                    f"{want[1]}x{want[0]}; the recording is corrupted")
        if self._fmt == "y8":
            return np.repeat(a[:, :, None], 3, axis=2)
        if self._fmt.startswith("bgr"):
            return np.ascontiguousarray(a[:, :, 2::-1])
        return np.ascontiguousarray(a[:, :, :3]).copy()

    def _stamp(self, frame) -> int:
        if self.recording is None or self.restamp:
            return time.time_ns()
        return int(round(float(frame.get_timestamp()) * 1e6))

    def _take(self, frames) -> Frame | None:
        """One frameset in; the frame it completes out (a colour frame with its matching depth, or the pending one
        a newer colour frame supersedes)."""
        c = frames.get_color_frame()
        if not c:
            return None
        n = int(c.get_frame_number())
        d = frames.get_depth_frame() if self.has_depth else None
        # same capture: depth within half a frame period of colour (the syncer also hands out stale pairs)
        match = bool(d) and abs(float(d.get_timestamp()) - float(c.get_timestamp())) <= 500.0 / max(self._fps, 1)
        out = None
        if n <= self._last:  # a colour frame seen before: only its matching depth is news
            if self._pending is not None and n == self._last and match:
                out, self._pending = self._with_depth(self._pending, frames), None
            return out
        out, self._pending = self._pending, None  # a newer colour frame: the pending one goes out as it is
        self._last = n
        frame = Frame(self._colour(c), self._stamp(c), self.intrinsics, 0, depth_scale=self.depth_scale)
        if not self.has_depth:
            if out is None:
                return frame
            self._pending = frame
            return out
        if match:
            frame = self._with_depth(frame, frames)
            if out is None:
                return frame
        self._pending = frame
        return out

    def _with_depth(self, frame: Frame, frames) -> Frame:
        aligned = self._align.process(frames).get_depth_frame()
        depth = np.asanyarray(aligned.get_data()).copy()
        if depth.shape != (self.intrinsics.height, self.intrinsics.width):
            raise InvalidInputError(f"aligned depth is {depth.shape[1]}x{depth.shape[0]}, colour "
                                    f"{self.intrinsics.width}x{self.intrinsics.height}; the recording is corrupted")
        return Frame(frame.image, frame.stamp_ns, frame.intrinsics, frame.index, depth=depth, depth_scale=self.depth_scale)

    def _at_end(self) -> bool:
        return self._playback is not None and self._playback.current_status() == self._rs.playback_status.stopped

    def read(self) -> Frame | None:
        """The next colour frame (``depth`` aligned to it where there is depth); None at a recording's end."""
        frame = self._next()
        if frame is None:
            return None
        self._n += 1
        return Frame(frame.image, frame.stamp_ns, frame.intrinsics, self._n - 1, frame.depth, frame.depth_scale)

    def _next(self) -> Frame | None:
        deadline = time.monotonic() + self.timeout_ms / 1000.0
        while True:
            if self._ended:
                if not self.loop or self._n == 0:
                    return None
                self._stop()
                self._start()
                deadline = time.monotonic() + self.timeout_ms / 1000.0
            try:
                ok, frames = self._pipe.try_wait_for_frames(POLL_MS)
            except RuntimeError as exc:
                raise ServerUnavailableError(f"RealSense pipeline failed ({_reason(exc)})") from None
            frame = None
            if ok:
                frame = self._take(frames)
            elif self._at_end():
                self._ended = True
                frame, self._pending = self._pending, None
            elif time.monotonic() > deadline:
                src = f"recording {self.recording}" if self.recording else "the RealSense"
                raise ServerUnavailableError(f"{src} delivered no frame within {self.timeout_ms} ms; check the camera "
                                             "(or the recording: it may be cut short)")
            if frame is not None:
                return frame

    def _stop(self) -> None:
        try:
            self._pipe.stop()
        except Exception:  # noqa: BLE001 - not started, or already stopped
            pass

    def close(self) -> None:
        self._stop()


@dataclass(frozen=True)
class RecordResult:
    """What :func:`record` wrote: frames per stream, wall-clock seconds, the recorded profiles."""

    path: Path
    colour_frames: int
    depth_frames: int
    seconds: float
    profiles: str


def _pick(sensors, rs, stream, fmt, width: int, height: int, fps: int):
    """(sensor, profile) of the first sensor offering ``stream`` in ``fmt`` at width x height @ fps, and every
    profile of that stream seen (for the error message)."""
    seen = []
    for s in sensors:
        for p in s.get_stream_profiles():
            if p.stream_type() != stream or not p.is_video_stream_profile():
                continue
            v = p.as_video_stream_profile()
            seen.append(f"{p.format().name} {v.width()}x{v.height()}@{p.fps()}")
            if p.format() == fmt and (v.width(), v.height(), p.fps()) == (width, height, fps):
                return (s, p), seen
    return None, seen


def record(out: str | Path, *, width: int = 640, height: int = 480, fps: int = 30, depth: bool = True,
           frames: int = 0, seconds: float = 0.0, serial: str = "", device: Any = None,
           progress: Callable[[int, int, float], None] | None = None, timeout_ms: int = 5000) -> RecordResult:
    """Record colour (rgb8) and depth (z16, ``depth``) at ``width`` x ``height`` @ ``fps`` from ``device`` (default: the
    connected camera ``serial``, else the first) to ``out`` (``.db3``) with ``rs.recorder``, until ``frames`` colour
    frames or ``seconds`` have passed (at least one must be set); ``progress(colour, depth, elapsed_s)`` after
    every colour frame. A camera that stops delivering for ``timeout_ms`` ends the recording with an error; what was
    recorded until then stays in the file."""
    rs = _rs()
    out = Path(out).expanduser()
    if out.suffix.lower() != ".db3":
        raise ConfigError(f"--out {out}: librealsense {rs.__version__} records rosbag2 .db3 files (it refuses .bag); "
                          f"name it {out.with_suffix('.db3').name}")
    if out.exists():
        raise ConfigError(f"{out} exists; choose another name or remove it (a recording is never overwritten)")
    if frames <= 0 and seconds <= 0:
        raise ConfigError("give --frames N or --seconds S (how long to record)")
    if device is None:
        devs = list(rs.context().query_devices())
        if serial:
            devs = [d for d in devs if d.get_info(rs.camera_info.serial_number) == serial]
        if not devs:
            which = f"with serial {serial} " if serial else ""
            raise ServerUnavailableError(f"no RealSense {which}connected; plug the camera into USB 3 "
                                         "(`rs-enumerate-devices` lists it), or evaluate against a recording")
        device = devs[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    rec = rs.recorder(str(out), device)
    sensors = list(rec.query_sensors())
    wanted = [(rs.stream.color, rs.format.rgb8, "colour rgb8")] + ([(rs.stream.depth, rs.format.z16, "depth z16")]
                                                                   if depth else [])
    chosen: dict[Any, list] = {}
    for stream, fmt, label in wanted:
        hit, seen = _pick(sensors, rs, stream, fmt, width, height, fps)
        if hit is None:
            del rec
            out.unlink(missing_ok=True)
            raise ConfigError(f"the camera has no {label} stream at {width}x{height}@{fps}; it offers "
                              f"{', '.join(sorted(set(seen))) or 'none'}; choose --width/--height/--fps from those")
        chosen.setdefault(hit[0], []).append(hit[1])
    queue = rs.frame_queue(64)
    started = []
    n_colour = n_depth = 0
    t0 = time.monotonic()
    s = None
    try:
        for s, profiles in chosen.items():
            s.open(profiles if len(profiles) > 1 else profiles[0])
            s.start(queue)
            started.append(s)
        last = time.monotonic()
        while (frames <= 0 or n_colour < frames) and (seconds <= 0 or time.monotonic() - t0 < seconds):
            ok, f = queue.try_wait_for_frame(POLL_MS)
            if not ok:
                if time.monotonic() - last > timeout_ms / 1000.0:
                    raise ServerUnavailableError(f"the camera delivered no frame for {timeout_ms} ms; {n_colour} colour "
                                                 f"frames are in {out}; check the USB 3 cable and record again")
                continue
            last = time.monotonic()
            if f.get_profile().stream_type() == rs.stream.color:
                n_colour += 1
                if progress is not None:
                    progress(n_colour, n_depth, time.monotonic() - t0)
            elif f.get_profile().stream_type() == rs.stream.depth:
                n_depth += 1
    finally:
        for s in started:
            try:
                s.stop()
                s.close()
            except RuntimeError:
                pass
        text = ", ".join(_profile_text(p) for ps in chosen.values() for p in ps)
        del rec, sensors, chosen, started, s  # the recorder writes the file out when the last reference goes
        import gc

        gc.collect()
    return RecordResult(out, n_colour, n_depth, time.monotonic() - t0, text)
