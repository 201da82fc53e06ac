"""A2Eval end to end on the procedural pool: curated subset vs full ranking, rank statistics vs scipy,
Eval Agent error feedback, lmms-eval export round trip."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from scipy import stats

from embeval_analysis.a2eval import fidelity as F
from embeval_analysis.a2eval import pipeline as P


def test_rank_agreement_matches_scipy_and_counts_discordant_pairs():
    rng = np.random.default_rng(0)
    a = rng.random(13)
    b = a + rng.normal(0, 0.1, 13)
    ra = F.rank_agreement(a, b, n_boot=300, seed=1)
    assert ra.spearman.value == pytest.approx(stats.spearmanr(a, b)[0])
    assert ra.kendall.value == pytest.approx(stats.kendalltau(a, b)[0])
    assert ra.pearson.value == pytest.approx(stats.pearsonr(a, b)[0])
    assert ra.spearman.lo <= ra.spearman.value <= ra.spearman.hi
    # with no ties, tau = 1 - 4 D / (n (n - 1)) for D discordant pairs
    assert ra.kendall.value == pytest.approx(1 - 4 * len(ra.discordant) / (13 * 12))
    assert F.discordant_pairs([1, 2, 3], [1, 3, 2], ["x", "y", "z"]) == [("y", "z")]
    with pytest.raises(Exception, match="3 models"):
        F.rank_agreement([1, 2], [1, 2])


def test_random_baseline_needs_20_seeds_and_kcenter_covers():
    with pytest.raises(Exception, match="20 seeds"):
        F.random_baseline(np.zeros((3, 10)), 5, n_seeds=5)
    X = np.array([[0, 0], [0, 0.1], [10, 0], [10, 0.1], [5, 5]])
    assert sorted(F.kcenter(X, 3, seed=0).tolist()) in ([0, 2, 4], [1, 2, 4], [0, 3, 4], [1, 3, 4])


@pytest.fixture(scope="module")
def curated():
    from embeval_analysis.a2eval.data_agent import curate
    from embeval_analysis.a2eval.sampling import embed_items
    from embeval_analysis.a2eval.subjects import collect_results

    cfg = P.load_config(P.CONFIG_DIR / "ci.yaml")
    items = P.make_pool(cfg)
    res = collect_results(P.make_subjects(cfg), items)
    X = embed_items(items, P.embed_config(cfg))
    cur = curate(items, P.data_agent_config(cfg), X=X)
    return cfg, items, res, X, cur


@pytest.mark.slow  # the module fixture curates a 600-item pool (~30 s)
def test_curated_subset_is_small_and_ranks_like_the_full_pool(curated):
    cfg, items, res, X, cur = curated
    assert np.mean([l == it.dimension for l, it in zip(cur.assignment.labels, items)]) > 0.95
    assert cur.assignment.kappa > 0.5
    rep = P.fidelity_report(res.scores, res.subjects, cur.selection, X, cur.assignment.labels, n_random=20,
                            n_boot=200, n_kcenter=3, seed=0)
    assert rep["cost"]["reduction"] >= 0.80
    w, b, rnd = rep["a2eval_weighted"], rep["a2eval_balanced"], rep["random"]
    assert w["spearman"]["value"] >= 0.9 and b["spearman"]["value"] >= 0.9
    assert w["spearman"]["value"] > rnd["spearman_mean"]["value"]
    assert b["spearman"]["value"] > rnd["spearman_mean"]["hi"]  # above the interval of the random mean
    assert rnd["n_seeds"] == 20 and len(rnd["spearman_all"]) == 20
    assert set(rep["redundancy"]) == {"counting", "spatial", "affordance", "physics", "planning", "dynamics"}
    assert "Spearman" in P.format_report(rep)


class _CoderDouble:
    """Writes broken code first, fixed code once the error comes back (tests the feedback loop)."""

    id = "coder-double"

    def __init__(self):
        self.prompts = []

    def chat(self, messages, json_schema=None, **gen):
        text = messages[-1]["content"]
        self.prompts.append(text)
        if "eval_score" in text:
            if "rejected" not in text:  # a scorer that ignores the prediction
                return json.dumps({"code": "def eval_score(doc, prediction):\n    return 1.0\n"})
            return json.dumps({"code": "import re\ndef eval_score(doc, prediction):\n"
                                       "    m = re.findall(r'-?\\d+', str(prediction))\n"
                                       "    return float(bool(m) and float(m[0]) == float(doc['answer']))\n"})
        if "failed in the sandbox" not in text:
            return json.dumps({"code": "def run_vlm_inference(doc):\n    return generate(prompt_of(doc), doc['image_ids'])\n"})
        return json.dumps({"code": "def run_vlm_inference(doc):\n    return generate(doc['question'], doc['image_ids'])\n"})

    def choose(self, prompt, options):
        return options[0]


@pytest.mark.slow  # shares the curated-pool fixture
def test_eval_agent_feeds_errors_back_and_exports_lmms_task(curated, tmp_path):
    from embeval_analysis.a2eval.eval_agent import EvalAgent, EvalAgentConfig, evaluate
    from embeval_analysis.a2eval.lmms_export import export_lmms_task
    from embeval_analysis.a2eval.pool import load_pool
    from embeval_analysis.a2eval.subjects import embedded_population

    cfg, items, res, X, cur = curated
    numeric = [it for it in (items[i] for i in cur.selection.indices) if it.answer_type == "numeric"][:6]
    subj = embedded_population(4)
    coder = _CoderDouble()
    agent = EvalAgent(EvalAgentConfig(probe_docs=4), evaluator=coder, scorer=coder)
    syn = agent.synthesise(numeric, subj[-2])
    att = [(a.role, a.attempt, a.error is None) for a in syn.attempts]
    assert att == [("evaluator", 0, False), ("evaluator", 1, True), ("scorer", 0, False), ("scorer", 1, True)]
    assert "NameError" in syn.attempts[0].error and "disagrees with the reference" in syn.attempts[2].error
    assert syn.probe_fidelity["numeric"] == 1.0 and not syn.failed
    ev = evaluate(syn, subj[:2], numeric)
    assert ev.scorer_fidelity == 1.0 and np.all(np.isfinite(ev.synth_scores))

    # rule-based roles produce working code for every answer type; export and read back
    subset = [items[i] for i in cur.selection.indices]
    syn2 = EvalAgent(EvalAgentConfig(probe_docs=3)).synthesise(subset, subj[-2])
    assert set(syn2.scorer_code) == {it.answer_type for it in subset} and not syn2.failed
    path = export_lmms_task(tmp_path / "task", subset, syn2.inference_code, syn2.scorer_code, cur.selection.weights)
    back = load_pool(tmp_path / "task")
    assert [b.id for b in back] == [s.id for s in subset]
    spec = importlib.util.spec_from_file_location("a2eval_utils", tmp_path / "task" / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    docs = [json.loads(l) for l in (tmp_path / "task" / "data.jsonl").read_text().splitlines()]
    from embeval_analysis.a2eval.scorers import reference_score
    from embeval_analysis.a2eval.subjects import solve

    for doc, it in zip(docs[:12], subset[:12]):
        assert utils.doc_to_visual(doc)[0].size == (96, 96)
        pred = solve(it.load_images(), utils.doc_to_text(doc)).answer
        assert utils.process_results(doc, [pred])["a2eval_score"] == reference_score(it, pred) == 1.0
    assert "metric: a2eval_score" in path.read_text()


def test_ranking_table_cli(tmp_path, capsys):
    from embeval.cli import main

    csv = tmp_path / "t.csv"
    csv.write_text("model,original,a2eval\nm1,50,40\nm2,60,55\nm3,70,52\nm4,80,70\n")
    res = F.ranking_table(str(csv), "original")
    assert res["a2eval"].spearman.value == pytest.approx(0.8) and res["a2eval"].discordant == [("m2", "m3")]
    assert main(["a2eval", "ranks", str(csv), "--boot", "200"]) == 0
    assert "0.800" in capsys.readouterr().out
    assert main(["a2eval", "ranks", str(csv), "--reference", "nope"]) == 2
