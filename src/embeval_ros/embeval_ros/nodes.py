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

from typing import Any

from embeval.errors import ConfigError
from embeval.registry import Registry
from embeval_ros.node_spec import (
    Param,
    RosNode,
    console_scripts,
    discover,
    parameters,
    topics,
)

__all__ = ["NODES", "Param", "RosNode", "console_scripts", "discover", "get_node", "graph_nodes", "launch_nodes",
           "markdown_table", "nodes", "parameters", "register_node", "topics", "unregister_node"]

NODES: Registry[RosNode] = Registry(
    "ROS node", group="embeval.ros_nodes", entries={n.name: n for n in discover()},
    hint="add one with a module in embeval_ros/ declaring NODE = RosNode(...), or register_node(); docs/contributing.md")


def register_node(node: RosNode) -> RosNode:
    """Register ``node`` under its name (replacing a node of the same name); returns it."""
    if not isinstance(node, RosNode):
        raise ConfigError(f"register_node takes an embeval_ros.node_spec.RosNode, got {type(node).__name__}")
    if not node.module:
        raise ConfigError(f"ROS node {node.name}: give module, the Python module holding {node.cls} and main()")
    NODES.register(node.name, node, description=node.description)
    return node


def unregister_node(name: str) -> None:
    """Remove the node ``name`` (:class:`ConfigError` naming the nodes when absent)."""
    NODES.remove(name)


def get_node(name: str, field: str = "") -> RosNode:
    """The node registered as ``name``; :class:`ConfigError` (did you mean, the choices) otherwise."""
    return NODES.get_record(name, RosNode, field)


def nodes() -> list[RosNode]:
    """Every registered node in start order (then registry order)."""
    recs = [get_node(n) for n in NODES.names()]
    return sorted(recs, key=lambda n: n.start)  # stable: ties keep registry order


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


def markdown_table() -> str:
    """The node table of docs/ros.md: node, executable, start order, graph node, topics, description."""
    rows = ["| node | executable | publishes | subscribes | parameters | description |", "|---|---|---|---|---|---|"]
    for n in nodes():
        t = topics(n)
        pub, sub = (", ".join(f"`{x}`" for x in t[k]) or "-" for k in ("publishes", "subscribes"))
        rows.append(f"| `{n.name}` | `{n.executable}` | {pub} | {sub} | {len(parameters(n))} | {n.description} |")
    return "\n".join(rows)
