"""The import layering of src/embeval and the analysis package, checked from the AST (scripts/import_layers.py).

Lower layers (kinematics, scoring, distortion, camera, robot, sim, action, errors, config, registry) never import
from the higher ones (subjects, runs, act2answer, serving, embeval_analysis), not even lazily inside a function or
by a ``"module:attr"`` registry string; no two packages import each other, directly or round a loop; no module
cycle. ``embeval.demo`` and ``embeval.cli`` are the top layers and exempt.
"""
from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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


def test_the_check_sees_what_it_forbids(layers, tmp_path, monkeypatch):
    """A planted lazy upward import, a registry string naming a higher layer, a two-package cycle and a lazy module
    cycle are all found."""
    src = tmp_path / "embeval"
    for rel, text in {
        "__init__.py": "",
        "sim/__init__.py": "from embeval.robot import base\n",
        "sim/x.py": "def f():\n    from embeval.subjects import y\n",
        "robot/__init__.py": "",
        "robot/base.py": "from embeval.sim import x\nREG = {'a': 'embeval.runs.z:Thing'}\n",
        "subjects/__init__.py": "", "subjects/y.py": "",
        "runs/__init__.py": "", "runs/z.py": "",
        "demo/__init__.py": "from embeval.subjects import y\n",
        "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from embeval.typed2 import T\n",
        "typed2.py": "from embeval import typed\n",
        "sim/p.py": "from embeval.sim import q\n",
        "sim/q.py": "def g():\n    from embeval.sim.p import h\n",
    }.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(textwrap.dedent(text))
    (tmp_path / "embeval_analysis").mkdir()
    (tmp_path / "embeval_analysis" / "__init__.py").write_text("")
    monkeypatch.setattr(layers, "TREES", {"embeval": src, "embeval_analysis": tmp_path / "embeval_analysis"})
    res = layers.analyse()
    assert [comp for comp, _ in res["package_cycles"]] == [["embeval.robot", "embeval.sim"]]
    assert set(res["upward"]) == {"embeval.robot.base -> embeval.runs.z (by name)", "embeval.sim.x -> embeval.subjects",
                                  "embeval.sim.x -> embeval.subjects.y"}
    # the lazy import counts; the TYPE_CHECKING-only one (typed <-> typed2) does not
    assert res["module_cycles"] == [["embeval.sim.p", "embeval.sim.q"]]
