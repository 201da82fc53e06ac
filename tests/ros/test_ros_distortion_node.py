"""The live distortion node and `embeval distort bag` give identical frames for the same seed
(both seed frame n of a topic with embeval.distortion.frame_seed)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from embeval_cli import main
from embeval.distortion.samples import synthetic_tabletop

rclpy = pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")

pytestmark = pytest.mark.ros

N, W, H, SEED = 4, 48, 32, 11


def _frames() -> list[np.ndarray]:
    return [synthetic_tabletop(W, H, seed=i) for i in range(N)]


def _bag_frames(tmp_path, topic: str, kind: str, level: int, seed: int) -> list[np.ndarray]:
    """Write the frames to a bag, distort it with the CLI, read the distorted frames back."""
    from embeval.distortion.batch import _image_msg
    from embeval.recording import BagRecorder, read_bag, typestore

    ts = typestore()
    Header, Time = ts.types["std_msgs/msg/Header"], ts.types["builtin_interfaces/msg/Time"]
    src, dst = tmp_path / f"in_{kind}_{seed}", tmp_path / f"out_{kind}_{seed}"
    with BagRecorder(src) as rec:
        rec.add_topic(topic, "sensor_msgs/msg/Image")
        for i, f in enumerate(_frames()):
            rec.write_msg(topic, _image_msg(ts, Header(stamp=Time(sec=i, nanosec=0), frame_id="cam"), f), 1_000 + i)
    assert main(["distort", "bag", str(src), str(dst), "--topic", topic, "--type", kind, "--level", str(level),
                 "--seed", str(seed)]) == 0
    return [np.asarray(m.msg.data, dtype=np.uint8).reshape(H, W, 3) for m in read_bag(dst) if m.topic == topic]


class _Node:
    """A DistortionNode in its own context; its published images are captured instead of sent."""

    def __init__(self, **params):
        from embeval_ros.distortion_node import DistortionNode
        from rclpy.context import Context
        from rclpy.parameter import Parameter

        self.ctx = Context()
        rclpy.init(context=self.ctx)
        self.node = DistortionNode(parameter_overrides=[Parameter(k, value=v) for k, v in params.items()], context=self.ctx)
        self.out: list = []
        self.node.pub.publish = self.out.append

    def feed(self, frame: np.ndarray, i: int) -> np.ndarray:
        from embeval_ros.conversions import image_to_msg, msg_to_image

        self.node._on_image(image_to_msg(frame, (i + 1) * 1_000_000_000, "cam"))
        return msg_to_image(self.out[-1])

    def close(self) -> None:
        self.node.destroy_node()
        rclpy.shutdown(context=self.ctx)


@pytest.mark.parametrize("kind,level", [("white_noise", 3), ("impulse_noise", 2)])
def test_node_and_distort_bag_give_identical_frames(tmp_path, kind, level):
    from embeval_ros import topics as T

    bag = _bag_frames(tmp_path, T.IMAGE_RAW, kind, level, SEED)
    n = _Node(distortion=kind, level=level, seed=SEED, publish_quality=False)
    try:
        live = [n.feed(f, i) for i, f in enumerate(_frames())]
    finally:
        n.close()
    assert len(bag) == len(live) == N
    for i in range(N):
        np.testing.assert_array_equal(live[i], bag[i], err_msg=f"frame {i}")
    # not trivially equal: the noise is there, differs from frame to frame and with the seed
    frames = _frames()
    assert all(not np.array_equal(live[i], frames[i]) for i in range(N))
    assert not np.array_equal(live[0].astype(int) - frames[0], live[1].astype(int) - frames[1])
    other = _bag_frames(tmp_path, T.IMAGE_RAW, kind, level, SEED + 1)
    assert not np.array_equal(other[0], bag[0])


def test_frame_index_counts_pass_through_frames(tmp_path):
    """An episode event that switches the distortion mid-stream keeps the bag's frame numbering."""
    from embeval_ros import topics as T

    bag = _bag_frames(tmp_path, T.IMAGE_RAW, "white_noise", 4, SEED)
    frames = _frames()
    n = _Node(distortion="none", seed=SEED, publish_quality=False)
    try:
        from std_msgs.msg import String

        assert np.array_equal(n.feed(frames[0], 0), frames[0]) and np.array_equal(n.feed(frames[1], 1), frames[1])
        n.node._on_event(String(data=json.dumps({"event": "episode_start", "distortion": "white_noise", "level": 4})))
        np.testing.assert_array_equal(n.feed(frames[2], 2), bag[2])
        np.testing.assert_array_equal(n.feed(frames[3], 3), bag[3])
    finally:
        n.close()


@pytest.mark.parametrize("dists,levels,match", [(["none", "gaussian_blur"], [0, 0], "level must be an integer 1..5"),
                                                (["none", "fisheye_melt"], [0, 3], "fisheye_melt")])
def test_conductor_rejects_bad_episode_distortions_at_start(dists, levels, match):
    from embeval_ros.graph import Graph, load_params

    from embeval.errors import ConfigError

    params = load_params({"embeval_conductor": {"ros__parameters": {"items": ["a", "a"], "instructions": ["push"] * 2,
                                                                    "distortions": dists, "levels": levels}}})
    with pytest.raises(ConfigError, match=match), Graph(params):
        pass


@pytest.mark.parametrize("kind,level", [("white_noise", 3), ("impulse_noise", 2)])
def test_episode_frames_match_the_in_process_act2answer_runner(kind, level):
    """An Act2Answer episode (episode_start with the episode seed): the node distorts frame n of the episode
    exactly as the in-process runner distorts the policy's n-th observation of that camera."""
    from std_msgs.msg import String

    from embeval.act2answer.evaluator import _DistortedObservations
    from embeval.action import Observation

    seen = []

    class Recorder:  # a policy that keeps what it is shown
        id, action_spec = "rec", None

        def reset(self, instruction):
            pass

        def act(self, obs):
            seen.append(obs.images["third_person"])

    frames, episode_seed = _frames(), 1234567
    runner = _DistortedObservations(Recorder(), kind, level, episode_seed)
    runner.reset("put the cube on the cat")
    for f in frames:
        runner.act(Observation({"third_person": f}, "put the cube on the cat", {}, 0.0))
    n = _Node(distortion="none", seed=SEED, publish_quality=False, camera="third_person")
    try:
        n.feed(frames[0], 0)  # frames before the episode do not shift its numbering
        start = {"event": "episode_start", "distortion": kind, "level": level, "seed": episode_seed}
        n.node._on_event(String(data=json.dumps(start)))
        live = [n.feed(f, i + 1) for i, f in enumerate(frames)]
        n.node._on_event(String(data=json.dumps(start)))  # the next episode with the same seed starts over
        again = n.feed(frames[0], 9)
        n.node._on_event(String(data=json.dumps({k: v for k, v in start.items() if k != "seed"})))
        plain = n.feed(frames[1], 10)  # an episode without a seed: the stream's numbering again (its frame 6)
    finally:
        n.close()
    for i in range(N):
        np.testing.assert_array_equal(live[i], seen[i], err_msg=f"frame {i}")
        assert not np.array_equal(live[i], frames[i])  # noise is there
    np.testing.assert_array_equal(again, seen[0])
    from embeval.distortion import distort, frame_seed
    from embeval_ros import topics as T

    np.testing.assert_array_equal(plain, distort(frames[1], kind, level, frame_seed(SEED, T.IMAGE_RAW, 1 + N + 1, kind, level)))
    assert not np.array_equal(live[0].astype(int) - frames[0], live[1].astype(int) - frames[1])
