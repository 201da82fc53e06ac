"""A2Eval model subjects: tiny scene-QA VLMs trained on the procedural pool's generators
(embeval_analysis.a2eval.models, embeval.subjects.embedded.scene_qa)."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.errors import ConfigError, MissingWeightsError
from embeval_analysis.a2eval import models as M
from embeval_analysis.a2eval.pool import PoolItem
from embeval_analysis.a2eval.procedural import DIMENSIONS, procedural_pool
from embeval_analysis.a2eval.scorers import reference_score


@pytest.fixture(scope="module")
def held_out():
    """A small pool on a seed neither the shipped report (1) nor the demo (0) uses; the training items
    come from another seed stream altogether."""
    return procedural_pool(n_items=300, seed=11)


@pytest.fixture(scope="module")
def shipped():
    return M.load_models()


@pytest.fixture(scope="module")
def accuracy(shipped, held_out):
    return M.per_dimension_accuracy(shipped, held_out)


class HashText:
    """A deterministic 384-d text embedding from the string's hash (stands in for MiniLM in the fast tests)."""

    def encode(self, texts):
        import hashlib

        out = [np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "big")).normal(size=384)
               for t in texts]
        return np.asarray(out, np.float32).reshape(len(out), 384)


def test_labels_decode_to_the_gold_answer():
    """Encoding a training item's answer into the heads and decoding the one-hot logits gives an answer the
    reference scorer accepts, for every answer type (points: the grid cell's centre lies in the target's box)."""
    from embeval.subjects.embedded.scene_qa import decode

    cfg = M.member_config(M.recipe("a2eval-base"))
    heads = cfg.heads()
    for dim in DIMENSIONS:
        for k in range(25):
            rec = M.draw_record(dim, 0, k)
            lab = M._labels(rec, cfg, heads)
            logits = {h: np.eye(len(v))[[0]] for h, v in heads.items()}  # class 0 everywhere ...
            for h, v in lab.items():  # ... except the supervised heads
                if h == "list":
                    for j, c in enumerate(v):
                        logits[f"list{j}"] = np.eye(len(heads[f"list{j}"]))[[c]]
                else:
                    logits[h] = np.eye(len(heads[h]))[[v]]
            item = PoolItem(id="t", question=rec["question"], answer=rec["answer"], answer_type=rec["answer_type"],
                            options=rec.get("options"), mask=rec.get("mask"), images=rec["images"])
            h, w = rec["images"][0].shape[:2]
            text = decode(cfg, logits, 0, w, h)
            assert reference_score(item, text) == 1.0, (dim, rec["question"], rec["answer"], text)


def test_training_stream_is_disjoint_from_the_pool():
    pool = procedural_pool(n_items=120, seed=0)
    pool_imgs = {it.load_images()[0].tobytes() for it in pool}
    train = [M.draw_record(d, 0, k)["images"][0].tobytes() for d in DIMENSIONS for k in range(20)]
    # planning scenes are a few stacks of distinct colours, so a handful may coincide by chance; no other kind does
    same = sum(t in pool_imgs for t in train)
    assert same <= 6, same


def test_training_is_deterministic_and_checkpoints_round_trip(tmp_path):
    """Same seed -> byte-identical safetensors; another seed -> other weights; the saved model answers as trained."""
    from embeval.subjects.embedded.scene_qa import TinySceneQA
    from embeval.subjects.embedded.zoo import load_vlm

    tiny = M.SceneQARecipe("a2eval-test", seed=3, per_dimension=4,
                           arch={"image_size": 16, "vision": {"width": 4, "depth": 2, "pool": "both", "film": True},
                                 "backbone_dims": [16], "text_width": 16},
                           train={"steps": 4, "batch_size": 8, "lr": 3e-3, "shift_pixels": 0, "log_every": 2})
    enc = HashText()  # the text side is not under test here: spare the MiniLM load
    a = M.train_member(tiny, tmp_path / "a", log=None, text_encoder=enc)
    b = M.train_member(tiny, tmp_path / "b", log=None, text_encoder=enc)
    tiny.seed = 4
    c = M.train_member(tiny, tmp_path / "c", log=None, text_encoder=enc)
    wa, wb, wc = ((tmp_path / n / "model.safetensors").read_bytes() for n in "abc")
    assert wa == wb and wa != wc
    assert (tmp_path / "a" / "config.json").read_text() == (tmp_path / "b" / "config.json").read_text()
    items = procedural_pool(n_items=24, seed=2)
    back = load_vlm(tmp_path / "a", text_encoder=enc)  # the embedded registry knows the family
    assert isinstance(back, TinySceneQA)
    for it in items:
        ims = it.load_images()
        assert back.generate(ims, it.question) == a["model"].generate(ims, it.question)
    with pytest.raises(ConfigError, match="unknown A2Eval model"):
        M.train_models(tmp_path / "x", only=["a2eval-nope"], log=None)
    with pytest.raises(MissingWeightsError, match="embeval train a2eval"):
        M.load_models(tmp_path)


def test_shipped_members_are_small_and_listed():
    folder = M.models_dir()
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert total < 2 << 20, total
    import json

    man = json.loads((folder / "members.json").read_text())
    assert man["order"] == [r.name for r in M.RECIPES]
    for name in man["order"]:
        assert set(man["members"][name]["eval"]) == set(DIMENSIONS) | {"all"}


def test_models_answer_above_chance_where_trained_and_near_chance_where_not(accuracy, held_out):
    """Trained dimensions: at least 0.2 above the best constant answer; untrained ones: at most 0.1 above it
    (300 held-out items; the shipped members.json has the 600-item table)."""
    base = M.constant_baseline(held_out)
    acc = accuracy

    def above(member, dims, margin=0.2):
        for d in dims:
            assert acc[member][d] >= base[d] + margin, (member, d, acc[member][d], base[d])

    def near_chance(member, dims):
        for d in dims:
            assert acc[member][d] <= base[d] + 0.1, (member, d, acc[member][d], base[d])

    above("a2eval-wide", ("counting", "affordance", "physics", "planning"), 0.3)
    above("a2eval-wide", ("dynamics",), 0.15)
    above("a2eval-topdown", ("counting", "affordance"))  # trained on the top-down dimensions only
    near_chance("a2eval-topdown", ("physics", "planning", "dynamics"))
    above("a2eval-stacks", ("physics", "planning"))  # trained on the side views only
    near_chance("a2eval-stacks", ("counting", "affordance", "dynamics"))
    above("a2eval-motion", ("dynamics",), 0.5)  # trained on dynamics alone
    near_chance("a2eval-motion", ("counting", "affordance", "physics", "planning"))
    near_chance("a2eval-oneframe", ("dynamics",))  # one frame cannot show motion
    assert acc["a2eval-short"]["all"] < acc["a2eval-wide"]["all"] - 0.2  # 400 steps vs 3000, width 8 vs 16


def test_fidelity_report_runs_on_the_models(shipped, held_out):
    from embeval_analysis.a2eval import pipeline as P
    from embeval_analysis.a2eval.sampling import diversity_sample, embed_items
    from embeval_analysis.a2eval.subjects import collect_results

    res = collect_results(shipped, held_out)
    labels = [it.dimension for it in held_out]
    X = embed_items(held_out)
    sel = diversity_sample(X, labels, k=6, seed=0)
    rep = P.fidelity_report(res.scores, res.subjects, sel, X, labels, 20, 100, 2, 0)
    assert rep["n_subjects"] == len(M.RECIPES) and rep["n_subset"] == len(sel.indices)
    assert -1.0 <= rep["a2eval_balanced"]["spearman"]["value"] <= 1.0
    # the models differ: the full-pool scores spread (real answers, not ties)
    assert np.ptp(rep["scores"]["full"]) > 0.3
    text = P.format_report(rep)
    assert "a2eval-oneframe" in text and "A2Eval (mean over dimensions)" in text


def test_train_population_includes_the_a2eval_members(capsys, tmp_path):
    """`embeval train population` lists (and rebuilds) the A2Eval model subjects; an unknown name is refused."""
    from embeval_cli import main
    from embeval_analysis.a2eval.models import RECIPES

    assert main(["train", "population", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(f"a2eval  {r.name}" in listed for r in RECIPES)
    assert main(["train", "population", "--only", "a2eval-shrot", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "unknown population member(s) ['a2eval-shrot']" in err and "--list" in err
    assert not (tmp_path / "p").exists()
