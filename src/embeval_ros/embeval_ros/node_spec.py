"""The ROS node record (:class:`RosNode`) and the reader that finds each node's record in its own file.

Every node module of this package declares itself at module level with literal arguments only::

    NODE = RosNode("embeval_camera", "CameraNode", start=10, description="image source on the realsense-ros topics")

:func:`discover` reads those declarations from the source (``ast``; nothing is imported, so neither rclpy nor
launch is needed): setup.py's console scripts, the launch files (:func:`embeval_ros.nodes.launch_nodes`),
``embeval graph`` and the tests all read that one list (:data:`embeval_ros.nodes.NODES`). A node's parameters
(name, default, description) and topics are read from its code the same way (:func:`parameters`,
:func:`topics`): the ``self.param(...)`` / ``declare(self, ...)`` calls and ``create_publisher`` /
``create_subscription`` calls are the only copy.

Standard library only: setup.py loads this file by path at build time.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from embeval.errors import ConfigError
except ImportError:  # setup.py at build time, before embeval is installed
    ConfigError = ValueError  # type: ignore[misc,assignment]

PACKAGE = "embeval_ros"
PACKAGE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class RosNode:
    """One ROS 2 node of the graph.

    ``name``: its ROS node name (``embeval_<word>``). ``cls``: the node class (or a factory returning the node) in
    ``module``. ``module``: the Python module (default: the module the record was read from). ``executable``: the
    console script (default: the module's last part, e.g. ``camera_node``). ``start``: start order in ``embeval
    graph`` and the launch files (lower first). ``graph``: part of the evaluation graph (False: a helper
    executable only, such as the echo node). ``package``: the ROS package installing the executable.
    ``description``: one line for docs and listings.
    """

    name: str
    cls: str
    start: int = 100
    graph: bool = True
    description: str = ""
    module: str = ""
    executable: str = ""
    package: str = PACKAGE
    source: str = field(default="", compare=False, repr=False)  # the file the record was read from ("": not read)

    def __post_init__(self):
        if not isinstance(self.name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ConfigError(f"ROS node names are lower-case words such as 'embeval_camera', got {self.name!r}")
        if not isinstance(self.cls, str) or not self.cls.isidentifier():
            raise ConfigError(f"ROS node {self.name}: cls must name the node class, got {self.cls!r}")
        if isinstance(self.start, bool) or not isinstance(self.start, int):
            raise ConfigError(f"ROS node {self.name}: start must be a whole number (start order), got {self.start!r}")

    @property
    def entry_point(self) -> str:
        """``module:main``: what the console script runs."""
        return f"{self.module}:main"

    @property
    def target(self) -> str:
        """``module:cls``: the node class (or factory), for :func:`embeval.registry.load_target`."""
        return f"{self.module}:{self.cls}"


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)  # an expression (a topic constant, a computed default): kept as its source text


def read_node_file(path: str | Path, module: str | None = None) -> RosNode | None:
    """The ``NODE = RosNode(...)`` record of one module file (None when it declares none), with ``module`` /
    ``executable`` filled in from the file name; a non-literal argument is a ConfigError naming the file."""
    path = Path(path)
    tree = ast.parse(path.read_text(), str(path))
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["NODE"]):
            continue
        call = stmt.value
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "RosNode"):
            raise ConfigError(f"{path}: NODE must be RosNode(...) with literal arguments")
        try:
            args = [ast.literal_eval(a) for a in call.args]
            kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        except ValueError:
            raise ConfigError(f"{path}: RosNode(...) arguments must be literals (strings, numbers, booleans): the "
                              "build reads them without importing the node") from None
        kw.setdefault("module", module or f"{PACKAGE}.{path.stem}")
        kw.setdefault("executable", path.stem)
        return RosNode(*args, **kw, source=str(path))
    return None


def discover(folders: list[str | Path] | None = None) -> list[RosNode]:
    """The records of every module in ``folders`` (default: this package's), in start order (then by name).
    Two records of one name are a ConfigError naming both files."""
    found: dict[str, RosNode] = {}
    for folder in folders or [PACKAGE_DIR]:
        for path in sorted(Path(folder).glob("*.py")):
            rec = read_node_file(path, f"{PACKAGE}.{path.stem}")
            if rec is None:
                continue
            if rec.name in found:
                raise ConfigError(f"ROS node {rec.name!r} is declared twice: {found[rec.name].source} and {path}")
            found[rec.name] = rec
    return sorted(found.values(), key=lambda n: (n.start, n.name))


def console_scripts(nodes: list[RosNode]) -> list[str]:
    """setup.py's ``console_scripts`` of ``nodes`` of this package: ``executable = module:main``."""
    return [f"{n.executable} = {n.entry_point}" for n in nodes if n.package == PACKAGE]


@dataclass(frozen=True)
class Param:
    """One declared node parameter: its default (a literal, or the expression's source text) and description."""

    default: Any
    description: str = ""


def _calls(node: RosNode) -> list[ast.Call]:
    """Every call in ``node``'s source file, in source order."""
    if node.source:
        path = Path(node.source)
    else:  # a record from a plugin: its module's file, found without running the module
        import importlib.util

        spec = importlib.util.find_spec(node.module) if node.module else None
        path = Path(spec.origin) if spec is not None and spec.origin else Path(node.module or "?")
    if not path.is_file():
        raise ConfigError(f"ROS node {node.name}: its source {path} is not a file (installed without sources?)")
    calls = [c for c in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(c, ast.Call)]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def parameters(node: RosNode) -> dict[str, Param]:
    """The parameters ``node`` declares, from its source: ``self.param(name, default, description)`` (or a
    helper's ``param(...)``) and ``declare(self, name, default, description)`` calls, in source order."""
    out: dict[str, Param] = {}
    for call in _calls(node):
        f = call.func
        called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        args = call.args[1:] if called == "declare" else call.args
        if called not in ("param", "declare") or not args or not isinstance(args[0], ast.Constant):
            continue
        desc = args[2].value if len(args) > 2 and isinstance(args[2], ast.Constant) else ""
        out.setdefault(args[0].value, Param(_literal(args[1]) if len(args) > 1 else None, desc))
    return out


def topics(node: RosNode) -> dict[str, list[str]]:
    """``{"publishes": [...], "subscribes": [...]}``: the topic arguments of ``create_publisher`` /
    ``create_subscription`` in ``node``'s source (``T.NAME`` resolved through :mod:`embeval_ros.topics`; other
    expressions as their source text), each once, in source order."""
    from embeval_ros import topics as T

    out: dict[str, list[str]] = {"publishes": [], "subscribes": []}
    for call in _calls(node):
        if not (isinstance(call.func, ast.Attribute) and len(call.args) >= 2):
            continue
        key = {"create_publisher": "publishes", "create_subscription": "subscribes"}.get(call.func.attr)
        if key is None:
            continue
        arg = call.args[1]
        if isinstance(arg, ast.Attribute) and getattr(arg.value, "id", "") == "T" and hasattr(T, arg.attr):
            name = getattr(T, arg.attr)
        else:
            name = _literal(arg)
        if name not in out[key]:
            out[key].append(str(name))
    return out
