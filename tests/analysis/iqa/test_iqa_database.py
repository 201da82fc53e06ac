"""Embodied-IQA database: sources, build through embeval.runs (resume), scores against an
independent recomputation, pyiqa export read back by pyiqa itself."""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from embeval.distortion.samples import synthetic_tabletop
from embeval.errors import ConfigError, MissingFileError

TYPES = ["gaussian_blur", "darken", "white_noise", "jpeg"]
SUBJECTS = [
    {"id": "stats-a", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.05}},
    {"id": "stats-b", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}},
    {"id": "vlm-a", "kind": "vlm", "adapter": "scripted"},
]


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("imgs")
    for i in range(6):
        Image.fromarray(synthetic_tabletop(64, 48, seed=i)).save(d / f"img{i}.png")
    (d / "tasks.yaml").write_text(yaml.safe_dump({
        "tasks": {"*": ["pick up the red cube", "push the box", "press the button", "pour the cup", "twist the knob"]},
        "scenes": {f"img{i}.png": f"scene{i // 2}" for i in range(6)},  # two images per scene
        "views": {f"img{i}.png": ("first_person", "third_person")[i % 2] for i in range(6)},
        "source": {f"img{i}.png": "simulated" for i in range(6)},
    }))
    return d


@pytest.fixture(scope="module")
def db(image_folder, tmp_path_factory):
    from embeval_analysis.iqa.database import BuildConfig, build_database

    out = tmp_path_factory.mktemp("db")
    cfg = BuildConfig(source="folder", source_params={"path": str(image_folder)}, distortions=TYPES, levels="sample",
                      subjects=SUBJECTS, seed=3)
    scores = build_database(cfg, out, log=None)
    return out, cfg, scores


def test_folder_source_reads_tasks_scenes_views(image_folder):
    from embeval_analysis.iqa.sources import load_references

    refs = load_references("folder", path=image_folder)
    assert [r.ref_id for r in refs] == [f"img{i}" for i in range(6)]
    assert refs[3].scene_id == "scene1" and refs[3].view == "third_person" and refs[0].source == "simulated"
    assert refs[0].tasks[0] == "pick up the red cube" and len(refs[0].tasks) == 5
    assert refs[0].image.shape == (48, 64, 3) and refs[0].image.dtype == np.uint8
    with pytest.raises(ConfigError, match="unknown image source"):
        load_references("camera")
    with pytest.raises(MissingFileError, match="not found"):
        load_references("folder", path=image_folder / "nope")


def test_build_one_sampled_level_per_reference_and_type(db):
    out, cfg, scores = db
    assert len(scores) == 6 * len(TYPES)  # one level each
    assert scores.groupby(["ref_id", "distortion"]).size().max() == 1
    assert scores["level"].between(1, 5).all() and scores["level"].nunique() > 1
    for p in scores["path"]:
        assert (out / p).exists()
    assert (out / "manifest.json").exists() and (out / "run" / "results.sqlite").exists()
    assert scores["n_vla"].eq(2).all() and scores["n_vlm"].eq(1).all()
    assert scores["decision"].between(0, 5).all() and scores["cognition"].between(0, 15).all()


def test_decision_matches_independent_recomputation(db):
    """Re-run the policies by hand on the stored images; the per-pair form with embeval.scoring.decision,
    the database's Decision (the paper's min-max normalisation over the whole corpus) written out."""
    from scipy.spatial.transform import Rotation

    from embeval.action import Observation
    from embeval.runs.runner import load_run_spec
    from embeval.runs.store import ResultsStore
    from embeval.scoring.decision import DecisionConfig, decision_score
    from embeval.subjects.scripted import ImageStatsPolicy

    out, _, scores = db
    subj = pd.read_csv(out / "subject_scores.csv")
    with ResultsStore(out / "run" / "results.sqlite") as st:
        res = st.results(load_run_spec(out / "run").hash)

    def dists(a, b):
        rot = [(Rotation.from_euler("xyz", x[3:6]).inv() * Rotation.from_euler("xyz", y[3:6])).magnitude() for x, y in zip(a, b)]
        return np.linalg.norm(a[:, :3] - b[:, :3], axis=1), np.array(rot)

    all_d = [dists(np.array(o["reference_actions"]), np.array(o["distorted_actions"])) for o in res.values() if o["kind"] == "policy"]
    dt, dr = np.concatenate([d[0] for d in all_d]), np.concatenate([d[1] for d in all_d])
    row = scores.iloc[5]
    ref = np.asarray(Image.open(out / row["ref_path"]).convert("RGB"))
    dist = np.asarray(Image.open(out / row["path"]).convert("RGB"))
    vals = []
    for sid, scale in (("stats-a", 0.05), ("stats-b", 0.2)):
        p = ImageStatsPolicy(scale=scale)
        a = np.array([p.act(Observation(images={"third_person": ref})).vector for _ in range(5)])
        b = np.array([p.act(Observation(images={"third_person": dist})).vector for _ in range(5)])
        got = subj[(subj["image_id"] == row["image_id"]) & (subj["subject"] == sid)]
        per_pair = decision_score(a, b, DecisionConfig(normalisation="per_pair")).total
        assert got["decision_per_pair"].item() == pytest.approx(per_pair, abs=1e-9)
        pt, pr = dists(a, b)
        pos = 1 - (pt - dt.min()) / np.ptp(dt)
        rot = 1 - (pr - dr.min()) / np.ptp(dr) if np.ptp(dr) > 0 else np.ones(5)
        expect = np.sum((pos + rot + 1 - np.abs(a[:, 6] - b[:, 6])) / 3)
        assert got["decision"].item() == pytest.approx(expect, abs=1e-9)
        vals.append(expect)
    assert row["decision"] == pytest.approx(np.mean(vals), abs=1e-9)  # the image's score = mean over subjects
    assert subj["position"].max() == pytest.approx(5.0)  # the least-moved pairs of the corpus score 1 each


def test_cognition_is_corpus_scored_and_identical_answers_score_15(db):
    from embeval.runs.runner import load_run_spec
    from embeval.runs.store import ResultsStore
    from embeval.scoring.cognition import cognition_scores

    out, _, scores = db
    spec = load_run_spec(out / "run")
    with ResultsStore(out / "run" / "results.sqlite") as st:
        res = st.results(spec.hash)
    answers = {(s, f"{i}__{d}__{lv}"): (o["reference_answers"], o["distorted_answers"])
               for (s, i, d, lv, _), o in res.items() if s == "vlm-a"}
    ind = cognition_scores(answers)
    for _, r in scores.iterrows():
        assert r["cognition"] == pytest.approx(ind[("vlm-a", r["image_id"])].total, abs=1e-9)
    same = [k for k, (a, b) in answers.items() if a == b]
    assert same, "some distortions leave the scripted VLM's answers unchanged"
    # 5 tasks x (1 + 1 + 0.1 * 10): 15 as a weighted sum, 15 / 2.1 as the paper's weighted average (the default)
    assert all(ind[k].total == pytest.approx(15.0 / 2.1) for k in same)


def test_build_resumes_without_rescoring(db):
    from embeval_analysis.iqa.database import score_subjects

    out, cfg, _ = db
    summary = score_subjects(cfg, out, log=None)
    assert summary.done == 0 and summary.skipped == summary.total == 6 * len(TYPES) * len(SUBJECTS)


def test_export_pyiqa_splits_disjoint_by_scene_and_readable_by_pyiqa(db, tmp_path):
    from embeval_analysis.iqa.export import export_pyiqa

    out, _, scores = db
    files = export_pyiqa(scores, tmp_path, n_splits=10, test_size=0.34, seed=0, split_by="scene")  # the option
    with open(files["splits"], "rb") as fh:
        splits = pickle.load(fh)
    assert sorted(splits) == list(range(1, 11))
    for s in splits.values():
        tr, te = set(s["train"]), set(s["test"])
        assert not tr & te and len(tr | te) == len(scores)
        assert not set(scores["scene_id"].iloc[list(tr)]) & set(scores["scene_id"].iloc[list(te)])
    from pyiqa.data.general_fr_dataset import GeneralFRDataset
    from pyiqa.data.general_nr_dataset import GeneralNRDataset

    opt = {"meta_info_file": str(files["meta_nr_decision"]), "dataroot_target": str(out), "split_file": str(files["splits"]),
           "split_index": 2, "phase": "test", "augment": None}
    nr = GeneralNRDataset(opt)
    assert len(nr) == len(splits[2]["test"])
    item = nr[0]
    assert item["img"].shape[0] == 3
    assert float(item["mos_label"]) == pytest.approx(scores["decision"].iloc[splits[2]["test"][0]], abs=1e-5)
    fr = GeneralFRDataset({**opt, "meta_info_file": str(files["meta_fr_decision"]), "phase": "train"})
    assert len(fr) == len(splits[2]["train"]) and fr[0]["ref_img"].shape == fr[0]["img"].shape


def test_analyses_write_pngs(db, tmp_path):
    from embeval_analysis.iqa.analyses import run_all

    out, _, scores = db
    tabs = run_all(out, tmp_path)
    assert {p.name for p in tmp_path.glob("*.png")} >= {"iqa_decision_by_distortion.png", "iqa_jnd_sensitivity.png",
                                                        "iqa_subject_srcc.png", "iqa_cognition_vs_decision.png"}
    m = tabs["srcc_matrix"]
    assert list(m.columns) == ["stats-a", "stats-b", "vlm-a"]  # VLAs first, then VLMs
    assert np.allclose(np.diag(m.to_numpy()), 1.0)
    assert tabs["jnd"].shape == (len(TYPES), 2) and tabs["jnd"].to_numpy().max() <= 1.0


def test_execution_scores_on_simulated_references(tmp_path):
    """Execution (simulation) for a subset: each row follows the Execution formula; the image's
    score is the mean over tasks and subjects."""
    from embeval_analysis.iqa.database import BuildConfig, build_database

    cfg = BuildConfig(source="sim", source_params={"n": 2, "size": [64, 48]}, distortions=["darken"], levels=[5],
                      subjects=[SUBJECTS[1]], execution_images=1)
    scores = build_database(cfg, tmp_path, log=None)
    ex = pd.read_csv(tmp_path / "execution.csv")
    assert ex["image_id"].nunique() == 1 and len(ex) >= 1
    for _, r in ex.iterrows():
        expect = {"success": 100.0, "estop": 0.0}.get(r["reason"], 100.0 - r["distance_cm"])  # not floored: the paper's
        assert r["execution"] == pytest.approx(expect)
    row = scores[scores["image_id"] == ex["image_id"].iloc[0]]
    assert row["execution"].item() == pytest.approx(ex["execution"].mean())
    assert scores["execution"].isna().sum() == len(scores) - 1
