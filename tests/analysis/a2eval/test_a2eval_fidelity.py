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


def _check_agent_fidelity(ev, subjects, items):
    """Score and inference fidelity against the reference harness, written out (nltk's edit distance)."""
    from nltk.metrics.distance import edit_distance

    from embeval_analysis.a2eval.subjects import collect_results

    ref = collect_results(subjects, items)
    fid = P.agent_fidelity(ev, ref, items)
    # default: per capability dimension plus the final score (the paper's Table 6); per benchmark beside it
    assert set(fid["score"]) == {it.dimension for it in items} | {"final"}
    assert set(fid["score_by_benchmark"]) == {"procedural", "all"}
    dims = np.array([it.dimension for it in items])
    for s in range(len(subjects)):
        sa, sr = ev.synth_scores[s].mean(), ref.scores[s].mean()
        want = 1 - abs(sa - sr) / abs(sr) if sr else np.nan
        assert fid["score_by_benchmark"]["all"]["per_subject"][ev.subjects[s]] == pytest.approx(want, nan_ok=True)
        fa = np.mean([np.nan_to_num(ev.synth_scores[s])[dims == d].mean() for d in set(dims)])
        fr = np.mean([ref.scores[s][dims == d].mean() for d in set(dims)])
        want = 1 - abs(fa - fr) / abs(fr) if fr else np.nan
        assert fid["score"]["final"]["per_subject"][ev.subjects[s]] == pytest.approx(want, nan_ok=True)
    sims = [1 - edit_distance(a, b) / max(len(a), len(b), 1) for ra, rb in zip(ev.predictions, ref.predictions)
            for a, b in zip(ra, rb)]
    assert fid["inference"]["all"]["similarity"] == pytest.approx(np.mean(sims))
    assert "score fidelity" in P.format_agent_fidelity(fid)


def test_final_score_and_inference_fidelity_hand_computed():
    agent = np.array([[1, 0, 1, 1], [0.5, 0.5, 0, np.nan]])
    ref = np.array([[1, 1, 1, 1], [0.5, 0.5, 0, 0]])
    fid = F.final_score_fidelity(agent, ref, ["a", "a", "b", "b"], ["m1", "m2"])
    # m1: benchmark a 0.5 vs 1 -> 0.5; b 1 vs 1 -> 1; all 0.75 vs 1 -> 0.75. m2: a 0.5 vs 0.5 -> 1; b 0 vs 0 -> NaN
    assert fid["a"]["per_subject"] == {"m1": 0.5, "m2": 1.0} and fid["a"]["mean"] == pytest.approx(0.75)
    assert fid["a"]["median"] == pytest.approx(0.75)
    assert fid["b"]["per_subject"]["m1"] == 1.0 and np.isnan(fid["b"]["per_subject"]["m2"]) and fid["b"]["mean"] == 1.0
    assert fid["all"]["per_subject"] == {"m1": pytest.approx(0.75), "m2": pytest.approx(1 - 0 / 0.25)}
    assert F.edit_distance("kitten", "sitting") == 3 and F.edit_distance("", "abc") == 3
    assert F.normalised_edit_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert F.normalised_edit_similarity("", "") == 1.0 and F.normalised_edit_similarity(None, "x") == 0.0
    inf = F.inference_fidelity([["B", "3", None]], [["B", "4", "x"]], ["a", "a", "b"])
    assert inf["a"] == {"outputs": 2.0, "similarity": 0.5, "exact": 0.5}
    assert inf["all"]["similarity"] == pytest.approx(1 / 3) and list(inf) == ["a", "b", "all"]


def test_edit_distance_agrees_with_nltk():
    from nltk.metrics.distance import edit_distance

    rng = np.random.default_rng(3)
    for _ in range(200):
        a = "".join(rng.choice(list("abc "), rng.integers(0, 12)))
        b = "".join(rng.choice(list("abc "), rng.integers(0, 12)))
        assert F.edit_distance(a, b) == edit_distance(a, b)


def test_default_k_rule_scales_the_papers_500_to_the_pool():
    from embeval_analysis.a2eval.sampling import default_k, resolve_k

    assert default_k(24519) == 500 and default_k(100_000) == 500  # the paper's pool size and beyond
    assert default_k(600) == 12 and default_k(300) == 6 and default_k(50) == 4
    k, rule = resolve_k("auto", 600)
    assert k == 12 and "default rule" in rule and "24519" in rule
    assert resolve_k(8, 600) == (8, "K = 8 per dimension (configured)")
    assert resolve_k({"counting": 3}, 600)[0] == {"counting": 3, "default": 12}
    with pytest.raises(Exception, match="k_per_dim"):
        resolve_k(0, 600)


def test_measured_speedup_times_the_same_subjects_on_both(curated):
    cfg, items, res, X, cur = curated
    subj = P.make_subjects(cfg)[:3]
    t_full, t_sub, sub = P.measure_speedup(subj, items, cur.selection.indices)
    assert t_full > t_sub > 0
    np.testing.assert_array_equal(sub.scores, res.scores[:3][:, cur.selection.indices])
    c = F.cost_summary(len(items), len(cur.selection.indices), t_full, t_sub)
    assert c["speedup"] == pytest.approx(t_full / t_sub) and c["items_ratio"] == len(items) / len(cur.selection.indices)
    assert np.isnan(F.cost_summary(10, 2)["speedup"])


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
    assert rep["headline"] == "a2eval_balanced" and rep["better_than_random"]
    assert rep["k_rule"] == "K = 8 per dimension (configured)" and set(rep["k_per_dim"].values()) == {8}
    text = P.format_report(rep)
    assert "Spearman" in text and text.index("mean over dimensions") < text.index("mass-weighted") and "K = 8" in text


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
    # the stricter option (ours): disagreements with the reference scorer go back to the Scorer role
    agent = EvalAgent(EvalAgentConfig(probe_docs=4, acceptance="reference_agreement"), evaluator=coder, scorer=coder)
    syn = agent.synthesise(numeric, subj[-2])
    att = [(a.role, a.attempt, a.error is None) for a in syn.attempts]
    assert att == [("evaluator", 0, False), ("evaluator", 1, True), ("scorer", 0, False), ("scorer", 1, True)]
    assert "NameError" in syn.attempts[0].error and "disagrees with the reference" in syn.attempts[2].error
    assert syn.probe_fidelity["numeric"] == 1.0 and not syn.failed
    ev = evaluate(syn, subj[:2], numeric)
    assert ev.scorer_fidelity == 1.0 and np.all(np.isfinite(ev.synth_scores))
    _check_agent_fidelity(ev, subj[:2], numeric)

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
    from embeval_cli import main

    csv = tmp_path / "t.csv"
    csv.write_text("model,original,a2eval\nm1,50,40\nm2,60,55\nm3,70,52\nm4,80,70\n")
    res = F.ranking_table(str(csv), "original")
    assert res["a2eval"].spearman.value == pytest.approx(0.8) and res["a2eval"].discordant == [("m2", "m3")]
    assert main(["a2eval", "ranks", str(csv), "--boot", "200"]) == 0
    assert "0.800" in capsys.readouterr().out
    assert main(["a2eval", "ranks", str(csv), "--reference", "nope"]) == 2
