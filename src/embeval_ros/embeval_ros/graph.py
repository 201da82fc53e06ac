"""Compose the embeval nodes in one process with a MultiThreadedExecutor (a stand-in for ``ros2 launch``).

The parameter file is a standard ROS 2 parameter YAML (``node_name: {ros__parameters: {...}}``,
``/**`` for every node), the same file the launch files pass to the nodes, so
``embeval graph --params config/embeval_sim.yaml`` runs the graph that
``ros2 launch embeval_ros sim.launch.py`` starts as separate processes.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from embeval.errors import ConfigError, load_yaml
from embeval.registry import load_target
from embeval_ros.nodes import RosNode, graph_nodes


class _GraphNodes(Mapping[str, RosNode]):
    """Live read-only view ``node name -> record`` of the graph nodes of :data:`embeval_ros.nodes.NODES`, in
    start order (a node registered later, or by a package's ``embeval.ros_nodes`` entry point, joins it)."""

    def __getitem__(self, name: str) -> RosNode:
        for n in graph_nodes():
            if n.name == name:
                return n
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (n.name for n in graph_nodes())

    def __len__(self) -> int:
        return len(graph_nodes())


#: the graph's nodes (name -> :class:`~embeval_ros.node_spec.RosNode`), in start order; iterate it for the names
NODE_CLASSES = _GraphNodes()


#: how nodes are spun in one process: one SingleThreadedExecutor per node, each in its own thread (the
#: default: like one process per node, a slow node cannot starve the others), or one MultiThreadedExecutor
#: for all nodes (measured slower here: the shared wait set is rebuilt for every callback)
EXECUTORS = ("per_node", "multi")


def _per_node_executor(kind: str, context):
    from rclpy.executors import SingleThreadedExecutor

    return SingleThreadedExecutor(context=context)


def _spin_quietly(executor) -> None:
    """Spin until shutdown. A callback that raises is reported in one line (once per message) and the node
    keeps spinning, instead of its thread dying with a traceback while the rest of the graph runs on."""
    import sys

    from rclpy.executors import ExternalShutdownException

    seen: set[str] = set()
    while True:
        try:
            executor.spin()
            return
        except (ExternalShutdownException, KeyboardInterrupt):
            return
        except Exception as exc:  # noqa: BLE001 - reported, the node goes on
            if not executor.context.ok():
                return
            msg = f"{type(exc).__name__}: {exc}"
            if msg not in seen:
                seen.add(msg)
                names = ", ".join(n.get_name() for n in executor.get_nodes())
                print(f"embeval graph: a callback of {names} raised {msg}; the node keeps running", file=sys.stderr,
                      flush=True)


def load_params(path: str | Path | dict, common_out: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Read a ROS 2 parameter YAML into ``{node_name: {param: value}}`` (``/**`` merged into every node;
    ``common_out``, when given, receives the ``/**`` parameters themselves)."""
    if isinstance(path, dict):
        data = path
    else:
        p = Path(path)
        data = load_yaml(p, "parameter file", fix="compare with config/embeval_sim.yaml",
                         missing=f"parameter file {p} not found; see config/ for examples (config/embeval_sim.yaml)") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a ROS 2 parameter file maps node names to {{ros__parameters: ...}}")
    common: dict[str, Any] = {}
    out: dict[str, dict[str, Any]] = {}
    for name, body in data.items():
        params = (body["ros__parameters"] or {}) if isinstance(body, dict) and "ros__parameters" in body else None
        if not isinstance(params, dict):
            raise ConfigError(f"{path}: node {name!r} needs a 'ros__parameters:' mapping")
        key = name.strip("/")
        if key in ("**", "*"):
            common.update(params)
        else:
            if key not in NODE_CLASSES:
                raise ConfigError(f"{path}: unknown node {name!r}; embeval nodes are {', '.join(NODE_CLASSES)}")
            out[key] = dict(params)
    if common_out is not None:
        common_out.update(common)
    return {k: {**common, **v} for k, v in out.items()}


def follow_policy_dry_run(params: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The arm's ``dry_run`` follows the policy's (a real bool) unless the arm sets its own: one switch,
    ``embeval_policy.dry_run``, lets the arm move on its own (the home move on reset). Returns a copy."""
    params = {k: dict(v) for k, v in params.items()}
    policy, arm = params.get("embeval_policy", {}), params.get("embeval_arm")
    if arm is not None and "dry_run" not in arm and isinstance(policy.get("dry_run"), bool):
        arm["dry_run"] = policy["dry_run"]
    return params


def node_class(name: str):
    """The class (or factory) of graph node ``name``, imported on first use."""
    if name not in NODE_CLASSES:
        raise ConfigError(f"unknown node {name!r}; embeval nodes are {', '.join(NODE_CLASSES)}")
    return load_target(NODE_CLASSES[name].target)


def _overrides(params: dict[str, Any], node: str = "") -> list:
    """rclpy parameters from plain values; a list mixing ints and floats (``[.nan, 0, 0, 0, 0, 0]``) becomes floats;
    any other value rclpy cannot hold is a ConfigError naming the parameter."""
    from rclpy.parameter import Parameter

    out = []
    for k, v in params.items():
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            v = [float(x) for x in v] if any(isinstance(x, float) for x in v) else list(v)
        try:
            out.append(Parameter(k, value=v))
        except (TypeError, ValueError):
            raise ConfigError(f"parameter {node}.{k}: {v!r} is not a ROS parameter value (a bool, number, string, or a "
                              "list of one of these)") from None
    return out


def _check_declared(name: str, node, wanted: Iterable[str]) -> None:
    """Raise a ConfigError naming a parameter that ``node`` does not declare (ROS would ignore it silently)."""
    import difflib

    for param in wanted:
        if not node.has_parameter(param):
            known = sorted(p for p in node._parameters if p not in ("use_sim_time", "start_type_description_service"))
            close = difflib.get_close_matches(param, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(f"node {name} has no parameter {param!r}; {hint}its parameters: {', '.join(known)}")


class Graph:
    """The node graph in one process. Use as a context manager; :meth:`spin` runs it.

    ``params``: ``{node_name: {param: value}}`` (see :func:`load_params`); ``nodes``: which nodes to
    start (default: every node named in ``params``); ``shared``: in-process objects handed to the
    nodes (``arm``: an ArmBackend, ``renderer``: its camera renderer, ``policy``: a Policy);
    ``check``: ``{node_name: [param, ...]}`` that each node must declare (a typo in a parameter file
    or a ``--set`` is a :class:`ConfigError` before the graph spins, instead of being ignored).
    """

    def __init__(self, params: dict[str, dict[str, Any]], nodes: Iterable[str] | None = None,
                 shared: dict | None = None, threads: int | None = None, executor: str = "per_node",
                 check: dict[str, Iterable[str]] | None = None):
        self.params = follow_policy_dry_run(params)
        self.check = {k: list(v) for k, v in (check or {}).items()}
        self.names = [n for n in NODE_CLASSES if n in (set(nodes) if nodes is not None else set(params))]
        unknown = set(nodes or []) - set(NODE_CLASSES)
        if unknown:
            raise ConfigError(f"unknown nodes {sorted(unknown)}; choose from {', '.join(NODE_CLASSES)}")
        self.shared = shared if shared is not None else {}
        self.threads = threads
        if executor not in EXECUTORS:
            raise ConfigError(f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}")
        self.executor_kind = executor
        self.nodes: dict[str, Any] = {}
        self._threads: list = []
        self._executors: list = []

    def __enter__(self) -> Graph:
        from embeval.env import configure

        configure()  # localhost-only DDS before rclpy.init (see embeval.env)
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import MultiThreadedExecutor

        self.context = Context()
        rclpy.init(context=self.context)
        self.executor = None
        try:
            self._share_sim()
            if self.executor_kind == "multi":
                self.executor = MultiThreadedExecutor(num_threads=self.threads, context=self.context)
            for name in self.names:
                node = node_class(name)(parameter_overrides=_overrides(self.params.get(name, {}), name), shared=self.shared,
                                        context=self.context)
                self.nodes[name] = node
                _check_declared(name, node, self.check.get(name, ()))
                if self.executor is not None:
                    self.executor.add_node(node)
                else:  # one executor per node, each spinning in its own thread (like one process per node)
                    ex = _per_node_executor(self.executor_kind, self.context)
                    ex.add_node(node)
                    self._executors.append(ex)
            for ex in self._executors:
                t = threading.Thread(target=_spin_quietly, args=(ex,), daemon=True)
                t.start()
                self._threads.append(t)
        except BaseException:
            for node in reversed(list(self.nodes.values())):  # a node failed to start: undo what the others made
                try:
                    getattr(node, "abort", lambda: None)()
                except Exception as exc:  # noqa: BLE001 - the startup error is the one to report
                    node.get_logger().warning(f"abort failed: {exc}")
            self.__exit__(None, None, None)
            raise
        return self

    def _share_sim(self) -> None:
        """With the sim arm composed in this process, the camera renders that same workcell."""
        arm = self.params.get("embeval_arm", {})
        if "embeval_arm" in self.names and arm.get("backend") == "libero" and "arm" not in self.shared:
            from embeval.sim.libero.arm import graph_shared  # one LIBERO task: the arm steps it, the camera shows it
            from embeval_ros.arm_node import safety_limits

            limits = safety_limits(lambda name, default, _description: arm.get(name, default))
            self.shared.update(graph_shared(arm, self.params.get("embeval_camera", {}), limits))
            return
        if "embeval_arm" not in self.names or arm.get("backend", "mock") != "sim" or "arm" in self.shared:
            return
        from embeval.robot.safety import check_range
        from embeval.sim.arm_backend import SimArmBackend
        from embeval_ros.arm_node import safety_limits
        from embeval_ros.runtime import typed

        cam = self.params.get("embeval_camera", {})
        w, h = typed("embeval_camera.width", cam.get("width", 640), 0), typed("embeval_camera.height", cam.get("height", 480), 0)
        limits = safety_limits(lambda name, default, _description: arm.get(name, default))  # the arm node's own limits
        sim = SimArmBackend(limits=limits, task=typed("embeval_arm.sim_task", arm.get("sim_task", "Pick"), ""),
                            seed=typed("embeval_arm.sim_seed", arm.get("sim_seed", 0), 0),
                            control_hz=check_range("control_hz", typed("embeval_arm.control_hz", arm.get("control_hz", 10.0), 0.0)))
        self.shared["arm"] = sim
        self.shared["renderer"] = lambda camera: sim.render(camera, w, h)

    def spin(self, duration_s: float | None = None, until: Callable[[Graph], bool] | None = None) -> float:
        """Spin until ``duration_s`` elapsed or ``until(graph)`` is true (checked every 50 ms); returns seconds spun."""
        t0 = time.monotonic()
        while True:
            if self.executor is not None:
                self.executor.spin_once(timeout_sec=0.05)
            else:
                time.sleep(0.05)
            if until is not None and until(self):
                break
            if duration_s is not None and time.monotonic() - t0 >= duration_s:
                break
        return time.monotonic() - t0

    def wait_for(self, until: Callable[[Graph], bool], timeout_s: float, what: str) -> float:
        """Spin until ``until(graph)`` holds; a TimeoutError naming ``what`` after ``timeout_s``. Returns seconds spun."""
        spun = self.spin(timeout_s, until=until)
        if not until(self):
            raise TimeoutError(f"waited {spun:.1f} s for {what}; it did not happen")
        return spun

    def __exit__(self, *exc) -> None:
        import rclpy

        for ex in self._executors:
            ex.shutdown(timeout_sec=2.0)
        for t in self._threads:
            t.join(timeout=5.0)
        for node in reversed(list(self.nodes.values())):
            try:
                node.close()
            finally:
                node.destroy_node()
        self.nodes.clear()
        if getattr(self, "executor", None) is not None:
            self.executor.shutdown(timeout_sec=2.0)
        if self.context.ok():
            rclpy.shutdown(context=self.context)
        arm = self.shared.pop("arm", None)
        if arm is not None and self.shared.pop("renderer", None) is not None:
            arm.close()

    def stage_latencies(self) -> dict[str, dict[str, float]]:
        """Per node: p50/p99 processing latency (ms), messages received and published."""
        import numpy as np

        out = {}
        for name, node in self.nodes.items():
            lat = np.asarray(node.log.latency_s, dtype=np.float64) * 1e3
            out[name] = {
                "p50_ms": float(np.percentile(lat, 50)) if lat.size else float("nan"),
                "p99_ms": float(np.percentile(lat, 99)) if lat.size else float("nan"),
                "received": node.log.received, "published": node.log.published,
            }
        return out
