"""Claims across training / curation seeds: the "holds on every seed" logic on constructed inputs,
``embeval iqa bench --seeds`` and ``embeval a2eval seeds`` against separate single-seed runs, bad arguments."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml
from conftest import folder_iqa_database, one_error_line

from embeval_cli import main
from embeval.errors import ConfigError
from embeval_analysis.seed_claims import Claim, check_seeds, claim_verdicts, format_claims, format_rows, row_stats

SUBJECTS = [{"id": f"stats-{i}", "kind": "policy", "adapter": "image_stats", "params": {"scale": s}}
            for i, s in enumerate((0.05, 0.1, 0.2))]


# ---- the claim logic -------------------------------------------------------------------------------------------

def test_claim_true_on_two_of_three_seeds_does_not_hold():
    values = {"x": {0: 0.8, 1: 0.7, 2: 0.5}, "psnr": {0: 0.6, 1: 0.6, 2: 0.6}, "y": {0: 0.9, 1: 0.9, 2: 0.9}}
    v = claim_verdicts(values, [Claim("x beats psnr", "x", "psnr"), Claim("y beats psnr", "y", "psnr"),
                                Claim("x below psnr", "x", "psnr", higher=False)], [0, 1, 2])
    assert [c["per_seed"] for c in v] == [{0: True, 1: True, 2: False}, {0: True, 1: True, 2: True},
                                         {0: False, 1: False, 2: True}]
    assert [(c["holds"], c["seeds_holding"]) for c in v] == [(False, 2), (True, 3), (False, 1)]
    md = format_claims(v, [0, 1, 2])
    assert "| x beats psnr | yes | yes | no | **no (2/3)** |" in md
    assert "| y beats psnr | yes | yes | yes | **yes (3/3)** |" in md


def test_ties_missing_seeds_and_nan_do_not_hold():
    values = {"a": {0: 0.5, 1: 0.7, 2: float("nan")}, "b": {0: 0.5, 1: 0.6, 2: 0.1}}
    (tie,) = claim_verdicts(values, [Claim("a beats b", "a", "b")], [0, 1])
    assert tie["per_seed"] == {0: False, 1: True} and not tie["holds"]  # equal is not "beats"
    (nan,) = claim_verdicts(values, [Claim("a beats b", "a", "b")], [1, 2])
    assert nan["per_seed"] == {1: True, 2: None} and not nan["holds"]
    (gone,) = claim_verdicts({"a": {0: 1.0}, "b": {0: 0.0, 1: 0.0}}, [Claim("a beats b", "a", "b")], [0, 1])
    assert gone["seeds_holding"] == 1 and not gone["holds"]
    (margin,) = claim_verdicts({"a": {0: 0.55}, "b": {0: 0.5}}, [Claim("a beats b by 0.1", "a", "b", margin=0.1)], [0])
    assert not margin["holds"]


def test_row_stats_and_table():
    st = row_stats({2: 0.3, 0: 0.1, 1: float("nan")})
    assert st["n"] == 2 and st["mean"] == pytest.approx(0.2) and (st["min"], st["max"]) == (0.1, 0.3)
    assert list(st["seeds"]) == [0, 1, 2]
    assert math.isnan(row_stats({0: float("nan")})["mean"])
    md = format_rows([(("m",), {0: 0.1, 1: 0.25})], ["metric"], [0, 1])
    assert md.splitlines()[2] == "| m | 0.100 | 0.250 | 0.175 | 0.100..0.250 |"


def test_check_seeds():
    assert check_seeds([2, 0, 1, 2]) == [0, 1, 2]
    with pytest.raises(ConfigError, match="at least 3 distinct seeds, got \\[0, 1\\]"):
        check_seeds([0, 1, 1])


# ---- IQA: embeval iqa bench --seeds ------------------------------------------------------------------------------

BENCH = ["--splits", "3", "--test-size", "0.25", "--zero-shot", "psnr,ssim", "--trained", "brisque-svr,nr-fusion,fr-fusion"]


@pytest.fixture(scope="module")
def iqa_db(tmp_path_factory):
    return folder_iqa_database(tmp_path_factory, 6, 20, distortions=["darken", "white_noise", "gaussian_blur"],
                               levels=[2, 5], subjects=SUBJECTS, seed=0)[0]


def test_iqa_seed_study_equals_single_seed_runs(iqa_db, tmp_path, capsys):
    out = tmp_path / "seeds"
    assert main(["iqa", "bench", "--db", str(iqa_db), "--out", str(out), "--seeds", "0", "1", "2", *BENCH]) == 0
    printed = capsys.readouterr().out
    assert "beats PSNR on every seed" in printed and (out / "seeds.md").read_text().strip() in printed
    rec = json.loads((out / "seeds.json").read_text())
    table = rec["table"]
    assert table["seeds"] == [0, 1, 2]
    for s in (1, 2):
        one = tmp_path / f"one{s}"
        assert main(["iqa", "bench", "--db", str(iqa_db), "--out", str(one), "--seed", str(s), *BENCH]) == 0
        summ = pd.read_csv(one / "bench_summary.csv")
        summ = summ[summ["breakdown"] == "all"]
        assert len(summ) == len(table["rows"]) == 2 * 5  # 5 metrics x 2 protocols, Decision only (no VLM)
        for _, r in summ.iterrows():
            row = next(x for x in table["rows"] if (x["metric"], x["target"], x["protocol"]) == (r.metric, r.target, r.protocol))
            assert row["seeds"][str(s)] == pytest.approx(r.srcc, abs=1e-12)
        gate = pd.read_csv(one / "gate_splits.csv")
        for g in table["gate"]:
            want = gate.loc[(gate["rate"] - g["rate"]).abs() < 1e-6].iloc[0]
            assert g["diff"]["seeds"][str(s)] == pytest.approx(want["diff"], abs=1e-12)
            assert g["diff_lo"]["seeds"][str(s)] == pytest.approx(want["diff_lo"], abs=1e-12)
    # the verdicts follow the per-seed values
    by_key = {r["key"]: r for r in table["rows"]}
    for c in table["claims"]:
        a, b = by_key[c["a"]]["seeds"], by_key[c["b"]]["seeds"]
        assert c["holds"] == all(a[k] > b[k] for k in ("0", "1", "2"))
    # the seed study leaves each seed's summary beside the table
    assert (out / "bench_summary_seed0.csv").exists()


@pytest.mark.parametrize("argv, needle", [
    (["--seeds", "0", "1"], "at least 3 distinct seeds"),
    (["--seeds", "0", "1", "2", "--seed", "4"], "--seed applies to one run"),
    (["--seeds", "0", "1", "2", "--save-predictor", "p"], "--save-predictor applies to one run"),
    (["--seeds", "0", "1", "2", "--trained", "psnr"], "zero-shot metric"),
])
def test_iqa_seeds_bad_arguments(tmp_path, capsys, argv, needle):
    assert main(["iqa", "bench", "--db", str(tmp_path), "--out", str(tmp_path / "o"), *argv]) == 2
    assert needle in one_error_line(capsys)
    assert not (tmp_path / "o").exists()


# ---- A2Eval: embeval a2eval seeds --------------------------------------------------------------------------------

CFG = {"pool": {"procedural": {"n_items": 60, "seed": 0}},
       "data_agent": {"k_per_dim": 3, "max_rounds": 2,
                      "voters": [{"kind": "llm", "llm": "rules", "variant": 0},
                                 {"kind": "llm", "llm": {"preset": "rules", "variant": 1}, "variant": 1},
                                 {"kind": "embedding", "threshold": 0.05}]},
       "subjects": {"population": {"n": 5, "seed": 0}},
       "report": {"n_random": 20, "n_boot": 10, "n_kcenter": 2}}


def test_a2eval_seed_study_equals_curate_and_report_per_seed(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(CFG))
    out = tmp_path / "seeds"
    assert main(["a2eval", "seeds", "--config", str(cfg), "--seeds", "0", "1", "2", "--out", str(out)]) == 0
    assert "holds on every seed" in capsys.readouterr().out
    rec = json.loads((out / "seeds.json").read_text())
    vals = rec["table"]["config subjects"]["values"]
    for s in (0, 2):
        one_cfg = tmp_path / f"cfg{s}.yaml"
        one_cfg.write_text(yaml.safe_dump({**CFG, "seed": s}))
        one = tmp_path / f"one{s}"
        assert main(["a2eval", "curate", "--config", str(one_cfg), "--out", str(one)]) == 0
        assert main(["a2eval", "report", "--config", str(one_cfg), "--out", str(one)]) == 0
        rep = json.loads((one / "report.json").read_text())
        assert json.loads((one / "selection.json").read_text())["indices"] == \
            json.loads((out / f"seed{s}" / "selection.json").read_text())["indices"]
        assert vals["headline"][str(s)] == pytest.approx(rep["a2eval_balanced"]["spearman"]["value"], abs=1e-12)
        assert vals["weighted"][str(s)] == pytest.approx(rep["a2eval_weighted"]["spearman"]["value"], abs=1e-12)
        assert vals["random"][str(s)] == pytest.approx(rep["random"]["spearman_mean"]["value"], abs=1e-12)
        assert vals["kcenter"][str(s)] == pytest.approx(rep["kcenter"]["spearman_mean"]["value"], abs=1e-12)
    # a different curation seed picks a different subset (else the study measures nothing)
    sel = [json.loads((out / f"seed{s}" / "selection.json").read_text())["indices"] for s in (0, 1, 2)]
    assert len({tuple(x) for x in sel}) > 1
    for c in rec["table"]["config subjects"]["claims"]:
        a, b = vals[c["a"]], vals[c["b"]]
        above = all(a[k] > b[k] for k in ("0", "1", "2"))
        below = all(a[k] < b[k] for k in ("0", "1", "2"))
        assert c["holds"] == (above if "above" in c["claim"] else below)


def test_a2eval_seeds_bad_arguments(tmp_path, capsys):
    assert main(["a2eval", "seeds", "--seeds", "0", "0", "1", "--out", str(tmp_path / "o")]) == 2
    assert "at least 3 distinct seeds" in one_error_line(capsys)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"report": {"n_random": 3}}))
    assert main(["a2eval", "seeds", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "n_random" in one_error_line(capsys)
    with pytest.raises(SystemExit) as exc:
        main(["a2eval", "seeds", "--seeds", "0", "-1", "2", "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert not (tmp_path / "o").exists()
