"""docs/contributing.md's examples, run as written: a throwaway tabletop task, simulator backend, distortion type, IQA
metric and ROS node, each added through the public registration path (one file or folder), seen everywhere it should
appear (registry views, CLI listings, closed-loop scored episodes, the scripted expert solving the task, reference
scenes, the VQA vocabulary, `embeval distort list`, a contact-sheet grid), then removed again with nothing left
behind."""
from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from embeval_cli import main
from embeval.errors import ConfigError

DOC = Path(__file__).resolve().parents[2] / "docs" / "contributing.md"


def _example(marker: str) -> str:
    """The first ```python block after ``<!-- example: marker -->`` in docs/contributing.md."""
    text = DOC.read_text()
    m = re.search(rf"<!-- example: {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert m, f"docs/contributing.md has no '{marker}' example"
    return m.group(1)


@pytest.fixture()
def hoist(tmp_path, monkeypatch):
    """The doc's task file dropped into the task folder (an extra folder on the package's path), found by the
    package's discovery and registered; removed afterwards."""
    import embeval.sim.tasks as pkg

    (tmp_path / "hoist.py").write_text(_example("task"))
    monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(tmp_path)])
    before = pkg.TASKS.names()
    try:
        found = pkg._builtin_tasks()  # what importing the package does with each file of the folder
        verbs = [t.verb for t in found]
        assert verbs.index("Hoist") == verbs.index("Press") + 1  # easiest first: difficulty 2, then by verb
        task = found[verbs.index("Hoist")]
        pkg.register_task(task)
        yield task
    finally:
        if "Hoist" in pkg.TASKS:
            pkg.unregister_task("Hoist")
        sys.modules.pop("embeval.sim.tasks.hoist", None)
    assert pkg.TASKS.names() == before


def test_a_task_file_appears_everywhere(hoist, capsys):
    from embeval.sim import VERBS
    from embeval.sim.expert import PLANNERS
    from embeval.sim.tasks import (
        DIFFICULTY,
        LEVEL_VERBS,
        MAKERS,
        PREDICATES,
        make_reference_scene,
        make_task,
        markdown_table,
    )
    from embeval.subjects.embedded import vqa
    from embeval.subjects.scripted import ScriptedVLM

    assert "Hoist" in VERBS and len(VERBS) == 11 and list(VERBS) == sorted(VERBS)
    assert DIFFICULTY["Hoist"] == 2 and LEVEL_VERBS[2] == ("Hoist", "Place", "Push")
    assert PREDICATES["Hoist"] is hoist.success and MAKERS["Hoist"] is hoist.make and PLANNERS["Hoist"] is hoist.plan
    scene, task = make_task("Hoist", seed=3)
    assert task.verb == "Hoist" and task.difficulty == 2 and task.implemented and scene.name == "hoist-3"
    assert make_task("Hoist", seed=3) == (scene, task)  # seeded
    slots = vqa.task_slots(scene, task)
    assert slots["motion"] == "grasp and hoist" and slots["goal"] == "hold it high"
    vocab = vqa.slot_vocabulary(["cube"])
    assert "grasp and hoist" in vocab["motion"] and "hold it high" in vocab["goal"]
    assert "| Hoist | 2 | cube lifted >= 10 cm | yes |" in markdown_table().splitlines()
    assert ScriptedVLM().generate([np.zeros((8, 8, 3), np.uint8)], "hoist the cube").startswith("hoist the object")
    # reference scenes draw it at level 2 on some seed
    assert any(make_reference_scene(s)[1][1].verb == "Hoist" for s in range(12))

    assert main(["sim", "tasks"]) == 0
    rows = [line.split()[:4] for line in capsys.readouterr().out.splitlines()]
    assert ["Hoist", "2", "yes", "yes"] in rows
    assert main(["sim", "scene", "--task", "hoist", "--seed", "3"]) == 0
    assert "hoist the" in capsys.readouterr().out
    # the scripted expert solves it, through the CLI
    assert main(["sim", "expert", "--task", "Hoist", "--episodes", "2"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Hoist"))
    assert line.split()[1] == "2/2", line

    import bench.bench_scoring as bs

    assert "hoist" in {ref.split()[0] for ref in bs.corpus(300)[1]}


def test_a_removed_task_is_gone_everywhere(hoist):
    from embeval.sim import VERBS
    from embeval.sim.expert import PLANNERS
    from embeval.sim.tasks import LEVEL_VERBS, make_task, unregister_task

    unregister_task("Hoist")
    assert "Hoist" not in VERBS and "Hoist" not in PLANNERS and LEVEL_VERBS[2] == ("Place", "Push")
    with pytest.raises(ConfigError, match=r"unknown tabletop task 'Hoist'.*choose from Cover, Insert"):
        make_task("Hoist", 0)
    assert main(["sim", "scene", "--task", "Hoist"]) == 2


def test_the_docs_task_table_is_generated_from_the_registry(capsys):
    """docs/sim.md's task table is what `embeval sim tasks --markdown` prints for the built-in tasks."""
    assert main(["sim", "tasks", "--markdown"]) == 0
    table = capsys.readouterr().out.strip()
    assert table.count("\n") == 11 and table in (DOC.parent / "sim.md").read_text()


def test_bad_task_records_are_refused_in_one_line():
    from embeval.sim.tasks import Task, register_task

    def make(rng, lay, d):
        return [], None

    with pytest.raises(ConfigError, match="difficulty must be an integer 1..5"):
        Task("Stack", difficulty=6, make=make, motion="stack")
    with pytest.raises(ConfigError, match="capitalised word"):
        Task("stack it", difficulty=1, make=make, motion="stack")
    with pytest.raises(ConfigError, match="give motion"):
        Task("Stack", difficulty=1, make=make)
    with pytest.raises(ConfigError, match="success must be a function"):
        Task("Stack", difficulty=1, make=make, success="yes", motion="stack")
    with pytest.raises(ConfigError, match="takes an embeval.sim.tasks.Task"):
        register_task({"verb": "Stack"})


@pytest.fixture()
def reach(tmp_path, monkeypatch):
    """The doc's backend folder (sim/reach/backend.py) on ``embeval.sim.__path__``, discovered and registered like
    the built-in folders; removed afterwards."""
    import embeval.sim as pkg
    from embeval.sim.backend import SIM_BACKENDS, discover

    folder = tmp_path / "reach"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "backend.py").write_text(_example("sim-backend"))
    monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(tmp_path)])
    before = SIM_BACKENDS.names()
    try:
        assert discover() == ["reach"]
        yield SIM_BACKENDS.get_record("reach")
    finally:
        if "reach" in SIM_BACKENDS:
            SIM_BACKENDS.remove("reach")
        for m in ("embeval.sim.reach.backend", "embeval.sim.reach"):
            sys.modules.pop(m, None)
    assert SIM_BACKENDS.names() == before


def test_a_sim_backend_folder_runs_episodes_everywhere(reach, tmp_path, capsys):
    from embeval.sim.backends import SimSpec, make_episode_env, run_episode, score_episode

    assert reach.name == "reach" and reach.supported_axes() == ()
    # the CLI: listed in the help, default task and policy, episodes with Decision / Execution under a distortion
    with pytest.raises(SystemExit):
        main(["sim", "episodes", "--help"])
    assert "reach" in capsys.readouterr().out
    out = tmp_path / "reach.json"
    assert main(["sim", "episodes", "--backend", "reach", "--episodes", "3", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    rows = rows["episodes"] if isinstance(rows, dict) else rows
    assert [r["success"] for r in rows] == [True, True, True] and all(r["steps"] <= 4 for r in rows)
    capsys.readouterr()
    assert main(["sim", "episodes", "--backend", "reach", "--episodes", "2", "--distortion", "white_noise",
                 "--level", "3", "--width", "32", "--height", "32"]) == 0
    assert "2/2 episodes succeeded" in capsys.readouterr().out
    # a run spec's sim mapping builds it; the episode loop and the scorers take it as any backend
    env = make_episode_env(SimSpec.from_dict({"backend": "reach", "env": "reach", "width": 32, "height": 32}))
    policy = env.default_policy()
    run = run_episode(env, policy, seed=4, keep_actions=True)
    assert run.outcome.success and len(run.actions) == run.outcome.n_actions
    sc, ref, dis = score_episode(env, policy, 4, ("white_noise", 3, 4))
    assert sc.execution.score == 100.0 and 0.0 <= sc.decision <= 1.0  # the policy reads the simulator, not the image
    assert not np.array_equal(dis.first_observation.images["top"], ref.first_observation.images["top"])
    # what it does not do is refused in one line, naming the backends that do
    assert main(["sim", "episodes", "--backend", "reach", "--perturb", "fov:2"]) == 2
    err = capsys.readouterr().err
    assert "no scene perturbations for backend 'reach' (libero, maniskill, pybullet)" in err
    assert main(["sim", "render", "--backend", "reach", "--out", str(tmp_path / "r.png")]) == 2
    assert "backend reach renders no stills; choose from libero, maniskill, pybullet" in capsys.readouterr().err


def test_bad_sim_backend_records_are_refused_in_one_line():
    from embeval.sim.backend import SIM_BACKENDS, SimBackend

    for rec, msg in [(SimBackend("Reach", "x", episodes=object, default_task="t"), "lower-case words"),
                     (SimBackend("reach", "x", episodes=object), "give default_task")]:
        with pytest.raises(ConfigError, match=msg) as e:
            SIM_BACKENDS.register_record(rec)
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="register_record takes an embeval.sim.backend.SimBackend"):
        SIM_BACKENDS.register_record("reach")
    assert "reach" not in SIM_BACKENDS


@pytest.fixture()
def vignette(tmp_path, monkeypatch):
    """The doc's distortion, registered by importing its module; removed afterwards."""
    from embeval.distortion import REGISTRY, unregister

    (tmp_path / "h9_vignette_example.py").write_text(_example("distortion"))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = REGISTRY.names()
    try:
        yield importlib.import_module("h9_vignette_example")
    finally:
        if "vignette" in REGISTRY:
            unregister("vignette")
        sys.modules.pop("h9_vignette_example", None)
    assert REGISTRY.names() == before


def test_a_distortion_function_appears_everywhere(vignette, tmp_path, capsys):
    from PIL import Image

    from embeval.distortion import DISTORTIONS, FrameDistorter, categories, distort, get, list_distortions
    from embeval.distortion.grid import contact_sheet
    from embeval.distortion.measures import psnr
    from embeval.distortion.samples import synthetic_tabletop

    assert len(DISTORTIONS) == 31 and DISTORTIONS["vignette"].fn is vignette.vignette
    assert list_distortions("luminance")[-1] == "vignette" and "vignette" in categories()["luminance"]
    assert list_distortions().index("vignette") == list_distortions().index("overexposure") + 1  # category order
    img = synthetic_tabletop(64, 48, seed=0)
    outs = [distort(img, "vignette", lv) for lv in range(1, 6)]
    assert all(o.shape == img.shape and o.dtype == np.uint8 for o in outs)
    db = [psnr(img, o) for o in outs]
    assert all(a > b for a, b in zip(db, db[1:])), db  # severity rises with the level
    assert outs[4][0, 0].sum() < img[0, 0].sum() and np.array_equal(outs[4][24, 32], img[24, 32])  # corners only
    assert get("vignette").param_for(2) == 0.2 and not get("vignette").kadid
    assert np.array_equal(FrameDistorter("vignette", 3)(img), outs[2])

    assert main(["distort", "list"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^vignette\s+luminance\s+0.1 0.2 0.35 0.5 0.7\s+Darker towards the corners", out, re.M)
    assert "31 types" in out
    assert main(["distort", "list", "--category", "luminance", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[-1]["name"] == "vignette"
    sheet = contact_sheet(img, names=["jpeg", "vignette"], thumb_width=32)
    assert sheet.ndim == 3 and sheet.shape[1] >= 6 * 32
    path = tmp_path / "grid.png"
    assert main(["distort", "grid", "--out", str(path), "--type", "vignette", "--width", "64", "--thumb", "32"]) == 0
    assert np.asarray(Image.open(path)).shape[1] >= 6 * 32


def test_distortion_registry_refuses_a_twin_and_bad_records(vignette):
    from embeval.distortion import DistortionType, distort, get, register, register_type

    with pytest.raises(ConfigError, match="'vignette' registered twice"):
        register("vignette", "luminance", (1, 2, 3, 4, 5))(lambda img, p, rng: img)
    with pytest.raises(ConfigError, match="unknown category 'optics'"):
        DistortionType("flare", "optics", (1, 2, 3, 4, 5), lambda img, p, rng: img)
    with pytest.raises(ConfigError, match="needs 5 level parameters"):
        register("flare", "other", (1, 2, 3))(lambda img, p, rng: img)
    with pytest.raises(ConfigError, match="lower-case identifiers"):
        DistortionType("Lens Flare", "other", (1, 2, 3, 4, 5), lambda img, p, rng: img)
    with pytest.raises(ConfigError, match="takes an embeval.distortion.DistortionType"):
        register_type("flare")
    with pytest.raises(ConfigError, match=r"unknown distortion 'vignete' \(did you mean 'vignette'\?\)"):
        get("vignete")
    with pytest.raises(ConfigError, match="unknown distortion"):
        distort(np.zeros((16, 16, 3), np.uint8), "flare", 1)


def test_gripper_conventions_and_object_kinds_are_registries():
    from embeval.registry import Registry
    from embeval.sim.objects import BUILDERS
    from embeval.conventions import GRIPPERS, gripper_to_embeval, register_gripper

    assert isinstance(GRIPPERS, Registry) and isinstance(BUILDERS, Registry)
    assert {"box", "bowl", "drawer", "knob", "peg", "hole"} <= set(BUILDERS.names())
    register_gripper("percent_open", lambda g: g / 100.0, lambda g: 100.0 * g, "[0, 100], 100 = open")
    try:
        assert gripper_to_embeval(25.0, "percent_open") == 0.25
    finally:
        GRIPPERS.unregister("percent_open")
    with pytest.raises(ConfigError, match=r"params.gripper'?: unknown gripper convention 'open2' \(did you mean 'open1'"):
        gripper_to_embeval(0.5, "open2")


# --------------------------------------------------------------------------- an IQA metric and a ROS node
def _doc_table(name: str) -> str:
    m = re.search(rf"<!-- table: {name} -->\n(.*?)\n<!-- end table: {name} -->", DOC.read_text(), re.S)
    assert m, f"docs/contributing.md has no '{name}' table"
    return m.group(1)


@pytest.fixture()
def colourfulness(tmp_path, monkeypatch):
    """The doc's metric file, registered by importing it; removed afterwards."""
    from embeval_analysis.iqa.metric_registry import METRICS, unregister_metric

    (tmp_path / "h28_colourfulness_example.py").write_text(_example("metric"))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = METRICS.names()
    try:
        yield importlib.import_module("h28_colourfulness_example")
    finally:
        if "colourfulness" in METRICS:
            unregister_metric("colourfulness")
        sys.modules.pop("h28_colourfulness_example", None)
    assert METRICS.names() == before


def test_the_docs_metric_table_is_generated_from_the_registry():
    from embeval_analysis.iqa.metric_registry import markdown_table

    assert _doc_table("metrics") == markdown_table()


def test_a_metric_file_appears_everywhere(colourfulness):
    from embeval_analysis.iqa.bench import BenchConfig
    from embeval_analysis.iqa.metric_registry import get_metric, markdown_table, metrics
    from embeval_analysis.iqa.metrics import ZERO_SHOT, zero_shot_scores

    from embeval.distortion import distort
    from embeval.distortion.samples import synthetic_tabletop

    rec = colourfulness.METRIC
    assert get_metric("colourfulness") is rec and metrics()[-1] is rec and ZERO_SHOT["colourfulness"] == ("NR", True)
    assert BenchConfig().zero_shot == ["psnr", "ssim", "gmsd", "piqe", "niqe", "brisque", "colourfulness"]
    assert markdown_table().splitlines()[-1] == ("| `colourfulness` | NR | zero-shot | higher | yes | nothing | "
                                                 "Hasler-Suesstrunk colourfulness |")
    ref = synthetic_tabletop(64, 48, seed=1)
    grey = np.repeat(ref.mean(axis=2, keepdims=True), 3, axis=2).astype(np.uint8)
    dark = distort(ref, "darken", 5)
    vals, missing, hib = zero_shot_scores([ref, grey, dark], [ref, ref, ref], ["colourfulness"])
    r, g, b = (ref[..., i].astype(float) for i in range(3))
    rg, yb = r - g, (r + g) / 2 - b
    expect = np.sqrt(rg.var() + yb.var()) + 0.3 * np.sqrt(rg.mean() ** 2 + yb.mean() ** 2)  # Hasler-Suesstrunk
    assert vals["colourfulness"][0] == pytest.approx(expect) and vals["colourfulness"][1] < 1.0
    assert vals["colourfulness"][2] < vals["colourfulness"][0] and hib == {"colourfulness": True} and not missing


def test_a_metric_runs_in_the_bench(colourfulness, tmp_path):
    """The benchmark runs the new metric by default (its mode and kind in every row) on a tiny database."""
    from conftest import folder_iqa_database
    from embeval_analysis.iqa.bench import BenchConfig, main_table, run_bench

    class _Tmp:
        def mktemp(self, name):
            (tmp_path / name).mkdir()
            return tmp_path / name

    subjects = [{"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.1}}]
    db = folder_iqa_database(_Tmp(), 4, 6, distortions=["darken", "white_noise"], levels=[2, 5], subjects=subjects, seed=0)
    cfg = BenchConfig(targets=["decision"], trained=[], n_splits=2, test_size=0.5, min_group=3, compare_splits=False)
    assert "colourfulness" in cfg.zero_shot
    cfg.zero_shot = ["psnr", "colourfulness"]
    t = main_table(run_bench(db[0], cfg, log=None))
    row = t[t["metric"] == "colourfulness"].iloc[0]
    assert (row["mode"], row["kind"], int(row["n_splits"])) == ("NR", "zero-shot", 2) and -1 <= row["srcc"] <= 1


HEARTBEAT = "embeval_heartbeat"


@pytest.fixture()
def heartbeat(tmp_path, monkeypatch):
    """The doc's node file dropped into the node folder (an extra folder on embeval_ros's path), found by the
    package's discovery and registered; removed afterwards."""
    from embeval_ros.node_spec import PACKAGE_DIR
    from embeval_ros.nodes import NODES, discover, register_node, unregister_node

    import embeval_ros

    (tmp_path / "heartbeat_node.py").write_text(_example("node"))
    monkeypatch.setattr(embeval_ros, "__path__", [*embeval_ros.__path__, str(tmp_path)])
    before = NODES.names()
    try:
        found = discover([PACKAGE_DIR, tmp_path])  # what the package (and setup.py) do with each file of the folder
        names = [n.name for n in found]
        assert names.index(HEARTBEAT) == names.index("embeval_recorder") + 1  # start 65: after the recorder (60)
        rec = found[names.index(HEARTBEAT)]
        register_node(rec)
        yield rec
    finally:
        if HEARTBEAT in NODES:
            unregister_node(HEARTBEAT)
        sys.modules.pop("embeval_ros.heartbeat_node", None)
    assert NODES.names() == before


def test_the_docs_node_table_is_generated_from_the_registry():
    from embeval_ros.nodes import markdown_table

    assert _doc_table("nodes") == markdown_table()


def test_a_node_file_appears_everywhere(heartbeat, monkeypatch, tmp_path):
    from embeval_ros.graph import NODE_CLASSES, load_params
    from embeval_ros.nodes import (
        Param,
        console_scripts,
        graph_nodes,
        markdown_table,
        nodes,
        parameters,
        topics,
    )
    from test_ros_launch import (
        LAUNCH,
        _declared,
        _executables,
        node_modules,
        resolve_launch,
    )

    assert (heartbeat.module, heartbeat.executable, heartbeat.cls) == ("embeval_ros.heartbeat_node", "heartbeat_node",
                                                                       "HeartbeatNode")
    assert [n.name for n in graph_nodes()][-2:] == [HEARTBEAT, "embeval_conductor"]
    assert list(NODE_CLASSES)[-2] == HEARTBEAT and len(NODE_CLASSES) == 8
    assert parameters(heartbeat) == {"rate_hz": Param(1.0, "publish rate (Hz)"),
                                     "topic": Param("/embeval/heartbeat", "topic of the uptime (std_msgs/Float64, s)")}
    assert topics(heartbeat) == {"publishes": ["topic"], "subscribes": []}
    assert "heartbeat_node = embeval_ros.heartbeat_node:main" in console_scripts(nodes())
    assert _executables()["heartbeat_node"] == "heartbeat_node" and node_modules()[HEARTBEAT] == "heartbeat_node"
    assert _declared("heartbeat_node") == {"rate_hz", "topic"}
    assert "| `embeval_heartbeat` | `heartbeat_node` | `topic` | - | 2 | publishes its uptime (s) |" in markdown_table()
    # every launch file starts it with its parameter file, as ros2 launch would
    for path in LAUNCH:
        started = resolve_launch(path, {}, monkeypatch, tmp_path)
        assert started[HEARTBEAT] == {"executable": "heartbeat_node", "params_file": started["embeval_arm"]["params_file"],
                                      "overrides": {}}, path.name
    assert load_params({HEARTBEAT: {"ros__parameters": {"rate_hz": 5.0}}}) == {HEARTBEAT: {"rate_hz": 5.0}}


@pytest.mark.ros
def test_a_node_file_runs_in_the_graph(heartbeat):
    """`embeval graph` builds the new node from its record, with the parameters given, and it publishes."""
    pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")
    from embeval_ros.graph import Graph
    from embeval_ros.runtime import qos_reliable
    from std_msgs.msg import Float64

    with Graph({HEARTBEAT: {"rate_hz": 50.0, "topic": "/h28/heartbeat"}}) as g:
        node = g.nodes[HEARTBEAT]
        got: list[float] = []
        node.create_subscription(Float64, "/h28/heartbeat", lambda m: got.append(m.data), qos_reliable())
        g.wait_for(lambda g: len(got) >= 3, 10.0, "three heartbeats")
    assert node.get_parameter("rate_hz").value == 50.0 and got == sorted(got) and got[0] >= 0.0


def test_a_removed_node_is_gone_everywhere(heartbeat, monkeypatch, tmp_path):
    from embeval_ros.graph import NODE_CLASSES, load_params
    from embeval_ros.nodes import console_scripts, nodes, unregister_node
    from test_ros_launch import resolve_launch

    unregister_node(HEARTBEAT)
    assert HEARTBEAT not in NODE_CLASSES and not any("heartbeat" in s for s in console_scripts(nodes()))
    assert HEARTBEAT not in resolve_launch(ROOT_LAUNCH / "sim.launch.py", {}, monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match="unknown node 'embeval_heartbeat'"):
        load_params({HEARTBEAT: {"ros__parameters": {}}})
    with pytest.raises(ConfigError, match=r"unknown ROS node 'embeval_heartbeat'.*choose from embeval_arm"):
        unregister_node(HEARTBEAT)


ROOT_LAUNCH = DOC.parents[1] / "launch"


def test_bad_node_records_and_launch_overrides_are_refused_in_one_line(tmp_path, monkeypatch):
    from embeval_ros.node_spec import RosNode, read_node_file
    from embeval_ros.nodes import launch_nodes, register_node
    from test_ros_launch import _stub_modules

    with pytest.raises(ConfigError, match="lower-case words"):
        RosNode("Embeval Camera", "CameraNode")
    with pytest.raises(ConfigError, match="start must be a whole number"):
        RosNode("embeval_x", "X", start="first")
    with pytest.raises(ConfigError, match="takes an embeval_ros.node_spec.RosNode"):
        register_node({"name": "embeval_x"})
    with pytest.raises(ConfigError, match="give module"):
        register_node(RosNode("embeval_x", "X"))
    (tmp_path / "x_node.py").write_text("NAME = 'embeval_x'\nNODE = RosNode(NAME, 'X')\n")
    with pytest.raises(ConfigError, match="x_node.py: RosNode\\(...\\) arguments must be literals"):
        read_node_file(tmp_path / "x_node.py")
    for name, mod in _stub_modules(tmp_path).items():
        monkeypatch.setitem(sys.modules, name, mod)
    with pytest.raises(ConfigError, match=r"launch overrides: unknown node\(s\) \['embeval_cam'\]; graph nodes: embeval_camera"):
        launch_nodes("params.yaml", overrides={"embeval_cam": {"source": "sim"}})


def test_the_node_list_imports_no_ros_and_arm_backends_live_in_robot():
    """embeval_ros.nodes (data) imports neither rclpy nor launch; the arm-backend registry is embeval.robot's, with
    the sim layer's backend added by embeval.sim."""
    import subprocess

    code = ("import sys, embeval_ros.nodes as n, embeval.robot.backends as b; "
            "assert not [m for m in sys.modules if m.split('.')[0] in ('rclpy', 'launch', 'launch_ros')]; "
            "print(len(n.graph_nodes()), b.ARM_BACKENDS.names()); import embeval.sim; print(b.ARM_BACKENDS.names())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.split("\n")[:2] == ["7 ['mock', 'ur_rtde']", "['mock', 'ur_rtde', 'sim', 'libero']"]
