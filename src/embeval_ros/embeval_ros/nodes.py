"""The ROS node list: every node's :class:`~embeval_ros.node_spec.RosNode` record, registered once on :data:`NODES`.

The built-in records are the ``NODE = RosNode(...)`` declarations of this package's modules, read from their
source (:func:`embeval_ros.node_spec.discover`; neither rclpy nor launch is imported here). Everything that
names nodes reads this list: setup.py's console scripts, the launch files (:func:`launch_nodes`), ``embeval
graph`` (:data:`embeval_ros.graph.NODE_CLASSES`, the start order), the parameter-file checks, the tests and the
docs (:func:`markdown_table`). Adding a node is one new module here with a ``NODE`` record, a class and
``main()`` (docs/contributing.md); an installed package adds one through the entry-point group
``embeval.ros_nodes`` (``my_node = "my_pkg.my_node:NODE"``, a record with ``module`` and ``package`` set).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from embeval.errors import ConfigError
from embeval.registry import RecordKind, Registry
from embeval_ros.node_spec import (
    PACKAGE,
    Param,
    RosNode,
    console_scripts,
    discover,
    parameters,
    topics,
)

__all__ = ["NODES", "SHARED_LAUNCH_ARGS", "LaunchArg", "Param", "RosNode", "console_scripts", "discover", "get_node", "graph_launch", "graph_nodes", "launch_nodes",
           "markdown_table", "nodes", "parameters", "register_node", "topics", "unregister_node"]


def _has_module(node: RosNode) -> None:
    if not node.module:
        raise ConfigError(f"ROS node {node.name}: give module, the Python module holding {node.cls} and main()")


NODES: Registry[RosNode] = Registry(
    "ROS node", group="embeval.ros_nodes", entries={n.name: n for n in discover()},
    record=RecordKind(RosNode, adder="register_node", check=_has_module),
    hint="add one with a module in embeval_ros/ declaring NODE = RosNode(...), or register_node(); docs/contributing.md")

#: ``register_node(node) -> node``: register under its name (replacing a node of the same name)
register_node = NODES.register_record
#: ``unregister_node(name)``: remove it (:class:`ConfigError` naming the nodes when absent)
unregister_node = NODES.remove
#: ``get_node(name, field="") -> RosNode``: :class:`ConfigError` (did you mean, the choices) when unknown
get_node = NODES.get_record


def nodes() -> list[RosNode]:
    """Every registered node in start order (then registry order)."""
    return sorted(NODES.records(), key=lambda n: n.start)  # stable: ties keep registry order


def graph_nodes() -> list[RosNode]:
    """The nodes of the evaluation graph (``graph=True``) in start order."""
    return [n for n in nodes() if n.graph]


def launch_nodes(params: Any, overrides: dict[str, dict[str, Any]] | None = None,
                 conditions: dict[str, Any] | None = None, **node_kw: Any) -> list:
    """``launch_ros`` ``Node`` actions for every graph node, in start order: each gets the parameter file
    ``params`` (a substitution) then its entry of ``overrides`` (parameter name -> value or substitution) and
    its ``conditions`` entry; ``node_kw`` (e.g. ``output="screen"``) go to every node. A name in
    ``overrides`` / ``conditions`` that is no graph node is a ConfigError (a typo would drop the override)."""
    from launch_ros.actions import Node

    overrides, conditions = overrides or {}, conditions or {}
    names = [n.name for n in graph_nodes()]
    for what, table in (("overrides", overrides), ("conditions", conditions)):
        unknown = sorted(set(table) - set(names))
        if unknown:
            raise ConfigError(f"launch {what}: unknown node(s) {unknown}; graph nodes: {', '.join(names)}")
    out = []
    for n in graph_nodes():
        kw = dict(node_kw)
        if n.name in conditions:
            kw["condition"] = conditions[n.name]
        extra = [overrides[n.name]] if n.name in overrides else []
        out.append(Node(package=n.package, executable=n.executable, name=n.name, parameters=[params, *extra], **kw))
    return out


@dataclass(frozen=True)
class LaunchArg:
    """A launch argument several launch files declare, and what it sets: ``param`` (node, parameter) takes its
    value; ``runs`` names the node started only when it is true; ``env`` names an environment variable set to it."""

    default: str
    description: str
    param: tuple[str, str] | None = None
    runs: str = ""
    env: str = ""


#: the launch arguments the launch files share (:func:`graph_launch`'s ``shared``)
SHARED_LAUNCH_ARGS: dict[str, LaunchArg] = {
    "robot_ip": LaunchArg("192.168.1.102", "UR controller IP (arm backend ur_rtde)", param=("embeval_arm", "robot_ip")),
    "record": LaunchArg("true", "record the topics to an MCAP bag", runs="embeval_recorder"),
    "bag_dir": LaunchArg("", "bag folder (empty: runs/bags/embeval_<time>)", param=("embeval_recorder", "bag_dir")),
    "dds_localhost": LaunchArg("1", "1: DDS on loopback only; 0: robot network", env="EMBEVAL_DDS_LOCALHOST"),
}


def graph_launch(config: str, args: dict[str, tuple[Any, str]], overrides: dict[str, dict[str, Any]] | None = None,
                 *, shared: tuple[str, ...] = ("bag_dir",), **node_kw: Any) -> Any:
    """The ``LaunchDescription`` of a launch file that starts the evaluation graph: its own ``args`` (name ->
    (default, description); a default may be a substitution), the ``shared`` ones of :data:`SHARED_LAUNCH_ARGS`
    (each wired to what it sets), ``params_file`` (default: the installed package's ``config/<config>``), then
    :func:`launch_nodes` with ``overrides`` (merged with the shared arguments' parameters) and ``node_kw``."""
    from ament_index_python.packages import get_package_share_directory
    from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
    from launch.conditions import IfCondition
    from launch.substitutions import LaunchConfiguration

    from launch import LaunchDescription

    unknown = sorted(set(shared) - set(SHARED_LAUNCH_ARGS))
    if unknown:
        raise ConfigError(f"graph_launch: unknown shared launch argument(s) {unknown}; choose from "
                          f"{', '.join(SHARED_LAUNCH_ARGS)} (or declare them in args)")
    default = os.path.join(get_package_share_directory(PACKAGE), "config", config)
    table = {**args, **{n: (SHARED_LAUNCH_ARGS[n].default, SHARED_LAUNCH_ARGS[n].description) for n in shared},
             "params_file": (default, f"ROS 2 parameter file for the embeval nodes (default: the package's config/{config})")}
    actions = [DeclareLaunchArgument(n, default_value=d, description=text) for n, (d, text) in table.items()]
    merged = {node: dict(values) for node, values in (overrides or {}).items()}
    conditions = {}
    for name in shared:
        arg, value = SHARED_LAUNCH_ARGS[name], LaunchConfiguration(name)
        if arg.param:
            merged.setdefault(arg.param[0], {})[arg.param[1]] = value
        if arg.runs:
            conditions[arg.runs] = IfCondition(value)
        if arg.env:
            actions.append(SetEnvironmentVariable(arg.env, value))
    nodes = launch_nodes(LaunchConfiguration("params_file"), merged, conditions, **node_kw)
    return LaunchDescription(actions + nodes)


def markdown_table() -> str:
    """The node table of docs/ros.md: node, executable, start order, graph node, topics, description."""
    rows = ["| node | executable | publishes | subscribes | parameters | description |", "|---|---|---|---|---|---|"]
    for n in nodes():
        t = topics(n)
        pub, sub = (", ".join(f"`{x}`" for x in t[k]) or "-" for k in ("publishes", "subscribes"))
        rows.append(f"| `{n.name}` | `{n.executable}` | {pub} | {sub} | {len(parameters(n))} | {n.description} |")
    return "\n".join(rows)
