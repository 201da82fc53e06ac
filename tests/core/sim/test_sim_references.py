"""Reference-image generator and the `embeval sim` commands."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml
from PIL import Image

from embeval_cli import main
from embeval.errors import ConfigError
from embeval.sim.references import generate_references, load_manifest
from embeval.sim.scene import VERBS, SceneSpec


def test_references_manifest_images_and_resume(tmp_path):
    out = tmp_path / "refs"
    recs = generate_references(2, out, seed=1, width=96, height=72)
    assert len(recs) == 4 and {r.view for r in recs} == {"first_person", "third_person"}
    for r in recs:
        img = np.asarray(Image.open(out / r.path))
        assert img.shape == (72, 96, 3) and img.std() > 5  # not blank
        assert [t["difficulty"] for t in r.tasks] == [1, 2, 3, 4, 5]
        assert all(t["verb"] in VERBS for t in r.tasks)
        assert r.main_object and r.background and r.main_object in r.object_categories
        spec = SceneSpec.from_yaml(out / "scenes" / f"{r.scene_id}.yaml")
        assert spec.object(r.main_object_name).category == r.main_object
    # the two views of one scene differ; manifest files agree with the records
    a, b = (np.asarray(Image.open(out / r.path)) for r in recs[:2])
    assert not np.array_equal(a, b)
    assert [r.to_dict() for r in load_manifest(out)] == [r.to_dict() for r in recs]
    with open(out / "manifest.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 and rows[0]["task5_difficulty"] == "5"
    meta = json.loads((out / "manifest.json").read_text())["meta"]
    assert meta["n_scenes"] == 2 and meta["code_version"].startswith("embeval")
    # resume: existing images are not rendered again; same seed -> same images
    mtime = (out / recs[0].path).stat().st_mtime_ns
    generate_references(2, out, seed=1, width=96, height=72)
    assert (out / recs[0].path).stat().st_mtime_ns == mtime
    fresh = generate_references(1, tmp_path / "again", seed=1, width=96, height=72)
    assert np.array_equal(np.asarray(Image.open(tmp_path / "again" / fresh[0].path)), a)
    with pytest.raises(ConfigError, match="view"):
        generate_references(1, out, views=["top"])


def test_cli_scene_render_execute(tmp_path, capsys):
    assert main(["sim", "scene", "--task", "push", "--seed", "2", "--out", str(tmp_path / "p.yaml")]) == 0
    data = yaml.safe_load((tmp_path / "p.yaml").read_text())
    assert data["task"]["verb"] == "Push" and SceneSpec.from_dict(data["scene"]).objects
    assert main(["sim", "render", "--task", "Pick", "--width", "64", "--height", "48", "--out", str(tmp_path / "r.png")]) == 0
    assert Image.open(tmp_path / "r.png").size == (64, 48)
    capsys.readouterr()
    assert main(["sim", "execute", "--task", "Pick", "--seed", "3", "--reference", "0.05", "0", "-0.1", "0", "0", "0", "1",
                 "--distorted", "0.02", "0.03", "-0.1", "0", "0", "0", "1"]) == 0
    out = capsys.readouterr().out
    assert "Execution score 95.8 (failure" in out
    assert main(["sim", "render", "--task", "Juggle"]) == 2  # user error, no traceback


def test_cli_expert_json(tmp_path, capsys):
    assert main(["sim", "expert", "--task", "Press", "--episodes", "2", "--json", str(tmp_path / "e.json")]) == 0
    rows = json.loads((tmp_path / "e.json").read_text())
    assert rows[0]["task"] == "Press" and rows[0]["successes"] == 2 and rows[0]["rate"] == 1.0
