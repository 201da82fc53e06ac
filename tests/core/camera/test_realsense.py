"""The RealSense path through the real librealsense, without a camera: a software device's colour + depth (known
pixel values, depth and intrinsics) recorded with ``rs.recorder`` and played back through ``RealSenseSource``
(``rs.pipeline``, ``rs.align``), ``embeval camera record``'s recording code, ``iqa build --source realsense``,
the camera node on the realsense-ros topics, and hostile recordings (one line each, nothing hangs)."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

rs = pytest.importorskip("pyrealsense2", reason="pyrealsense2 is not installed: run scripts/install.sh")

from embeval.camera import make_source  # noqa: E402
from embeval.errors import ConfigError, InvalidInputError, MissingFileError, ServerUnavailableError  # noqa: E402
from realsense_software import FPS, FX, FY, H, PPX, PPY, W, SoftwareCamera, colour_of, depth_of, stamp_ms  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def rec5(tmp_path_factory) -> Path:
    return SoftwareCamera().write(tmp_path_factory.mktemp("rs") / "cell.db3", 5)


def _index(f) -> int:
    """The software frame number a played-back frame carries, from its recorded stamp."""
    return int(round((f.stamp_ns / 1e6 - stamp_ms(0)) * FPS / 1000.0))


def _check(f, i: int, depth: bool = True) -> None:
    assert np.array_equal(f.image, colour_of(i)), i
    assert f.stamp_ns == round(stamp_ms(i) * 1e6)
    if not depth:
        return
    assert f.depth is not None and f.depth.shape == (H, W) and f.depth.dtype == np.uint16
    valid = f.depth[f.depth > 0]
    # rs.align leaves a few holes at pixel-grid rounding, nothing else: every aligned value is the pushed depth
    assert valid.size >= 0.9 * H * W and np.all(valid == depth_of(i)[0, 0]), (i, np.unique(f.depth))


def test_recording_plays_back_every_frame_with_its_intrinsics_depth_and_stamps(rec5):
    src = make_source("realsense", recording=rec5)
    try:
        k = src.intrinsics
        assert (k.width, k.height, k.fx, k.fy, k.cx, k.cy) == (W, H, FX, FY, PPX, PPY)
        assert src.has_depth and src.depth_scale == pytest.approx(0.001)
        frames = []
        t0 = time.monotonic()
        while (f := src.read()) is not None:
            frames.append(f)
        assert time.monotonic() - t0 < 3.0  # the end of the file is an end, not a timeout
        idx = [_index(f) for f in frames]
        # in order, never twice, to the last one; librealsense's pipeline may lose the first ones while it starts
        assert [f.index for f in frames] == list(range(len(frames))) and idx == sorted(set(idx)) and idx[-1] == 4
        assert len(idx) >= 2 and set(idx) <= set(range(5))
        # under load the real-time playback's syncer can drop a colour frame's depth: that frame goes out with colour
        # only (never with another capture's depth); most keep theirs
        with_depth = [f for f in frames if f.depth is not None]
        assert len(with_depth) >= len(frames) / 2, [(_index(f), f.depth is not None) for f in frames]
        for f in frames:
            _check(f, _index(f), depth=f.depth is not None)
            assert f.depth_scale == pytest.approx(0.001)
        assert src.read() is None  # stays ended
    finally:
        src.close()
    colour_only = make_source("realsense", recording=rec5, depth=False)
    f = colour_only.read()
    assert f.depth is None and np.array_equal(f.image, colour_of(_index(f)))
    colour_only.close()


def test_real_time_playback_keeps_the_recorded_rate_and_fast_playback_does_not(tmp_path):
    path = SoftwareCamera().write(tmp_path / "long.db3", 24)  # 0.8 s at 30 fps
    times = {}
    for realtime in (True, False):
        src = make_source("realsense", recording=path, realtime=realtime)
        got, t0 = [], None
        while (f := src.read()) is not None:
            t0 = t0 or time.monotonic()
            got.append(_index(f))
        times[realtime] = time.monotonic() - t0
        src.close()
        assert got == sorted(set(got)) and set(got) <= set(range(24))  # in order, never twice
        assert got  # fast playback: the pipeline keeps only the latest frames, a slower reader misses the others
        if realtime:
            assert len(got) >= 8 and got[-1] == 23  # the reader keeps pace; the start may lose the first ones
    assert times[True] >= 0.5 and times[False] < times[True]


def test_loop_starts_the_recording_again(rec5):
    src = make_source("realsense", recording=rec5, loop=True)
    seen = [_index(src.read()) for _ in range(12)]
    src.close()
    wraps = [i for i in range(1, 12) if seen[i] <= seen[i - 1]]
    assert len(wraps) >= 1 and all(seen[i - 1] == 4 for i in wraps), seen  # from the last frame back to the start


def test_record_writes_what_the_device_streams(tmp_path, capsys):
    """`embeval camera record`'s code path (rs.recorder over the device's sensors, profile choice, progress) on a
    software device; the file plays back with the pushed values."""
    import argparse

    from embeval_cli.camera import _record

    cam = SoftwareCamera()
    out = tmp_path / "sub" / "cell.db3"
    args = argparse.Namespace(out=out, seconds=0.0, frames=6, width=W, height=H, fps=FPS, serial="", depth=True)
    with cam.pushing():
        assert _record(args, device=cam.dev) == 0
    cap = capsys.readouterr()
    assert "recording " in cap.err and "/6 colour" in cap.err  # the progress line
    assert "recorded 6 colour + " in cap.out and "Color rgb8 64x48@30" in cap.out and "Depth z16 64x48@30" in cap.out
    src = make_source("realsense", recording=out)
    frames = []
    while (f := src.read()) is not None:
        frames.append(f)
    src.close()
    idx = [_index(f) for f in frames]
    assert len(frames) >= 3 and idx == sorted(set(idx))
    for f in frames:
        assert np.array_equal(f.image, colour_of(_index(f)))
    assert sum(f.depth is not None for f in frames) >= len(frames) - 1  # the last pair may be cut by the stop
    for f in frames:
        if f.depth is not None:
            _check(f, _index(f))
    with pytest.raises(ConfigError, match="exists"):
        _record(args, device=cam.dev)
    bad = argparse.Namespace(**{**vars(args), "out": tmp_path / "x.db3", "width": 640, "height": 480})
    with pytest.raises(ConfigError, match="no colour rgb8 stream at 640x480@30; it offers rgb8 64x48@30"):
        _record(bad, device=cam.dev)
    assert not (tmp_path / "x.db3").exists()


def _cli(*argv, timeout=60):
    return subprocess.run([sys.executable, "-m", "embeval_cli", *argv], capture_output=True, text=True, timeout=timeout)


def test_record_without_a_camera_says_so_in_one_line(tmp_path):
    from embeval.camera.realsense import realsense_devices

    if realsense_devices():
        pytest.skip("a RealSense is connected: the command would record it")
    r = _cli("camera", "record", "--out", str(tmp_path / "c.db3"), "--seconds", "1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "no RealSense connected" in r.stderr and not (tmp_path / "c.db3").exists()
    r = _cli("camera", "record", "--out", str(tmp_path / "c.bag"), "--seconds", "1")
    assert r.returncode == 2 and "records rosbag2 .db3 files (it refuses .bag); name it c.db3" in r.stderr


def _hostile(tmp_path: Path, rec5: Path, case: str) -> tuple[dict, type, str]:
    data = rec5.read_bytes()
    p = tmp_path / f"{case}.db3"
    if case == "truncated":
        p.write_bytes(data[: len(data) // 2])
        return {"recording": p}, InvalidInputError, "truncated, corrupted or not a librealsense recording"
    if case == "corrupted":
        rng = np.random.default_rng(0)
        b = np.frombuffer(data, np.uint8).copy()
        b[100:] = rng.integers(0, 256, b.size - 100, dtype=np.uint8)
        p.write_bytes(b.tobytes())
        return {"recording": p}, InvalidInputError, "malformed"
    if case == "text":
        p.write_text("not a recording\n")
        return {"recording": p}, InvalidInputError, "file is not a database"
    if case == "old_bag_that_is_not":
        p = tmp_path / "cell.bag"
        p.write_bytes(data)  # a .db3 named .bag: the rosbag1 reader refuses it
        return {"recording": p}, InvalidInputError, "cannot play RealSense recording"
    if case == "png":
        p = tmp_path / "frame.png"
        p.write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 64)
        return {"recording": p}, InvalidInputError, "not a librealsense recording"
    if case == "empty":
        p.write_bytes(b"")
        return {"recording": p}, InvalidInputError, "is empty"
    if case == "missing":
        return {"recording": tmp_path / "nope.db3"}, MissingFileError, "embeval camera record"
    if case == "no_colour":
        SoftwareCamera(colour=False).write(p, 3)
        return {"recording": p}, InvalidInputError, "has no colour stream (it has: Depth z16 64x48@30)"
    if case == "yuyv_colour":
        SoftwareCamera(depth=False, fmt="yuyv").write(p, 3)
        return {"recording": p}, InvalidInputError, "colour stream format yuyv is not read"
    if case == "other_resolution":
        return {"recording": rec5, "width": 640, "height": 480}, ConfigError, "colour is 64x48@30, asked for width 640"
    if case == "depth_required":
        SoftwareCamera(depth=False).write(p, 3)
        return {"recording": p, "depth": True}, InvalidInputError, "has no depth stream"
    raise AssertionError(case)


HOSTILE = ["truncated", "corrupted", "text", "old_bag_that_is_not", "png", "empty", "missing", "no_colour", "yuyv_colour",
           "other_resolution", "depth_required"]


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_recordings_are_refused_in_one_line(tmp_path, rec5, case):
    kw, err, text = _hostile(tmp_path, rec5, case)
    t0 = time.monotonic()
    with pytest.raises(err) as exc:
        src = make_source("realsense", realtime=False, timeout_ms=2000, **kw)
        src.read()
    assert time.monotonic() - t0 < 10
    msg = str(exc.value)
    assert text in msg and "\n" not in msg, msg


def test_a_recording_that_stops_delivering_times_out(rec5):
    """A stalled playback (paused: no frame, no end) raises after timeout_ms instead of blocking."""
    src = make_source("realsense", recording=rec5, realtime=False, timeout_ms=500)
    src._playback.pause()
    t0 = time.monotonic()
    with pytest.raises(ServerUnavailableError, match="delivered no frame within 500 ms"):
        src.read()
    assert time.monotonic() - t0 < 3
    src.close()


def test_iqa_build_takes_its_references_from_a_recording(tmp_path):
    from PIL import Image

    from embeval_cli import main

    rec = SoftwareCamera().write(tmp_path / "cell.db3", 24)
    subj = tmp_path / "p.yaml"
    subj.write_text(yaml.safe_dump({"kind": "policy", "adapter": "image_stats", "params": {"scale": 0.1}}))
    db = tmp_path / "db"
    assert main(["iqa", "build", "--out", str(db), "--source", "realsense", "--path", str(rec), "--n", "2",
                 "--distortions", "darken", "--levels", "3", "--subjects", str(subj), "--no-progress"]) == 0
    import pandas as pd

    scores = pd.read_csv(db / "scores.csv")
    assert len(scores) == 2 and set(scores["distortion"]) == {"darken"} and (scores["source"] == "real").all()
    refs = sorted(p for p in db.rglob("*.png") if "rs_cell_f" in p.name and "darken" not in p.name)
    assert len(refs) == 2
    known = [colour_of(i) for i in range(24)]
    for f in refs:  # every reference is a recorded frame, pixel for pixel
        img = np.asarray(Image.open(f).convert("RGB"))
        assert any(np.array_equal(img, k) for k in known), f
