"""Replay images from a rosbag2 (MCAP) bag folder or a single ``.mcap`` file, recorded by embeval or
``ros2 bag record`` (read with rosbags)."""
from __future__ import annotations

import time
from pathlib import Path

from embeval.camera.base import IMAGE_TOPIC, Frame, Intrinsics, image_from_msg
from embeval.errors import ConfigError


class BagSource:
    """Frames of ``topic`` in a bag, with their recorded header stamps (``restamp``: use the replay time)."""

    name = "bag"

    def __init__(self, path: str | Path, topic: str = IMAGE_TOPIC, loop: bool = False, restamp: bool = True,
                 vfov_deg: float = 58.0):
        from embeval.recording import bag_info, read_bag

        info = bag_info(path)
        if topic not in info["topics"]:
            raise ConfigError(f"topic {topic} is not in bag {path}; it has: {', '.join(sorted(info['topics'])) or 'no topics'}")
        if info["topics"][topic]["type"] != "sensor_msgs/msg/Image":
            raise ConfigError(f"topic {topic} in {path} is {info['topics'][topic]['type']}, not sensor_msgs/msg/Image")
        self.path, self.topic, self.loop, self.restamp = Path(path), topic, loop, restamp
        self._read_bag = read_bag
        self._it = iter(read_bag(self.path, [topic]))
        self._n = 0
        first = self._peek = next(self._it, None)
        if first is None:
            raise ConfigError(f"topic {topic} in {path} holds no messages")
        self.intrinsics = Intrinsics.from_fov(first.msg.width, first.msg.height, vfov_deg)

    def read(self) -> Frame | None:
        m, self._peek = (self._peek, None) if self._peek is not None else (next(self._it, None), None)
        if m is None:
            if not self.loop or self._n == 0:
                return None
            self._it = iter(self._read_bag(self.path, [self.topic]))
            m = next(self._it)
        self._n += 1
        stamp = time.time_ns() if self.restamp else m.msg.header.stamp.sec * 1_000_000_000 + m.msg.header.stamp.nanosec
        return Frame(image_from_msg(m.msg), stamp, self.intrinsics, self._n - 1)

    def close(self) -> None:
        pass
