"""Hostile bags: a truncated, empty, corrupt segment or a bad metadata.yaml is one line naming the file and the
fix (``embeval bag recover DIR``), exit code 2, no traceback, in every command that reads bags."""
from __future__ import annotations

import numpy as np
import pytest

from embeval_cli import main
from embeval.errors import InvalidInputError
from embeval.recording import read_bag

TOPIC = "/camera/camera/color/image_raw"
FRAME_ID = "hostile_camera_frame"


@pytest.fixture()
def bag(tmp_path):
    """A real rosbag2 MCAP bag written by rosbags' own Writer: 3 rgb8 images on TOPIC."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    Image, Header, Time = (ts.types[t] for t in ("sensor_msgs/msg/Image", "std_msgs/msg/Header",
                                                    "builtin_interfaces/msg/Time"))
    path = tmp_path / "bag"
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        conn = w.add_connection(TOPIC, "sensor_msgs/msg/Image", typestore=ts)
        for i in range(3):
            msg = Image(header=Header(stamp=Time(sec=i, nanosec=0), frame_id=FRAME_ID), height=6, width=8,
                        encoding="rgb8", is_bigendian=0, step=24, data=np.full(144, 40 * i, np.uint8))
            w.write(conn, 1_000 + i, ts.serialize_cdr(msg, "sensor_msgs/msg/Image"))
    return path


def _segment(bag):
    (seg,) = bag.glob("*.mcap")
    return seg


def _error(capsys, *argv) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if "embeval: error" in ln]
    # one error line of its own: not glued to the progress bar's \r line (a line-based grep must find it)
    assert len(lines) == 1 and lines[0].startswith("embeval: error: "), err
    return lines[0]


def _distort(bag, out):
    return "distort", "bag", str(bag), str(out), "--topic", TOPIC, "--type", "jpeg", "--level", "2"


@pytest.mark.parametrize("damage", ["truncated", "empty", "bad_magic"])
def test_broken_segment_names_the_file_and_bag_recover(bag, tmp_path, capsys, damage):
    seg = _segment(bag)
    data = seg.read_bytes()
    seg.write_bytes({"truncated": data[:3000], "empty": b"", "bad_magic": b"garbage!" + data[8:]}[damage])
    for argv in (("bag", "info", str(bag)), _distort(bag, tmp_path / "out")):
        line = _error(capsys, *argv)
        assert str(seg) in line and "truncated, corrupt or empty" in line
        assert f"run `embeval bag recover {bag}`" in line
    assert not (tmp_path / "out").exists()  # the input is checked before the output bag is created
    # the fix the message names works: recover drops the broken segment, the bag reads again (empty)
    assert main(["bag", "recover", str(bag)]) == 0
    capsys.readouterr()
    assert main(["bag", "info", str(bag)]) == 0
    assert f"{bag}: 0 messages" in capsys.readouterr().out


def test_single_mcap_file_truncated(bag, capsys):
    seg = _segment(bag)
    seg.write_bytes(seg.read_bytes()[:3000])
    line = _error(capsys, "bag", "info", str(seg))
    assert f"MCAP file {seg} is truncated" in line and "bag recover" in line


@pytest.mark.parametrize("damage", ["list", "not_yaml", "missing_segment"])
def test_bad_metadata_names_it_and_bag_recover_rebuilds_it(bag, tmp_path, capsys, damage):
    if damage == "list":
        (bag / "metadata.yaml").write_text("[1, 2]\n")
    elif damage == "not_yaml":
        (bag / "metadata.yaml").write_text("rosbag2_bagfile_information: {version: [\n")
    else:  # the listed segment was renamed away: metadata lists a file that is not there
        seg = _segment(bag)
        seg.rename(seg.with_name("renamed_0.mcap"))
    for argv in (("bag", "info", str(bag)), _distort(bag, tmp_path / "out")):
        line = _error(capsys, *argv)
        assert f"bag {bag}: metadata.yaml is not valid" in line and f"run `embeval bag recover {bag}`" in line
    assert main(["bag", "recover", str(bag)]) == 0
    capsys.readouterr()
    assert main(["bag", "info", str(bag)]) == 0
    assert f"{bag}: 3 messages" in capsys.readouterr().out


def test_corrupt_message_inside_a_segment_is_found_while_reading(bag, tmp_path, capsys):
    """Header and summary intact, one message's bytes broken: caught mid-way, the segment named."""
    seg = _segment(bag)
    data = seg.read_bytes()
    i = data.index(FRAME_ID.encode())
    seg.write_bytes(data[:i] + b"\xff" * len(FRAME_ID) + data[i + len(FRAME_ID):])  # not UTF-8 any more
    assert main(["bag", "info", str(bag)]) == 0  # metadata and summary are fine
    capsys.readouterr()
    line = _error(capsys, *_distort(bag, tmp_path / "out"))
    assert f"bag segment {seg} is corrupt" in line and f"embeval bag recover {bag}" in line
    assert not (tmp_path / "out").exists()  # no partial copy left to block the rerun after the repair
    with pytest.raises(InvalidInputError, match="is corrupt"):
        list(read_bag(bag))


def test_messages_silently_skipped_are_an_error(bag):
    """A zeroed chunk makes the MCAP reader skip messages without an error: the count check catches it."""
    seg = _segment(bag)
    data = bytearray(seg.read_bytes())
    i = data.index(FRAME_ID.encode())
    start = data.rindex(b"\x06", 0, i - 60)  # somewhere in the chunk record before the first message
    data[start:start + 64] = bytes(64)
    seg.write_bytes(bytes(data))
    with pytest.raises(InvalidInputError, match=f"bag segment {seg} is corrupt"):
        list(read_bag(bag))


def test_message_count_is_the_bags_after_close(tmp_path):
    """BagRecorder.message_count (what `embeval graph` prints) equals what bag info and a reader see, also after
    the last segment was flushed (it used to be counted twice)."""
    from embeval.recording import BagRecorder, bag_info, typestore

    String = typestore().types["std_msgs/msg/String"]
    with BagRecorder(tmp_path / "b", segment_s=0.1) as rec:
        rec.add_topic("/s", "std_msgs/msg/String")
        for i in range(25):
            rec.write_msg("/s", String(data=str(i)), 1_000 + i * 30_000_000)  # 0.72 s in 0.1 s segments
            assert rec.message_count == i + 1
    assert len(rec.segments) == 7  # 4 messages (120 ms) per segment
    assert rec.message_count == bag_info(rec.path)["message_count"] == len(list(read_bag(rec.path))) == 25


def test_discard_if_empty_removes_only_an_empty_bag(tmp_path):
    from embeval.recording import BagRecorder, typestore

    rec = BagRecorder(tmp_path / "empty")
    rec.add_topic("/s", "std_msgs/msg/String")
    assert rec.discard_if_empty() and not (tmp_path / "empty").exists()
    rec = BagRecorder(tmp_path / "one")
    rec.add_topic("/s", "std_msgs/msg/String")
    rec.write_msg("/s", typestore().types["std_msgs/msg/String"](data="x"), 5)
    assert not rec.discard_if_empty()
    assert [m.msg.data for m in read_bag(tmp_path / "one")] == ["x"]


def test_recover_sets_a_segment_with_corrupt_messages_aside_and_keeps_the_rest(tmp_path, capsys):
    """A segment whose header and summary are intact but whose messages are corrupt: `bag recover` finds it by
    reading every message, moves it (byte for byte) into damaged/, and the bag reads again from the other segments."""
    from embeval.recording import BagRecorder, recover_bag, typestore

    String = typestore().types["std_msgs/msg/String"]
    bag = tmp_path / "b"
    with BagRecorder(bag, segment_s=0.1) as rec:
        rec.add_topic("/s", "std_msgs/msg/String")
        for i in range(10):
            rec.write_msg("/s", String(data=f"value-{i:02d}"), 1_000 + i * 50_000_000)
    segs = sorted(bag.glob("*.mcap"))
    assert len(segs) >= 3
    victim = segs[1]
    data = victim.read_bytes()
    i = data.index(b"value-")
    broken = data[:i] + b"\xff\xfe" + data[i + 2:]  # not UTF-8 any more; the summary still says all is well
    victim.write_bytes(broken)
    with pytest.raises(InvalidInputError, match=f"bag segment {victim} is corrupt.*sets the segment aside"):
        list(read_bag(bag))
    assert main(["bag", "recover", str(bag)]) == 0
    out = capsys.readouterr().out
    assert f"set aside in {bag / 'damaged'}: {victim.name}" in out
    assert (bag / "damaged" / victim.name).read_bytes() == broken and not victim.exists()
    values = [m.msg.data for m in read_bag(bag)]
    assert values and all(v.startswith("value-") for v in values) and len(values) < 10
    assert values == sorted(values)
    assert recover_bag(bag).discarded == []  # a second recovery finds nothing more to set aside
