"""Floor-by-floor import graph of every Python tree of the project, read from the AST.

The trees: the core library ``src/embeval``, the analysis layer ``analysis/embeval_analysis``, the ROS 2 package
``src/embeval_ros``, the command line ``src/embeval_cli``, the demo ``src/embeval_demo`` and the benchmarks ``bench``.
Every package of every tree stands on one floor, lowest first:

    foundations  embeval.{kinematics, scoring, sim, robot, camera, distortion, ...}   (FOUNDATIONS)
    evaluation   embeval.{subjects, runs, act2answer, serving, control}              (EVALUATION)
    analysis     embeval_analysis
    ROS          embeval_ros                    (the only floor, with those above, that may import rclpy & co.)
    top          embeval_cli, embeval_demo, bench   (entry points)

Rules, none with exemptions: nothing imports from a floor above its own, not even lazily inside a function, by a
``"module:attr"`` registry string or by starting a child process on it (``[sys.executable, "-m", "embeval_cli"]``,
``"python -m embeval_cli"``); ``rclpy``, ``launch`` and ``launch_ros`` are imported only at the ROS floor and
above; every package is classified; no two packages import each other, directly or round a loop; no module cycle.

Every ``import`` / ``from ... import`` counts, including those inside functions (a lazy import is still a
dependency), except those under ``if TYPE_CHECKING:`` (annotations only, never run). A module's package is its first
two dotted parts (``embeval.sim.tasks`` -> ``embeval.sim``; a top-level module such as ``embeval.action`` or
``embeval_ros.graph`` is its own package). Prints what breaks a rule; exits 1 when anything does.

    .venv/bin/python scripts/import_layers.py
"""
from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: top-level package name -> its folder
TREES = {
    "embeval": ROOT / "src" / "embeval",
    "embeval_analysis": ROOT / "analysis" / "embeval_analysis",
    "embeval_ros": ROOT / "src" / "embeval_ros" / "embeval_ros",
    "embeval_cli": ROOT / "src" / "embeval_cli",
    "embeval_demo": ROOT / "src" / "embeval_demo",
    "bench": ROOT / "bench",
}
#: the core's foundations (sub-packages of ``embeval``; ``""`` is ``embeval/__init__`` itself)
FOUNDATIONS = ("", "kinematics", "scoring", "distortion", "camera", "robot", "sim", "action", "conventions", "rotations",
               "resize", "errors", "config", "registry", "entry", "checks", "argtypes", "contact_sheet", "datasets", "env",
               "image_io", "iqa", "progress", "provenance", "recording", "safe_yaml")
#: the core's evaluation layers, built on the foundations
EVALUATION = ("subjects", "runs", "act2answer", "serving", "control", "vla_eval_benchmarks", "evaluate")
#: the floors, lowest first: (name, the packages on it: ``embeval.<sub>`` for the core, else a top-level package)
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundations", tuple(f"embeval.{s}" if s else "embeval" for s in FOUNDATIONS)),
    ("evaluation", tuple(f"embeval.{s}" for s in EVALUATION)),
    ("analysis", ("embeval_analysis",)),
    ("ROS", ("embeval_ros",)),
    ("top", ("embeval_cli", "embeval_demo", "bench")),
)
#: outside modules a floor needs before it may import them: ROS 2 only at the ROS floor and above
FOREIGN_FLOOR = {"rclpy": "ROS", "launch": "ROS", "launch_ros": "ROS"}


def module_name(pkg: str, path: Path) -> str:
    rel = path.relative_to(TREES[pkg]).with_suffix("")
    parts = [pkg, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    out = {}
    for pkg, root in TREES.items():
        for path in sorted(root.rglob("*.py")):
            out[module_name(pkg, path)] = path
    return out


def _type_checking(node: ast.AST) -> bool:
    t = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING"
                                         or isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _walk(node: ast.AST):
    """``ast.walk`` without the bodies of ``if TYPE_CHECKING:`` blocks (their ``else`` still counts)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if _type_checking(n):
            todo.extend(n.orelse)
        else:
            todo.extend(ast.iter_child_nodes(n))


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of ``known`` that module ``name`` imports (anywhere in its body)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                parts = parts if is_pkg else parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    """``id`` of every string that stands alone as a statement (docstrings: prose, not code)."""
    return {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}


#: ``python -m pkg.mod`` inside a string (a command line)
_DASH_M = re.compile(r"(?:^|\s)-m\s+([A-Za-z_][\w.]*)")


def _dash_m_targets(tree: ast.AST, prose: set[int]) -> set[str]:
    """The modules a child process is started on: the item after ``"-m"`` in a list or tuple of strings, and the
    name after ``-m`` in a command-line string (docstrings aside)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            items = node.elts
            found.update(b.value for a, b in zip(items, items[1:])
                         if isinstance(a, ast.Constant) and a.value == "-m" and isinstance(b, ast.Constant)
                         and isinstance(b.value, str))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            found.update(_DASH_M.findall(node.value))
    return found


def named_modules(path: Path, known: set[str]) -> set[str]:
    """Modules of ``known`` named by a ``"module:attr"`` or dotted string constant (registry entries import them),
    or started as a child process (``"-m", "embeval_cli"``: see :func:`_dash_m_targets`).

    Any other bare top-level name (a folder name, a word in a message) names no module and is not counted."""
    tree = ast.parse(path.read_text(), str(path))
    prose = _docstrings(tree)
    names = _dash_m_targets(tree, prose)
    for node in ast.walk(tree):
        v = node.value if isinstance(node, ast.Constant) else None
        if isinstance(v, str) and v.startswith(tuple(TREES)) and ("." in v or ":" in v):
            names.add(v.partition(":")[0].strip())
    found = set()
    for t in names:
        while t and t not in known:
            t = t.rpartition(".")[0]
        if t:
            found.add(t)
    return found


def package(mod: str) -> str:
    return ".".join(mod.split(".")[:2])


def floor(pkg: str) -> int | None:
    """Index in :data:`FLOORS` of package ``pkg`` (``embeval.sim``, ``embeval_ros.graph``, ``bench``); None: unclassified."""
    core = ".".join(pkg.split(".")[:2]) if pkg.startswith("embeval.") else pkg.split(".")[0]
    for i, (_, members) in enumerate(FLOORS):
        if core in members:
            return i
    return None


def floor_index(name: str) -> int:
    return [n for n, _ in FLOORS].index(name)


def foreign_imports(path: Path) -> set[str]:
    """Top-level names of the absolute imports of a module (anywhere in its body, ``TYPE_CHECKING`` aside)."""
    found: set[str] = set()
    for node in _walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def analyse() -> dict[str, list]:
    mods = modules()
    known = set(mods)
    mod_graph = {m: imports(m, p, known) for m, p in mods.items()}
    # a package's own __init__ importing its submodules is not a cycle worth naming; parents are implicit
    pkg_graph: dict[str, set[str]] = defaultdict(set)
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    upward, foreign = [], []
    unclassified = sorted({package(m) for m in mods if floor(package(m)) is None})
    for m, deps in mod_graph.items():
        fm = floor(package(m))
        for d in deps:
            pm, pd = package(m), package(d)
            if pm != pd:
                pkg_graph[pm].add(pd)
                edges[pm, pd].append(f"{m} -> {d}")
            fd = floor(pd)
            if fm is not None and fd is not None and fd > fm:
                upward.append(f"{m} -> {d}")
        for d in named_modules(mods[m], known):
            fd = floor(package(d))
            if fm is not None and fd is not None and fd > fm:
                upward.append(f"{m} -> {d} (by name)")
        for name in foreign_imports(mods[m]) & set(FOREIGN_FLOOR):
            if fm is not None and fm < floor_index(FOREIGN_FLOOR[name]):
                foreign.append(f"{m} -> {name} (below the {FOREIGN_FLOOR[name]} floor)")
    pkg_cycles = []
    for comp in cycles(pkg_graph):
        via = [e for a in comp for b in comp if (a, b) in edges for e in edges[a, b]]
        pkg_cycles.append((comp, via))
    mod_graph_nodes = {m: {d for d in deps if d != m and mods[d].name != "__init__.py"} for m, deps in mod_graph.items()}
    mod_cycles = cycles(mod_graph_nodes)
    return {"package_cycles": pkg_cycles, "module_cycles": mod_cycles, "upward": sorted(upward),
            "foreign": sorted(foreign), "unclassified": unclassified}


def main() -> int:
    res = analyse()
    for comp, via in res["package_cycles"]:
        print("package cycle:", " <-> ".join(comp))
        for e in sorted(via):
            print("   ", e)
    for comp in res["module_cycles"]:
        print("module cycle:", " <-> ".join(comp))
    for e in res["upward"]:
        print("upward import:", e)
    for e in res["foreign"]:
        print("import below its floor:", e)
    for p in res["unclassified"]:
        print("unclassified package (add it to a floor in FLOORS):", p)
    return 1 if any(res.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
