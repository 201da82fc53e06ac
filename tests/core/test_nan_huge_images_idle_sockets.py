"""The low findings of the fourth hostile-input round: idle WebSocket connections, NaN in the speed and step
checks, images that decode to hundreds of megapixels."""
from __future__ import annotations

import math
import time

import msgpack
import pytest

from embeval.errors import InvalidInputError
from embeval.robot.safety import SafetyLimits, check_joint_speed, check_step, check_step_rotation, check_tcp_speed


@pytest.mark.parametrize("check,value", [
    (check_step, [math.nan, 0, 0]), (check_step, [math.inf, 0, 0]), (check_step_rotation, [0, math.nan, 0]),
    (check_tcp_speed, math.nan), (check_joint_speed, [0, 0, math.nan, 0, 0, 0]),
])
def test_nan_is_refused_by_every_safety_check(check, value):
    assert check(value, SafetyLimits()).stopped  # before: NaN passed check_step, check_tcp_speed, check_joint_speed
    assert check(value, SafetyLimits(max_step_translation=None, max_step_rotation=None)).stopped


def test_finite_values_within_the_limits_still_pass():
    lim = SafetyLimits()
    assert not check_step([0.001, 0, 0], lim).stopped and not check_tcp_speed(0.01, lim).stopped
    assert not check_joint_speed([0.01] * 6, lim).stopped and not check_step_rotation([0.01, 0, 0], lim).stopped


def test_an_image_that_decodes_to_177_megapixels_is_refused_from_its_header(tmp_path, capsys):
    import zlib
    import struct

    from embeval_cli import main

    w, h = 13300, 13300  # 177 Mpx: under Pillow's own bomb limit (179 Mpx), 530 MB decoded as RGB

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = zlib.compress(b"\0" * (w + 1) * 64, 9)  # only the first rows: the header alone must stop it
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) + chunk(b"IDAT", raw) \
        + chunk(b"IEND", b"")
    src = tmp_path / "in"
    src.mkdir()
    (src / "bomb.png").write_bytes(png)
    t = time.monotonic()
    rc = main(["distort", "apply", "--in", str(src), "--out", str(tmp_path / "out"), "--type", "darken", "--level", "1"])
    assert rc != 0 and time.monotonic() - t < 10
    err = capsys.readouterr().err
    assert "13300x13300 pixels" in err and "over the limit" in err and "Traceback" not in err
    from embeval.image_io import MAX_DECODED_PIXELS
    from embeval.distortion.batch import read_rgb

    with pytest.raises(InvalidInputError, match=f"over the limit of {MAX_DECODED_PIXELS / 1e6:.1f} Mpx"):
        read_rgb(src / "bomb.png")


def _both_closed_idle(*conns):
    from websockets.exceptions import ConnectionClosed

    for ws in conns:
        err = msgpack.unpackb(ws.recv(timeout=5), raw=False)  # before: they held the slots for good
        assert err["type"] == "error" and err["payload"]["code"] == "idle_timeout"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        assert ws.close_code == 1008


def test_idle_websocket_connections_are_closed_before_hello_and_between_messages():
    from websockets.sync.client import connect

    from embeval.serving.vla_eval_server import VlaEvalServer, serve_in_thread
    from embeval.subjects.scripted import ImageStatsPolicy

    server = VlaEvalServer(ImageStatsPolicy(), max_connections=2, hello_timeout_s=0.5, idle_timeout_s=1.0)
    with serve_in_thread(server) as running:
        with connect(running.url, compression=None) as a, connect(running.url, compression=None) as b:
            _both_closed_idle(a, b)  # every slot was held
        with connect(running.url, compression=None) as ws:  # a slot is free again
            ws.send(msgpack.packb({"type": "hello", "payload": {"protocol_version": 1}, "seq": 1, "timestamp": 0.0}))
            assert msgpack.unpackb(ws.recv(timeout=5), raw=False)["type"] == "hello"
            t = time.monotonic()
            err = msgpack.unpackb(ws.recv(timeout=5), raw=False)
            assert err["payload"]["code"] == "idle_timeout" and 0.8 < time.monotonic() - t < 4
        assert server.health()["idle_closed"] == 3


def test_a_full_disk_while_recording_is_one_error_naming_the_run_folder(tmp_path):
    from embeval.errors import ConfigError
    from embeval.runs.store import ResultsStore

    store = ResultsStore(tmp_path / "run" / "results.sqlite")
    with store._tx() as c:
        c.execute("CREATE TABLE blobs (x BLOB)")
        c.execute("INSERT INTO blobs VALUES (?)", (b"kept",))
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    store.conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # SQLite's own "database or disk is full"
    with pytest.raises(ConfigError, match=r"the disk holding .*run is full .*embeval resume") as e:
        with store._tx() as c:
            c.execute("INSERT INTO blobs VALUES (?)", (b"x" * (1 << 20),))
    assert "\n" not in str(e.value)  # before: sqlite3.OperationalError and a 25-line traceback
    assert store.conn.execute("SELECT x FROM blobs").fetchall() == [(b"kept",)]


@pytest.mark.parametrize("w,h", [(0, 4), (4, 0), (5000, 1), (1, 100000)])
def test_an_image_message_with_an_absurd_header_is_refused(w, h):
    from types import SimpleNamespace

    from embeval.camera.base import image_from_msg

    msg = SimpleNamespace(encoding="mono8", width=w, height=h, step=w, data=bytes(max(w * h, 1)))
    with pytest.raises(InvalidInputError, match="pixels a side"):  # before: a 0-pixel or 100000-row image went on
        image_from_msg(msg)
    ok = SimpleNamespace(encoding="mono8", width=3, height=2, step=3, data=bytes(range(6)))
    assert image_from_msg(ok).shape == (2, 3, 3)
