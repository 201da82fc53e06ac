"""ROS 2 runtime: rclpy pub/sub across processes, localhost-only DDS by default, nothing leaves loopback."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from embeval.env import DDS_PROFILE, dds_environment

rclpy = pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")

pytestmark = pytest.mark.ros


def test_default_environment_is_localhost_only():
    env = dds_environment({})
    assert env["FASTDDS_DEFAULT_PROFILES_FILE"] == str(DDS_PROFILE)
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert dds_environment({"EMBEVAL_DDS_LOCALHOST": "0"}) == {}
    # a user's own profile is never overridden
    assert dds_environment({"FASTDDS_DEFAULT_PROFILES_FILE": "/x.xml"})["FASTDDS_DEFAULT_PROFILES_FILE"] == "/x.xml"
    # this process (conftest calls embeval.env.configure()) runs under the profile
    assert os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] == str(DDS_PROFILE)
    text = DDS_PROFILE.read_text()
    assert "<useBuiltinTransports>false</useBuiltinTransports>" in text and "127.0.0.1" in text


def test_node_process_gets_profile_before_rclpy_init():
    """A node started as a plain `python -m` process (run_node) has the profile set when rclpy.init runs,
    although importing its modules set nothing."""
    env = {k: v for k, v in os.environ.items() if k not in ("FASTDDS_DEFAULT_PROFILES_FILE", "ROS_AUTOMATIC_DISCOVERY_RANGE")}
    probe = ("import os, sys, rclpy, embeval_ros.runtime as rt\n"
             "print(os.environ.get('FASTDDS_DEFAULT_PROFILES_FILE'))\n"
             "def init(*a, **k):\n"
             "    print(os.environ['FASTDDS_DEFAULT_PROFILES_FILE'], os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'])\n"
             "    sys.exit(0)\n"
             "rclpy.init = init\n"
             "rt.run_node(None, [])\n")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout.split()
    assert out == ["None", str(DDS_PROFILE), "LOCALHOST"]


def _start_echo(in_topic: str, out_topic: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "embeval_ros.echo_node", "--ros-args", "-p", f"in_topic:={in_topic}", "-p", f"out_topic:={out_topic}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _roundtrip(n: int, in_topic: str, out_topic: str, timeout: float = 45.0) -> list[str]:
    """Publish n strings to an echo node in another process; return what came back, in order."""
    from embeval_ros.runtime import qos_reliable
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import String

    proc = _start_echo(in_topic, out_topic)
    ctx = Context()
    rclpy.init(context=ctx)
    try:
        node = rclpy.create_node("embeval_test_talker", context=ctx)
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        got: list[str] = []
        node.create_subscription(String, out_topic, lambda m: got.append(m.data), qos_reliable(50))
        pub = node.create_publisher(String, in_topic, qos_reliable(50))
        deadline = time.monotonic() + timeout
        # discovery: wait until the echo node's subscription and publisher are matched
        while (pub.get_subscription_count() == 0 or node.count_publishers(out_topic) == 0) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            ex.spin_once(timeout_sec=0.1)
        assert pub.get_subscription_count() > 0, "echo node never matched (discovery failed)"
        # the reverse path: a probe comes back once the echo's publisher has matched this subscription
        while "probe" not in got and time.monotonic() < deadline:
            pub.publish(String(data="probe"))
            ex.spin_once(timeout_sec=0.1)
        assert "probe" in got, "the echo node's reply never came back (discovery of the reverse path failed)"
        sent = [f"msg-{i}-{'x' * i}" for i in range(n)]
        for s in sent:
            pub.publish(String(data=s))
            ex.spin_once(timeout_sec=0.01)
        while len([m for m in got if m != "probe"]) < n and time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.1)
        node.destroy_node()
        return [m for m in got if m != "probe"]
    finally:
        rclpy.shutdown(context=ctx)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_message_roundtrips_between_processes():
    sent = [f"msg-{i}-{'x' * i}" for i in range(20)]
    got = _roundtrip(20, "/embeval_test/ping", "/embeval_test/pong")
    assert got == sent


def test_no_dds_packet_leaves_loopback():
    from embeval_ros.netcheck import RtpsSniffer, can_sniff

    ok, why = can_sniff()
    if not ok:
        pytest.skip(why)
    if os.environ.get("EMBEVAL_DDS_LOCALHOST", "1") == "0":
        pytest.skip("EMBEVAL_DDS_LOCALHOST=0: the localhost profile is switched off on purpose")
    with RtpsSniffer() as sniffer:
        got = _roundtrip(10, "/embeval_test/ping2", "/embeval_test/pong2")
        time.sleep(1.0)  # periodic discovery announcements
    res = sniffer.result
    assert len(got) == 10
    # the sniffer works: it saw the RTPS discovery traffic on loopback ...
    assert res.rtps["lo"] > 0, f"sniffer saw no RTPS on lo (frames: {dict(res.frames)})"
    # ... and none of it anywhere else
    assert res.outside_loopback() == 0, f"DDS traffic left loopback: {res.samples}"


def test_classify_parses_rtps_udp():
    import socket
    import struct

    from embeval_ros.netcheck import classify

    payload = b"RTPS\x02\x03" + b"\0" * 10
    udp = struct.pack("!HHHH", 40000, 7400, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 1, 17, 0,
                     socket.inet_aton("192.0.2.2"), socket.inet_aton("239.255.0.1"))
    frame = b"\xff" * 12 + b"\x08\x00" + ip + udp
    assert classify(frame) == ("192.0.2.2", "239.255.0.1", 7400, True)
    tcp_ip = ip[:9] + b"\x06" + ip[10:]
    assert classify(b"\xff" * 12 + b"\x08\x00" + tcp_ip + udp) is None
