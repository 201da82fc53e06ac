"""embeval.registry.Registry: lazy entries, did-you-mean, listing, and entry-point plugins from a package
installed into a temporary location (no embeval file edited)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from embeval.errors import ConfigError
from embeval.registry import Registry


def test_lazy_entries_import_on_first_use_and_register_decorator():
    reg = Registry("widget", entries={"json": "json:dumps", "path": "os.path:join"})
    assert reg.names() == ["json", "path"] and "json" in reg
    assert reg.describe() == [("json", "json:dumps"), ("path", "os.path:join")]
    import json

    assert reg.get("json") is json.dumps

    @reg.register("mine", description="a local one")
    class Mine:
        pass

    assert reg.get("mine") is Mine and not hasattr(Mine, "name")  # nothing written onto the class
    assert ("mine", "a local one") in reg.describe()
    reg.unregister("mine")
    assert "mine" not in reg


def test_unknown_name_says_did_you_mean_and_lists():
    reg = Registry("policy backend", hint="register one with X", entries={"local": "json:dumps", "ray": "json:loads"})
    with pytest.raises(ConfigError) as e:
        reg.get("locl", field="backend")
    assert str(e.value) == ("backend: unknown policy backend 'locl' (did you mean 'local'?); "
                            "choose from local, ray (register one with X)")
    with pytest.raises(ConfigError, match="cannot be imported"):
        Registry("x", entries={"gone": "no_such_module_xyz:thing"}).get("gone")


def test_project_registries_use_it():
    from embeval.camera import SOURCES
    from embeval_demo import STAGES
    from embeval.runs.backends import BACKENDS
    from embeval.runs.registry import EVALUATORS

    for reg in (SOURCES, STAGES, BACKENDS, EVALUATORS):
        assert isinstance(reg, Registry) and reg.names()
    assert STAGES.names()[0] == "kinematics"  # run order kept
    with pytest.raises(ConfigError, match="did you mean 'folder'"):
        from embeval.camera import make_source

        make_source("foldr")
    from embeval.subjects.registry import ADAPTERS

    assert set(ADAPTERS) == {"vlm", "policy", "llm"} and "embedded" in ADAPTERS["policy"]
    assert all(isinstance(r, Registry) for r in ADAPTERS.values())


def test_ros_registries_use_it():
    pytest.importorskip("rclpy")
    from embeval_ros.arm_node import make_backend
    from embeval_ros.graph import NODE_CLASSES, node_class
    from embeval_ros.nodes import NODES

    from embeval.robot.backends import ARM_BACKENDS as BACKENDS

    assert isinstance(BACKENDS, Registry) and isinstance(NODES, Registry)
    order = list(NODE_CLASSES)
    assert order[0] == "embeval_camera" and order[-1] == "embeval_conductor"  # start order kept
    assert node_class("embeval_conductor").__name__ == "ConductorNode"
    with pytest.raises(ConfigError, match="backend: unknown arm backend 'mok' \\(did you mean 'mock'\\?\\); choose from libero, mock, sim, ur_rtde"):
        make_backend("mok", None)


def pyproject(name: str, module: str, entry_points: str) -> str:
    """A setuptools pyproject.toml of a one-module package with ``entry_points`` (TOML tables)."""
    return f"""
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.0.1"
{entry_points}
[tool.setuptools]
py-modules = ["{module}"]
"""


PLUGIN_PYPROJECT = pyproject("embeval-tiny-plugin", "tiny_plugin", """
[project.entry-points."embeval.run_evaluators"]
tiny-eval = "tiny_plugin:TinyEvaluator"

[project.entry-points."embeval.camera_sources"]
folder = "tiny_plugin:Shadow"
""")

PLUGIN_MODULE = """
from embeval.runs.evaluators.synthetic import SyntheticEvaluator


class TinyEvaluator(SyntheticEvaluator):
    '''A third-party evaluation kind.'''


class Shadow:
    pass
"""


def install_and_probe(tmp_path, pyproject_text: str, module: str, module_text: str, probe: str) -> list[str]:
    """pip-install a one-module package to a temp dir (no index, no build isolation) and run ``probe`` with it
    on the path; its stdout lines."""
    src, site = tmp_path / "src", tmp_path / "site"
    src.mkdir()
    (src / "pyproject.toml").write_text(pyproject_text)
    (src / f"{module}.py").write_text(module_text)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(src)], check=True, capture_output=True, timeout=300)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site)] + sys.path))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(probe)], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return out.stdout.splitlines()


def test_entry_point_plugin_from_an_installed_package(tmp_path):
    lines = install_and_probe(tmp_path, PLUGIN_PYPROJECT, "tiny_plugin", PLUGIN_MODULE, """
        from embeval.camera import SOURCES
        from embeval.runs.registry import EVALUATORS, get_evaluator
        ev = get_evaluator("tiny-eval")
        print(type(ev).__name__, ev.name, "tiny-eval" in EVALUATORS.names())
        print(SOURCES.get("folder").__name__, SOURCES.conflicts())
    """)
    assert lines[0] == "TinyEvaluator tiny-eval True"
    # a plugin never silently replaces a built-in
    assert lines[1] == "FolderSource ['folder (entry point of embeval-tiny-plugin; the built-in is kept)']"


ADAPTER_PYPROJECT = pyproject("embeval-tiny-adapter", "tiny_adapter", """
[project.entry-points."embeval.subject_adapters.policy"]
tiny_vla = "tiny_adapter:TinyVLA"
""")

ADAPTER_MODULE = """
import numpy as np

from embeval.action import Action, ActionSpec


class TinyVLA:
    '''A third-party policy: moves ``step`` m along +x, gripper open.'''

    def __init__(self, id: str = "tiny-vla", step: float = 0.01):
        self.id, self.step, self.action_spec, self.instruction = id, float(step), ActionSpec(), ""

    def reset(self, instruction: str) -> None:
        self.instruction = instruction

    def act(self, observation) -> Action:
        return Action(np.array([self.step, 0, 0, 0, 0, 0, 1.0]))
"""


def test_policy_adapter_from_an_installed_package_loads_as_a_subject(tmp_path):
    """A user's package registers a policy adapter through an entry point; ``load_subject`` builds it."""
    lines = install_and_probe(tmp_path, ADAPTER_PYPROJECT, "tiny_adapter", ADAPTER_MODULE, """
        from embeval.errors import ConfigError
        from embeval.subjects import list_adapters, load_subject
        p = load_subject({"kind": "policy", "adapter": "tiny_vla", "id": "mine", "params": {"step": 0.02}})
        p.reset("go")
        print(type(p).__name__, p.id, p.act(None).vector.tolist())
        print([r for r in list_adapters() if r[1] == "tiny_vla"])
        try:
            load_subject({"kind": "vlm", "adapter": "tiny_vla"})
        except ConfigError as exc:
            print(exc)
    """)
    assert lines[0] == "TinyVLA mine [0.02, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]"
    assert lines[1] == "[('policy', 'tiny_vla', 'plugin from embeval-tiny-adapter')]"
    assert "unknown adapter 'tiny_vla' for kind 'vlm' (adapter 'tiny_vla' exists for kind policy)" in lines[2]
    # without the package the name is unknown (nothing leaks into this process)
    from embeval.subjects.registry import resolve_adapter

    with pytest.raises(ConfigError, match="unknown adapter 'tiny_vla' for kind 'policy'"):
        resolve_adapter("policy", "tiny_vla")
