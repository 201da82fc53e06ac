"""The floors of the project's imports, checked from the AST over every tree (scripts/import_layers.py).

Floors, lowest first: the core's foundations (kinematics, scoring, distortion, camera, robot, sim, action, ...),
its evaluation layers (subjects, runs, act2answer, serving, control), the analysis layer (embeval_analysis), the ROS
package (embeval_ros), and the top: the command line (embeval_cli), the demo (embeval_demo) and the benchmarks
(bench). Nothing imports from a floor above its own, not even lazily inside a function, by a ``"module:attr"``
registry string or by a child process started on it (``"-m", "embeval_cli"``); ``rclpy`` (and ``launch``, ``launch_ros``) only at the ROS floor and above; every package stands on
a floor; no two packages import each other, directly or round a loop; no module cycle. No exemptions.
"""
from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def layers():
    spec = importlib.util.spec_from_file_location("import_layers", ROOT / "scripts" / "import_layers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def result(layers):
    return layers.analyse()


def test_no_package_cycle(result):
    assert result["package_cycles"] == [], "\n".join(
        " <-> ".join(comp) + ":\n  " + "\n  ".join(sorted(via)) for comp, via in result["package_cycles"])


def test_no_module_cycle(result):
    assert result["module_cycles"] == []


def test_no_import_from_a_lower_layer_into_a_higher_one(result):
    assert result["upward"] == []


def test_ros_only_at_the_ros_floor_and_above(result):
    assert result["foreign"] == []


def test_every_package_of_every_tree_is_on_a_floor(layers, result):
    assert result["unclassified"] == []
    # the trees are all there: the check sees the ROS package, the CLI, the demo and the benchmarks
    pkgs = {layers.package(m) for m in layers.modules()}
    for pkg, name in [("embeval_ros.graph", "ROS"), ("embeval_cli.runs", "top"), ("embeval_demo.kinematics", "top"),
                      ("bench.bench_sim", "top"), ("embeval_analysis.iqa", "analysis"), ("embeval.control", "evaluation"),
                      ("embeval.sim", "foundations")]:
        assert pkg in pkgs
        assert layers.FLOORS[layers.floor(pkg)][0] == name, pkg
    # no trace of the old exempt top layers inside the core
    assert not any(m.startswith(("embeval.cli", "embeval.demo")) for m in layers.modules())


def test_the_check_sees_what_it_forbids(layers, tmp_path, monkeypatch):
    """A planted lazy upward import, a registry string naming a higher floor, a two-package cycle, a lazy module
    cycle, rclpy below the ROS floor, an import from the analysis floor into ROS and from ROS into the CLI, and a
    package on no floor, and child processes started on the CLI from the core (an argument list ``"-m",
    "embeval_cli"`` and a command-line string) are all found; rclpy at the ROS floor and above, a ``-m`` target on the
    same floor, and ``-m embeval_cli`` in a docstring are not."""
    trees = {name: tmp_path / name for name in ("embeval", "embeval_analysis", "embeval_ros", "embeval_cli")}
    for rel, text in {
        "embeval/__init__.py": "",
        "embeval/sim/__init__.py": "from embeval.robot import base\n",
        "embeval/sim/x.py": "def f():\n    from embeval.subjects import y\n",
        "embeval/robot/__init__.py": "",
        "embeval/robot/base.py": "from embeval.sim import x\nREG = {'a': 'embeval.runs.z:Thing'}\n",
        "embeval/robot/spawn.py": "import sys\nCMD = [sys.executable, '-m', 'embeval_cli', 'serve']\n",
        "embeval/robot/shell.py": "'Run as python -m embeval_cli (a docstring).'\nCMD = f'python -m embeval_cli.runs x'\n",
        "embeval/robot/own.py": "import sys\nCMD = (sys.executable, '-m', 'embeval.robot.base')\n",
        "embeval/subjects/__init__.py": "", "embeval/subjects/y.py": "",
        "embeval/runs/__init__.py": "", "embeval/runs/z.py": "def g():\n    import rclpy.node\n",
        "embeval/demo/__init__.py": "from embeval.subjects import y\n",
        "embeval/sim/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from embeval.sim.typed2 import T\n",
        "embeval/sim/typed2.py": "from embeval.sim import typed\n",
        "embeval/sim/p.py": "from embeval.sim import q\n",
        "embeval/sim/q.py": "def g():\n    from embeval.sim.p import h\n",
        "embeval/camera/__init__.py": "from launch_ros.actions import Node\n",
        "embeval_analysis/__init__.py": "def f():\n    from embeval_ros import node\n",
        "embeval_ros/__init__.py": "", "embeval_ros/node.py": "import rclpy\nfrom embeval.subjects import y\n",
        "embeval_ros/cmd.py": "HANDLER = 'embeval_cli.runs:main'\n",
        "embeval_cli/__init__.py": "import rclpy\nfrom embeval_ros import node\n", "embeval_cli/runs.py": "",
    }.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.setattr(layers, "TREES", trees)
    res = layers.analyse()
    assert [comp for comp, _ in res["package_cycles"]] == [["embeval.robot", "embeval.sim"]]
    assert set(res["upward"]) == {"embeval.robot.base -> embeval.runs.z (by name)", "embeval.sim.x -> embeval.subjects",
                                  "embeval.sim.x -> embeval.subjects.y", "embeval_analysis -> embeval_ros",
                                  "embeval_analysis -> embeval_ros.node",
                                  "embeval_ros.cmd -> embeval_cli.runs (by name)",
                                  "embeval.robot.spawn -> embeval_cli (by name)",
                                  "embeval.robot.shell -> embeval_cli.runs (by name)"}
    # rclpy / launch_ros below the ROS floor, even lazily; embeval_ros and embeval_cli may import rclpy
    assert res["foreign"] == ["embeval.camera -> launch_ros (below the ROS floor)",
                              "embeval.runs.z -> rclpy (below the ROS floor)"]
    assert res["unclassified"] == ["embeval.demo"]
    # the lazy import counts; the TYPE_CHECKING-only one (typed <-> typed2) does not
    assert res["module_cycles"] == [["embeval.sim.p", "embeval.sim.q"]]
