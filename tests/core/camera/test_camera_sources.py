"""Camera sources and message conversions (no cv_bridge): folder, bag replay, synthetic, sim wrapper, RealSense error."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image as PILImage

from embeval.camera import make_source
from embeval.camera.base import Intrinsics, image_from_msg
from embeval.errors import ConfigError, InvalidInputError, MissingFileError


def _rand(h=6, w=7, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_folder_source_sorted_loop_and_errors(tmp_path):
    imgs = [_rand(seed=i) for i in range(3)]
    for i, im in enumerate(imgs):
        PILImage.fromarray(im).save(tmp_path / f"f{2 - i}.png")  # names in reverse order of content
    src = make_source("folder", path=tmp_path, loop=True)
    got = [src.read().image for _ in range(4)]
    assert np.array_equal(got[0], imgs[2]) and np.array_equal(got[2], imgs[0]) and np.array_equal(got[3], imgs[2])
    assert (src.intrinsics.width, src.intrinsics.height) == (7, 6)
    once = make_source("folder", path=tmp_path, loop=False)
    assert [once.read() is None for _ in range(4)] == [False, False, False, True]
    with pytest.raises(MissingFileError, match="does not exist"):
        make_source("folder", path=tmp_path / "nope")
    with pytest.raises(ConfigError, match="choose from"):
        make_source("webcam")


def test_folder_source_moves_past_a_corrupt_file(tmp_path):
    good = _rand()
    PILImage.fromarray(good).save(tmp_path / "a.png")
    (tmp_path / "b.png").write_bytes(b"not an image")
    src = make_source("folder", path=tmp_path, loop=True)
    assert np.array_equal(src.read().image, good)
    with pytest.raises(InvalidInputError, match="b.png"):
        src.read()
    assert np.array_equal(src.read().image, good)  # the camera node skips the bad frame and goes on


def test_intrinsics_from_fov():
    k = Intrinsics.from_fov(640, 480, vfov_deg=90.0)
    assert k.fy == pytest.approx(240.0) and k.cx == pytest.approx(319.5) and k.cy == pytest.approx(239.5)


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "mono8", "rgba8"])
def test_image_from_msg_encodings_and_padding(encoding):
    img = _rand(5, 4)
    ch = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4}[encoding]
    if encoding == "bgr8":
        raw = img[:, :, ::-1]
    elif encoding == "mono8":
        img = np.repeat(img[:, :, :1], 3, axis=2)
        raw = img[:, :, :1]
    elif encoding == "rgba8":
        raw = np.concatenate([img, np.full((5, 4, 1), 255, np.uint8)], axis=2)
    else:
        raw = img
    step = 4 * ch + 3  # padded rows
    buf = np.zeros((5, step), np.uint8)
    buf[:, : 4 * ch] = raw.reshape(5, -1)
    msg = type("M", (), dict(encoding=encoding, height=5, width=4, step=step, data=buf.tobytes()))()
    assert np.array_equal(image_from_msg(msg), img)
    msg.encoding = "16UC1"
    with pytest.raises(InvalidInputError, match="unsupported"):
        image_from_msg(msg)


def test_bag_source_replays_recorded_images(tmp_path):
    from embeval.recording import BagRecorder, typestore

    ts = typestore()
    Img, Hdr, Tm = ts.types["sensor_msgs/msg/Image"], ts.types["std_msgs/msg/Header"], ts.types["builtin_interfaces/msg/Time"]
    imgs = [_rand(seed=i) for i in range(3)]
    with BagRecorder(tmp_path / "b") as rec:
        rec.add_topic("/camera/camera/color/image_raw", "sensor_msgs/msg/Image")
        for i, im in enumerate(imgs):
            rec.write_msg("/camera/camera/color/image_raw",
                          Img(header=Hdr(stamp=Tm(sec=10 + i, nanosec=5), frame_id="camera_color_optical_frame"), height=6,
                              width=7, encoding="rgb8", is_bigendian=0, step=21, data=im.reshape(-1)), 10**9 * (10 + i))
    src = make_source("bag", path=tmp_path / "b", restamp=False)
    frames = [src.read() for _ in range(4)]
    assert frames[3] is None
    assert all(np.array_equal(f.image, im) for f, im in zip(frames, imgs))
    assert [f.stamp_ns for f in frames[:3]] == [10**9 * (10 + i) + 5 for i in range(3)]
    with pytest.raises(ConfigError, match="not in bag"):
        make_source("bag", path=tmp_path / "b", topic="/other")


def test_synthetic_source_follows_the_tcp():
    src = make_source("synthetic", width=160, height=120, seed=1)
    a = src.read().image
    src.set_tcp([0.3, 0.2, 0.2, 0, 0, 0])
    b = src.read().image
    assert a.shape == (120, 160, 3) and a.dtype == np.uint8 and not np.array_equal(a, b)
    assert np.array_equal(make_source("synthetic", width=160, height=120, seed=1).read().image, a)  # deterministic


def test_sim_source_wraps_a_renderer():
    calls = []

    def render(camera):
        calls.append(camera)
        return np.zeros((4, 6, 3), np.uint8)

    src = make_source("sim", renderer=render, camera="wrist")
    f = src.read()
    assert f.image.shape == (4, 6, 3) and calls == ["wrist", "wrist"] and f.index == 0
    with pytest.raises(InvalidInputError):
        make_source("sim", renderer=lambda c: np.zeros((4, 6), np.float32))


def test_realsense_missing_names_the_fix(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake(name, *a, **k):
        if name == "pyrealsense2":
            raise ImportError("No module named 'pyrealsense2'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(MissingFileError, match="pip install pyrealsense2"):
        make_source("realsense")


def test_ros_message_conversions_roundtrip():
    pytest.importorskip("rclpy")
    from embeval_ros.conversions import (
        ACTION_NAMES,
        action_to_msg,
        image_to_msg,
        msg_to_action,
        msg_to_image,
        msg_to_pose6,
        pose_msg,
    )

    img = _rand(9, 11)
    m = image_to_msg(img, 1_234_567_890_123, "camera_color_optical_frame")
    assert (m.header.stamp.sec, m.header.stamp.nanosec, m.encoding, m.step) == (1234, 567_890_123, "rgb8", 33)
    assert np.array_equal(msg_to_image(m), img)
    v = np.array([0.01, -0.02, 0.03, 0.1, -0.2, 0.3, 0.7])
    am = action_to_msg(v, 5, "base")
    assert list(am.name) == list(ACTION_NAMES)
    am.name = list(reversed(am.name))
    am.position = list(reversed(am.position))
    np.testing.assert_allclose(msg_to_action(am), v)  # matched by name, not order
    pose = np.array([0.4, -0.1, 0.3, 0.2, -2.9, 0.1])
    back = msg_to_pose6(pose_msg(pose, 0))
    from scipy.spatial.transform import Rotation

    np.testing.assert_allclose(back[:3], pose[:3])
    np.testing.assert_allclose(Rotation.from_rotvec(back[3:]).as_matrix(), Rotation.from_rotvec(pose[3:]).as_matrix(), atol=1e-12)
