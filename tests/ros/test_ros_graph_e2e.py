"""End to end as ROS 2 nodes: camera(sim) -> distortion -> policy -> arm(sim) -> scorer, recorded to MCAP.

The bag read back with rosbags holds every message the recorder received, in order, with the right
types; a recorder process killed with SIGKILL leaves a readable bag.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import bag_so_far, wait_for

pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")
pytestmark = pytest.mark.ros


@pytest.fixture
def no_dds_leak():
    """Sniff every interface during the test (as root) and fail if any RTPS packet leaves loopback."""
    from embeval_ros.netcheck import RtpsSniffer, can_sniff

    ok, _ = can_sniff()
    if not ok or os.environ.get("EMBEVAL_DDS_LOCALHOST", "1") == "0":
        yield None
        return
    with RtpsSniffer() as sniffer:
        yield sniffer
    assert sniffer.result.outside_loopback() == 0, f"DDS traffic left loopback: {sniffer.result.samples}"


def _policy_subject() -> str:
    """The shipped tiny VLA (the issue's end-to-end graph runs it, not a stand-in)."""
    from embeval.subjects.embedded.zoo import shipped_models

    assert "tiny-vla" in shipped_models("vla"), "the tiny VLA weights must ship in src/embeval/data/models"
    return "embedded"


def _params(tmp_path, camera="sim", backend="sim", w=128, h=96):
    from embeval_ros.graph import load_params

    return load_params({
        "embeval_camera": {"ros__parameters": {"source": camera, "rate_hz": 8.0, "width": w, "height": h}},
        "embeval_distortion": {"ros__parameters": {"distortion": "none", "seed": 3}},
        "embeval_policy": {"ros__parameters": {"subject": _policy_subject(), "dry_run": False, "rate_hz": 3.0, "max_steps": 3,
                                               "max_image_age_s": 3.0}},
        "embeval_arm": {"ros__parameters": {"backend": backend, "max_command_age_s": 10.0, "tcp_speed": 0.2,
                                            "state_rate_hz": 10.0}},
        "embeval_scorer": {"ros__parameters": {"store": str(tmp_path / "results.sqlite"), "run_id": "e2e"}},
        "embeval_recorder": {"ros__parameters": {"bag_dir": str(tmp_path / "bag"), "segment_s": 0.5}},
        "embeval_conductor": {"ros__parameters": {"items": ["it", "it"], "instructions": ["pick up the cube"] * 2,
                                                  "distortions": ["none", "gaussian_blur"], "levels": [0, 4],
                                                  "steps_per_episode": 3, "episode_timeout_s": 60.0, "settle_s": 0.5}},
    })


def test_sim_graph_end_to_end_bag(tmp_path, no_dds_leak):
    from embeval_ros.graph import Graph
    from embeval_ros.topics import TOPIC_TYPES

    from embeval.recording import bag_info, read_bag
    from embeval.runs.store import ResultsStore

    g = Graph(_params(tmp_path))
    with g:
        g.spin(150, until=lambda g: g.nodes["embeval_conductor"].finished)
        assert g.nodes["embeval_conductor"].finished, "the conductor did not finish its two episodes"
        recorder = g.nodes["embeval_recorder"]
        g.wait_for(lambda g: recorder.counts.get("/embeval/events", 0) >= 5 and len(g.nodes["embeval_scorer"].book.records) == 2,
                   30, "the recorder to hold all five events (graph_done last) and the scorer its two records")
        arm = g.nodes["embeval_arm"]
        from embeval.robot.base import ArmBackend
        from embeval.sim.arm_backend import SimArmBackend

        assert isinstance(arm.backend, SimArmBackend) and isinstance(arm.backend, ArmBackend)
        records = list(g.nodes["embeval_scorer"].book.records)
        stats = g.stage_latencies()
        arm_received = arm.log.received
    rec_counts = dict(recorder.counts)  # final: every executor has stopped and the bag is closed
    # -- scores: the reference scored against itself and the distorted episode against the reference
    assert [r["distortion"] for r in records] == ["none", "gaussian_blur"]
    ref, dist = records
    assert ref["scores"]["execution"] == pytest.approx(100.0) and ref["scores"]["decision"] == pytest.approx(1.0)
    assert 0.0 <= dist["scores"]["execution"] <= 100.0 and 0.0 <= dist["scores"]["decision"] <= 1.0
    assert len(dist["raw"]["distorted"]["actions"]) >= 3 and dist["raw"]["distorted"]["final_tcp"] is not None
    with ResultsStore(tmp_path / "results.sqlite") as store:
        rows = store.rows("e2e")
    assert {(r["distortion"], r["level"]) for r in rows} == {("none", 0), ("gaussian_blur", 4)}
    # -- the arm executed what the policy commanded
    assert arm_received >= 6 and stats["embeval_arm"]["published"] == arm_received
    # -- the bag: every message the recorder received, right types, in order
    info = bag_info(tmp_path / "bag")
    assert {t: v["count"] for t, v in info["topics"].items() if v["count"]} == {t: n for t, n in rec_counts.items() if n}
    msgs = list(read_bag(tmp_path / "bag"))
    assert len(msgs) == sum(rec_counts.values())
    for m in msgs:
        assert m.msgtype == TOPIC_TYPES[m.topic]
    times = [m.timestamp_ns for m in msgs]
    assert times == sorted(times)
    for topic in ("/camera/camera/color/image_raw", "/embeval/image_distorted", "/embeval/action"):
        stamps = [m.msg.header.stamp.sec * 10**9 + m.msg.header.stamp.nanosec for m in msgs if m.topic == topic]
        assert stamps and stamps == sorted(stamps), topic
    img = next(m.msg for m in msgs if m.topic == "/camera/camera/color/image_raw")
    assert (img.width, img.height, img.encoding, img.header.frame_id) == (128, 96, "rgb8", "camera_color_optical_frame")
    events = [json.loads(m.msg.data)["event"] for m in msgs if m.topic == "/embeval/events"]
    assert events == ["episode_start", "episode_end", "episode_start", "episode_end", "graph_done"]
    actions = [m.msg for m in msgs if m.topic == "/embeval/action"]
    assert len(actions) == rec_counts["/embeval/action"] >= 6
    assert list(actions[0].name) == ["dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"]
    # distorted frames keep the source stamps: each distorted stamp is a camera stamp
    cam = {(m.msg.header.stamp.sec, m.msg.header.stamp.nanosec) for m in msgs if m.topic == "/camera/camera/color/image_raw"}
    dis = [(m.msg.header.stamp.sec, m.msg.header.stamp.nanosec) for m in msgs if m.topic == "/embeval/image_distorted"]
    assert dis and set(dis) <= cam


_PUBLISHER = r"""
import sys, time
import embeval, rclpy
from std_msgs.msg import String
from embeval_ros.runtime import qos_reliable
rclpy.init()
n = rclpy.create_node("embeval_test_counter")
pub = n.create_publisher(String, "/embeval/events", qos_reliable(100))
deadline = time.time() + 30
while pub.get_subscription_count() == 0 and time.time() < deadline:
    time.sleep(0.05)
print("matched", flush=True)
i = 0
while True:
    pub.publish(String(data=str(i)))
    i += 1
    time.sleep(0.01)
"""


def test_recorder_node_killed_leaves_readable_bag(tmp_path, no_dds_leak):
    """SIGKILL the recorder node process mid-recording: the bag on disk is readable with no gaps."""
    from embeval.recording import read_bag

    bag = tmp_path / "killed_bag"
    rec = subprocess.Popen([sys.executable, "-m", "embeval_ros.recorder_node", "--ros-args", "-p", f"bag_dir:={bag}",
                            "-p", "topics:=['/embeval/events']", "-p", "segment_s:=0.3"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pub = subprocess.Popen([sys.executable, "-c", _PUBLISHER], stdout=subprocess.PIPE, text=True)
    try:
        assert pub.stdout.readline().strip() == "matched"
        wait_for(lambda: len(bag_so_far(bag)) > 30, 30, "more than 30 messages in the bag's closed segments")
        os.kill(rec.pid, signal.SIGKILL)
        rec.wait(timeout=10)
    finally:
        pub.kill()
        pub.wait(timeout=10)
        if rec.poll() is None:
            rec.kill()
    values = [int(m.msg.data) for m in read_bag(bag)]
    assert len(values) > 30
    assert values == list(range(values[0], values[0] + len(values)))  # in order, nothing missing in between
