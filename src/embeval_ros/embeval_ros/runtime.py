"""Shared node plumbing: QoS profiles and a main() helper that sets localhost DDS defaults before rclpy.init."""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence


def qos_reliable(depth: int = 10):
    """Reliable, volatile, keep-last ``depth``: images, actions, states (drops are counted, not hidden)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=depth, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)


def qos_latched():
    """Reliable + transient local, depth 1: the last message reaches late joiners (instruction topic)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL)


def declare(node, name: str, default, description: str):
    """Declare a parameter with a description (shown by ``ros2 param describe``) and return its value."""
    from rcl_interfaces.msg import ParameterDescriptor

    # dynamic typing: a YAML "30" for a float parameter must not abort the launch; nodes coerce values
    return node.declare_parameter(name, default, ParameterDescriptor(description=description, dynamic_typing=True)).value


def str_list(value) -> list[str]:
    """A string-list parameter as a list without empty entries. One string is split at commas: ``ros2 launch``
    joins a list that holds a launch substitution into one string (``[LaunchConfiguration("x")]`` -> ``"..."``)."""
    items = value.split(",") if isinstance(value, str) else list(value or [])
    return [str(v).strip() for v in items if str(v).strip()]


def run_node(factory: Callable, args: Sequence[str] | None = None) -> int:
    """Console-script main: init rclpy, spin the node until Ctrl-C, shut down cleanly."""
    from embeval.env import configure

    configure()  # localhost-only DDS before rclpy.init (see embeval.env)
    import rclpy
    from rclpy.executors import ExternalShutdownException

    from embeval.errors import EmbevalError

    rclpy.init(args=list(args) if args is not None else sys.argv)
    node = None
    try:
        node = factory()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except EmbevalError as exc:
        print(f"embeval_ros: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if node is not None:
            close = getattr(node, "close", None)
            if close:
                close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0
