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


def declare(node, name: str, default, description: str, checked: bool = True, lo=None, hi=None):
    """Declare a parameter with a description (shown by ``ros2 param describe``) and return its value, checked
    against the type of ``default`` (:func:`typed`): a wrong type is a ConfigError naming the parameter
    (``checked=False``: any type, for a parameter whose node parses several spellings itself); ``lo`` / ``hi``
    bound a number parameter (inclusive)."""
    from rcl_interfaces.msg import ParameterDescriptor

    # dynamic typing: a YAML 30 (int) for a float parameter must not abort the launch; typed() converts it
    value = node.declare_parameter(name, default, ParameterDescriptor(description=description, dynamic_typing=True)).value
    return typed(f"{node.get_name()}.{name}", value, default, lo, hi) if checked else value


def _kind(default) -> str:
    return "bool" if isinstance(default, bool) else "int" if isinstance(default, int) else \
        "float" if isinstance(default, float) else "str"


def _scalar(where: str, value, kind: str, lo=None, hi=None):
    """One parameter value of ``kind`` through the shared checks of :mod:`embeval.checks` (``where`` names it;
    ``lo`` / ``hi`` bound a number)."""
    from embeval import checks

    key = where.rpartition(".")[2]
    if kind == "bool":  # YAML null, "", "yes", 0, 1: never guessed (dry_run must not turn off)
        return checks.flag(value, where, fix=f"write {key}: true or false (no quotes, not empty)")
    if kind == "int":
        if isinstance(value, float) and value.is_integer():  # a YAML 30.0 for an int parameter
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)  # out of range: the range itself is the fix
        return checks.integer(value, where, lo, hi, fix="" if ok else "write a plain whole number (no quotes, not empty)")
    if kind == "float":
        ok = checks.is_finite_number(value)
        return checks.number(value, where, lo, hi, fix="" if ok else "write a plain number (no quotes, not empty)")
    return checks.string(value, where, empty=True, fix=f'quote it, e.g. "{value}"')


def typed(where: str, value, default, lo=None, hi=None):
    """``value`` checked against the type of ``default`` (bool, int, float, str, or a list of one of these):
    a bool is only true/false (YAML null, strings and numbers are refused: a doubtful ``dry_run`` must not read
    as false); an int or float parameter takes a finite number (an int converts to float, a whole float to int); a
    string list also takes one string (comma-separated, as ``ros2 launch`` passes substitutions). Ranges are the
    node's, or ``lo`` / ``hi`` (inclusive) for a number or each number of a list. Errors read ``parameter <where>: <problem>; <fix>`` in the wording of :mod:`embeval.checks`."""
    from embeval.errors import ConfigError

    if isinstance(default, (list, tuple)):
        kind = _kind(default[0]) if len(default) else "str"
        if kind == "str" and isinstance(value, str):
            return value
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"parameter {where}: must be a list of {kind} values, got {value!r}; write it as [a, b, ...]")
        return [_scalar(f"parameter {where}[{i}]", v, kind, lo, hi) for i, v in enumerate(value)]
    return _scalar(f"parameter {where}", value, _kind(default), lo, hi)


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
