"""Launch files and parameter files: every executable, node name and parameter they name exists.

launch/launch_ros are not installable here, so the launch files are executed against stub modules
that record what they declare; node parameters are read from the node sources (AST of self.param calls).
"""
from __future__ import annotations

import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = sorted((ROOT / "launch").glob("*.launch.py"))
CONFIGS = sorted(p for p in (ROOT / "config").glob("*.yaml"))
PKG_DIR = ROOT / "src" / "embeval_ros"


def _executables() -> dict[str, str]:
    """Console script -> node module, as setup.py's entry_points() makes them (from the node records)."""
    from embeval_ros.nodes import console_scripts, nodes

    return {line.split(" = ")[0]: line.split(" = ")[1].split(":")[0].rpartition(".")[2] for line in console_scripts(nodes())}


def _declared(module: str) -> set[str]:
    """The parameters node module ``module`` declares (its self.param / declare calls)."""
    from embeval_ros.nodes import nodes, parameters

    (node,) = [n for n in nodes() if n.module.rpartition(".")[2] == module]
    return set(parameters(node))


def node_modules() -> dict[str, str]:
    """Graph node name -> its module, read from embeval_ros.nodes.NODES (a node registered there is here too)."""
    from embeval_ros.nodes import graph_nodes

    return {n.name: n.module.rpartition(".")[2] for n in graph_nodes()}


class _Rec:
    """Records constructor arguments (a stand-in for launch / launch_ros classes)."""

    made: list = []

    def __init__(self, *args, **kw):
        self.args, self.kw = args, kw
        _Rec.made.append(self)


def _stub_modules(share: Path) -> dict[str, types.ModuleType]:
    mods = {}
    for name in ("launch", "launch.actions", "launch.conditions", "launch.substitutions", "launch_ros", "launch_ros.actions",
                 "ament_index_python", "ament_index_python.packages"):
        mods[name] = types.ModuleType(name)
    kinds = {}
    for mod, cls in [("launch", "LaunchDescription"), ("launch.actions", "DeclareLaunchArgument"),
                     ("launch.actions", "SetEnvironmentVariable"), ("launch.actions", "IncludeLaunchDescription"),
                     ("launch.conditions", "IfCondition"), ("launch.conditions", "UnlessCondition"),
                     ("launch.substitutions", "LaunchConfiguration"), ("launch.substitutions", "PythonExpression"),
                     ("launch.substitutions", "PathJoinSubstitution"), ("launch_ros.actions", "Node")]:
        kinds[cls] = type(cls, (_Rec,), {})
        setattr(mods[mod], cls, kinds[cls])
    mods["ament_index_python.packages"].get_package_share_directory = lambda pkg: str(share)
    return mods


def _load(path: Path, monkeypatch, tmp_path):
    share = tmp_path / "share"
    (share / "config").mkdir(parents=True, exist_ok=True)
    for c in CONFIGS:
        (share / "config" / c.name).write_text(c.read_text())
    for name, mod in _stub_modules(share).items():
        monkeypatch.setitem(sys.modules, name, mod)
    _Rec.made = []
    spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ld = module.generate_launch_description()
    return ld, list(_Rec.made), share


def test_there_are_launch_files():
    names = {p.name for p in LAUNCH}
    assert {"ur5_execution.launch.py", "sim.launch.py", "act2answer_sim2real.launch.py", "hil_regression.launch.py"} <= names


@pytest.mark.parametrize("path", LAUNCH, ids=lambda p: p.name)
def test_launch_file_names_real_executables_and_parameters(path, monkeypatch, tmp_path):
    ld, made, share = _load(path, monkeypatch, tmp_path)
    assert type(ld).__name__ == "LaunchDescription"
    exes = _executables()
    args = {m.args[0]: m.kw for m in made if type(m).__name__ == "DeclareLaunchArgument"}
    assert all(kw.get("description") for kw in args.values()), "every launch argument needs a description"
    nodes = [m for m in made if type(m).__name__ == "Node"]
    assert len(nodes) >= 6
    for n in nodes:
        assert n.kw["package"] == "embeval_ros"
        assert n.kw["executable"] in exes, f"{path.name}: unknown executable {n.kw['executable']}"
        name = n.kw["name"]
        assert node_modules()[name] == exes[n.kw["executable"]], f"{path.name}: {name} runs the wrong executable"
        declared = _declared(node_modules()[name])
        for p in n.kw.get("parameters", []):
            if isinstance(p, dict):
                unknown = set(p) - declared
                assert not unknown, f"{path.name}: node {name} has no parameter(s) {sorted(unknown)}"
    # every LaunchConfiguration used refers to a declared argument
    used = {m.args[0] for m in made if type(m).__name__ == "LaunchConfiguration"}
    assert used <= set(args), f"{path.name}: undeclared launch arguments {sorted(used - set(args))}"
    # the default parameter file exists in the installed share folder
    default = args["params_file"]["default_value"]
    assert Path(default).is_file() and Path(default).parent == share / "config"


def test_ur5_launch_has_the_documented_arguments(monkeypatch, tmp_path):
    _, made, _ = _load(ROOT / "launch" / "ur5_execution.launch.py", monkeypatch, tmp_path)
    args = {m.args[0] for m in made if type(m).__name__ == "DeclareLaunchArgument"}
    assert {"ur_type", "robot_ip", "use_mock_hardware", "backend", "record", "bag_dir"} <= args


@pytest.mark.parametrize("path", [c for c in CONFIGS], ids=lambda p: p.name)
def test_parameter_files_name_declared_parameters(path):
    from embeval_ros.graph import load_params

    params = load_params(path)
    assert params, f"{path.name} configures no node"
    for node, values in params.items():
        unknown = set(values) - _declared(node_modules()[node])
        assert not unknown, f"{path.name}: {node} has no parameter(s) {sorted(unknown)}"


def test_setup_py_entry_points_are_the_node_records(tmp_path):
    """setup.py's console scripts (what colcon installs), read back from the egg-info it writes, are one per
    node record: the executables the launch files name."""
    import subprocess
    import sys

    from embeval_ros.nodes import console_scripts, nodes

    subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)], cwd=PKG_DIR, check=True,
                   capture_output=True, timeout=120)
    lines = (tmp_path / "embeval_ros.egg-info" / "entry_points.txt").read_text().splitlines()
    assert sorted(x for x in lines if " = " in x) == sorted(console_scripts(nodes()))
    assert "camera_node = embeval_ros.camera_node:main" in lines and len(console_scripts(nodes())) == 8


def test_every_executable_module_has_main():
    for exe, mod in _executables().items():
        src = (PKG_DIR / "embeval_ros" / f"{mod}.py").read_text()
        assert re.search(r"^def main\(", src, re.MULTILINE), f"{mod}.py lacks main() for executable {exe}"


def test_package_xml_is_format_3_ament_python():
    import xml.etree.ElementTree as ET

    root = ET.parse(PKG_DIR / "package.xml").getroot()
    assert root.get("format") == "3" and root.findtext("name") == "embeval_ros"
    assert root.find("export/build_type").text == "ament_python"
    deps = {e.text for e in root.findall("exec_depend")}
    assert {"rclpy", "sensor_msgs", "std_msgs", "geometry_msgs", "diagnostic_msgs", "std_srvs"} <= deps
    assert (PKG_DIR / "resource" / "embeval_ros").exists() and (PKG_DIR / "setup.cfg").exists()


def test_colcon_workspace_links_the_packages():
    src = ROOT / "ros2_ws" / "src"
    link = src / "embeval_ros"
    assert link.is_symlink() and (link / "package.xml").exists()
    assert (ROOT / "docker" / "Dockerfile").exists()
    text = (ROOT / "docker" / "Dockerfile").read_text()
    assert "ros:kilted" in text and "colcon build" in text


@pytest.mark.skipif(__import__("shutil").which("colcon") is None, reason="colcon is not installed (pip install colcon-common-extensions)")
def test_colcon_build_installs_nodes_launch_and_config(tmp_path):
    import subprocess

    subprocess.run(["colcon", "--log-base", str(tmp_path / "log"), "build", "--build-base", str(tmp_path / "build"),
                    "--install-base", str(tmp_path / "install")], cwd=ROOT / "ros2_ws", check=True, capture_output=True, timeout=600)
    share = tmp_path / "install" / "embeval_ros" / "share" / "embeval_ros"
    assert {p.name for p in (share / "launch").iterdir()} == {p.name for p in LAUNCH}
    assert (share / "config" / "embeval_sim.yaml").exists() and (share / "package.xml").exists()
    for exe in _executables():
        assert (tmp_path / "install" / "embeval_ros" / "lib" / "embeval_ros" / exe).exists()


# --------------------------------------------------------------------------- resolving a launch file like ros2 launch
def _subst(value, args: dict, given: dict) -> str:
    """A launch substitution (or a list of them, concatenated, as launch does) as the string it evaluates to."""
    kind = type(value).__name__
    if isinstance(value, (list, tuple)):
        return "".join(_subst(v, args, given) for v in value)
    if kind == "LaunchConfiguration":
        name = value.args[0]
        return given[name] if name in given else _subst(args[name]["default_value"], args, given)
    if kind == "PythonExpression":
        return str(eval(_subst(value.args[0], args, given)))  # the launch file's own expression
    return str(value)


def _param_value(value, args: dict, given: dict):
    """launch_ros's evaluation of a node parameter: a substitution, or a list holding one, becomes one string that
    is read as YAML ('' stays ''); plain values and lists of plain values are kept."""
    import yaml

    subst = ("LaunchConfiguration", "PythonExpression")
    if type(value).__name__ in subst or (isinstance(value, list) and any(type(v).__name__ in subst for v in value)):
        text = _subst(value, args, given)
        return yaml.safe_load(text) if text else ""
    return value


def resolve_launch(path: Path, given: dict, monkeypatch, tmp_path) -> dict[str, dict]:
    """Node name -> {"executable", "params_file", "overrides"} for ``ros2 launch ... k:=v`` (``given``), conditions applied."""
    _, made, _ = _load(path, monkeypatch, tmp_path)
    args = {m.args[0]: m.kw for m in made if type(m).__name__ == "DeclareLaunchArgument"}
    assert set(given) <= set(args), f"unknown launch arguments {sorted(set(given) - set(args))}"
    nodes = {}
    for n in (m for m in made if type(m).__name__ == "Node"):
        cond = n.kw.get("condition")
        if cond is not None:
            on = _subst(cond.args[0], args, given).lower() in ("true", "1")
            if on != (type(cond).__name__ == "IfCondition"):
                continue
        files = [_subst(p, args, given) for p in n.kw["parameters"] if not isinstance(p, dict)]
        overrides = {k: _param_value(v, args, given) for p in n.kw["parameters"] if isinstance(p, dict) for k, v in p.items()}
        nodes[n.kw["name"]] = {"executable": n.kw["executable"], "params_file": files[0] if files else "", "overrides": overrides}
    return nodes


A2A_LAUNCH = ROOT / "launch" / "act2answer_sim2real.launch.py"


@pytest.mark.parametrize("backend", ["sim", "ur_rtde"])
def test_act2answer_launch_defaults_are_the_sim_to_real_parameters(backend, monkeypatch, tmp_path):
    """``ros2 launch embeval_ros act2answer_sim2real.launch.py backend:=...`` with no params_file: the installed
    config/embeval_act2answer.yaml plus the launch's own overrides give every node a coherent Act2Answer setup."""
    import yaml
    from embeval_ros.runtime import str_list

    nodes = resolve_launch(A2A_LAUNCH, {"backend": backend}, monkeypatch, tmp_path)
    assert set(nodes) == set(node_modules())
    default = tmp_path / "share" / "config" / "embeval_act2answer.yaml"
    doc = yaml.safe_load(default.read_text())
    p = {}
    for name, n in nodes.items():
        assert n["params_file"] == str(default), name
        p[name] = {**doc[name]["ros__parameters"], **n["overrides"]}
        unknown = set(p[name]) - _declared(node_modules()[name])
        assert not unknown, f"{name}: {sorted(unknown)}"
    real = backend == "ur_rtde"
    cam, pol, cond = p["embeval_camera"], p["embeval_policy"], p["embeval_conductor"]
    assert (cam["source"], cam["width"], cam["height"]) == (("realsense", 640, 480) if real else ("sim", 64, 48))
    assert str_list(pol["camera_topics"]) == ([] if real else ["wrist=/embeval/camera/wrist/image_raw"])
    assert pol["dry_run"] is real and cond["operator_confirm"] is real and p["embeval_arm"]["backend"] == backend
    assert cond["act2answer_scenes"] == "runs/act2answer/scenes" and "items" not in cond
    assert cond["wait_for_nodes"] == ["embeval_arm", "embeval_policy", "embeval_scorer"]
    assert pol["subject"] == "embedded" and pol["sync_to_arm"] is True and pol["max_steps"] == 80
    assert p["embeval_scorer"]["episodes_jsonl"] == "runs/act2answer/episodes_ros.jsonl"


@pytest.mark.ros
@pytest.mark.slow  # ~40 s: four node processes, one Act2Answer unit
def test_act2answer_launch_runs_with_no_params_file(monkeypatch, tmp_path):
    """What ``ros2 launch embeval_ros act2answer_sim2real.launch.py backend:=sim`` starts, one process per node with
    the resolved parameters, in a folder where ``embeval act2answer scenes --out runs/act2answer/scenes`` ran: every
    unit is filed in runs/act2answer/episodes_ros.jsonl and the recorder writes a bag."""
    pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")
    import json
    import os
    import sys

    import yaml
    from conftest import bag_so_far
    from embeval_ros.processes import NodeProcesses

    from embeval.act2answer.episode import read_results
    from embeval.act2answer.generator import generate_items
    from embeval_cli import main as cli

    cell = tmp_path / "cell"
    items = generate_items(tmp_path / "suite", ["color"], per_category=1, seed=0)
    assert cli(["act2answer", "scenes", "--items", str(tmp_path / "suite" / "items.jsonl"),
                "--out", str(cell / "runs" / "act2answer" / "scenes")]) == 0
    nodes = resolve_launch(A2A_LAUNCH, {"backend": "sim"}, monkeypatch, tmp_path)
    env = dict(os.environ, EMBEVAL_DDS_LOCALHOST="1")  # ROS_DOMAIN_ID: this test's own (conftest allocator)
    jsonl = cell / "runs" / "act2answer" / "episodes_ros.jsonl"
    with NodeProcesses(tmp_path) as procs:
        for name, n in nodes.items():
            over = tmp_path / f"{name}.yaml"
            over.write_text(yaml.safe_dump({name: {"ros__parameters": n["overrides"]}}))
            procs.start(name, [sys.executable, "-m", f"embeval_ros.{_executables()[n['executable']]}", "--ros-args",
                               "-r", f"__node:={name}", "--params-file", n["params_file"], "--params-file", str(over)],
                        cwd=cell, env=env)
        assert procs.wait_until(lambda: jsonl.exists() and len(jsonl.read_text().splitlines()) >= 2, timeout_s=180), \
            f"no two Act2Answer episodes in {jsonl} within 180 s; see {tmp_path}/<node>.log"

        def ends_recorded():  # both episode_end events in the recorder's closed segments
            bags = list((cell / "runs" / "bags").glob("*"))
            msgs = bag_so_far(bags[0], ["/embeval/events"]) if len(bags) == 1 else []
            return sum(json.loads(m.msg.data)["event"] == "episode_end" for m in msgs) == 2

        assert procs.wait_until(ends_recorded, timeout_s=30, poll_s=0.2), "the recorder's bag never held both episode_end events"
    recs = read_results(jsonl)
    assert [(r["item"], r["layout"]) for r in recs] == [(items[0].id, "original"), (items[0].id, "swapped")]
    for r in recs:
        assert r["subject"] == "tiny-vla" and r["cube_source"] == "sim" and 1 <= r["steps"] <= 80
        assert r["zone"] in ("correct", "incorrect", "out_of_bounds") and len(r["actions"]) == r["steps"]
    from embeval.recording import read_bag

    (bag,) = (cell / "runs" / "bags").iterdir()
    events = [json.loads(m.msg.data)["event"] for m in read_bag(bag, ["/embeval/events"])]
    assert events.count("episode_end") == 2
