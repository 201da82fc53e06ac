"""Scene specs as plain data, task definitions and success predicates (no simulator)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from embeval.errors import ConfigError, MissingFileError
from embeval.sim.scene import VERBS, CameraSpec, ObjectSpec, SceneSpec
from embeval.sim.tasks import (
    DIFFICULTY,
    PREDICATES,
    ObjectState,
    TaskSpec,
    WorldState,
    get_task,
    make_reference_scene,
    make_task,
    register_task,
)


def test_scene_round_trips_through_yaml_and_dict(tmp_path):
    scene, task = make_task("Place", seed=4)
    card = ObjectSpec("card_a", "card", position=(0.5, 0.2), texture="img.png")
    scene = scene.with_objects(card)
    path = tmp_path / "s.yaml"
    scene.to_yaml(path)
    again = SceneSpec.from_yaml(path)
    assert again == scene
    assert SceneSpec.from_dict(scene.to_dict()) == scene
    assert again.object("card_a").texture == "img.png"
    assert TaskSpec.from_dict(task.to_dict()) == task


def test_the_file_sim_scene_writes_loads_as_a_scene(tmp_path):
    """`embeval sim scene --out F` writes {scene, task}; `embeval sim render --scene F` must read it back."""
    from embeval_cli import main

    out = tmp_path / "sub" / "push1.yaml"  # the parent folder does not exist yet
    assert main(["sim", "scene", "--task", "Push", "--seed", "1", "--out", str(out)]) == 0
    scene, _ = make_task("Push", seed=1)
    assert SceneSpec.from_yaml(out) == scene
    assert SceneSpec.from_yaml(out.read_text()) == scene  # YAML text works as well as a path


def test_spec_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="unique"):
        SceneSpec(objects=[ObjectSpec("a", "box"), ObjectSpec("a", "box")])
    with pytest.raises(ConfigError, match="unknown field"):
        SceneSpec.from_dict({"objects": [{"name": "a", "kind": "box", "colour": "red"}]})
    with pytest.raises(ConfigError, match="no object"):
        SceneSpec().object("missing")
    with pytest.raises(MissingFileError, match="embeval sim scene"):
        SceneSpec.from_yaml(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="verb"):
        TaskSpec("Juggle", "juggle", 1, "cube")
    with pytest.raises(ConfigError, match="1..5"):
        TaskSpec("Pick", "pick", 6, "cube")


def test_camera_scaling_keeps_field_of_view():
    cam = CameraSpec("c")
    small = cam.scaled(160, 120)
    assert small.fx == pytest.approx(cam.fx / 4) and small.fy == pytest.approx(cam.fy / 4)
    assert 2 * np.degrees(np.arctan(cam.width / 2 / cam.fx)) == pytest.approx(2 * np.degrees(np.arctan(80 / small.fx)))


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_instruction_difficulty_and_scene(verb):
    scene, task = make_task(verb, seed=11)
    assert task.verb == verb and task.instruction and 1 <= task.difficulty <= 5
    assert task.difficulty == DIFFICULTY[verb]
    names = {o.name for o in scene.objects}
    assert task.target in names
    if task.reference:
        assert task.reference in names
    assert task.implemented  # all ten verbs have a success predicate
    # deterministic from the seed
    assert make_task(verb, seed=11) == (scene, task)
    assert make_task(verb, seed=12)[0] != scene


def test_verb_without_predicate_reports_not_implemented():
    scene, task = make_task("Pour", seed=0)
    pour = get_task("Pour")
    register_task(replace(pour, success=None))  # the same place in the registry, no predicate
    try:
        assert not task.implemented and "Pour" not in PREDICATES and "Pour" in VERBS
        with pytest.raises(ConfigError, match="no success predicate"):
            task.success(WorldState({}, np.zeros(6), 1.0), scene)
    finally:
        register_task(pour)
    assert task.implemented and list(PREDICATES)[-1] == "Pour"


@pytest.mark.parametrize("seed", range(8))
def test_reference_scene_has_five_tasks_of_rising_difficulty(seed):
    scene, tasks = make_reference_scene(seed)
    assert [t.difficulty for t in tasks] == [1, 2, 3, 4, 5]
    assert all(t.verb in VERBS for t in tasks)
    names = [o.name for o in scene.objects]
    assert len(names) == len(set(names))
    for t in tasks:
        assert t.target in names
    # objects do not overlap on the table (footprint centres apart)
    xy = np.array([o.xy for o in scene.objects if o.kind != "marker"])
    d = np.linalg.norm(xy[:, None] - xy[None], axis=-1) + np.eye(len(xy))
    assert d.min() > 0.03


def _obj(pos, bottom, joint=None, jmin=None):
    return ObjectState(np.asarray(pos, float), np.array([0, 0, 0, 1.0]), bottom, joint, jmin, jmin)


def test_predicates_on_hand_built_world_states():
    ws = lambda objs, grasped=None, ever=(): WorldState(objs, np.zeros(6), 1.0, grasped, frozenset(ever))
    pick = TaskSpec("Pick", "pick", 1, "cube", threshold=0.05)
    assert pick.success(ws({"cube": _obj((0.5, 0, 0.1), 0.08)}))
    assert not pick.success(ws({"cube": _obj((0.5, 0, 0.02), 0.0)}))

    scene = SceneSpec(objects=[ObjectSpec("cube", "box"), ObjectSpec("bowl", "bowl", size=(0.07, 0.045, 0.008))])
    place = TaskSpec("Place", "place", 2, "cube", reference="bowl", tolerance=0.03)
    inside = {"cube": _obj((0.52, 0.01, 0.03), 0.01), "bowl": _obj((0.5, 0, 0.02), 0.0)}
    assert place.success(ws(inside), scene)
    assert not place.success(ws(inside, grasped="cube"), scene)  # still held
    assert not place.success(ws({**inside, "cube": _obj((0.58, 0.0, 0.02), 0.0)}), scene)  # outside the rim

    move = TaskSpec("Move", "move", 3, "cube", goal=(0.4, 0.1), tolerance=0.04)
    assert move.success(ws({"cube": _obj((0.43, 0.12, 0.02), 0.0)}))
    assert not move.success(ws({"cube": _obj((0.45, 0.13, 0.02), 0.0)}))  # 5.8 cm away

    push = TaskSpec("Push", "push", 2, "cube", goal=(0.4, 0.1), tolerance=0.04)
    assert push.success(ws({"cube": _obj((0.41, 0.1, 0.02), 0.0)}))
    assert not push.success(ws({"cube": _obj((0.41, 0.1, 0.02), 0.0)}, ever={"cube"}))  # carried, not pushed

    press = TaskSpec("Press", "press", 1, "button", threshold=0.007)
    assert press.success(ws({"button": _obj((0.5, 0, 0.01), 0.0, joint=0.0, jmin=-0.009)}))  # pressed earlier
    assert not press.success(ws({"button": _obj((0.5, 0, 0.01), 0.0, joint=0.0, jmin=-0.004)}))

    pull = TaskSpec("Pull", "pull", 3, "drawer", threshold=0.08)
    assert pull.success(ws({"drawer": _obj((0.5, 0, 0.03), 0.0, joint=-0.09)}))
    assert not pull.success(ws({"drawer": _obj((0.5, 0, 0.03), 0.0, joint=-0.05)}))
    twist = TaskSpec("Twist", "twist", 4, "knob", threshold=1.2)
    assert twist.success(ws({"knob": _obj((0.5, 0, 0.03), 0.0, joint=-1.3)}))
    assert not twist.success(ws({"knob": _obj((0.5, 0, 0.03), 0.0, joint=0.9)}))

    insert = TaskSpec("Insert", "insert", 5, "peg", reference="hole", tolerance=0.008)
    inside = {"peg": _obj((0.503, 0.004, 0.04), 0.0), "hole": _obj((0.5, 0.0, 0.02), 0.0)}
    assert insert.success(ws(inside))
    assert not insert.success(ws(inside, grasped="peg"))
    assert not insert.success(ws({**inside, "peg": _obj((0.51, 0.0, 0.08), 0.04)}))  # resting on the block's rim
    cover = TaskSpec("Cover", "cover", 4, "plate", reference="bowl", tolerance=0.015)
    on_rim = {"plate": _obj((0.505, 0.0, 0.045), 0.04), "bowl": _obj((0.5, 0.0, 0.02), 0.0)}
    assert cover.success(ws(on_rim))
    assert not cover.success(ws({**on_rim, "plate": _obj((0.56, 0.0, 0.005), 0.0)}))  # beside the bowl

    from scipy.spatial.transform import Rotation

    pour = TaskSpec("Pour", "pour", 5, "cup", reference="bowl", threshold=np.radians(80))
    tipped = Rotation.from_euler("x", -np.radians(95)).as_quat()  # cup axis -> +y
    cup = ObjectState(np.array([0.5, -0.06, 0.2]), tipped, 0.16)
    assert pour.success(ws({"cup": cup, "bowl": _obj((0.5, 0.0, 0.02), 0.0)}))
    upright = ObjectState(np.array([0.5, -0.06, 0.2]), np.array([0, 0, 0, 1.0]), 0.16)
    assert not pour.success(ws({"cup": upright, "bowl": _obj((0.5, 0.0, 0.02), 0.0)}))
    away = ObjectState(np.array([0.5, -0.06, 0.2]), Rotation.from_euler("x", np.radians(95)).as_quat(), 0.16)
    assert not pour.success(ws({"cup": away, "bowl": _obj((0.5, 0.0, 0.02), 0.0)}))  # mouth away from the bowl
    assert set(PREDICATES) == set(VERBS)


def test_procedural_textures_are_seeded_and_resolve_to_files():
    from pathlib import Path

    from embeval.sim import textures

    for kind in textures.TEXTURES:
        a, b = textures.procedural(kind, 3), textures.procedural(kind, 3)
        assert a.dtype == np.uint8 and a.shape == (256, 256, 3) and np.array_equal(a, b)
        assert not np.array_equal(a, textures.procedural(kind, 4))
        assert a.std() > 3  # has structure, not a flat colour
    path = textures.resolve(textures.name("checker", 7))
    assert Path(path).is_file() and path == textures.resolve("procedural:checker:7")
    assert textures.resolve("my.png") == "my.png"
    with pytest.raises(ConfigError):
        textures.resolve("procedural:marble:1")
    # textured backgrounds are sampled and recorded as categories
    styles = [make_task("Pick", s)[0] for s in range(40)]
    textured = [s for s in styles if s.table_texture]
    assert textured and all(s.table_texture.startswith("procedural:") for s in textured)
    assert len({s.background for s in styles}) >= 6
