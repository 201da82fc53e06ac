"""The A2Eval paper's definitions as defaults, today's as named options.

1. Headline: Table 3's A2Eval column is Table 7's "Avg", "the mean across dimensions" (mean over dimensions of each
   dimension's item mean); the item mean is the option. ``embeval a2eval headline`` reproduces Table 7's Avg for
   all 13 models from per-item rows built with Table 2's item counts, then Table 3's rank agreement with humans.
6. Score fidelity per capability dimension plus the final score (the paper's Table 6), per benchmark beside it.
8. N_v = 5 votes on every item (a capped voter hands the items past its cap to a stand-in), ties explicit.

tests/data/a2eval_table7.csv and a2eval_table2.csv are copies of ../shared/data/ (checked when present);
the human column of Table 3 comes from the shipped src/embeval/data/reference/a2eval_table3.csv.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from embeval_cli import main
from embeval_analysis.a2eval import fidelity as F
from embeval_analysis.a2eval import headline as H
from embeval_analysis.a2eval import pipeline as P
from embeval_analysis.a2eval.assigner import OTHER, Dimension, LLMVoter, assign, majority, tied_labels

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data"
SHARED = ROOT.parent / "shared" / "data"
TABLE3 = ROOT / "src" / "embeval" / "data" / "reference" / "a2eval_table3.csv"


# ----------------------------------------------------------------------------------- the headline


def test_the_copies_match_the_shared_tables():
    for name in ("a2eval_table7.csv", "a2eval_table2.csv"):
        if not (SHARED / name).exists():
            pytest.skip(f"{SHARED / name} not beside this checkout")
        assert (DATA / name).read_bytes() == (SHARED / name).read_bytes()


def test_table2_retained_items_sum_to_3791_not_3781():
    """The paper's text says 3,781 items; its own Table 2 sums to 3,791 (docs/a2eval.md, deviations)."""
    t2 = pd.read_csv(DATA / "a2eval_table2.csv")
    assert int(t2["retained"].sum()) == 3791


def test_toy_case_mean_over_dimensions_vs_item_mean():
    """The issue's toy check: four items scoring 1 in dimension a, one scoring 0 in b: 0.5 (paper), 0.8 (item mean)."""
    s = np.array([[1, 1, 1, 1, 0.0]])
    dims = ["a", "a", "a", "a", "b"]
    assert H.headline_scores(s, dims)[0] == pytest.approx(0.5)
    assert H.headline_scores(s, dims, "item_mean")[0] == pytest.approx(0.8)
    with pytest.raises(Exception, match="dimension_mean, item_mean"):
        H.headline_scores(s, dims, "median")


def test_headline_equals_pandas_groupby_on_random_unbalanced_scores():
    rng = np.random.default_rng(7)
    dims = rng.choice(["p", "q", "r", "s"], size=57, p=[0.55, 0.25, 0.15, 0.05]).tolist()
    s = rng.random((5, 57))
    for m in range(5):
        df = pd.DataFrame({"d": dims, "s": s[m]})
        want = df.groupby("d")["s"].mean().mean()  # mean over dimensions of the per-dimension means
        assert H.headline_scores(s, dims)[m] == pytest.approx(want, abs=1e-12)
        assert H.headline_scores(s, dims, "item_mean")[m] == pytest.approx(s[m].mean(), abs=1e-12)


def _table7_rows() -> tuple[list[dict], pd.DataFrame]:
    """Per-item rows for Table 7's models: each dimension's retained items (Table 2) are 0/1 scores with one
    partial-credit item, so that the dimension's item mean is exactly the printed percentage."""
    t7 = pd.read_csv(DATA / "a2eval_table7.csv")
    counts = {r.dimension: int(r.retained) for r in pd.read_csv(DATA / "a2eval_table2.csv").itertuples() if r.retained}
    rows = []
    for r in t7.itertuples(index=False):
        for d, n in counts.items():
            total = getattr(r, d) / 100 * n
            k = math.floor(total)
            scores = [1.0] * k + [total - k] + [0.0] * (n - k - 1)
            rows += [{"model": r.model, "dimension": d, "score": x} for x in scores]
    return rows, t7


@pytest.fixture(scope="module")
def table7_files(tmp_path_factory):
    rows, t7 = _table7_rows()
    d = tmp_path_factory.mktemp("t7")
    csv = d / "items.csv"
    pd.DataFrame(rows).assign(item=lambda f: range(len(f)))[["item", "model", "dimension", "score"]].to_csv(csv, index=False)
    jsonl = d / "items.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return csv, jsonl, t7


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_reproduces_table7_avg_for_all_13_models(table7_files, capsys):
    csv, jsonl, t7 = table7_files
    for path in (csv, jsonl):
        out = _json(capsys, ["a2eval", "headline", str(path), "--json"])
        assert out["method"] == "dimension_mean" and out["units"] == "percent"
        got = {m["model"]: m for m in out["models"]}
        assert list(got) == t7["model"].tolist()
        for r in t7.itertuples(index=False):
            m = got[r.model]
            assert m["items"] == 3791
            # the paper's rounding: Internvl-3.5-38B's eight dimensions average 62.385, printed 62.37
            assert abs(m["headline"] - r.Avg) <= 0.02, r.model
            for d in out["dimensions"]:
                assert m["dimensions"][d] == pytest.approx(getattr(r, d), abs=1e-9)
    # the text table: two decimals, the item mean beside the headline
    assert main(["a2eval", "headline", str(csv)]) == 0
    text = capsys.readouterr().out
    assert "headline" in text and "item mean" in text and "Table 7 'Avg'" in text
    for r in t7.itertuples(index=False):
        line = next(l for l in text.splitlines() if f" {r.model} " in l)
        nums = re.findall(r"-?\d+\.\d\d\b", line)
        assert len(nums) == 10  # 8 dimensions, the headline, the item mean
        assert abs(float(nums[8]) - r.Avg) <= 0.02 + 1e-9 and [float(x) for x in nums[:8]] == pytest.approx(
            [getattr(r, d) for d in out["dimensions"]], abs=0.005)


def _ranks_vs_human(capsys, headlines: dict[str, float], tmp_path) -> tuple[float, float]:
    human = pd.read_csv(TABLE3).set_index("model")["human"]
    f = tmp_path / "vs_human.csv"
    pd.DataFrame({"model": list(headlines), "a2eval": list(headlines.values()),
                  "human": [human[m] for m in headlines]}).to_csv(f, index=False)
    assert main(["a2eval", "ranks", str(f), "--reference", "human", "--boot", "50"]) == 0
    m = re.search(r"^human vs a2eval\s+(-?\d\.\d\d)\s+(-?\d\.\d\d)", capsys.readouterr().out, re.M)
    # scipy, independently
    a, h = np.array(list(headlines.values())), np.array([human[k] for k in headlines])
    assert float(m[1]) == round(stats.spearmanr(a, h)[0], 2) and float(m[2]) == round(stats.kendalltau(a, h)[0], 2)
    return float(m[1]), float(m[2])


def test_table3_rank_agreement_from_the_headlines(table7_files, capsys, tmp_path):
    """Table 3: Spearman / Kendall of the A2Eval scores vs human 0.85 / 0.72. The item mean (Table 2's counts)
    swaps ranks 2 and 3 and gives 0.87 / 0.74."""
    csv, _, t7 = table7_files
    paper = _json(capsys, ["a2eval", "headline", str(csv), "--json"])
    dim = {m["model"]: m["headline"] for m in paper["models"]}
    assert _ranks_vs_human(capsys, dim, tmp_path) == (0.85, 0.72)
    item = _json(capsys, ["a2eval", "headline", str(csv), "--json", "--item-mean"])
    assert item["method"] == "item_mean"
    im = {m["model"]: m["headline"] for m in item["models"]}
    assert _ranks_vs_human(capsys, im, tmp_path) == (0.87, 0.74)
    rank = {m["model"]: m["rank"] for m in paper["models"]}
    rank_im = {m["model"]: m["rank"] for m in item["models"]}
    assert (rank["Internvl-3.5-241B-A28B"], rank["GPT-5-20250807-Mini"]) == (2, 3)
    assert (rank_im["Internvl-3.5-241B-A28B"], rank_im["GPT-5-20250807-Mini"]) == (3, 2)
    # the item mean is the Table-2-weighted mean of Table 7's columns
    counts = pd.read_csv(DATA / "a2eval_table2.csv").set_index("dimension")["retained"]
    for r in t7.itertuples(index=False):
        want = sum(getattr(r, d) * counts[d] for d in paper["dimensions"]) / 3791
        assert im[r.model] == pytest.approx(want, abs=1e-9)
        assert {m["model"]: m for m in paper["models"]}[r.model]["item_mean"] == pytest.approx(want, abs=1e-9)


HOSTILE = [
    ("items.csv", "model,dimension\nm,a\n", "no column(s) score"),
    ("items.csv", "model,dimension,score\nm,a,1.5\n", "number in [0, 1]"),
    ("items.csv", "model,dimension,score\nm,a,62.5\n", "a percentage? divide by 100"),
    ("items.csv", "model,dimension,score\nm,a,nan\n", "number in [0, 1]"),
    ("items.csv", "model,dimension,score\nm,a,inf\n", "number in [0, 1]"),
    ("items.csv", "model,dimension,score\nm,a,-0.1\n", "number in [0, 1]"),
    ("items.csv", "model,dimension,score\nm,a,high\n", "number in [0, 1]"),
    ("items.csv", "model,dimension,score\n,a,1\n", "model is empty"),
    ("items.csv", "model,dimension,score\nm,a,1,extra\n", "has 4 fields, the header 3"),
    ("items.csv", "model,dimension,score,score\nm,a,1,1\n", "more than once"),
    ("items.csv", "model,dimension,score\n", "no item rows"),
    ("items.csv", "", "is empty"),
    ("items.csv", "model,dimension,score\nm1,a,1\nm1,b,0\nm2,a,1\n", "'m2' has no items in dimension(s) b"),
    ("items.jsonl", '{"model": "m", "dimension": "a", "score": true}\n', "number in [0, 1]"),
    ("items.jsonl", '{"model": "m", "dimension": "a", "score": "NaN"}\n', "number in [0, 1]"),
    ("items.jsonl", '{"model": "m", "dimension": "a"}\n', "has no score"),
    ("items.jsonl", '{"model": 3, "dimension": "a", "score": 1}\n', "model must be a string"),
    ("items.jsonl", '{"model": "m", "dimension": "a", "score": 1}\n[1, 2]\n', "line 2 is a JSON list"),
    ("items.jsonl", '{"model": "m", "dimension": "a", "score": 1}\n{oops\n', "line 2 is not valid JSON"),
    ("items.jsonl", '{"model": "' + "x" * 300 + '", "dimension": "a", "score": 1}\n', "at most 200"),
]


@pytest.mark.parametrize("name,text,message", HOSTILE)
def test_cli_hostile_score_files_one_line_exit_2(tmp_path, capsys, name, text, message):
    f = tmp_path / name
    f.write_text(text)
    assert main(["a2eval", "headline", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and str(f) in err


def test_cli_hostile_files_binary_folder_missing_and_too_large(tmp_path, capsys, monkeypatch):
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00model,dimension,score\n")
    missing = tmp_path / "nope.csv"
    for f, message in ((binary, "not UTF-8"), (tmp_path, "is a folder"), (missing, "not found")):
        assert main(["a2eval", "headline", str(f)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
    big = tmp_path / "big.csv"
    big.write_text("model,dimension,score\n" + "m,a,1\n" * 200)
    monkeypatch.setattr(H, "MAX_FILE_BYTES", 1000)
    assert main(["a2eval", "headline", str(big)]) == 2
    err = capsys.readouterr().err.strip()
    assert "over the 1000 bytes limit" in err and len(err.splitlines()) == 1


def _selection(dims: list[str]):
    from embeval_analysis.a2eval.sampling import Selection

    idx = list(range(len(dims)))
    return Selection(idx, [1.0] * len(dims), dims)


def test_fidelity_report_headline_default_is_the_mean_over_dimensions_and_item_mean_is_todays():
    rng = np.random.default_rng(3)
    n_sub, n_pool = 14, 40
    dims = ["a"] * 8 + ["b"] * 4 + ["c"] * 2  # unbalanced: a dimension with fewer than K items is kept whole
    scores = rng.random((6, n_pool))
    sel = _selection(dims)
    X = rng.random((n_pool, 4))
    labels = dims + ["a"] * (n_pool - n_sub)
    names = [f"s{i}" for i in range(6)]
    rep = P.fidelity_report(scores, names, sel, X, labels, 20, 50, 2, 0)
    by_hand = np.array([np.mean([scores[m, :8].mean(), scores[m, 8:12].mean(), scores[m, 12:14].mean()]) for m in range(6)])
    assert rep["headline_method"] == "dimension_mean" and rep["headline"] == "a2eval_balanced"
    np.testing.assert_allclose(rep["scores"]["subset_balanced"], by_hand, atol=1e-12)
    np.testing.assert_allclose(rep["scores"]["subset_dimension_mean"], by_hand, atol=1e-12)
    full = scores.mean(axis=1)
    assert rep["a2eval_balanced"]["spearman"]["value"] == pytest.approx(stats.spearmanr(full, by_hand)[0])
    assert rep["a2eval_balanced"]["kendall"]["value"] == pytest.approx(stats.kendalltau(full, by_hand)[0])
    # the option: today's numbers (the balanced subset's item mean through the unchanged code path)
    today = F.subset_fidelity(scores, sel.indices, None, names, 50, 0).to_dict()
    np.testing.assert_allclose(rep["scores"]["subset_item_mean"], sel.estimate(scores, weighted=False), atol=1e-12)
    assert rep["a2eval_item_mean"] == today and rep["a2eval_other"] == today
    opt = P.fidelity_report(scores, names, sel, X, labels, 20, 50, 2, 0, headline="item_mean")
    assert opt["a2eval_balanced"] == today and opt["headline_method"] == "item_mean"
    np.testing.assert_allclose(opt["scores"]["subset_balanced"], sel.estimate(scores, weighted=False), atol=1e-12)
    assert opt["a2eval_other"] == rep["a2eval_balanced"]
    text = P.format_report(rep)
    assert "A2Eval (mean over dimensions)" in text and "A2Eval (item mean, option)" in text
    assert "A2Eval (item mean)" in P.format_report(opt)


def test_report_headline_config_is_checked(tmp_path):
    assert P.report_config(P.load_config(P.CONFIG_DIR / "default.yaml")).headline == "dimension_mean"
    assert P.report_config(P.load_config(P.CONFIG_DIR / "ci.yaml")).headline == "dimension_mean"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("report: {headline: median}\n")
    with pytest.raises(Exception, match="report.headline"):
        P.load_config(cfg)


# ----------------------------------------------------------------------------------- fidelity per dimension


def _fid_case():
    agent = np.array([[1, 0, 1, 1, 1, np.nan], [0.5, 0.5, 0, 0, 1, 1]])
    ref = np.array([[1, 1, 1, 1, 0.5, 0], [0.5, 0.5, 0, 1, 1, 1]])
    dims = ["a", "a", "b", "b", "c", "c"]
    sources = ["bench1", "bench1", "bench1", "bench2", "bench2", "bench2"]
    return agent, ref, dims, sources


def test_dimension_fidelity_by_hand():
    agent, ref, dims, _ = _fid_case()
    fid = F.dimension_fidelity(agent, ref, dims, ["m1", "m2"])
    assert list(fid) == ["a", "b", "c", "final"]
    A, R = np.nan_to_num(agent), ref
    for m, name in enumerate(["m1", "m2"]):
        sa = {d: np.mean([A[m, i] for i in range(6) if dims[i] == d]) for d in "abc"}
        sr = {d: np.mean([R[m, i] for i in range(6) if dims[i] == d]) for d in "abc"}
        for d in "abc":
            want = 1 - abs(sa[d] - sr[d]) / abs(sr[d]) if sr[d] else np.nan
            assert fid[d]["per_subject"][name] == pytest.approx(want, nan_ok=True)
        fa, fr = np.mean(list(sa.values())), np.mean(list(sr.values()))  # the final score: mean over dimensions
        assert fid["final"]["per_subject"][name] == pytest.approx(1 - abs(fa - fr) / abs(fr))
    # m1: a 0.5 vs 1 -> 0.5, b 1 vs 1 -> 1, c 0.5 (NaN counted 0) vs 0.25 -> 0; final 2/3 vs 0.75 -> 1 - (1/12)/0.75
    assert fid["a"]["per_subject"]["m1"] == 0.5 and fid["c"]["per_subject"]["m1"] == pytest.approx(0.0)
    assert fid["final"]["per_subject"]["m1"] == pytest.approx(1 - (0.75 - 2 / 3) / 0.75)
    assert fid["final"]["items"] == 6 and fid["b"]["items"] == 2
    assert fid["final"]["mean"] == pytest.approx(np.mean([fid["final"]["per_subject"][s] for s in ("m1", "m2")]))


def test_agent_fidelity_groups_by_dimension_by_default_and_keeps_the_benchmark_table():
    agent, ref, dims, sources = _fid_case()
    items = [SimpleNamespace(source=s, dimension=None) for s in sources]
    preds = [["A", "B", "C", "1", "2", "x"], ["A", "B", "C", "1", "2", "y"]]
    refp = [["A", "B", "D", "1", "2", "x"], ["A", "B", "C", "1", "3", "y"]]
    ev = SimpleNamespace(subjects=["m1", "m2"], item_ids=list("uvwxyz"), synth_scores=agent, predictions=preds,
                         scorer_fidelity=1.0)
    res = SimpleNamespace(subjects=["m1", "m2"], item_ids=list("uvwxyz"), scores=ref, predictions=refp)
    fid = P.agent_fidelity(ev, res, items, dims)
    assert fid["grouping"] == "dimension" and list(fid["score"]) == ["a", "b", "c", "final"]
    assert fid["score"] == F.dimension_fidelity(agent, ref, dims, ["m1", "m2"])
    # the per-benchmark grouping: today's numbers, beside it
    assert fid["score_by_benchmark"] == F.final_score_fidelity(agent, ref, sources, ["m1", "m2"])
    assert set(fid["score_by_benchmark"]) == {"bench1", "bench2", "all"}
    assert fid["score_by_benchmark"]["all"]["per_subject"]["m1"] == pytest.approx(1 - abs(4 / 6 - 4.5 / 6) / (4.5 / 6))
    assert fid["inference"]["b"]["exact"] == 0.75 and fid["inference_by_benchmark"]["bench1"]["exact"] == pytest.approx(5 / 6)
    text = P.format_agent_fidelity(fid)
    assert text.index("dimension") < text.index("final") < text.index("benchmark") < text.index("bench2")
    # dimensions default to the items' own dimension field
    items2 = [SimpleNamespace(source=s, dimension=d) for s, d in zip(sources, dims)]
    assert P.agent_fidelity(ev, res, items2)["score"] == fid["score"]
    with pytest.raises(Exception, match="6 items"):
        P.agent_fidelity(ev, res, items, dims[:5])


# ----------------------------------------------------------------------------------- five votes, explicit ties


def _dims():
    return [Dimension("counting", "how many objects"), Dimension("spatial", "where objects are")]


def test_default_config_gives_every_item_five_votes(small_texts):
    from embeval_analysis.a2eval.data_agent import build_voters

    cfg = P.load_config(P.CONFIG_DIR / "default.yaml")
    da = P.data_agent_config(cfg)
    assert len(da.voters) == 5 and da.tie_rule == "first_voter"
    capped = [v for v in da.voters if v.max_calls is not None]
    assert len(capped) == 1 and capped[0].max_calls == 8 and capped[0].beyond_cap == "stand_in"
    capped[0].llm = "rules"  # the same cap and stand-in, without loading the Gemma GGUF in a test
    voters = build_voters(da)
    a = assign(small_texts, _dims(), voters, da.tie_rule)
    assert a.votes_per_item == {5: len(small_texts)}
    assert all(v is not None for row in a.votes for v in row)
    assert list(a.stand_in_votes.values()) == [len(small_texts) - 8]
    assert "stand-in" in a.voters[3] and math.isfinite(a.kappa) and len(a.kappa_voters) == 5


def test_cap_option_abstain_gives_todays_four_votes(small_texts):
    """beyond_cap: abstain is embeval's earlier behaviour: past the cap the voter abstains."""
    from embeval_analysis.a2eval.data_agent import DataAgentConfig, VoterConfig, build_voters

    voters = build_voters(DataAgentConfig(voters=[
        VoterConfig("llm", "rules", 0), VoterConfig("llm", {"preset": "rules", "variant": 1}, 1),
        VoterConfig("llm", {"preset": "rules", "variant": 2}, 2),
        VoterConfig("llm", "rules", 0, max_calls=8, beyond_cap="abstain"), VoterConfig("embedding")]))
    a = assign(small_texts, _dims(), voters)
    n = len(small_texts)
    assert a.votes_per_item == {4: n - 8, 5: 8} and a.stand_in_votes == {}
    assert [row[3] is None for row in a.votes] == [False] * 8 + [True] * (n - 8)
    assert a.kappa_all_items == 8 and len(a.kappa_voters) == 4
    with pytest.raises(Exception, match="beyond_cap"):
        from embeval.config import from_mapping

        from_mapping(DataAgentConfig, {"voters": [{"kind": "llm", "max_calls": 3, "beyond_cap": "skip"}]},
                     "data_agent", strict=True)


def test_stand_in_votes_only_past_the_cap():
    class Fixed:
        def __init__(self, answer):
            self.id, self.answer, self.calls = f"fixed-{answer}", answer, 0

        def choose(self, prompt, options):
            self.calls += 1
            return self.answer

    model, stand_in = Fixed("counting"), Fixed("spatial")
    v = LLMVoter(model, 0, max_calls=3, stand_in=stand_in)
    assert v.vote(["t"] * 5, _dims()) == ["counting"] * 3 + ["spatial"] * 2
    assert (model.calls, stand_in.calls, v.stand_in_votes) == (3, 2, 2)
    assert LLMVoter(Fixed("counting"), 0, max_calls=3, beyond_cap="abstain").vote(["t"] * 5, _dims()) == \
        ["counting"] * 3 + [None] * 2


def _majority_by_numpy(row: list[str]) -> tuple[set[str], float]:
    """The paper's majority vote, independently: the labels with the most votes and that count's share."""
    labels, counts = np.unique(np.array(row), return_counts=True)
    return set(labels[counts == counts.max()].tolist()), counts.max() / len(row)


def test_majority_vote_against_numpy_and_explicit_ties():
    rng = np.random.default_rng(11)
    cats = ["a", "b", "c", OTHER]
    n_ties = 0
    for _ in range(400):
        row = rng.choice(cats, 5).tolist()
        top, share = _majority_by_numpy(row)
        lab, agree, tie = majority(row)
        assert agree == pytest.approx(share) and tie == (len(top) > 1)
        assert set(tied_labels(row)) == (top if len(top) > 1 else set())
        if len(top) == 1:
            assert lab == next(iter(top)) and majority(row, "other")[0] == lab
        else:
            n_ties += 1
            assert lab == next(v for v in row if v in top)  # first_voter: the earliest voter among the tied
            assert majority(row, "other") == (OTHER, pytest.approx(share), True)
    assert n_ties > 50  # 2-2-1 and the like happen with 5 voters
    assert tied_labels(["b", "a", "a", "b", "c"]) == ["b", "a"]
    with pytest.raises(ValueError, match="tie_rule"):
        majority(["a"], "coin")


def test_assign_records_ties_and_the_rule():
    class Seq:
        def __init__(self, answers):
            self.answers, self.id = list(answers), "seq"

        def choose(self, prompt, options):
            return self.answers.pop(0)

    # two items; item 0 splits 2-2-1 (counting, spatial, counting, spatial, other), item 1 is 3-2
    votes = [["counting", "spatial"], ["spatial", "spatial"], ["counting", "spatial"], ["spatial", "counting"],
             [OTHER, "counting"]]
    dims = _dims()
    for rule, label0 in (("first_voter", "counting"), ("other", OTHER)):
        voters = [LLMVoter(Seq(v), 0, name=f"v{i}") for i, v in enumerate(votes)]
        a = assign(["x", "y"], dims, voters, rule)
        assert a.labels == [label0, "spatial"] and a.tie == [True, False]
        assert a.tied == [["counting", "spatial"], []] and a.tie_rule.startswith(rule)
        assert a.agreement == [pytest.approx(0.4), pytest.approx(0.6)]


@pytest.fixture(scope="module")
def small_texts():
    from embeval_analysis.a2eval.procedural import procedural_pool

    return [it.text() for it in procedural_pool(n_items=20, seed=3)]
