"""docs/contributing.md's examples, run as written: a throwaway tabletop task and a throwaway distortion type,
each added through the public registration path (one file), seen everywhere it should appear (registry views,
CLI listings, the scripted expert solving the task, reference scenes, the VQA vocabulary, `embeval distort list`,
a contact-sheet grid), then removed again with nothing left behind."""
from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from embeval.cli import main
from embeval.errors import ConfigError

DOC = Path(__file__).resolve().parents[1] / "docs" / "contributing.md"


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
    from embeval.subjects.conventions import GRIPPERS, gripper_to_embeval, register_gripper

    assert isinstance(GRIPPERS, Registry) and isinstance(BUILDERS, Registry)
    assert {"box", "bowl", "drawer", "knob", "peg", "hole"} <= set(BUILDERS.names())
    register_gripper("percent_open", lambda g: g / 100.0, lambda g: 100.0 * g, "[0, 100], 100 = open")
    try:
        assert gripper_to_embeval(25.0, "percent_open") == 0.25
    finally:
        GRIPPERS.unregister("percent_open")
    with pytest.raises(ConfigError, match=r"params.gripper'?: unknown gripper convention 'open2' \(did you mean 'open1'"):
        gripper_to_embeval(0.5, "open2")
