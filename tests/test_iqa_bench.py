"""Embodied-IQA benchmark: correlations against scipy and an independent PSNR, split statistics,
the NR predictor round trip, and the live quality gate against a PSNR gate (measured)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image
from scipy.stats import spearmanr

from embeval.distortion.samples import synthetic_tabletop

# the policies below act on the mean colour: brightness changes move their actions; noise, blur and
# pixelation barely do, yet they lower PSNR
TYPES = ["darken", "mean_shift", "white_noise", "impulse_noise", "gaussian_blur", "pixelate"]
# the natural operating point: withhold as many frames as there are low ones (the lowest third)
RATE = 1 / 3
SUBJECTS = [{"id": f"stats-{i}", "kind": "policy", "adapter": "image_stats", "params": {"scale": s}}
            for i, s in enumerate((0.05, 0.1, 0.2))]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from embeval_analysis.iqa.database import BuildConfig, build_database

    imgs = tmp_path_factory.mktemp("imgs")
    for i in range(8):
        Image.fromarray(synthetic_tabletop(48, 32, seed=10 + i)).save(imgs / f"im{i}.png")
    (imgs / "tasks.yaml").write_text(yaml.safe_dump({"*": ["pick up the cube"]}))
    out = tmp_path_factory.mktemp("db")
    cfg = BuildConfig(source="folder", source_params={"path": str(imgs)}, distortions=TYPES, levels=[2, 4, 5],
                      subjects=SUBJECTS, seed=0)
    return out, build_database(cfg, out, log=None)


@pytest.fixture(scope="module")
def bench(db):
    from embeval_analysis.iqa.bench import BenchConfig, run_bench
    from embeval_analysis.iqa.metrics import TrainConfig

    cfg = BenchConfig(targets=["decision"], zero_shot=["psnr", "ssim", "niqe"], trained=["cnniqa", "brisque-svr", "nr-fusion", "fr-fusion"],
                      n_splits=3, cnniqa_splits=1, test_size=0.25, seed=0,
                      train=TrainConfig(epochs=5, input_size=[32, 48], n_kers=16, n_nodes=64, lr=2e-3))
    return run_bench(db[0], cfg, log=print)


def test_psnr_matches_independent_implementation(db, bench):
    from skimage.metrics import peak_signal_noise_ratio

    out, scores = db
    for i in (0, 7, 100):
        ref = np.asarray(Image.open(out / scores["ref_path"].iloc[i]))
        dist = np.asarray(Image.open(out / scores["path"].iloc[i]))
        assert bench.metric_values["psnr"][i] == pytest.approx(min(peak_signal_noise_ratio(ref, dist), 60.0), abs=0.05)


def test_split_correlations_match_scipy_and_summary_is_median(db, bench):
    from embeval_analysis.iqa.export import scene_splits

    _, scores = db
    y = scores["decision"].to_numpy(float)
    splits = scene_splits(scores["scene_id"].to_numpy(), 3, 0.25, 0)
    ps = bench.per_split
    psnr = ps[(ps.metric == "psnr") & (ps.breakdown == "all")].set_index("split")
    for k, (_, te) in enumerate(splits):
        assert psnr.loc[k, "srcc"] == pytest.approx(spearmanr(bench.metric_values["psnr"][te], y[te]).statistic, abs=1e-12)
        assert psnr.loc[k, "n"] == len(te)
    row = bench.summary[(bench.summary.metric == "psnr") & (bench.summary.breakdown == "all")].iloc[0]
    assert row.srcc == pytest.approx(np.median(psnr["srcc"])) and row.n_splits == 3
    assert row.srcc_lo <= row.srcc <= row.srcc_hi
    # breakdowns present: parts of the decision score, JND thirds, levels
    groups = set(zip(ps.breakdown, ps.group))
    assert {("dimension", "position"), ("jnd", "severe"), ("level", "4")} <= groups
    assert "niqe" in bench.unavailable and "niqe_modelparameters.mat" in bench.unavailable["niqe"]


def test_trained_vs_psnr_and_gate_comparison_arithmetic():
    from embeval_analysis.iqa.bench import BenchResult, gate_comparison, trained_vs_psnr

    per = pd.DataFrame([{"metric": m, "kind": k, "target": "decision", "breakdown": "all", "split": s, "srcc": v}
                        for m, k, vals in (("psnr", "zero-shot", (0.5, 0.6, 0.7)), ("cnniqa", "trained", (0.55, 0.5, 0.8)))
                        for s, v in enumerate(vals)])
    r = trained_vs_psnr(BenchResult(per, None, {}, {}, {}), "decision")[0]
    assert r["srcc"] == pytest.approx(0.55) and r["psnr_srcc"] == pytest.approx(0.6)
    assert r["splits_better"] == 2 and r["better"] is False
    y = np.array([0.0, 1, 2, 3, 4, 5])  # low (lowest third): frames 0, 1
    gate = np.array([0.1, 0.2, 5, 5, 5, 5])  # finds both low frames
    psnr = np.array([30, 30, 1, 2, 30, 30.0])  # withholds two good frames
    row = gate_comparison(gate, psnr, y, rates=(1 / 3,))[0]
    assert row["gate_precision"] == 1.0 and row["psnr_precision"] == 0.0
    assert row["gate_recall"] == 1.0 and row["gate_passed_mean"] == pytest.approx(3.5)


def test_predictor_round_trip_and_gate(bench, db, tmp_path):
    from embeval.errors import ConfigError, MissingWeightsError
    from embeval.iqa import NRPredictor, QualityGate, load_predictor
    from embeval_analysis.iqa.bench import save_gate

    out, scores = db
    imgs = [np.asarray(Image.open(out / f)) for f in scores["path"].iloc[:8]]
    for metric in ("cnniqa", "nr-fusion"):
        p = save_gate(bench, tmp_path / metric, rate=0.25, metric=metric)
        a = bench.split0["predictor"][(metric, "decision")].predict(imgs)
        b = load_predictor(p).predict(imgs)
        assert np.allclose(a, b, atol=1e-5)
    assert isinstance(load_predictor(tmp_path / "cnniqa"), NRPredictor)
    gate = QualityGate.load(p)
    decisions = [gate.check(im) for im in imgs]
    assert [d.passed for d in decisions] == [s >= gate.threshold for s in b]
    assert gate.seen == 8 and gate.withheld_rate == pytest.approx(np.mean(b < gate.threshold))
    with pytest.raises(MissingWeightsError, match="embeval iqa bench"):
        load_predictor(tmp_path / "nothing")
    with pytest.raises(ConfigError):
        QualityGate(gate.predictor, float("nan"))


def test_feature_svr_matches_scikit_learn(db, bench):
    """The numpy evaluation of the saved SVR equals scikit-learn's predict on the same features."""
    from sklearn.svm import SVR

    from embeval.iqa.features import nr_features

    out, scores = db
    m = bench.split0["predictor"][("nr-fusion", "decision")]
    tr = bench.split0["train"]
    X = np.concatenate([bench.features["nss"], bench.features["colour"], bench.features["stats"]], axis=1)
    few = [np.asarray(Image.open(out / f)) for f in scores["path"].iloc[:3]]
    assert np.allclose(nr_features(few), X[:3], atol=1e-9)  # batched features = per-image features
    mu, sd = X[tr].mean(0), X[tr].std(0)
    sd[sd == 0] = 1
    svr = SVR(C=3.0, epsilon=0.05, gamma="scale").fit((X[tr] - mu) / sd, scores["decision"].to_numpy()[tr])
    assert np.allclose(m.predict_features(X), svr.predict((X - mu) / sd), atol=1e-8)


def test_gate_withholds_low_decision_frames_more_often_than_psnr_gate(db, bench):
    """Measured on the held-out scenes of split 1: at the same withheld rate, the best trained NR
    gate catches more frames whose Decision score is in the lowest third than a PSNR-threshold gate."""
    from embeval_analysis.iqa.bench import best_nr, gate_comparison

    _, scores = db
    te = bench.split0["test"]
    y = scores["decision"].to_numpy(float)[te]
    best = best_nr(bench, "decision")
    rows = gate_comparison(bench.split0["pred"][(best, "decision")], bench.metric_values["psnr"][te], y, rates=(0.2, RATE))
    for r in rows:
        print(f"{best} gate, withheld {r['rate']:.0%}: precision {r['gate_precision']:.2f} vs PSNR gate {r['psnr_precision']:.2f}; "
              f"mean Decision passed {r['gate_passed_mean']:.3f} vs {r['psnr_passed_mean']:.3f}")
    low, at_rate = rows[0], rows[1]
    assert low["gate_precision"] >= low["psnr_precision"], low
    assert at_rate["gate_precision"] > at_rate["psnr_precision"], at_rate
    assert at_rate["gate_passed_mean"] > at_rate["psnr_passed_mean"], at_rate


def test_corr_agrees_with_scoring_stats():
    """The benchmark's correlation helper = embeval.scoring.stats.correlations (minus the 5PL fit)."""
    from embeval.scoring.stats import correlations
    from embeval_analysis.iqa.bench import _corr

    rng = np.random.default_rng(0)
    x = rng.normal(size=60)
    y = 3 / (1 + np.exp(-2 * x)) + rng.normal(0, 0.2, 60)
    for hib in (True, False):
        ref = correlations(x if hib else -x, y, higher_is_better=hib)
        got = _corr(x if hib else -x, y, hib)
        for k in ("srcc", "krcc", "plcc", "plcc_4pl"):
            assert got[k] == pytest.approx(getattr(ref, k), abs=1e-9)
    assert _corr(np.ones(5), np.arange(5.0), True)["srcc"] == 0.0
