"""embeval's Act2Answer suite as a vla-eval StepBenchmark, run by vla-eval 0.8.0's own runner
(``vla_eval.api.run(config, server_url=..., docker=False)``) against ``embeval serve vla-eval``: the result holds
embeval's outcome fields, and the same episodes through embeval's own ``run_episode`` give the same outcomes."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vla_eval")
from vla_eval.api import run  # noqa: E402

from embeval.serving.runner import app_from_spec  # noqa: E402
from embeval.serving.vla_eval_server import serve_in_thread  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STATS = ROOT / "config/subjects/image_stats_policy.yaml"
PARAMS = {"categories": ["color"], "per_category": 1, "seed": 0, "max_steps": 6, "width": 64, "height": 48}


def test_vla_eval_runner_runs_act2answer_like_embeval(tmp_path):
    from embeval.act2answer.episode import run_episode, sim_config
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.sim import SimEnv
    from embeval.subjects.scripted import ImageStatsPolicy

    with serve_in_thread(app_from_spec(STATS, "vla-eval")) as running:
        cfg = {"server": {"url": running.url}, "output_dir": str(tmp_path / "out"),
               "benchmarks": [{"benchmark": "embeval.vla_eval_benchmarks:Act2AnswerBenchmark", "params": PARAMS,
                               "max_steps": 6}]}
        (res,) = run(cfg, server_url=running.url, docker=False)
    episodes = {t["task"]: t["episodes"][0]["metrics"] for t in res["tasks"]}
    assert sorted(episodes) == ["color-0000:original", "color-0000:swapped"] and res["num_errors"] == 0
    saved = [p for p in (tmp_path / "out").rglob("*.json")]
    assert saved and any('"zone"' in p.read_text() for p in saved)  # the result file carries embeval's metrics

    items = generate_items(tmp_path / "items", PARAMS["categories"], per_category=1, seed=0)
    env = SimEnv(sim_config(64, 48))
    try:
        for i, it in enumerate(items):
            for layout in ("original", "swapped"):
                mine = run_episode(env, ImageStatsPolicy(scale=0.1), it, layout, EpisodeSpec(max_steps=6), seed=i).to_dict()
                theirs = episodes[f"{it.id}:{layout}"]
                for key in ("zone", "choice", "end_reason", "termination", "steps", "correct_side", "instruction"):
                    assert theirs[key] == mine[key], key
                assert theirs["cube_xy"] == pytest.approx(mine["cube_xy"], abs=1e-4)
                assert theirs["success"] == float(mine["zone"] == "correct")
    finally:
        env.close()


def test_vla_eval_runner_runs_a_distorted_camera_unit_like_embeval(tmp_path):
    from embeval.sim.backends import make_episode_env, score_episode
    from embeval.subjects.scripted import ImageStatsPolicy

    params = {"env": "Pick", "distortion": "darken", "level": 4, "seeds": [1, 2], "max_steps": 3, "width": 48,
              "height": 32, "distortion_seed": 9}
    with serve_in_thread(app_from_spec(STATS, "vla-eval")) as running:
        cfg = {"server": {"url": running.url}, "output_dir": str(tmp_path / "out"),
               "benchmarks": [{"benchmark": "embeval.vla_eval_benchmarks:DistortedCameraBenchmark", "params": params}]}
        (res,) = run(cfg, server_url=running.url, docker=False, no_save=True)
    got = {t["task"]: t["episodes"][0]["metrics"] for t in res["tasks"]}
    env = make_episode_env({"backend": "pybullet", "env": "Pick", "width": 48, "height": 32, "max_steps": 3})
    try:
        for seed in (1, 2):
            mine = score_episode(env, ImageStatsPolicy(scale=0.1), seed, ("darken", 4, 9))[0].to_dict()
            theirs = got[f"seed{seed}:darken4"]
            assert theirs["decision"] == pytest.approx(mine["decision"], abs=1e-5)
            assert theirs["execution"] == pytest.approx(mine["execution"], abs=1e-3)
            assert (theirs["distortion"], theirs["level"]) == ("darken", 4)
            assert theirs["decision"] < 1.0
    finally:
        env.close()


def test_vla_eval_runner_runs_a_scene_shift_unit_like_embeval(tmp_path):
    from embeval.errors import ConfigError
    from embeval.sim.backends import make_episode_env
    from embeval.sim.perturb import Perturbations
    from embeval.sim.perturb.score import score_seed
    from embeval.subjects.scripted import ImageStatsPolicy
    from embeval.vla_eval_benchmarks import SceneShiftBenchmark

    params = {"env": "Pick", "axis": "light_intensity", "level": 5, "seeds": [1, 2], "max_steps": 3, "width": 48,
              "height": 32}
    with serve_in_thread(app_from_spec(STATS, "vla-eval")) as running:
        cfg = {"server": {"url": running.url}, "output_dir": str(tmp_path / "out"),
               "benchmarks": [{"benchmark": "embeval.vla_eval_benchmarks:SceneShiftBenchmark", "params": params}]}
        (res,) = run(cfg, server_url=running.url, docker=False)
    assert res["num_errors"] == 0
    got = {t["task"]: t["episodes"][0]["metrics"] for t in res["tasks"]}
    assert sorted(got) == ["seed1:light_intensity5", "seed2:light_intensity5"]
    saved = [p.read_text() for p in (tmp_path / "out").rglob("*.json")]
    assert saved and any('"execution"' in t and '"perturbation"' in t for t in saved)
    env = make_episode_env({"backend": "pybullet", "env": "Pick", "width": 48, "height": 32, "max_steps": 3})
    try:
        for seed in (1, 2):
            (mine,) = score_seed(env, ImageStatsPolicy(scale=0.1), seed, [Perturbations.parse("light_intensity:5")])
            theirs = got[f"seed{seed}:light_intensity5"]
            assert theirs["decision"] == pytest.approx(mine["decision"], abs=1e-5)
            assert theirs["execution"] == pytest.approx(mine["execution"], abs=1e-3)
            assert theirs["success"] == float(mine["success"])
            assert (theirs["axis"], theirs["level"]) == ("light_intensity", 5)
            assert theirs["perturbation"]["light_intensity"]["level"] == 5
            assert theirs["decision"] < 1.0  # the darker or brighter world changed what the policy did
    finally:
        env.close()
    with pytest.raises(ConfigError, match="axis"):
        SceneShiftBenchmark(axis="gravity", level=2)
