"""A librealsense recording through the ROS graph: the camera node (source realsense, ``recording``) publishes the
recorded colour, camera_info and aligned depth on the realsense-ros topics with the recorded intrinsics, frame id and
stamps, and the distortion node distorts that played-back stream live."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyrealsense2", reason="pyrealsense2 is not installed: run scripts/install.sh")
pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed: run scripts/install.sh")
pytestmark = pytest.mark.ros

from realsense_software import FPS, FX, FY, H, PPX, PPY, W, SoftwareCamera, colour_of, depth_of, stamp_ms  # noqa: E402


def _index(stamp) -> int:
    ns = stamp.sec * 1_000_000_000 + stamp.nanosec
    return int(round((ns / 1e6 - stamp_ms(0)) * FPS / 1000.0))


def test_camera_node_plays_a_recording_on_the_realsense_ros_topics_and_it_is_distorted_live(tmp_path):
    import rclpy
    from embeval_ros import topics as T
    from embeval_ros.conversions import msg_to_image
    from embeval_ros.graph import Graph, load_params
    from embeval_ros.runtime import qos_reliable
    from sensor_msgs.msg import CameraInfo, Image

    from embeval.distortion import FrameDistorter

    rec = SoftwareCamera().write(tmp_path / "cell.db3", 10)
    params = load_params({
        "embeval_camera": {"ros__parameters": {"source": "realsense", "recording": str(rec), "realtime": True,
                                               "loop": True, "rate_hz": 90.0}},
        "embeval_distortion": {"ros__parameters": {"distortion": "darken", "level": 3, "publish_quality": False}},
    })
    got: dict[str, list] = {k: [] for k in ("img", "info", "depth", "dinfo", "dist")}
    with Graph(params) as g:
        cam = g.nodes["embeval_camera"]
        probe = rclpy.create_node("test_rs_probe", context=g.context)
        from rclpy.executors import SingleThreadedExecutor

        ex = SingleThreadedExecutor(context=g.context)
        ex.add_node(probe)
        try:
            for key, typ, topic in (("img", Image, T.IMAGE_RAW), ("info", CameraInfo, T.CAMERA_INFO),
                                    ("depth", Image, T.ALIGNED_DEPTH), ("dinfo", CameraInfo, T.ALIGNED_DEPTH_INFO),
                                    ("dist", Image, T.IMAGE_DISTORTED)):
                probe.create_subscription(typ, topic, got[key].append, qos_reliable(100))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and min(len(v) for v in got.values()) < 8:
                ex.spin_once(timeout_sec=0.05)
        finally:
            ex.shutdown()
            probe.destroy_node()
        assert cam.source.recording == rec and cam.skipped == 0
    assert min(len(v) for v in got.values()) >= 8, {k: len(v) for k, v in got.items()}
    for m in got["img"]:
        assert (m.header.frame_id, m.encoding, m.width, m.height) == ("camera_color_optical_frame", "rgb8", W, H)
        assert np.array_equal(msg_to_image(m), colour_of(_index(m.header.stamp)))  # pixels of the recorded frame
        assert 0 <= _index(m.header.stamp) < 10
    stamps = {(m.header.stamp.sec, m.header.stamp.nanosec) for m in got["img"]}
    for key in ("info", "dinfo"):
        for m in got[key]:
            assert m.header.frame_id == "camera_color_optical_frame" and (m.width, m.height) == (W, H)
            assert list(m.k) == [FX, 0.0, PPX, 0.0, FY, PPY, 0.0, 0.0, 1.0]
            assert (m.header.stamp.sec, m.header.stamp.nanosec) in stamps
    for m in got["depth"]:
        assert (m.header.frame_id, m.encoding, m.step) == ("camera_color_optical_frame", "16UC1", 2 * W)
        d = np.frombuffer(bytes(m.data), "<u2").reshape(H, W)
        valid = d[d > 0]
        assert valid.size >= 0.9 * H * W and np.all(valid == depth_of(_index(m.header.stamp))[0, 0])  # mm
    dark = FrameDistorter("darken", 3, 0, stream=T.IMAGE_RAW)
    for m in got["dist"]:
        clean = colour_of(_index(m.header.stamp))  # the source stamp is kept
        out = msg_to_image(m)
        assert out.mean() < clean.mean() - 5 and np.array_equal(out, dark(clean, 0))


def test_act2answer_rehearsal_reads_its_camera_from_a_recording(tmp_path):
    """The sim-to-real Act2Answer graph (config/embeval_act2answer.yaml's nodes) with the camera a recorded cell: the
    policy acts on the recording's frames (restamped: it syncs to the arm), the unit is filed."""
    import json

    from embeval_ros.graph import Graph, load_params

    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import export_scenes

    items = generate_items(tmp_path / "suite", ["color"], per_category=1, seed=0)
    scenes_dir = export_scenes(items, tmp_path / "scenes")
    rec = SoftwareCamera(depth=False).write(tmp_path / "cell.db3", 10)
    params = load_params(Path(__file__).resolve().parents[2] / "config" / "embeval_act2answer.yaml")
    params.pop("embeval_recorder")
    params["embeval_camera"] = {"source": "realsense", "recording": str(rec), "restamp": True, "loop": True,
                                "rate_hz": 30.0}
    params["embeval_policy"].update(subject="embeval.act2answer.reference_policies:ScriptedPlacer",
                                    subject_params=json.dumps({"side": "left"}), camera_topics=[""])
    params["embeval_scorer"].update(store=str(tmp_path / "a2a.sqlite"), episodes_jsonl=str(tmp_path / "ep.jsonl"))
    params["embeval_conductor"].update(act2answer_scenes=str(scenes_dir), act2answer_items=[f"{items[0].id}@original"],
                                       settle_s=0.5, episode_timeout_s=30.0)
    with Graph(params) as g:
        g.spin(60, until=lambda g: g.nodes["embeval_conductor"].finished)
        assert g.nodes["embeval_conductor"].finished
        g.wait_for(lambda g: len(g.nodes["embeval_scorer"].a2a_records) == 1, 10, "the unit's record")
        rec_out = g.nodes["embeval_scorer"].a2a_records[0]
        camera, policy = g.nodes["embeval_camera"], g.nodes["embeval_policy"]
        assert camera.source.recording == rec and camera.frames > 0 and camera.skipped == 0
        assert policy.log.received > 0
        seen = list(policy.stepper.images.values())
        assert seen and all(any(np.array_equal(im, colour_of(i)) for i in range(10)) for im in seen)  # recorded frames
    assert (rec_out["item"], rec_out["layout"]) == (items[0].id, "original")
    from embeval.act2answer.episode import run_items
    from embeval.act2answer.reference_policies import ScriptedPlacer

    local = next(iter(run_items(ScriptedPlacer("left"), items))).to_dict()  # the same open-loop carry in process
    assert local["layout"] == "original"
    for key in ("zone", "choice", "termination", "steps"):
        assert rec_out[key] == local[key], (key, rec_out, local)
