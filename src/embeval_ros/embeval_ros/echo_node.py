"""``embeval_ros_echo``: republish every std_msgs/String from ``in_topic`` on ``out_topic``.

A tiny node for runtime checks (the cross-process round-trip and loopback-only DDS tests).
"""
from __future__ import annotations

from embeval_ros.node_spec import RosNode
from embeval_ros.runtime import declare, qos_reliable, run_node

NODE = RosNode("embeval_echo", "make_node", start=900, graph=False,
               description="republishes std_msgs/String (runtime and DDS checks)")


def make_node():
    from rclpy.node import Node
    from std_msgs.msg import String

    class EchoNode(Node):
        def __init__(self):
            super().__init__(NODE.name)
            self.in_topic = declare(self, "in_topic", "/embeval/ping", "topic to listen on (std_msgs/String)")
            self.out_topic = declare(self, "out_topic", "/embeval/pong", "topic to republish on (std_msgs/String)")
            self.pub = self.create_publisher(String, self.out_topic, qos_reliable())
            self.create_subscription(String, self.in_topic, self._on_msg, qos_reliable())

        def _on_msg(self, msg):
            self.pub.publish(String(data=msg.data))

    return EchoNode()


def main(args=None) -> int:
    return run_node(make_node, args)


if __name__ == "__main__":
    raise SystemExit(main())
