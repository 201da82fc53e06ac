"""An Embodied-IQA database from LIBERO scenes (``embeval iqa build --source libero``): references are LIBERO's
agent-view renders at its own initial states, Decision scored by the subjects as for every source, Execution closed
loop on LIBERO; ``embeval iqa bench`` reads the database. LIBERO runs in .venv-libero (skipped without it)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from embeval.errors import ConfigError
from embeval.sim.libero import libero_python
from embeval_analysis.iqa.libero_source import episode_spec, parse_tasks
from embeval_cli import main

needs_libero = pytest.mark.skipif(not libero_python().is_file(),
                                  reason=f"LIBERO's interpreter {libero_python()} is missing: run scripts/install_libero.sh")
TASK = "libero_spatial:0"
TYPES, LEVELS, N_REFS, SIZE = ["darken", "gaussian_blur"], [1, 5], 3, 64


def test_task_lists_are_parsed_and_bad_ones_named():
    assert parse_tasks("libero_spatial:0, libero_goal:3") == ["libero_spatial:0", "libero_goal:3"]
    assert parse_tasks("libero_spatial") == ["libero_spatial"]  # a whole suite
    for bad in ("libero_spatial:x", "", "libero spatial", "libero_goal:3,:1"):
        with pytest.raises(ConfigError, match="SUITE:TASK_ID"):
            parse_tasks(bad)


def test_episode_spec_replays_the_reference_camera_under_every_name():
    ref = {"width": 64, "height": 48, "sim": {"backend": "libero", "env": TASK, "seed": 2, "camera": "agentview",
                                              "options": {"render_mode": "fast"}}}
    assert episode_spec(ref, ["third_person", "wrist"], 7) == {
        "backend": "libero", "env": TASK, "render": True, "max_steps": 7, "options": {"render_mode": "fast"},
        "width": 64, "height": 48, "aliases": {"third_person": "agentview", "wrist": "agentview"}}
    assert episode_spec(ref, ["third_person"], None, render=False) == {
        "backend": "libero", "env": TASK, "render": False, "max_steps": None, "options": {"render_mode": "fast"}}


def test_unknown_libero_camera_is_refused_before_libero_starts(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"build": {"source": "libero", "source_params": {"path": TASK, "camera": "top"}}}))
    assert main(["iqa", "build", "--out", str(tmp_path / "db"), "--config", str(cfg), "--subjects",
                 "config/subjects/image_stats_policy.yaml", "--no-progress"]) == 2
    assert "libero source camera: choose from agentview, wrist, got 'top'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """3 references (libero_spatial:0 at initial states 0, 1, 2) x 2 types x 2 levels, the embedded tiny VLA and the
    mean-colour policy, Execution for 2 images closed loop on LIBERO (3 steps per run; fast renderer, soft resets)."""
    tmp = tmp_path_factory.mktemp("libero_iqa")
    stats, tiny = tmp / "stats.yaml", tmp / "tiny.yaml"
    stats.write_text(yaml.safe_dump({"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.1}}))
    tiny.write_text(yaml.safe_dump({"id": "tiny-vla", "kind": "policy", "adapter": "embedded", "path": "tiny-vla"}))
    cfg = tmp / "build.yaml"
    cfg.write_text(yaml.safe_dump({"build": {
        "source": "libero", "source_params": {"path": TASK, "n": N_REFS, "size": [SIZE, SIZE], "render_mode": "fast",
                                              "hard_reset": False},
        "distortions": TYPES, "levels": LEVELS}}))
    out = tmp / "db"
    assert main(["iqa", "build", "--out", str(out), "--config", str(cfg), "--subjects", str(tiny), str(stats),
                 "--execution-images", "2", "--execution-max-steps", "3", "--no-progress"]) == 0
    return out


@needs_libero
def test_references_are_libero_renders_at_its_initial_states(db):
    from embeval.sim.libero.episodes import LiberoTask

    man = json.loads((db / "manifest.json").read_text())
    refs = man["references"]
    assert [r["ref_id"] for r in refs] == [f"libero_libero_spatial_0_s{i:04d}" for i in range(N_REFS)]
    assert [r["scene_id"] for r in refs] == [f"libero_libero_spatial_0_s{i}" for i in range(N_REFS)]
    instruction = "pick up the black bowl between the plate and the ramekin and place it on the plate"
    for i, r in enumerate(refs):
        assert r["sim"] == {"backend": "libero", "env": TASK, "seed": i, "camera": "agentview",
                            "options": {"render_mode": "fast", "hard_reset": False}}
        assert r["tasks"][0] == instruction and len(r["tasks"]) == 5 and len(set(r["tasks"])) == 5
        assert (r["width"], r["height"], r["view"], r["source"]) == (SIZE, SIZE, "third_person", "simulated")
        assert len(r["state"]["tcp_pose"]) == 7 and 0.9 < r["state"]["gripper"][0] <= 1.0  # LIBERO starts open
    imgs = [np.asarray(Image.open(db / r["path"]).convert("RGB")) for r in refs]
    assert all(im.shape == (SIZE, SIZE, 3) for im in imgs)
    assert not np.array_equal(imgs[0], imgs[1])  # initial states 0 and 1 place the objects differently
    # reference 1 is LIBERO's own render of initial state 1 (a fresh worker, same settings and, as soft resets
    # keep some of the previous episode's state, the same resets before it: 0 then 1)
    task = LiberoTask(TASK, SIZE, SIZE, cameras=("agentview",), max_steps=0, render_mode="fast", hard_reset=False)
    try:
        np.testing.assert_array_equal(task.reset(0).images["agentview"], imgs[0])
        np.testing.assert_array_equal(task.reset(1).images["agentview"], imgs[1])
    finally:
        task.close()


@needs_libero
def test_rows_scores_and_execution_on_libero(db):
    images = pd.read_csv(db / "images.csv")
    assert len(images) == N_REFS * len(TYPES) * len(LEVELS)
    assert set(images["distortion"]) == set(TYPES) and set(images["level"]) == set(LEVELS)
    assert images["scene_id"].str.startswith("libero_libero_spatial_0_s").all()
    scores = pd.read_csv(db / "scores.csv")
    assert sorted(scores["image_id"]) == sorted(images["image_id"])
    for col in ("decision", "position", "rotation", "state"):
        assert col in scores.columns, col
    assert np.isfinite(scores["decision"]).all() and scores["decision"].between(0, 5).all()
    assert (scores["n_vla"] == 2).all()
    # the mean-colour policy: darkening the whole frame moves it more at level 5 than at level 1
    d = scores[scores.distortion == "darken"].groupby("level")["decision"].mean()
    assert d[5] < d[1], d
    ex = pd.read_csv(db / "execution.csv")
    assert ex["image_id"].nunique() == 2 and set(ex["subject"]) == {"tiny-vla", "stats"} and len(ex) == 4
    assert (ex["verb"] == TASK).all() and (ex["distorted_steps"] == 3).all() and (ex["reference_steps"] == 3).all()
    for _, r in ex.iterrows():  # the Execution formula on LIBERO's success and final end-effector distance
        expect = {"success": 100.0, "estop": 0.0}.get(r["reason"], 100.0 - r["distance_cm"])
        assert r["execution"] == pytest.approx(expect) and np.isfinite(r["execution"])
    got = scores.dropna(subset=["execution"]).set_index("image_id")["execution"]
    assert len(got) == 2
    for image_id, v in got.items():
        assert v == pytest.approx(ex[ex.image_id == image_id]["execution"].mean())


@needs_libero
def test_bench_reads_the_libero_database(db, tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["iqa", "bench", "--db", str(db), "--out", str(out), "--splits", "2", "--test-size", "0.5",
                 "--zero-shot", "psnr", "--trained", "fr-fusion,nr-fusion", "--one-protocol"]) == 0
    summary = pd.read_csv(out / "bench_summary.csv")
    assert {"psnr", "fr-fusion", "nr-fusion"} <= set(summary["metric"])
    assert "psnr" in capsys.readouterr().out
