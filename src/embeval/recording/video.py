"""Episode videos: one H.264 mp4 per episode, encoded while the episode runs.

Files: ``<video dir>/<episode name>.mp4`` (e.g. ``Pick_seed0003.mp4``), H.264 (PyAV's libx264), yuv420p,
:data:`FPS` frames per second (one frame per control step: the cell steps at 10 Hz, so a video plays at the
episode's own pace). While an episode runs its file is ``<name>.mp4.part``; it is renamed to ``.mp4`` when
the episode ends (and deleted instead when the :class:`VideoPolicy` does not keep it), so a killed run or a
full disk leaves every finished episode a complete, playable ``.mp4`` and nothing half-written under that
suffix. Memory does not grow with the episode: frames are encoded as they come, only the last
:data:`OUTCOME_FRAMES` are held back to draw the outcome on them.

A frame shows the policy's camera view (upscaled by a whole factor to at least :data:`MIN_VIEW_HEIGHT`
pixels, nearest neighbour) or, under a distortion, the clean reference view BESIDE the distorted one the
policy saw, each with a label above it, and a text band below: the step, the 7-DoF action (rounded) and,
on the last frames, the outcome.

Recording from an episode loop (a no-op unless a recorder opened an episode in this thread)::

    videos = EpisodeRecorder(VideoPolicy.parse("failures"), "runs/x/videos")
    with videos.episode("Pick_seed0000") as ep:   # the loop below calls video_step / video_last
        result = run_episode(...)
        ep.finish(result.success, result.reason)

A write error (disk full, ...) ends that episode's video with one line on stderr; the episode and the run go on.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import os
import re
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embeval.errors import ConfigError

#: frames per second of every episode video (one frame per control step; the cell's control rate is 10 Hz)
FPS = 10
#: x264 constant rate factor: 0 lossless .. 51 worst; 20 is visually clean at small sizes
DEFAULT_CRF = 20
#: views are upscaled (whole factor, nearest neighbour) to at least this many pixels high, so text fits
MIN_VIEW_HEIGHT = 192
#: the last frames of an episode carry its outcome (held back, not encoded, until the episode ends)
OUTCOME_FRAMES = 5
#: height of a view's label strip and of one text line of the band, pixels
LABEL_H, LINE_H = 16, 16
#: temporary suffix of a video being written (renamed to .mp4 when its episode ends)
PART = ".part"

_MODES = ("none", "failures", "all")


@dataclass(frozen=True)
class VideoPolicy:
    """Which episodes keep a video (``--record-video``): ``none``, ``failures`` (episodes that did not
    succeed), ``all``, or the first ``n`` episodes of the run (``--record-video N``)."""

    mode: str = "none"  # none | failures | all | first
    n: int = 0  # episodes kept for mode "first"

    @classmethod
    def parse(cls, text: str | int | None) -> VideoPolicy:
        """``none``, ``failures``, ``all`` or a whole number N >= 1; a ConfigError naming the choices otherwise."""
        t = str("none" if text is None else text).strip().lower()
        if t in _MODES:
            return cls(t)
        if t.isdigit() and int(t) >= 1:
            return cls("first", int(t))
        raise ConfigError(f"--record-video {text!r}: choose none, failures, all or a whole number N >= 1 (the first N episodes)")

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    def may_keep(self, index: int) -> bool:
        """Before episode ``index`` (0-based, in run order) starts: could its video be kept (encode it at all)?"""
        return self.mode in ("all", "failures") or (self.mode == "first" and index < self.n)

    def keep(self, index: int, success: bool) -> bool:
        """After episode ``index`` ended with ``success``: keep its video?"""
        return self.may_keep(index) and (self.mode != "failures" or not success)

    def __str__(self) -> str:
        return str(self.n) if self.mode == "first" else self.mode


def _write_errors() -> tuple[type[BaseException], ...]:
    """What a failed write or encode raises: OSError (ENOSPC, EIO, ...) and PyAV's FFmpeg errors."""
    import av

    return (OSError, av.FFmpegError)


def _open_output(path: Path):
    """The binary file a video is written to (a seam for tests: a fake full disk)."""
    return open(path, "w+b")


@dataclass(frozen=True)
class Layout:
    """Where things sit in a composed frame (pixels): ``scale`` of the views, ``boxes`` (x, y, w, h) of each
    view (upscaled), ``size`` (width, height) of the whole frame, both even."""

    scale: int
    boxes: tuple[tuple[int, int, int, int], ...]
    size: tuple[int, int]


def layout(view_shapes: list[tuple[int, int]], n_lines: int = 4) -> Layout:
    """The :class:`Layout` of views of ``(height, width)`` side by side above ``n_lines`` of text."""
    h = max(s[0] for s in view_shapes)
    scale = max(1, math.ceil(MIN_VIEW_HEIGHT / h))
    boxes, x = [], 0
    for vh, vw in view_shapes:
        boxes.append((x, LABEL_H, vw * scale, vh * scale))
        x += vw * scale
    w, hh = x, LABEL_H + h * scale + n_lines * LINE_H + 4
    return Layout(scale, tuple(boxes), (w + w % 2, hh + hh % 2))


def _rgb(img: np.ndarray) -> np.ndarray:
    a = np.asarray(img)
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    if a.shape[2] == 4:
        a = a[:, :, :3]
    if a.dtype != np.uint8:
        a = np.clip(a * (255.0 if np.issubdtype(a.dtype, np.floating) and a.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
    return a


def _put(canvas: np.ndarray, text: str, x: int, y: int, width: int) -> None:
    """Draw ``text`` with its baseline at ``y``, shrunk to fit ``width`` pixels (OpenCV Hershey font, white)."""
    import cv2

    scale = 0.4
    tw = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)[0][0]
    if tw > width - 4:
        scale *= (width - 4) / tw
    cv2.putText(canvas, text, (x + 2, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 1, cv2.LINE_AA)


def compose_frame(views: list[tuple[str, np.ndarray]], lines: list[str], n_lines: int = 4) -> np.ndarray:
    """One video frame (H, W, 3) uint8: ``views`` ``(label, RGB image)`` side by side, upscaled by
    :func:`layout`'s scale, each labelled, above a dark band of ``n_lines`` text lines holding ``lines``
    (keep the last line free: the writer draws the outcome there)."""
    imgs = [_rgb(im) for _, im in views]
    lay = layout([im.shape[:2] for im in imgs], n_lines)
    w, h = lay.size
    canvas = np.zeros((h, w, 3), dtype=np.uint8)
    for (label, _), im, (x, y, bw, bh) in zip(views, imgs, lay.boxes):
        canvas[y:y + bh, x:x + bw] = im.repeat(lay.scale, 0).repeat(lay.scale, 1) if lay.scale > 1 else im
        _put(canvas, label, x, LABEL_H - 4, bw)
    y0 = LABEL_H + max(b[3] for b in lay.boxes)
    for i, line in enumerate(lines[:n_lines]):
        _put(canvas, line, 0, y0 + (i + 1) * LINE_H, w)
    return canvas


def action_lines(step: int, action: Any | None) -> list[str]:
    """The band's step and 7-DoF action ``[dx dy dz (m) droll dpitch dyaw (rad) gripper]``, rounded."""
    if action is None:
        return [f"step {step}  (end)"]
    v = np.asarray(getattr(action, "vector", action), dtype=np.float64).ravel()
    if v.size < 7:
        return [f"step {step}  action " + " ".join(f"{x:+.3f}" for x in v)]
    return [f"step {step}  gripper {v[6]:.2f}", "xyz " + " ".join(f"{x:+.3f}" for x in v[:3]),
            "rpy " + " ".join(f"{x:+.3f}" for x in v[3:6])]


class EpisodeVideoWriter:
    """Encode frames of one episode to ``path`` as they come (a context manager).

    ``add(frame)`` takes an RGB frame (all frames of an episode the same size; odd sizes are padded
    to even); the last :data:`OUTCOME_FRAMES` are held back until
    ``finish(outcome, keep)`` draws ``outcome`` in their bottom text line, encodes them, closes the file and renames
    ``path.part`` to ``path`` (``keep`` False: deletes it). Leaving the ``with`` block without ``finish``
    (an exception) deletes the partial file. A write error (``OSError``, e.g. ENOSPC) prints one line to
    ``log`` and turns the writer off; later calls do nothing and :attr:`error` holds the reason.
    """

    def __init__(self, path: str | Path, fps: int = FPS, crf: int | None = None, log: Callable[[str], Any] | None = None,
                 outcome_frames: int = OUTCOME_FRAMES):
        self.path = Path(path)
        self.part = self.path.with_name(self.path.name + PART)
        self.fps, self.crf, self.outcome_frames = int(fps), int(DEFAULT_CRF if crf is None else crf), int(outcome_frames)
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.frames = 0  # frames added
        self.error: str | None = None
        self._held: deque[np.ndarray] = deque()
        self._size: tuple[int, int] | None = None
        self._file = self._container = self._stream = None
        self._done = False

    # ------------------------------------------------------------------ io
    def _fail(self, exc: BaseException) -> None:
        self.error = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        self.log(f"video {self.path}: not written ({self.error}); the episode and the run go on")
        self._close(remove=True)

    def _close(self, remove: bool) -> None:
        c, f = self._container, self._file
        self._container = self._file = self._stream = None
        self._held.clear()
        for obj in (c, f):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        if remove:
            with contextlib.suppress(OSError):
                self.part.unlink()
        self._done = True

    def _open(self, w: int, h: int) -> None:
        import av

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = _open_output(self.part)
        self._container = av.open(self._file, "w", format="mp4", options={"movflags": "+faststart"})
        s = self._container.add_stream("libx264", rate=self.fps, options={"crf": str(self.crf), "preset": "veryfast"})
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        self._stream = s

    def _encode(self, frame: np.ndarray, text: str = "") -> None:
        import av

        if self._container is None:
            self._open(frame.shape[1], frame.shape[0])
        if text:
            frame = frame.copy()
            frame[-LINE_H:] = 0
            _put(frame, text, 0, frame.shape[0] - 5, frame.shape[1])
        vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
        for p in self._stream.encode(vf):
            self._container.mux(p)

    # ------------------------------------------------------------------ api
    def add(self, frame: np.ndarray) -> None:
        """Queue one RGB frame (H, W, 3) uint8; encodes the frame :data:`OUTCOME_FRAMES` back."""
        if self._done:
            return
        f = _rgb(frame)
        if f.shape[0] % 2 or f.shape[1] % 2:  # yuv420p needs even sides: pad by one row / column
            f = np.pad(f, ((0, f.shape[0] % 2), (0, f.shape[1] % 2), (0, 0)))
        if self._size is not None and f.shape[:2] != self._size:
            raise ValueError(f"video {self.path}: frame {self.frames} is {f.shape[1]}x{f.shape[0]}, the episode's "
                             f"frames are {self._size[1]}x{self._size[0]}")
        self._size = f.shape[:2]
        self.frames += 1
        self._held.append(f)
        try:
            while len(self._held) > self.outcome_frames:
                self._encode(self._held.popleft())
        except _write_errors() as exc:
            self._fail(exc)

    def finish(self, outcome: str = "", keep: bool = True) -> Path | None:
        """End the episode: draw ``outcome`` on the held-back frames, close, rename to ``path``; the path, or
        None when not kept, empty or failed."""
        if self._done:
            return None
        if not keep or not self.frames:
            self._close(remove=True)
            return None
        try:
            while self._held:
                self._encode(self._held.popleft(), outcome)
            for p in self._stream.encode():
                self._container.mux(p)
            self._container.close()
            self._container = None
            self._file.close()
            os.replace(self.part, self.path)
        except _write_errors() as exc:
            self._fail(exc)
            return None
        self._close(remove=False)
        return self.path

    def abort(self) -> None:
        """Close and delete the partial file."""
        if not self._done:
            self._close(remove=True)

    def __enter__(self) -> EpisodeVideoWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.abort()


# ---------------------------------------------------------------------- episode loops' hook
_ACTIVE: contextvars.ContextVar[EpisodeVideo | None] = contextvars.ContextVar("embeval_episode_video", default=None)


def video_step(observation, action, clean: Mapping[str, np.ndarray] | None = None,
               render: Callable[[], Mapping[str, np.ndarray]] | None = None) -> None:
    """Episode loops call this once per step with the observation the policy acted on and its ``action``
    (``clean``: the undistorted images of that observation under a distortion; ``render``: images to use
    when the observation has none). Does nothing unless an :meth:`EpisodeRecorder.episode` is open."""
    ep = _ACTIVE.get()
    if ep is not None:
        ep.step(observation, action, clean, render)


def video_last(observation, clean: Mapping[str, np.ndarray] | None = None,
               render: Callable[[], Mapping[str, np.ndarray]] | None = None) -> None:
    """The observation after the episode's last action (its final frame); a no-op when not recording."""
    ep = _ACTIVE.get()
    if ep is not None:
        ep.step(observation, None, clean, render)


@dataclass
class EpisodeVideo:
    """One episode being recorded (from :meth:`EpisodeRecorder.episode`): turns observations into frames."""

    recorder: EpisodeRecorder
    index: int
    name: str
    writer: EpisodeVideoWriter | None  # None: this episode is not recorded (the policy cannot keep it)
    steps: int = 0
    path: Path | None = None
    _finished: bool = field(default=False, repr=False)

    def _views(self, observation, clean, render) -> list[tuple[str, np.ndarray]]:
        images = dict(getattr(observation, "images", None) or {})
        if not images and render is not None:
            images = dict(render())
        if not images:
            return []
        cam = self.recorder.camera if self.recorder.camera in images else next(iter(images))
        if clean and cam in clean and clean[cam] is not images[cam]:
            return [(f"{cam} reference", clean[cam]), (f"{cam} distorted (policy input)", images[cam])]
        return [(cam, images[cam])]

    def step(self, observation, action, clean=None, render=None) -> None:
        if self.writer is None or self._finished:
            return
        views = self._views(observation, clean, render)
        if views:
            try:
                self.writer.add(compose_frame(views, action_lines(self.steps, action)))
            except ValueError as exc:  # the view changed size mid-episode: end this video, never the episode
                self.writer._fail(exc)
        self.steps += action is not None

    def finish(self, success: bool, outcome: str = "") -> Path | None:
        """End the recording: keep the file when the policy says so; the path kept, or None."""
        if self._finished:
            return self.path
        self._finished = True
        if self.writer is None:
            return None
        word = "SUCCESS" if success else "FAILURE"
        text = word + (f": {outcome}" if outcome and outcome.lower() != word.lower() else "")  # no "SUCCESS: success"
        self.path = self.writer.finish(text, keep=self.recorder.policy.keep(self.index, bool(success)))
        if self.path is not None:
            self.recorder.written.append(self.path)
        return self.path


class EpisodeRecorder:
    """A run's episode videos: ``episode(name)`` opens one (a context manager that makes it the target of
    :func:`video_step` in this thread), ``policy`` decides which are kept, ``out_dir`` holds them,
    ``camera`` picks the view (default: the observation's first image). :attr:`written`: the kept files."""

    def __init__(self, policy: VideoPolicy | str, out_dir: str | Path, camera: str | None = None, fps: int = FPS,
                 crf: int | None = None, log: Callable[[str], Any] | None = None):
        self.policy = policy if isinstance(policy, VideoPolicy) else VideoPolicy.parse(policy)
        self.out_dir, self.camera, self.fps, self.crf, self.log = Path(out_dir), camera, fps, crf, log
        self.count = 0
        self.written: list[Path] = []

    @contextlib.contextmanager
    def episode(self, name: str, index: int | None = None) -> Iterator[EpisodeVideo]:
        """Record the episode ``name`` run inside the block (call ``finish`` on what it yields). ``index``:
        the episode's place in the run (default: the count of episodes opened so far; give it where episodes
        run out of order, e.g. in vectorised workers)."""
        if index is None:
            index = self.count
        self.count += 1
        writer = None
        if self.policy.may_keep(index):
            path = self.out_dir / f"{safe_name(name)}.mp4"
            writer = EpisodeVideoWriter(path, self.fps, self.crf, self.log)
        ep = EpisodeVideo(self, index, name, writer)
        token = _ACTIVE.set(ep)
        try:
            yield ep
        finally:
            _ACTIVE.reset(token)
            if writer is not None and not ep._finished:
                writer.abort()


def safe_name(name: str) -> str:
    """``name`` as a file name: letters, digits, ``-``, ``_``, ``.`` kept, anything else ``_`` (at most 120 chars)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip("._")[:120] or "episode"


def recorder_from_args(args, default_dir: str | Path) -> EpisodeRecorder | None:
    """The recorder of the ``--record-video`` / ``--video-dir`` options (:func:`embeval_cli._util.add_video_args`),
    or None when recording is off; a folder that cannot be written is a one-line ConfigError before any episode."""
    from embeval.errors import check_out_dir

    policy = getattr(args, "record_video", None) or VideoPolicy()
    if not policy.enabled:
        return None
    folder = getattr(args, "video_dir", None) or default_dir
    check_out_dir(folder, "--video-dir")
    return EpisodeRecorder(policy, folder)


@contextlib.contextmanager
def maybe_episode(recorder: EpisodeRecorder | None, name: str, index: int | None = None) -> Iterator[EpisodeVideo | None]:
    """``recorder.episode(name, index)``, or nothing (yields None) when ``recorder`` is None."""
    if recorder is None:
        yield None
    else:
        with recorder.episode(name, index) as ep:
            yield ep
