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


def declare(node, name: str, default, description: str, checked: bool = True):
    """Declare a parameter with a description (shown by ``ros2 param describe``) and return its value, checked
    against the type of ``default`` (:func:`typed`): a wrong type is a ConfigError naming the parameter
    (``checked=False``: any type, for a parameter whose node parses several spellings itself)."""
    from rcl_interfaces.msg import ParameterDescriptor

    # dynamic typing: a YAML 30 (int) for a float parameter must not abort the launch; typed() converts it
    value = node.declare_parameter(name, default, ParameterDescriptor(description=description, dynamic_typing=True)).value
    return typed(f"{node.get_name()}.{name}", value, default) if checked else value


def _kind(default) -> str:
    return "bool" if isinstance(default, bool) else "int" if isinstance(default, int) else \
        "float" if isinstance(default, float) else "str"


def _scalar(where: str, value, kind: str):
    from embeval.errors import ConfigError

    if kind == "bool":
        if not isinstance(value, bool):  # YAML null, "", "yes", 0, 1: never guessed (dry_run must not turn off)
            raise ConfigError(f"parameter {where} must be true or false, got {value!r}; write {where.rpartition('.')[2]}: "
                              "true or false (no quotes, not empty)")
        return value
    if kind in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"parameter {where} must be a number, got {value!r}; write a plain number (no quotes, not empty)")
        if kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ConfigError(f"parameter {where} must be a whole number, got {value!r}")
            return int(value)
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"parameter {where} must be a string, got {value!r}; quote it, e.g. \"{value}\"")
    return value


def typed(where: str, value, default):
    """``value`` checked against the type of ``default`` (bool, int, float, str, or a list of one of these):
    a bool is only true/false (YAML null, strings and numbers are refused: a doubtful ``dry_run`` must not read
    as false); an int or float parameter takes a number (an int converts to float, a whole float to int); a string
    list also takes one string (comma-separated, as ``ros2 launch`` passes substitutions). Ranges are the node's."""
    from embeval.errors import ConfigError

    if isinstance(default, (list, tuple)):
        kind = _kind(default[0]) if len(default) else "str"
        if kind == "str" and isinstance(value, str):
            return value
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"parameter {where} must be a list of {kind} values, got {value!r}; write it as [a, b, ...]")
        return [_scalar(f"{where}[{i}]", v, kind) for i, v in enumerate(value)]
    return _scalar(where, value, _kind(default))


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
