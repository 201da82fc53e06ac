"""Crafted data files: bags and LeRobot datasets.

A compression bomb in an MCAP bag: an 11 KB zstd chunk of zeros decompressed to 300 MB (1.4 GB of RSS for
`embeval bag video`), because rosbags decompresses chunks without a bound. Chunks now decompress to at most what
they declare, and a declared size over ``MAX_CHUNK_BYTES`` is refused in one line. A LeRobot dataset's image
feature is refused when its frames would decode past ``MAX_IMAGE_FEATURE_BYTES`` or change size mid-way."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import one_error_line
from embeval.recording import bag as B
from embeval_cli import main


def _bomb(tmp_path, payload: int, **rewrite):
    from mcap.writer import CompressionType

    ts = B.typestore()
    Image, Header, Time = (ts.types[t] for t in ("sensor_msgs/msg/Image", "std_msgs/msg/Header",
                                                  "builtin_interfaces/msg/Time"))
    with B.BagRecorder(tmp_path / "plain") as r:
        r.add_topic("/cam", "sensor_msgs/msg/Image")
        r.write_msg("/cam", Image(header=Header(stamp=Time(sec=0, nanosec=0), frame_id="c"), height=1, width=4,
                                  encoding="rgb8", is_bigendian=0, step=12, data=np.zeros(payload, np.uint8)), 1)
    return _rewrite(next((tmp_path / "plain").glob("*.mcap")), tmp_path / "bomb.mcap",
                    **{"compression": CompressionType.ZSTD, "chunk_size": 1 << 30, **rewrite})


def _rewrite(src, out, compression, chunk_size, encoding=None, schema_data=None, schema_name=None):
    """MCAP file ``src`` written again as ``out`` with this compression and chunk size, and optionally every
    schema's encoding, text or name replaced."""
    from mcap.reader import make_reader
    from mcap.writer import Writer

    with open(src, "rb") as f, open(out, "wb") as o:
        w = Writer(o, compression=compression, chunk_size=chunk_size)
        w.start(profile="ros2", library="test")
        for schema, ch, m in make_reader(f).iter_messages():
            sid = w.register_schema(schema_name or schema.name, encoding or schema.encoding,
                                    schema.data if schema_data is None else schema_data)
            w.add_message(w.register_channel(ch.topic, ch.message_encoding, sid, ch.metadata), m.log_time, m.data,
                          m.publish_time)
        w.finish()
    return out


@pytest.mark.parametrize("bad, problem", [
    ({"encoding": "protobuf"}, "has encoding 'protobuf'; embeval reads ROS 2 bags (ros2msg, ros2idl)"),
    ({"schema_data": b"\xff\xfe not a definition"}, "is not UTF-8 text"),
])
@pytest.mark.parametrize("command", ["info", "video"])
def test_a_schema_rosbags_cannot_read_is_named_with_its_topic(tmp_path, capsys, bad, problem, command):
    f = _bomb(tmp_path, 48, **bad)
    argv = ["bag", command, str(f)] + (["--topic", "/cam", "--out", str(tmp_path / "v.mp4")] if command == "video" else [])
    assert main(argv) != 0
    line = one_error_line(capsys)
    assert f"schema 'sensor_msgs/msg/Image' of topic /cam {problem}" in line and "truncated" not in line, line
    assert not (tmp_path / "v.mp4").exists()


def test_a_schema_naming_another_type_and_one_byte_chunks(tmp_path, capsys):
    """A channel whose schema names another type is refused by bag video in one line; a bag written with one
    message per uncompressed chunk (chunk_size 1) reads the same as the original."""
    from mcap.writer import CompressionType

    f = _bomb(tmp_path, 48, schema_name="std_msgs/msg/String")
    assert main(["bag", "video", str(f), "--topic", "/cam", "--out", str(tmp_path / "v.mp4")]) != 0
    assert "is std_msgs/msg/String, not sensor_msgs/msg/Image" in one_error_line(capsys)
    tiny = _rewrite(f, tmp_path / "tiny.mcap", CompressionType.NONE, 1, schema_name="sensor_msgs/msg/Image")
    (m,) = B.read_bag(tiny)
    assert (m.msg.width, m.msg.height, len(m.msg.data)) == (4, 1, 48)


def test_a_chunk_declaring_more_than_the_limit_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    bomb = _bomb(tmp_path, 8 << 20)
    assert bomb.stat().st_size < 64 << 10  # 8 MiB of payload in a few KB
    monkeypatch.setattr(B, "MAX_CHUNK_BYTES", 4 << 20)
    rc = main(["bag", "video", str(bomb), "--topic", "/cam", "--out", str(tmp_path / "v.mp4")])
    assert rc != 0
    assert "over the limit of 4194304" in one_error_line(capsys)
    monkeypatch.setattr(B, "MAX_CHUNK_BYTES", 16 << 20)  # under the limit the same bag reads as before
    assert [m.msg.width for m in B.read_bag(bomb)] == [4]


def test_a_chunk_that_decompresses_past_its_declared_size_stops_there():
    from backports import zstd

    data = zstd.compress(b"\0" * (8 << 20))
    assert len(B._bounded_decompressor("zstd")(data, 1000)) == 1001  # rosbags then refuses the size mismatch
    import lz4.frame

    assert len(B._bounded_decompressor("lz4")(lz4.frame.compress(b"\0" * (8 << 20)), 1000)) == 1001
    with pytest.raises(Exception, match="over the limit"):
        B._bounded_decompressor("zstd")(data, B.MAX_CHUNK_BYTES + 1)


def test_a_dataset_whose_frames_would_decode_past_the_limit_or_change_size_is_refused(tmp_path, monkeypatch):
    from test_datasets_lerobot_format import _write

    from embeval.datasets import lerobot_format as L
    from embeval.datasets import read_lerobot
    from embeval.errors import InvalidInputError

    _write(tmp_path / "ds")  # 18 frames of 24x32
    monkeypatch.setattr(L, "MAX_IMAGE_FEATURE_BYTES", 17 * 24 * 32 * 3)
    with pytest.raises(InvalidInputError, match=r"18 frames of 24x32x3 would take .* over the limit"):
        read_lerobot(tmp_path / "ds")
    monkeypatch.setattr(L, "MAX_IMAGE_FEATURE_BYTES", 18 * 24 * 32 * 3)
    assert read_lerobot(tmp_path / "ds").frames["observation.images.third_person"].shape == (18, 24, 32, 3)
    sizes = iter([(24, 32)] + [(48, 64)] * 20)  # a frame of another size (before: a numpy broadcast traceback)
    real = L._unpng
    monkeypatch.setattr(L, "_unpng", lambda b: np.zeros(next(sizes) + (3,), np.uint8) if real(b) is not None else None)
    with pytest.raises(InvalidInputError, match="frame 1 is 48x64x3, the first was 24x32x3"):
        read_lerobot(tmp_path / "ds")


def test_a_dataset_with_absurd_feature_declarations_is_refused_in_one_line(tmp_path):
    """info.json from outside: a huge or malformed shape, an unknown dtype, a shape the data does not have,
    a file that is not JSON: each one InvalidInputError naming the feature, before anything is allocated."""
    import json

    from test_datasets_lerobot_format import _write

    from embeval.datasets import read_lerobot
    from embeval.errors import InvalidInputError

    _write(tmp_path / "ds")
    info_file = tmp_path / "ds" / "meta" / "info.json"
    good = json.loads(info_file.read_text())
    plain = next(k for k, f in good["features"].items() if f["dtype"] == "float32" and not k.startswith("timestamp"))
    cases = [
        ({"shape": [1 << 16, 1 << 16]}, r"declares 4294967296 values per frame"),
        ({"shape": [-3]}, r"shape \[-3\]"),
        ({"shape": [2.5]}, r"shape \[2.5\]"),
        ({"shape": "7"}, r"shape 7"),
        ({"dtype": "object"}, r"dtype 'object'"),
        ({"shape": [good["features"][plain]["shape"][0] + 1]}, r"does not match its declared dtype"),
    ]
    for change, message in cases:
        info = json.loads(json.dumps(good))
        info["features"][plain].update(change)
        info_file.write_text(json.dumps(info))
        with pytest.raises(InvalidInputError, match=message) as exc:
            read_lerobot(tmp_path / "ds")
        assert "\n" not in str(exc.value) and plain in str(exc.value) or "does not match" in str(exc.value)
    info_file.write_text("{not json")
    with pytest.raises(InvalidInputError, match="is not JSON"):
        read_lerobot(tmp_path / "ds")
    info_file.write_text(json.dumps(good))
    assert read_lerobot(tmp_path / "ds").frames[plain].shape[0] == good["total_frames"]
