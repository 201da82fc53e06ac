"""embeval.evaluate.evaluate: a policy object on a named benchmark from Python, its records and scores equal to what
the benchmark's own pieces give (score_episode, score_seed, run_items and the Act2Answer aggregates)."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.errors import ConfigError
from embeval.evaluate import BENCHMARKS, evaluate
from embeval.scoring.record import EpisodeRecord
from embeval.subjects.scripted import ImageStatsPolicy

CELL = {"env": "Pick", "seeds": [1, 2], "max_steps": 3, "width": 48, "height": 32}


def _cell_env():
    from embeval.sim.backends import make_episode_env

    return make_episode_env({"backend": "pybullet", "env": "Pick", "width": 48, "height": 32, "max_steps": 3})


def test_distorted_camera_gives_score_episodes_rows_and_both_runs_records():
    from embeval.sim.backends import score_episode

    res = evaluate(ImageStatsPolicy(scale=0.1), "distorted-camera", distortion="darken", level=4, distortion_seed=9, **CELL)
    env = _cell_env()
    try:
        want = [score_episode(env, ImageStatsPolicy(scale=0.1), s, ("darken", 4, 9))[0].to_dict() for s in (1, 2)]
    finally:
        env.close()
    assert [r["seed"] for r in res.rows] == [1, 2]
    for row, w in zip(res.rows, want):
        assert {k: row[k] for k in w} == w and row["success"] == w["distorted_success"]
    assert [(r.distortion, r.level, r.seed) for r in res.records] == [("none", 0, 1), ("darken", 4, 1),
                                                                      ("none", 0, 2), ("darken", 4, 2)]
    assert all(isinstance(r, EpisodeRecord) and r.first_observation is None and len(r.final_tcp) == 6 for r in res.records)
    assert res.scores["episodes"] == 2
    assert res.scores["decision"] == pytest.approx(np.mean([w["decision"] for w in want]))
    assert res.scores["execution"] == pytest.approx(np.mean([w["execution"] for w in want]))
    assert res.scores["decision"] < 1.0  # darkened images changed the policy's first action
    assert res.config["distortion"] == "darken" and res.to_dict()["records"][1]["distortion"] == "darken"


def test_scene_shift_gives_score_seeds_rows_and_records_with_what_the_axis_drew():
    from embeval.sim.perturb import Perturbations
    from embeval.sim.perturb.score import score_seed

    res = evaluate(ImageStatsPolicy(scale=0.1), "scene-shift", axis="light_intensity", level=5, **CELL)
    env = _cell_env()
    try:
        want = [score_seed(env, ImageStatsPolicy(scale=0.1), s, [Perturbations.parse("light_intensity:5")])[0]
                for s in (1, 2)]
    finally:
        env.close()
    assert res.rows == want
    assert len(res.records) == 4 and [r.seed for r in res.records] == [1, 1, 2, 2]
    drawn = res.records[1].extra["perturbation"]
    assert (drawn["axis"], drawn["level"]) == ("light_intensity", 5) and drawn["light_intensity"] == want[0]["perturbation"]["light_intensity"]
    assert "perturbation" not in res.records[0].extra  # the reference ran the unchanged world


def test_act2answer_records_equal_run_items_and_the_scores_the_aggregates():
    from embeval.act2answer.aggregate import category_rates
    from embeval.act2answer.episode import run_items
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import EpisodeSpec

    res = evaluate(ImageStatsPolicy(scale=0.1), "act2answer", categories=["color"], per_category=2, seed=0, max_steps=6)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        items = generate_items(d, ["color"], per_category=2, seed=0)
        want = list(run_items(ImageStatsPolicy(scale=0.1), items, EpisodeSpec(max_steps=6), seed=0))
    assert [r.to_dict() for r in res.records] == [r.to_dict() for r in want]
    assert [row["item"] for row in res.rows] == ["color-0000", "color-0001"]
    rates = {c.category: c.to_dict() for c in category_rates(want)}
    assert set(rates) == {"color", "all"} and res.scores["categories"] == rates and res.scores["episodes"] == 4
    assert res.scores["success"] == rates["all"]["rate"]


@pytest.mark.parametrize("name, params, msg", [
    ("nope", {}, "unknown benchmark 'nope'"),
    ("distorted-camera", {"distorsion": "blur"}, "unknown parameter\\(s\\) distorsion; it takes env, seeds"),
    ("distorted-camera", {"distortion": "nope"}, "nope"),
    ("distorted-camera", {"level": 9}, "level: must lie in 1..5, got 9 \\(a distortion level\\)"),
    ("distorted-camera", {"level": True}, "level: must be an integer in 1..5"),
    ("distorted-camera", {"seeds": []}, "seeds: give 1..10000 episode seeds, got 0"),
    ("distorted-camera", {"seeds": range(10_001)}, "seeds: give 1..10000 episode seeds, got 10001"),
    ("distorted-camera", {"seeds": ["a"]}, "seeds: must be an integer"),
    ("distorted-camera", {"seeds": [-1]}, "seeds: must lie in 0..4294967295"),
    ("distorted-camera", {"seeds": "12"}, "seeds: a list of episode seeds"),
    ("distorted-camera", {"max_steps": float("nan")}, "max_steps: must be an integer"),
    ("act2answer", {"per_category": 10**9}, "per_category: must lie in 1..1000"),
    ("scene-shift", {"axis": "gravity"}, "gravity"),
    ("act2answer", {"categories": ["taste"]}, "categories: choose from"),
    ("act2answer", {"max_steps": 0}, "max_steps"),
])
def test_refusals_are_one_line_before_any_episode(name, params, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        evaluate(ImageStatsPolicy(), name, **params)
    assert "\n" not in str(e.value)


def test_image_decision_is_the_papers_corpus_score_computed_by_hand():
    """Decision on still images, checked against the paper's formula written out here from the images themselves:
    ImageStatsPolicy moves by 0.1 x (mean RGB - 0.5) m and never rotates, so per task position = 1 - (d - min) /
    (max - min) over all images (d: the translation change), rotation = 1 (no rotation anywhere: no spread),
    state = 1 - |gripper change|; an image scores the sum over its 5 tasks."""
    from embeval.distortion import distort
    from embeval.distortion.samples import synthetic_tabletop
    from embeval.provenance import derive_seed

    out = evaluate(ImageStatsPolicy(), "image-decision", references=3, distortions=["white_noise", "gaussian_blur"],
                   levels=[1, 5], width=48, height=36, seed=7)
    assert out.records == [] and len(out.rows) == 3 * 2 * 2 and out.scores["images"] == 12
    d, g = [], []
    for r in out.rows:
        ref = synthetic_tabletop(48, 36, seed=derive_seed("image-decision", 7, r["reference"]) % 2**32)
        dis = distort(ref, r["distortion"], r["level"],
                      seed=derive_seed("image-decision", 7, r["reference"], r["distortion"], r["level"]) % 2**32)
        ma, mb = (im.reshape(-1, 3).mean(0) / 255.0 for im in (ref, dis))
        d.append(np.linalg.norm(0.1 * (ma - mb)))
        g.append(abs(float(ma.mean() > 0.5) - float(mb.mean() > 0.5)))
        assert len(r["reference_actions"]) == 5 and np.allclose(r["reference_actions"][0][:3], 0.1 * (ma - 0.5))
    d, g = np.array(d), np.array(g)
    position = 5 * (1 - (d - d.min()) / (d.max() - d.min()))
    expect = (position + 5 * 1.0 + 5 * (1 - g)) / 3
    assert np.allclose([r["position"] for r in out.rows], position, atol=1e-9)
    assert np.allclose([r["decision"] for r in out.rows], expect, atol=1e-9)
    assert out.scores["decision"] == pytest.approx(expect.mean())
    by = out.scores["by_distortion"]
    assert set(by) == {"white_noise 1", "white_noise 5", "gaussian_blur 1", "gaussian_blur 5"}
    assert by["white_noise 5"] < by["white_noise 1"]  # the stronger distortion moves the policy more
    asked = []

    class Counted(ImageStatsPolicy):
        def act(self, observation):
            asked.append(self.instruction)
            return super().act(observation)

    again = evaluate(Counted(), "image-decision", references=3, distortions=["white_noise", "gaussian_blur"],
                     levels=[1, 5], width=48, height=36, seed=7)
    assert again.rows == out.rows  # seeded: the same images, the same actions
    from embeval.scoring.decision import DEFAULT_TASKS

    assert len(asked) == len(DEFAULT_TASKS) * (3 + 3 * 2 * 2)  # each task once per reference and per distorted image


@pytest.mark.parametrize("params, msg", [
    ({"distortions": ["fog_of_war"]}, "fog_of_war"),
    ({"distortions": "white_noise", "levels": [0]}, "levels: must lie in 1..5, got 0"),
    ({"levels": []}, "levels: a list of distortion levels 1..5"),
    ({"cameras": [""]}, "cameras: must be a non-empty list of non-empty strings, got \\[''\\]; image keys"),
    ({"state": {"gripper": [float("nan")]}}, "state: a mapping of state names to lists of finite numbers"),
    ({"state": {"gripper": [10**400]}}, "state: a mapping of state names to lists of finite numbers"),
    ({"seed": -1}, "seed: must lie in 0..2\\*\\*63-1, got -1"),
    ({"references": 0}, "references: must lie in 1..1000"),
    ({"width": 4}, "width: must lie in 8..4096"),
    ({"tasks": ["", "pick"]}, "tasks: must be a list of non-empty strings"),
])
def test_image_decision_refuses_bad_configs(params, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        evaluate(ImageStatsPolicy(), "image-decision", **params)
    assert "\n" not in str(e.value)


def test_the_benchmarks_are_registered_with_descriptions():
    names = ("distorted-camera", "scene-shift", "act2answer", "image-decision")
    assert set(BENCHMARKS.names()) >= set(names)
    described = dict(BENCHMARKS.describe())  # the registered description, not the module:name fallback
    for name in names:
        assert described[name] == BENCHMARKS.get(name).description != ""


def test_the_concepts_page_example_runs_as_written():
    import contextlib
    import io
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs/concepts.md").read_text()
    section = page[page.index("## From Python"):page.index("## Layout")]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/concepts.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("{'episodes': 2, 'decision': ") and lines[1] == "gaussian_blur 4"
