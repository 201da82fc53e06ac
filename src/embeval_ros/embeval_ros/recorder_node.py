"""recorder node: write the chosen topics to a rosbag2 (MCAP) with embeval.recording, safe to kill.

Subscriptions take the serialised CDR bytes (``raw=True``): nothing is decoded or re-encoded.
Like rosbag2's cache, callbacks only enqueue; one writer thread appends to the bag in arrival
order, so a slow disk write never blocks the subscriptions. The bag is written in ``segment_s``
segments; after ``kill -9`` the bag stays readable and loses at most the open segment and the
queue (see :mod:`embeval.recording.bag`).
"""
from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

from embeval_ros import topics as T
from embeval_ros.base import EmbevalNode
from embeval_ros.node_spec import RosNode
from embeval_ros.runtime import qos_latched, qos_reliable, run_node

NODE = RosNode("embeval_recorder", "RecorderNode", start=60, description="records the topics to an MCAP bag")

DEFAULT_TOPICS = [T.IMAGE_RAW, T.CAMERA_INFO, T.IMAGE_DISTORTED, T.IMAGE_QUALITY, T.QUALITY_GATE,
                  T.PREDICTED_DECISION, T.INSTRUCTION, T.ACTION,
                  T.ACTION_PROPOSED, T.POLICY_STATUS, T.JOINT_STATES, T.TCP_POSE, T.SAFETY_MODE, T.SPEED_SCALING,
                  T.ARM_STATUS, T.EVENTS, T.SCORES]


class RecorderNode(EmbevalNode):
    def __init__(self, **kw):
        super().__init__(NODE.name, **kw)
        from embeval.recording import BagRecorder

        bag_dir = self.param("bag_dir", "", "bag folder to create (empty: runs/bags/embeval_<UTC time>)")
        topics = [t for t in self.param("topics", DEFAULT_TOPICS, "topics to record (standard message types)") if t]
        types = list(self.param("topic_types", [""], "types for topics not in embeval's table, 'topic=pkg/msg/Type'"))
        segment_s = float(self.param("segment_s", 1.0, "seconds per bag segment (at most this is lost on kill -9)"))
        if not bag_dir:
            bag_dir = str(Path("runs/bags") / time.strftime("embeval_%Y%m%d_%H%M%S", time.gmtime()))
        type_map = dict(T.TOPIC_TYPES)
        for entry in types:
            if entry:
                topic, _, typ = entry.partition("=")
                type_map[topic] = typ
        for topic in topics:  # before the bag folder is created: a bad topic list leaves no empty bag behind
            if topic not in type_map:
                from embeval.errors import ConfigError

                raise ConfigError(f"no message type known for {topic}; add topic_types:=['{topic}=pkg/msg/Type']")
        self.bag = BagRecorder(bag_dir, segment_s=segment_s, custom_data={"recorder": "embeval_ros"})
        self.counts: dict[str, int] = {}
        try:
            for topic in topics:
                self.bag.add_topic(topic, type_map[topic])
        except BaseException:  # an unknown message type: no empty bag left behind either
            self.bag.discard_if_empty()
            raise
        for topic in topics:
            qos = qos_latched() if topic == T.INSTRUCTION else qos_reliable(100)
            self.create_subscription(T.msg_class(type_map[topic]), topic, self._writer(topic), qos, raw=True)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.max_backlog = 0
        self.write_error = ""
        self._thread = threading.Thread(target=self._write_loop, name="embeval_bag_writer", daemon=True)
        self._thread.start()
        self.get_logger().info(f"recording {len(topics)} topics to {bag_dir}")

    def _writer(self, topic: str):
        def cb(data: bytes) -> None:
            t_in = time.perf_counter()
            self.log.received += 1
            self.queue.put((topic, time.time_ns(), data))
            self.log.add(t_in)

        return cb

    def _write_loop(self) -> None:
        while True:
            try:
                item = self.queue.get(timeout=0.25)
            except queue.Empty:
                self.bag.tick(time.time_ns())
                continue
            if item is None:
                return
            self.max_backlog = max(self.max_backlog, self.queue.qsize())
            topic, t_ns, data = item
            try:
                self.bag.write(topic, t_ns, data)
            except Exception as exc:  # noqa: BLE001 - keep recording the other topics, report once
                if not self.write_error:
                    self.write_error = str(exc)
                    self.get_logger().error(f"bag write failed: {exc}")
                continue
            self.counts[topic] = self.counts.get(topic, 0) + 1

    def close(self) -> None:
        """Drain the queue into the bag, then close it (complete metadata)."""
        self.queue.put(None)
        self._thread.join(timeout=60)
        self.bag.close()

    def abort(self) -> None:
        """The graph did not start: drain and close the bag, and remove it if nothing was recorded."""
        self.close()
        if self.bag.discard_if_empty():
            self.get_logger().info(f"removed the empty bag {self.bag.path} (the graph did not start)")


def main(args=None) -> int:
    return run_node(RecorderNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
