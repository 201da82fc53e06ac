"""``embeval distort`` list / apply / bag / grid through the CLI entry point."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from embeval_cli import main
from embeval.distortion import distort
from embeval.distortion.samples import synthetic_tabletop
from embeval.provenance import derive_seed

TOPIC = "/camera/camera/color/image_raw"


@pytest.fixture()
def folder(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for i in range(2):
        Image.fromarray(synthetic_tabletop(64, 48, seed=i)).save(d / f"frame{i}.png")
    (d / "notes.txt").write_text("not an image")
    return d


def test_list(capsys):
    assert main(["distort", "list"]) == 0
    out = capsys.readouterr().out
    assert "jpeg2000" in out and "30 types" in out
    assert main(["distort", "list", "--category", "noise", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["category"] for r in rows} == {"noise"} and len(rows) == 6


def test_apply_one_and_all(folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["distort", "apply", "--in", str(folder), "--out", str(out), "--type", "white_noise", "--level", "3",
                 "--seed", "4"]) == 0
    got = np.asarray(Image.open(out / "white_noise" / "L3" / "frame1.png"))
    src = np.asarray(Image.open(folder / "frame1.png"))
    np.testing.assert_array_equal(got, distort(src, "white_noise", 3, derive_seed(4, "frame1.png", "white_noise", 3)))
    lines = (out / "manifest.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["level"] == 3
    out2 = tmp_path / "all"
    assert main(["distort", "apply", "--in", str(folder), "--out", str(out2), "--all", "--level", "1", "5"]) == 0
    assert len(list(out2.glob("*/L*/*.png"))) == 2 * 30 * 2
    assert main(["distort", "apply", "--in", str(folder), "--out", str(out2), "--type", "nope"]) == 2
    assert "unknown distortion" in capsys.readouterr().err
    assert main(["distort", "apply", "--in", str(tmp_path / "missing"), "--out", str(out2), "--all"]) == 2


def test_bag_roundtrip(tmp_path):
    from embeval.distortion.batch import _image_msg
    from embeval.recording import BagRecorder, read_bag, typestore

    ts = typestore()
    Header, Time, String = ts.types["std_msgs/msg/Header"], ts.types["builtin_interfaces/msg/Time"], ts.types["std_msgs/msg/String"]
    frames = [synthetic_tabletop(64, 48, seed=i) for i in range(3)]
    src = tmp_path / "bag_in"
    with BagRecorder(src) as rec:
        rec.add_topic(TOPIC, "sensor_msgs/msg/Image")
        rec.add_topic("/events", "std_msgs/msg/String")
        for i, f in enumerate(frames):
            rec.write_msg(TOPIC, _image_msg(ts, Header(stamp=Time(sec=i, nanosec=5), frame_id="cam"), f), 1_000 + i)
            rec.write_msg("/events", String(data=f"e{i}"), 1_500 + i)
    dst = tmp_path / "bag_out"
    assert main(["distort", "bag", str(src), str(dst), "--topic", TOPIC, "--type", "jpeg", "--level", "4"]) == 0
    msgs = list(read_bag(dst))
    imgs = [m for m in msgs if m.topic == TOPIC]
    assert len(imgs) == 3 and [m.msg.data for m in msgs if m.topic == "/events"] == ["e0", "e1", "e2"]
    for i, m in enumerate(imgs):
        assert m.msg.header.stamp.sec == i and m.msg.header.frame_id == "cam" and m.timestamp_ns == 1_000 + i
        assert m.msg.encoding == "rgb8"
        got = np.asarray(m.msg.data).reshape(48, 64, 3)
        np.testing.assert_array_equal(got, distort(frames[i], "jpeg", 4))  # jpeg is deterministic
    assert main(["distort", "bag", str(src), str(dst), "--type", "jpeg", "--level", "4"]) == 2  # never overwrite
    assert main(["distort", "bag", str(src), str(tmp_path / "x"), "--topic", "/nope", "--type", "jpeg", "--level", "1"]) == 2


def test_grid(tmp_path):
    out = tmp_path / "grid.png"
    assert main(["distort", "grid", "--out", str(out), "--type", "jpeg", "pixelate", "--width", "128", "--thumb", "64"]) == 0
    sheet = np.asarray(Image.open(out))
    assert sheet.ndim == 3 and sheet.shape[1] > 6 * 64 and sheet.shape[0] > 2 * 48


def test_frame_distorter_seeds_per_frame():
    from embeval.distortion import FrameDistorter, frame_seed
    from embeval.errors import ConfigError

    f = synthetic_tabletop(64, 48, seed=0)
    d = FrameDistorter("white_noise", 2, seed=3, stream="/cam")
    a, b = d(f), d(f)
    assert not np.array_equal(a, b)  # noise differs between frames
    np.testing.assert_array_equal(a, distort(f, "white_noise", 2, frame_seed(3, "/cam", 0, "white_noise", 2)))
    np.testing.assert_array_equal(b, FrameDistorter("white_noise", 2, seed=3, stream="/cam")(f, index=1))  # replay
    with pytest.raises(ConfigError):
        FrameDistorter("white_noise", 9)


def test_demo_stage_quick(tmp_path, capsys):
    from embeval_demo import DemoContext
    from embeval_demo.distortion import run

    ctx = DemoContext(out_dir=tmp_path, seed=0, quick=True)
    run(ctx)
    out = capsys.readouterr().out
    assert "all 30 types" in out
    assert (tmp_path / "distortion_grid_astronaut.png").exists() and (tmp_path / "distortion_grid_tabletop.png").exists()
    table = ctx.shared["distortion_psnr"]
    assert len(table) == 30 and all(np.all(np.diff(v) < 0) for v in table.values())


def test_apply_error_line_is_not_glued_to_the_progress_bar(folder, tmp_path, capsys):
    """An error after the bar started (here: a file stands where the type's output folder goes) is printed on
    a line of its own, not after the bar's \\r: a line-based grep for 'embeval: error' finds it whole."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "jpeg").write_text("a file, not a folder")
    assert main(["distort", "apply", "--in", str(folder), "--out", str(out), "--type", "jpeg", "--level", "2"]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "embeval: error" in ln]
    assert len(lines) == 1 and lines[0].startswith("embeval: error: ") and str(out / "jpeg") in lines[0], err
    assert "distort:" in err  # the bar was shown (and ended) before the error
