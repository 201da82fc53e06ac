"""Package-level import graph of ``src/embeval`` and ``analysis/embeval_analysis``, read from the AST.

Every ``import`` / ``from ... import`` counts, including those inside functions (a lazy import is still a
dependency), except those under ``if TYPE_CHECKING:`` (annotations only, never run). A module's package is its first two dotted parts (``embeval.sim.tasks`` -> ``embeval.sim``;
a top-level module such as ``embeval.action`` is its own package). Prints package cycles, module cycles
and imports that run from a lower layer up into a higher one; exits 1 when any are found.

    .venv/bin/python scripts/import_layers.py
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = {"embeval": ROOT / "src" / "embeval", "embeval_analysis": ROOT / "analysis" / "embeval_analysis"}
#: the foundations: nothing here may import from HIGHER
LOWER = ("kinematics", "scoring", "distortion", "camera", "robot", "sim", "action", "conventions", "rotations", "resize",
         "errors", "config", "registry")
#: the evaluation layers built on the foundations
HIGHER = ("subjects", "runs", "act2answer", "serving")
#: top layers (entry points) exempt from the rules: they may import anything
TOP = ("embeval.demo", "embeval.cli")
#: transitional aliases left at an old path for callers outside the core, exempt until removed
ALIASES: tuple[str, ...] = ()  # transitional re-export modules exempt from the layering rule (none today)


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


def named_modules(path: Path, known: set[str]) -> set[str]:
    """Modules of ``known`` named by a ``"module:attr"`` or dotted string constant (registry entries import them)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("embeval"):
            t = node.value.partition(":")[0].strip()
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t:
                found.add(t)
    return found


def package(mod: str) -> str:
    return ".".join(mod.split(".")[:2])


def layer(pkg: str) -> str | None:
    top, _, sub = pkg.partition(".")
    if top == "embeval_analysis":
        return "higher"
    if sub in LOWER:
        return "lower"
    if sub in HIGHER:
        return "higher"
    return None


def exempt(mod: str) -> bool:
    return mod in ALIASES or any(mod == t or mod.startswith(t + ".") for t in TOP)


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
    upward = []
    for m, deps in mod_graph.items():
        if exempt(m):
            continue
        for d in deps:
            pm, pd = package(m), package(d)
            if pm != pd and not exempt(d):
                pkg_graph[pm].add(pd)
                edges[pm, pd].append(f"{m} -> {d}")
            if layer(pm) == "lower" and layer(pd) == "higher":
                upward.append(f"{m} -> {d}")
        for d in named_modules(mods[m], known):
            if layer(package(m)) == "lower" and layer(package(d)) == "higher":
                upward.append(f"{m} -> {d} (by name)")
    pkg_cycles = []
    for comp in cycles(pkg_graph):
        via = [e for a in comp for b in comp if (a, b) in edges for e in edges[a, b]]
        pkg_cycles.append((comp, via))
    mod_graph_nodes = {m: {d for d in deps if d != m and mods[d].name != "__init__.py"} for m, deps in mod_graph.items()}
    mod_cycles = cycles(mod_graph_nodes)
    return {"package_cycles": pkg_cycles, "module_cycles": mod_cycles, "upward": sorted(upward)}


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
    return 1 if any(res.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
