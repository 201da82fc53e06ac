"""Embodied-IQA benchmark: correlations against scipy and an independent PSNR, split statistics,
the NR predictor round trip, and the live quality gate against a PSNR gate (measured)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import folder_iqa_database
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
    return folder_iqa_database(tmp_path_factory, 8, 10, distortions=TYPES, levels=[2, 4, 5], subjects=SUBJECTS, seed=0)


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
    ps = bench.per_split[bench.per_split.protocol == "scene"]  # the scene-disjoint option (random: test_paper_defaults)
    psnr = ps[(ps.metric == "psnr") & (ps.breakdown == "all")].set_index("split")
    for k, (_, te) in enumerate(splits):
        assert psnr.loc[k, "srcc"] == pytest.approx(spearmanr(bench.metric_values["psnr"][te], y[te]).statistic, abs=1e-12)
        assert psnr.loc[k, "n"] == len(te)
    row = bench.summary[(bench.summary.metric == "psnr") & (bench.summary.breakdown == "all")
                        & (bench.summary.protocol == "scene")].iloc[0]
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
        p = save_gate(bench, tmp_path / metric, rate=0.25, metric=metric)  # the gate: scene-disjoint split 1
        a = bench.view("scene").split0["predictor"][(metric, "decision")].predict(imgs)
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
    """The numpy evaluation of the saved SVR equals scikit-learn's predict on the same features (fitted
    to the normal scores of the target's ranks), mapped back to Decision units through the training
    target's quantiles (monotone: the gate's order is the SVR's)."""
    from scipy.special import ndtr, ndtri
    from scipy.stats import rankdata
    from sklearn.svm import SVR

    from embeval.iqa.features import nr_features

    out, scores = db
    m = bench.split0["predictor"][("nr-fusion", "decision")]
    assert m.target_transform == "rank" and m.input_size == [32, 48]
    tr = bench.split0["train"]
    X = np.concatenate([bench.features[f] for f in ("nss", "colour", "stats", "signal")], axis=1)
    assert X.shape[1] == 36 + 7 + 20 + 14
    few = [np.asarray(Image.open(out / f)) for f in scores["path"].iloc[:3]]
    assert np.allclose(nr_features(few), X[:3], atol=1e-9)  # batched features = per-image features
    mu, sd = X[tr].mean(0), X[tr].std(0)
    sd[sd == 0] = 1
    y = scores["decision"].to_numpy()[tr]
    svr = SVR(C=3.0, epsilon=0.1, gamma="scale").fit((X[tr] - mu) / sd, ndtri((rankdata(y) - 0.5) / len(y)))
    f = svr.predict((X - mu) / sd)
    got = m.predict_features(X)
    assert np.allclose(got, np.interp(ndtr(f), np.linspace(0, 1, 201), np.quantile(y, np.linspace(0, 1, 201))), atol=1e-8)
    assert y.min() <= got.min() and got.max() <= y.max()
    assert np.all(np.diff(got[np.argsort(f)]) >= 0)


def test_feature_predictor_resizes_live_frames_and_loads_old_files(bench, db, tmp_path):
    """A 4x larger camera frame is scored as its area-resized copy at the training size; a predictor
    saved before target_transform / input_size existed still loads (raw target, frames as they come)."""
    import json

    import cv2

    from embeval.iqa import load_predictor

    out, scores = db
    m = bench.split0["predictor"][("nr-fusion", "decision")]
    big = synthetic_tabletop(192, 128, seed=99)
    small = cv2.resize(big, (48, 32), interpolation=cv2.INTER_AREA)
    assert m(big) == pytest.approx(m(small), abs=1e-12)
    old = _plain_predictor(bench)
    p = old.save(tmp_path / "old")
    doc = json.loads((p / "predictor.json").read_text())
    for k in ("target_transform", "input_size"):
        doc.pop(k)
    (p / "predictor.json").write_text(json.dumps(doc))
    back = load_predictor(p)
    assert back.target_transform == "none" and back.input_size is None
    imgs = [np.asarray(Image.open(out / f)) for f in scores["path"].iloc[:4]]
    assert np.allclose(back.predict(imgs), old.predict(imgs), atol=1e-12)


def _plain_predictor(bench):
    """The old nr-fusion: NSS + colour + image statistics, SVR on the raw target, no resize."""
    from embeval.iqa.predictor import FeatureSVRPredictor

    tr = bench.split0["train"]
    return FeatureSVRPredictor(("nss", "colour", "stats"), "decision").fit_features(
        np.concatenate([bench.features[f] for f in ("nss", "colour", "stats")], axis=1)[tr], np.linspace(3, 5, len(tr)))


def test_signal_features_measure_what_they_name():
    """Noise sigma (Immerkaer) recovers added Gaussian noise; blur moves energy out of the high bands;
    JPEG-like 8x8 blocks raise blockiness; clipping shares count saturated pixels."""
    import cv2

    from embeval.iqa.features import signal_features

    rng = np.random.default_rng(0)
    flat = np.full((96, 128, 3), 128, np.uint8)
    noisy = np.clip(flat + rng.normal(0, 10, flat.shape), 0, 255).astype(np.uint8)
    scene = synthetic_tabletop(128, 96, seed=1)
    blurred = cv2.GaussianBlur(scene, (0, 0), 2.0)
    blocks = cv2.resize(cv2.resize(scene, (16, 12), interpolation=cv2.INTER_AREA), (128, 96), interpolation=cv2.INTER_NEAREST)
    clipped = scene.copy()
    clipped[:48] = 255
    f = signal_features([noisy, scene, blurred, blocks, clipped])
    assert f.shape == (5, 14) and np.isfinite(f).all()
    assert np.exp(f[0, 0]) == pytest.approx(10.0 * np.sqrt(0.299**2 + 0.587**2 + 0.114**2), rel=0.1)  # grey of RGB noise
    assert f[2, 6] < f[1, 6] - 1.0  # log energy share of 0.15-0.3 cycles/pixel: blur removes it
    assert f[2, 0] < f[1, 0] - 1.0 and f[2, 3] < f[1, 3]  # and lowers the noise estimate and the 99 % gradient
    assert max(f[3, 8], f[3, 9]) > 2.0 > max(f[1, 8], f[1, 9])  # blockiness of 8x8 blocks
    assert f[4, 11] >= 0.5 and f[1, 11] < 0.05  # bright clipped share


def test_gate_withholds_low_decision_frames_more_often_than_psnr_gate(db, bench):
    """Measured on the held-out scenes of every split: at the same withheld rate, the best trained NR
    gate (trained per split) catches more frames whose Decision score is in the lowest third than a
    PSNR-threshold gate (which needs the clean reference frame)."""
    from embeval_analysis.iqa.bench import best_nr, gate_comparison, gate_over_splits, print_gate_over_splits

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
    summary, per = gate_over_splits(bench, scores, best, rates=(0.2, RATE), n_boot=200)
    print_gate_over_splits(summary)
    assert len(per) == 2 * 3 and summary["n_splits"].tolist() == [3, 3]
    r = summary.iloc[1]
    assert r["diff"] > 0 and r.splits_higher >= 2 and r.diff_lo <= r["diff"] <= r.diff_hi, r


def test_gate_over_splits_arithmetic_and_bootstrap():
    """Per split: share of low frames among the round(rate * n) lowest scores of each gate; low = the
    database's lowest third; summary = medians over splits; bootstrap weights = duplicated frames."""
    from embeval_analysis.iqa.bench import BenchResult, _withheld_low_share, gate_over_splits

    y = np.array([1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])  # low: 1..4
    scores = pd.DataFrame({"decision": y, "scene_id": np.repeat(["a", "b", "c", "d"], 3)})
    te0, te1 = np.arange(0, 6), np.arange(6, 12)
    psnr = np.array([9.0, 1, 2, 3, 8, 7, 1, 2, 3, 4, 5, 6])  # split 0: withholds 2, 3 (2 and 3 low); split 1: 7, 8
    gate = {0: np.array([0.0, 1, 9, 2, 5, 5]), 1: np.array([6.0, 5, 4, 3, 2, 1])}  # split 0: 1, 2; split 1: 12, 11
    res = BenchResult(None, None, {}, {"psnr": psnr}, {}, splits=[(te1, te0), (te0, te1)],
                      preds={("nr", "decision"): gate})
    summary, per = gate_over_splits(res, scores, "nr", rates=(1 / 3,), n_boot=50)
    assert per["gate"].tolist() == [1.0, 0.0] and per["psnr"].tolist() == [1.0, 0.0]
    r = summary.iloc[0]
    assert (r.gate, r.psnr, r["diff"]) == (0.5, 0.5, 0.0) and (r.splits_higher, r.splits_equal, r.splits_lower) == (0, 2, 0)
    assert r.gate_lo <= r.gate <= r.gate_hi and r.low_share == pytest.approx(4 / 12)
    # weights count copies: the same as repeating frames
    rng = np.random.default_rng(3)
    sc, low, w = rng.random(20), rng.random(20) < 0.4, rng.integers(0, 3, 20)
    rates = (0.1, 0.25, 0.5)
    got = _withheld_low_share(sc, w, low, rates)
    rep = np.repeat(np.arange(20), w)
    assert np.allclose(got, _withheld_low_share(sc[rep], np.ones(len(rep)), low[rep], rates))
    for j, rt in enumerate(rates):
        k = int(round(rt * len(rep)))
        assert got[j] == pytest.approx(low[rep][np.argsort(sc[rep], kind="stable")[:k]].mean())
    from embeval.errors import ConfigError

    with pytest.raises(ConfigError, match="no held-out predictions"):
        gate_over_splits(res, scores, "cnniqa")


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


def test_summary_reports_mean_and_median_over_splits():
    """The paper reports the mean over splits; the summary keeps the median beside it."""
    import pandas as pd

    from embeval_analysis.iqa.bench import summarise

    vals = [0.1, 0.5, 0.6]
    per = pd.DataFrame([{"metric": "m", "mode": "NR", "kind": "trained", "target": "decision", "breakdown": "all",
                         "group": "all", "split": s, "srcc": v, "krcc": v / 2, "plcc": v, "plcc_4pl": v, "n": 10}
                        for s, v in enumerate(vals)])
    r = summarise(per).iloc[0]
    assert r["srcc"] == pytest.approx(0.5) and r["srcc_mean"] == pytest.approx(0.4)
    assert r["krcc_mean"] == pytest.approx(0.2) and r["n_splits"] == 3
