"""Correlations agree with scipy; logistic PLCC matches an independent reference fit; JND thirds."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

from embeval.errors import InvalidInputError
from embeval.scoring.jnd import jnd_groups, jnd_split
from embeval.scoring.stats import bootstrap_ci, correlations, fit_logistic, rank_agreement


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(42)
    x = rng.uniform(0, 1, 150)
    # scores from a known logistic in x plus noise
    y = 1 + 4 / (1 + np.exp(-(x - 0.55) / 0.08)) + rng.normal(0, 0.15, x.size)
    return x, y


def test_raw_correlations_agree_with_scipy(data):
    x, y = data
    c = correlations(x, y)
    assert c.srcc == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    assert c.krcc == pytest.approx(stats.kendalltau(x, y)[0], abs=1e-12)
    assert c.plcc == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    lo = correlations(-x, y, higher_is_better=False)  # a lower-is-better metric, oriented
    assert lo.srcc == pytest.approx(c.srcc) and lo.plcc == pytest.approx(c.plcc)
    assert correlations(-x, y).srcc == pytest.approx(-c.srcc)


def test_logistic_plcc_matches_reference_fit(data):
    x, y = data
    c = correlations(x, y)
    # independent reference: the 4PL written out here, fitted with curve_fit from a generic start
    f4 = lambda t, a, b, m, s: b + (a - b) / (1 + np.exp(-(t - m) / s))  # noqa: E731
    p4, _ = optimize.curve_fit(f4, x, y, p0=[y.max(), y.min(), np.mean(x), 0.1], maxfev=20000)
    ref4 = stats.pearsonr(f4(x, *p4), y)[0]
    f5 = lambda t, b1, b2, b3, b4, b5: b1 * (0.5 - 1 / (1 + np.exp(b2 * (t - b3)))) + b4 * t + b5  # noqa: E731
    p5, _ = optimize.curve_fit(f5, x, y, p0=[4, 10, 0.5, 0, 3], maxfev=20000)
    ref5 = stats.pearsonr(f5(x, *p5), y)[0]
    assert c.fit_4pl.ok and c.fit_5pl.ok
    assert c.plcc_4pl == pytest.approx(ref4, abs=1e-5)
    assert c.plcc_5pl == pytest.approx(ref5, abs=1e-5)
    assert c.plcc_4pl > c.plcc + 0.02  # the fit matters on a non-linear relation
    # the fitted parameters recover the generating logistic
    b1, b2, b3, b4 = c.fit_4pl.params
    assert (b1, b2, b3, abs(b4)) == pytest.approx((5, 1, 0.55, 0.08), rel=0.1)
    assert c.rmse_4pl == pytest.approx(np.sqrt(np.mean((f4(x, *p4) - y) ** 2)), rel=1e-4)
    assert c.rmse_4pl == pytest.approx(0.15, rel=0.15)  # the noise level


def test_fit_fallback_recorded():
    x = np.array([0.0, 0.0, 0.0, 1.0])  # too little structure for 4/5 parameters
    y = np.array([1.0, 2.0, 3.0, 4.0])
    f = fit_logistic(x, y, "5pl", maxfev=5)
    assert not f.ok and f.used in ("4pl", "linear") and ("failed" in f.message or "skipped" in f.message)
    rng = np.random.default_rng(0)
    u = rng.uniform(0, 1, 40)
    g = fit_logistic(u, u + rng.normal(0, 0.5, 40), "5pl", maxfev=3)  # cannot converge in 3 evaluations
    assert not g.ok and "failed" in g.message and g.kind == "5pl" and g.used != "5pl"
    const = correlations(np.ones(5), np.arange(5.0))
    assert const.srcc == 0 and const.plcc == 0 and const.fit_5pl.used == "linear" and not const.fit_5pl.ok


def test_bootstrap_ci(data):
    x, y = data
    a = bootstrap_ci(x, y, "srcc", n_resamples=400, seed=7)
    b = bootstrap_ci(x, y, "srcc", n_resamples=400, seed=7)
    assert a == b  # seeded
    assert a.low < a.estimate < a.high
    ref = stats.bootstrap((x, y), lambda u, v: stats.spearmanr(u, v)[0], paired=True, vectorized=False,
                          n_resamples=400, method="percentile", rng=np.random.default_rng(1)).confidence_interval
    assert a.low == pytest.approx(ref.low, abs=0.02) and a.high == pytest.approx(ref.high, abs=0.02)
    assert bootstrap_ci(x, y, "plcc", n_resamples=50, seed=0).estimate == pytest.approx(stats.pearsonr(x, y)[0])
    # the vectorised resampling equals the plain loop over resamples
    idx = np.random.default_rng(3).integers(0, x.size, size=(60, x.size))
    loop = np.array([stats.spearmanr(x[i], y[i])[0] for i in idx])
    c = bootstrap_ci(x, y, "srcc", n_resamples=60, seed=3, confidence=0.9)
    assert (c.low, c.high) == pytest.approx(tuple(np.quantile(loop, [0.05, 0.95])), abs=1e-12)
    krcc = bootstrap_ci(x, y, "krcc", n_resamples=60, seed=3, confidence=0.9)
    loop_k = np.array([stats.kendalltau(x[i], y[i])[0] for i in idx])
    assert (krcc.low, krcc.high) == pytest.approx(tuple(np.quantile(loop_k, [0.05, 0.95])), abs=1e-12)


def test_rank_agreement():
    a = {"m1": 0.9, "m2": 0.7, "m3": 0.5, "m4": 0.2, "extra": 1.0}
    b = {"m1": 0.8, "m2": 0.75, "m3": 0.1, "m4": 0.3}
    r = rank_agreement(a, b)
    assert r.n == 4 and set(r.items) == {"m1", "m2", "m3", "m4"}
    xa, xb = [0.9, 0.7, 0.5, 0.2], [0.8, 0.75, 0.1, 0.3]
    assert r.spearman == pytest.approx(stats.spearmanr(xa, xb)[0])
    assert r.kendall == pytest.approx(stats.kendalltau(xa, xb)[0])
    errors = {"m1": 1.0, "m2": 2.0, "m3": 4.0, "m4": 3.0}  # lower is better
    assert rank_agreement(a, errors, higher_is_better_b=False).spearman == pytest.approx(r.spearman)
    with pytest.raises(InvalidInputError):
        rank_agreement([1, 2], [1, 2, 3])


def test_jnd_thirds_and_ties():
    s = np.arange(9.0)
    g = jnd_groups(s)
    assert list(g) == ["severe"] * 3 + ["medium"] * 3 + ["mild"] * 3
    assert list(jnd_groups(s, higher_is_milder=False)) == ["mild"] * 3 + ["medium"] * 3 + ["severe"] * 3
    tied = np.array([5.0, 1, 1, 1, 1, 9, 8, 7, 6])
    gt = jnd_groups(tied)
    assert len(set(gt[tied == 1])) == 1  # equal scores share a group
    split = jnd_split(tied)
    assert sorted(np.concatenate(list(split.values())).tolist()) == list(range(9))
    with pytest.raises(InvalidInputError):
        jnd_groups([1.0, np.nan])


def test_one_correlation_helper_and_its_constant_input_rule():
    """corr agrees with scipy on ordinary input; a constant vector gives `constant` (0.0 by default, NaN on request)
    in every place that correlates: correlations(), the bootstrap statistics, the IQA benchmark and A2Eval fidelity."""
    from embeval.errors import ConfigError
    from embeval.scoring.stats import STATISTICS, corr
    from embeval_analysis.a2eval.fidelity import _corrs
    from embeval_analysis.iqa.bench import _corr

    rng = np.random.default_rng(3)
    x, y = rng.normal(size=30), rng.normal(size=30)
    y[:5] = y[5]  # ties
    assert corr(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert corr(x, y, "kendall") == pytest.approx(stats.kendalltau(x, y, variant="b").statistic, abs=1e-12)
    assert corr(x, y, "pearson") == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    flat = np.full(30, 0.7)
    for m in ("spearman", "kendall", "pearson"):
        assert corr(flat, y, m) == 0.0 and corr(x, flat, m) == 0.0
        assert np.isnan(corr(flat, y, m, constant=float("nan")))
    c = correlations(flat, y)
    assert (c.srcc, c.krcc, c.plcc) == (0.0, 0.0, 0.0)
    assert all(f(flat, y) == 0.0 for f in STATISTICS.values())
    assert _corr(flat, y, True) == {"srcc": 0.0, "krcc": 0.0, "plcc": 0.0, "plcc_4pl": 0.0}
    assert all(np.isnan(v) for v in _corrs(flat, y))  # the fidelity bootstrap drops undefined resamples
    assert _corrs(x, y) == (corr(x, y), corr(x, y, "kendall"), corr(x, y, "pearson"))
    with pytest.raises(ConfigError, match="unknown correlation method"):
        corr(x, y, "cosine")
