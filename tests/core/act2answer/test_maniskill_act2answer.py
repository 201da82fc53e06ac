"""Act2Answer as a ManiSkill scene: the card images appear with the cell's orientation, and the
privileged placer answers correctly in both layouts (the swap moves the correct card), judged by the
same zone classifier and termination rule as the UR5 cell."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("mani_skill")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from embeval.act2answer.items import BinaryItem
    from embeval.act2answer.maniskill import make_env

    d = tmp_path_factory.mktemp("cards")
    left = np.zeros((64, 64, 3), np.uint8)
    left[:32] = (0, 0, 255)  # top half blue
    left[32:] = (255, 0, 255)  # bottom half magenta
    Image.fromarray(left).save(d / "L.png")
    Image.fromarray(np.full((64, 64, 3), (0, 255, 255), np.uint8)).save(d / "R.png")  # cyan
    item = BinaryItem("t1", "Which picture is red and blue?", str(d / "L.png"), str(d / "R.png"), "left", "color")
    env = make_env(96, 96)
    yield env, item
    env.close()


def test_card_texture_orientation(setup):
    from embeval.act2answer.scene import EpisodeSpec

    env, item = setup
    # cards far from the arm, seen from straight above with +x up in the image
    spec = EpisodeSpec(left_card_xy=(0.8, 0.2), right_card_xy=(0.8, -0.2), card_size=0.15)
    env.unwrapped.configure(spec, {"card_left": item.left_image, "card_right": item.right_image}, "left")
    env.env.reset(seed=0, options={"reconfigure": True})
    img = env.reset(seed=0).images["base_camera"].astype(int)
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    blue = (b > 120) & (r < 0.5 * b) & (g < 0.5 * b)
    magenta = (r > 120) & (b > 120) & (g < 0.5 * r)
    cyan = (g > 120) & (b > 120) & (r < 0.5 * g)
    assert blue.sum() > 10 and magenta.sum() > 10 and cyan.sum() > 10, (blue.sum(), magenta.sum(), cyan.sum())
    # base_camera looks back at the robot from +x (image up = -x, image right = +y): the image's top half
    # (+x on the card) lies nearer the camera, lower in the picture; the left card (+y) on the right
    assert np.mean(np.nonzero(blue)[0]) > np.mean(np.nonzero(magenta)[0])
    assert np.mean(np.nonzero(blue)[1]) > np.mean(np.nonzero(cyan)[1])


def test_webp_and_16bit_cards_are_drawn_not_a_traceback(setup, tmp_path):
    """SAPIEN cannot load WebP (RuntimeError: failed to load image) or draws 16-bit PNGs wrongly: the cards go
    through embeval.sim.textures.loadable (card_textures), the pixels the VLM path reads."""
    from embeval.act2answer.items import BinaryItem, card_textures
    from embeval.act2answer.scene import EpisodeSpec

    env, item = setup
    Image.open(item.left_image).save(tmp_path / "L.webp", lossless=True)
    white16 = np.full((64, 64), 65535, np.uint16)  # a 16-bit grey card
    Image.fromarray(white16).save(tmp_path / "R16.png")
    it = BinaryItem("w1", "q?", str(tmp_path / "L.webp"), str(tmp_path / "R16.png"), "left", "color")
    spec = EpisodeSpec(left_card_xy=(0.8, 0.2), right_card_xy=(0.8, -0.2), card_size=0.15)
    env.unwrapped.configure(spec, card_textures(it, "original"), "left")
    env.env.reset(seed=0, options={"reconfigure": True})
    img = env.reset(seed=0).images["base_camera"].astype(int)
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    assert ((b > 120) & (r < 0.5 * b) & (g < 0.5 * b)).sum() > 10  # the WebP card's blue half
    assert ((r > 120) & (b > 120) & (g < 0.5 * r)).sum() > 10  # and its magenta half


@pytest.mark.parametrize("layout,side", [("original", "left"), ("swapped", "right")])
def test_placer_answers_in_both_layouts(setup, layout, side):
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.act2answer.maniskill import CardExpert, run_episode

    env, item = setup
    r = run_episode(env, CardExpert(env), item, layout, EpisodeSpec(max_steps=45), seed=0)
    assert (r.correct_side, r.choice, r.zone, r.success) == (side, side, "correct", 1.0), r
    assert r.end_reason == "released" and r.termination == "release_after_lift" and r.distance_correct < 0.03


def test_cli_run_on_maniskill_backend(tmp_path, capsys):
    """`embeval act2answer run --backend maniskill --policy expert`: 2 items x both layouts, the same
    records (zones, swap, termination) as the pybullet cell, and `act2answer report` reads them."""
    import json

    import yaml

    from embeval.act2answer.items import read_items
    from embeval_cli import main

    suite = tmp_path / "suite"
    assert main(["act2answer", "items", "generate", "--out", str(suite), "--categories", "color", "--per-category", "2"]) == 0
    items = {it.id: it for it in read_items(suite / "items.jsonl")}
    ep = tmp_path / "ep.yaml"
    ep.write_text(yaml.safe_dump({"episode": {"max_steps": 45}}))
    res = tmp_path / "res"
    assert main(["act2answer", "run", "--items", str(suite / "items.jsonl"), "--policy", "expert", "--backend", "maniskill",
                 "--episode", str(ep), "--out", str(res)]) == 0
    recs = [json.loads(x) for x in (res / "episodes_expert-answer.jsonl").read_text().splitlines()]
    assert [(r["item"], r["layout"]) for r in recs] == [(i, lay) for i in items for lay in ("original", "swapped")]
    for r in recs:
        it = items[r["item"]]
        # the swap moves the correct card; the privileged expert follows it into the correct zone
        assert r["correct_side"] == it.correct_side_in(r["layout"])
        assert (r["zone"], r["choice"], r["success"]) == ("correct", r["correct_side"], 1.0), r
        assert r["termination"] == "release_after_lift" and r["end_reason"] == "released" and r["steps"] <= 45
        assert r["distance_correct"] < 0.03 and r["subject"] == "expert-answer" and not r["stopped"]
    assert (res / "category_table.csv").is_file()
    capsys.readouterr()
    assert main(["act2answer", "report", str(res / "episodes_expert-answer.jsonl")]) == 0
    assert "swap pairs 2, consistency 1.000" in capsys.readouterr().out


def test_unknown_backend_is_a_one_line_error(tmp_path, capsys):
    from embeval_cli import main

    (tmp_path / "items.jsonl").write_text("")
    rc = main(["act2answer", "run", "--items", str(tmp_path / "items.jsonl"), "--policy", "expert", "--backend", "maniskil"])
    err = capsys.readouterr().err
    assert rc != 0 and "maniskill" in err and "pybullet" in err, err


def test_run_spec_backend_maniskill(tmp_path):
    """``params.backend: maniskill`` in an act2answer run spec: units run in ManiSkill, same records; a wrong
    backend name fails at planning with the choices."""
    from embeval.act2answer.generator import generate_items
    from embeval.errors import ConfigError
    from embeval.runs.plan import plan_run
    from embeval.runs.runner import run
    from embeval.runs.spec import parse_spec

    items = generate_items(tmp_path / "suite", ["color"], per_category=1, seed=0)
    d = {"name": "a2a-ms", "evaluator": "act2answer", "plugins": ["embeval.act2answer.evaluator"],
         "subjects": [{"id": "hold", "kind": "policy", "adapter": "scripted", "params": {"vector": [0, 0, 0, 0, 0, 0, 1]}}],
         "items": {"source": "file", "path": str(tmp_path / "suite" / "items.jsonl")},
         "params": {"episode": {"max_steps": 2, "start": "table"}, "obs_size": [32, 32], "backend": "maniskill"},
         "backend": {"progress": False}}
    with pytest.raises(ConfigError, match="pybullet"):
        plan_run(parse_spec({**d, "params": {**d["params"], "backend": "mujoco"}}))
    res = run(parse_spec(d), tmp_path / "r")
    assert res.done == 2 and res.failed == 0
    import pandas as pd

    from embeval.runs.export import export_parquet

    df = pd.read_parquet(export_parquet(tmp_path / "r", tmp_path / "r.parquet")).sort_values("out.layout")
    assert list(df["out.layout"]) == ["original", "swapped"]
    assert list(df["out.correct_side"]) == [items[0].correct_side_in("original"), items[0].correct_side_in("swapped")]
    # the hold policy leaves the cube at its table start (base (0.42, 0)): out of both zones
    assert set(df["out.zone"]) == {"out_of_bounds"} and set(df["out.end_reason"]) == {"max_steps"}
    # distance to the correct card from the start: hypot(0.55 - 0.42, 0.15) = 0.1985 m in either layout
    assert all(abs(v - 0.19849) < 0.005 for v in df["out.distance_correct"]), list(df["out.distance_correct"])


def test_grasped_start_zero_actions_hold_the_cube_and_the_expert_answers_under_both_rules(setup):
    """The reference protocol on the Panda: the cube in the closed gripper at the first step; zero actions
    end with it still held (answered by neither rule); the expert's carry succeeds under both rules."""
    from embeval.act2answer.maniskill import CardExpert, run_episode
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.subjects.scripted import ConstantPolicy

    env, item = setup
    spec = EpisodeSpec(max_steps=30)  # 25 held steps and 5 more (the full 80 holds the same way, ~3x slower)
    r = run_episode(env, ConstantPolicy(vector=(0,) * 7), item, "original", spec, seed=0, keep_actions=False)
    u = env.unwrapped
    assert bool(u.agent.is_grasping(u.cube)[0]) and u.cube_base_xyz()[2] > 0.1
    assert (r.start, r.steps, r.end_reason, r.is_answered, r.success_board, r.success_disc) == \
        ("grasped", 30, "max_steps", False, 0.0, 0.0)
    e = run_episode(env, CardExpert(env), item, "swapped", spec, seed=0, keep_actions=False)
    assert (e.choice, e.success, e.success_board, e.success_disc, e.is_answered) == ("right", 1.0, 1.0, 1.0, True), e
    assert e.intent["release_near_target"] and e.steps >= 26  # released after the hold
