"""Registries of typed records (embeval.registry.RecordKind): register_record / get_record / records / remove, the
one code behind register_task, register_metric, register_node and the perturbation axes; and graph_launch, the part
the launch files share."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from embeval.errors import ConfigError
from embeval.registry import RecordKind, Registry


@dataclass(frozen=True)
class Gadget:
    label: str
    summary: str = ""
    size_mm: float = 1.0


def _no_giants(g: Gadget) -> None:
    if g.size_mm > 100:
        raise ConfigError(f"gadget {g.label}: size_mm must be <= 100, got {g.size_mm}")


def _gadgets() -> Registry[Gadget]:
    return Registry("gadget", record=RecordKind(Gadget, key="label", about="summary", home="tools",
                                                adder="register_gadget", check=_no_giants))


def test_register_record_keys_by_the_key_attribute_and_describes_by_about():
    reg = _gadgets()
    a, b = Gadget("nut", "a hex nut", 8.0), Gadget("bolt", "an M8 bolt", 40.0)
    assert reg.register_record(a) is a and reg.register_record(b) is b
    assert reg.names() == ["nut", "bolt"] and reg.describe() == [("nut", "a hex nut"), ("bolt", "an M8 bolt")]
    assert reg.get_record("bolt").size_mm == 40.0 and reg.records() == [a, b]
    reg.register_record(Gadget("nut", "a lock nut", 9.5))  # same key: replaced, order kept
    assert [g.size_mm for g in reg.records()] == [9.5, 40.0]
    reg.remove("nut")
    assert reg.names() == ["bolt"]


def test_record_registry_errors_name_the_problem():
    reg = _gadgets()
    reg.register_record(Gadget("bolt"))
    with pytest.raises(ConfigError, match=r"^register_gadget takes an tools\.Gadget, got dict$"):
        reg.register_record({"label": "nut"})
    with pytest.raises(ConfigError, match="gadget giant: size_mm must be <= 100, got 500"):
        reg.register_record(Gadget("giant", size_mm=500))
    assert "giant" not in reg  # the check runs before anything is stored
    with pytest.raises(ConfigError, match=r"^unknown gadget 'blot' \(did you mean 'bolt'\?\); choose from bolt"):
        reg.remove("blot")
    with pytest.raises(ConfigError, match=r"^--gadget: unknown gadget 'nit'"):
        reg.get_record("nit", "--gadget")
    reg.register("stray", "json:dumps")  # a plugin's entry point may name anything
    with pytest.raises(ConfigError, match=r"gadget 'stray' is a function, not an tools\.Gadget record"):
        reg.get_record("stray")
    with pytest.raises(TypeError, match="holds no typed records"):
        Registry("widget").register_record(Gadget("x"))


def test_project_record_registries_share_it():
    from embeval_analysis.iqa.metric_registry import (
        METRICS,
        get_metric,
        metrics,
        register_metric,
    )
    from embeval_ros.nodes import NODES, get_node, register_node

    from embeval.sim.perturb import AXES, axes, get_axis
    from embeval.sim.tasks import TASKS, Task, get_task, register_task, tasks

    for reg, cls in ((TASKS, Task), (METRICS, None), (NODES, None), (AXES, None)):
        assert reg.record is not None and (cls is None or reg.record.cls is cls)
    assert [t.verb for t in tasks()] == TASKS.names() and len(tasks()) == 10 and get_task("Pick").difficulty == 1
    assert [m.name for m in metrics()] == METRICS.names() and get_metric("psnr").mode == "FR"
    assert get_node("embeval_arm").name == "embeval_arm" and [a.name for a in axes()] == AXES.names()
    with pytest.raises(ConfigError, match=r"^--perturb: unknown perturbation axis 'fvo' \(did you mean 'fov'\?\)"):
        get_axis("fvo")
    with pytest.raises(ConfigError, match=r"register_metric takes an embeval_analysis\.iqa\.metric_registry\.Metric"):
        register_metric("psnr")
    with pytest.raises(ConfigError, match=r"register_node takes an embeval_ros\.node_spec\.RosNode, got str"):
        register_node("embeval_x")
    with pytest.raises(ConfigError, match=r"register_task takes an embeval\.sim\.tasks\.Task, got type"):
        register_task(get_metric("psnr").__class__)  # a class, not a record


def test_graph_launch_wires_the_shared_arguments(monkeypatch, tmp_path):
    from test_ros_launch import ROOT, resolve_launch

    nodes = resolve_launch(ROOT / "launch" / "hil_regression.launch.py",
                           {"use_mock_hardware": "false", "robot_ip": "10.0.0.7", "bag_dir": "/tmp/b"}, monkeypatch, tmp_path)
    arm, cam = nodes["embeval_arm"]["overrides"], nodes["embeval_camera"]["overrides"]
    assert (arm["backend"], arm["robot_ip"], cam["source"]) == ("ur_rtde", "10.0.0.7", "realsense")
    assert nodes["embeval_recorder"]["overrides"] == {"bag_dir": "/tmp/b"}
    assert nodes["embeval_arm"]["params_file"].endswith("config/embeval_hil.yaml")
    off = resolve_launch(ROOT / "launch" / "ur5_execution.launch.py", {"record": "false"}, monkeypatch, tmp_path)
    assert "embeval_recorder" not in off and off["embeval_arm"]["overrides"]["robot_ip"] == "192.168.1.102"


def test_graph_launch_refuses_an_unknown_shared_argument(monkeypatch, tmp_path):
    import sys

    from test_ros_launch import _stub_modules

    for name, mod in _stub_modules(tmp_path).items():
        monkeypatch.setitem(sys.modules, name, mod)
    from embeval_ros.nodes import graph_launch

    with pytest.raises(ConfigError, match=r"unknown shared launch argument\(s\) \['robot_id'\]; choose from robot_ip"):
        graph_launch("embeval_sim.yaml", {}, shared=("robot_id",))
