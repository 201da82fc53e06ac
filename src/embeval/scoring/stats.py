"""Correlation and rank statistics for IQA benchmarks (VQEG-style).

- SRCC (Spearman), KRCC (Kendall tau-b), PLCC (Pearson) on the raw predictions, and PLCC/RMSE after
  mapping the predictions to the scores with the 4- and 5-parameter logistic functions of VQEG:
  ``logistic4(x) = (b1 - b2) / (1 + exp(-(x - b3) / |b4|)) + b2``,
  ``logistic5(x) = b1 (1/2 - 1 / (1 + exp(b2 (x - b3)))) + b4 x + b5``.
  A fit that fails (no convergence, non-finite, constant output) falls back - 5PL to 4PL to the
  identity-linear map (raw PLCC, least-squares line for RMSE) - and the fallback is recorded.
- Orientation: for a lower-is-better metric (LPIPS, DISTS, a distance) pass
  ``higher_is_better=False``; predictions are negated first so a good metric correlates positively.
- Percentile bootstrap confidence intervals with an explicit seed (paired resampling of items).
- Rank agreement (Spearman, Kendall) between two rankings of the same models.
- Binomial success rates: the Wilson score interval of a proportion, and McNemar's test of paired outcomes
  (Act2Answer's swap pairs, a perturbation level against the clean episodes).
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from embeval.errors import ConfigError, InvalidInputError


def logistic4(x, b1, b2, b3, b4):
    """VQEG 4-parameter logistic: from ``b2`` (x -> -inf) to ``b1`` (x -> +inf), centre ``b3``, scale ``|b4|``."""
    return (b1 - b2) / (1.0 + np.exp(-(x - b3) / np.abs(b4))) + b2


def logistic5(x, b1, b2, b3, b4, b5):
    """VQEG 5-parameter logistic with a linear term."""
    return b1 * (0.5 - 1.0 / (1.0 + np.exp(b2 * (x - b3)))) + b4 * x + b5


@dataclass(frozen=True)
class LogisticFit:
    kind: str  # "4pl" or "5pl": what was asked for
    used: str  # what produced the mapping: "4pl", "5pl" or "linear" (fallback)
    params: tuple[float, ...]
    ok: bool  # False when a fallback was used
    message: str = ""

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if self.used == "4pl":
            return logistic4(x, *self.params)
        if self.used == "5pl":
            return logistic5(x, *self.params)
        return self.params[0] * x + self.params[1]


def _check_pair(pred, mos) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(pred, dtype=np.float64).reshape(-1)
    y = np.asarray(mos, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise InvalidInputError(f"predictions ({x.size}) and scores ({y.size}) must have the same length")
    if x.size < 3:
        raise InvalidInputError(f"need at least 3 (prediction, score) pairs for correlations, got {x.size}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise InvalidInputError("predictions or scores contain NaN or inf; drop or fix those items first")
    return x, y


def _linear(x, y) -> tuple[float, float]:
    if np.ptp(x) == 0:
        return 0.0, float(y.mean())
    a, b = np.polyfit(x, y, 1)
    return float(a), float(b)


def fit_logistic(pred, mos, kind: str = "5pl", maxfev: int = 20000) -> LogisticFit:
    """Least-squares fit of ``mos ~ logistic(pred)`` (scipy ``curve_fit``), with the fallback chain
    5PL -> 4PL -> linear. The initial guess follows the data's range, centre and trend."""
    x, y = _check_pair(pred, mos)
    if kind not in ("4pl", "5pl"):
        raise ConfigError(f"unknown logistic kind {kind!r}; choose '4pl' or '5pl'")
    sx = float(x.std()) or 1.0
    trend = 1.0 if _pearson(x, y) >= 0 else -1.0
    tries = []
    if kind == "5pl":
        tries.append(("5pl", logistic5, [trend * float(np.ptp(y)) or 1.0, 1.0 / sx, float(np.median(x)), 0.0, float(y.mean())]))
    y_hi, y_lo = (float(y.max()), float(y.min())) if trend > 0 else (float(y.min()), float(y.max()))
    tries.append(("4pl", logistic4, [y_hi, y_lo, float(np.median(x)), sx / 2]))
    messages = []
    if np.ptp(x) > 0 and np.ptp(y) > 0:
        for name, f, p0 in tries:
            if x.size <= len(p0):
                messages.append(f"{name} fit skipped: {x.size} points for {len(p0)} parameters")
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    params, _ = optimize.curve_fit(f, x, y, p0=p0, maxfev=maxfev)
                fitted = f(x, *params)
                if not np.all(np.isfinite(fitted)) or np.ptp(fitted) == 0:
                    raise RuntimeError("fit gave non-finite or constant output")
                return LogisticFit(kind, name, tuple(float(p) for p in params), ok=name == kind,
                                   message="; ".join(messages))
            except (RuntimeError, ValueError, TypeError, optimize.OptimizeWarning, FloatingPointError) as exc:
                messages.append(f"{name} fit failed: {exc}")
    else:
        messages.append("constant predictions or scores: no logistic fit possible")
    return LogisticFit(kind, "linear", _linear(x, y), ok=False, message="; ".join(messages))


@dataclass(frozen=True)
class Correlations:
    """Correlations of predictions with scores (after orientation)."""

    n: int
    srcc: float
    krcc: float
    plcc: float  # raw, no fit
    plcc_4pl: float
    plcc_5pl: float
    rmse_4pl: float  # RMSE between the 4PL-mapped predictions and the scores (score units)
    rmse_5pl: float
    fit_4pl: LogisticFit
    fit_5pl: LogisticFit
    higher_is_better: bool = True


#: correlation estimators of :func:`corr` (scipy's; Kendall is tau-b, which accounts for ties)
_ESTIMATORS = {"spearman": stats.spearmanr, "kendall": stats.kendalltau, "pearson": stats.pearsonr}


def corr(x, y, method: str = "spearman", constant: float = 0.0) -> float:
    """The one correlation helper: Spearman rho, Kendall tau-b or Pearson r (``method``) of two equal-length
    vectors, by scipy.

    Constant-input rule: when either vector is constant (``np.ptp == 0``) the coefficient is undefined and
    ``constant`` is returned; so is any non-finite estimate. The default 0.0 reads "no relation" (a metric
    that outputs one value orders nothing), keeping tables and means finite; an analysis that must drop
    undefined cases (a bootstrap over resamples) passes ``constant=float("nan")``.
    """
    if method not in _ESTIMATORS:
        raise ConfigError(f"unknown correlation method {method!r}; choose from {', '.join(_ESTIMATORS)}")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float(constant)
    v = float(_ESTIMATORS[method](x, y)[0])
    return v if np.isfinite(v) else float(constant)


def _pearson(a, b) -> float:
    return corr(a, b, "pearson")


def correlations(pred, mos, higher_is_better: bool = True) -> Correlations:
    """SRCC, KRCC, PLCC raw and after 4PL / 5PL fits, RMSE after the fits. Constant inputs give 0 (:func:`corr`)."""
    x, y = _check_pair(pred, mos)
    if not higher_is_better:
        x = -x
    srcc, krcc = corr(x, y, "spearman"), corr(x, y, "kendall")
    f4, f5 = fit_logistic(x, y, "4pl"), fit_logistic(x, y, "5pl")
    m4, m5 = f4(x), f5(x)
    return Correlations(
        n=int(x.size), srcc=srcc, krcc=krcc, plcc=_pearson(x, y),
        plcc_4pl=_pearson(m4, y), plcc_5pl=_pearson(m5, y),
        rmse_4pl=float(np.sqrt(np.mean((m4 - y) ** 2))), rmse_5pl=float(np.sqrt(np.mean((m5 - y) ** 2))),
        fit_4pl=f4, fit_5pl=f5, higher_is_better=higher_is_better,
    )


def _srcc(x, y):
    return _pearson(stats.rankdata(x), stats.rankdata(y))


#: statistics available to :func:`bootstrap_ci`: name -> f(pred, mos) (pred already oriented)
STATISTICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "srcc": _srcc,
    "krcc": lambda x, y: corr(x, y, "kendall"),
    "plcc": _pearson,
    "plcc_4pl": lambda x, y: _pearson(fit_logistic(x, y, "4pl")(x), y),
    "plcc_5pl": lambda x, y: _pearson(fit_logistic(x, y, "5pl")(x), y),
}


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson r of each row pair; 0 for a constant row (the rule of :func:`corr`), vectorised for the bootstrap."""
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (a * b).sum(axis=1) / den
    return np.where(den > 0, np.clip(r, -1.0, 1.0), 0.0)


@dataclass(frozen=True)
class ConfidenceInterval:
    statistic: str
    estimate: float  # on the full sample
    low: float
    high: float
    confidence: float
    n_resamples: int
    seed: int


def bootstrap_ci(pred, mos, statistic: str = "srcc", n_resamples: int = 1000, confidence: float = 0.95,
                 seed: int = 0, higher_is_better: bool = True) -> ConfidenceInterval:
    """Percentile bootstrap CI of ``statistic`` (see :data:`STATISTICS`), resampling items with
    replacement (pairs kept together) ``n_resamples`` times with ``numpy.random.default_rng(seed)``."""
    if statistic not in STATISTICS:
        raise ConfigError(f"unknown statistic {statistic!r}; choose from {', '.join(STATISTICS)}")
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must lie in (0, 1), got {confidence}")
    if n_resamples < 10:
        raise ConfigError(f"n_resamples must be at least 10, got {n_resamples}")
    x, y = _check_pair(pred, mos)
    if not higher_is_better:
        x = -x
    f = STATISTICS[statistic]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_resamples, x.size))
    if statistic in ("srcc", "plcc"):  # vectorised over resamples (same values as the per-resample loop)
        xs, ys = x[idx], y[idx]
        if statistic == "srcc":
            xs, ys = stats.rankdata(xs, axis=1), stats.rankdata(ys, axis=1)
        vals = _rowwise_pearson(xs, ys)
    else:
        vals = np.array([f(x[i], y[i]) for i in idx])
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(vals, [alpha, 1 - alpha])
    return ConfidenceInterval(statistic, f(x, y), float(lo), float(hi), confidence, n_resamples, seed)


@dataclass(frozen=True)
class RankAgreement:
    """Agreement of two rankings of the same items (e.g. models on a subset vs the full benchmark)."""

    n: int
    spearman: float
    spearman_p: float
    kendall: float  # tau-b (ties handled)
    kendall_p: float
    items: tuple


def rank_agreement(a: Mapping[Hashable, float] | Sequence[float], b: Mapping[Hashable, float] | Sequence[float],
                   higher_is_better_a: bool = True, higher_is_better_b: bool = True) -> RankAgreement:
    """Spearman and Kendall agreement of two score tables (mappings are matched on their common keys;
    sequences by position). Orientation flags make both "higher = better" before comparing."""
    if isinstance(a, Mapping) != isinstance(b, Mapping):
        raise InvalidInputError("give both rankings as mappings (name -> score) or both as sequences")
    if isinstance(a, Mapping):
        items = tuple(k for k in a if k in b)
        xa = np.array([a[k] for k in items], dtype=np.float64)
        xb = np.array([b[k] for k in items], dtype=np.float64)
    else:
        xa, xb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if xa.shape != xb.shape:
            raise InvalidInputError(f"rankings of different lengths ({xa.size} vs {xb.size})")
        items = tuple(range(xa.size))
    if xa.size < 2:
        raise InvalidInputError(f"need at least 2 common items to compare rankings, got {xa.size}")
    xa = xa if higher_is_better_a else -xa
    xb = xb if higher_is_better_b else -xb
    if np.ptp(xa) == 0 or np.ptp(xb) == 0:
        return RankAgreement(int(xa.size), 0.0, 1.0, 0.0, 1.0, items)
    s = stats.spearmanr(xa, xb)
    k = stats.kendalltau(xa, xb)
    return RankAgreement(int(xa.size), float(s[0]), float(s[1]), float(k[0]), float(k[1]), items)


# --------------------------------------------------------------------------- binomial success rates
def wilson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``successes / n``; (0, 1) when n == 0."""
    if n < 0 or successes < 0 or successes > n:
        raise InvalidInputError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must lie in (0, 1), got {confidence}")
    if n == 0:
        return (0.0, 1.0)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar(b: int, c: int) -> tuple[float, float, float]:
    """McNemar's test on the discordant counts ``b`` (first only) and ``c`` (second only) of paired binary
    outcomes: (chi2 with continuity correction, exact two-sided p, chi2 p)."""
    if b < 0 or c < 0:
        raise InvalidInputError(f"discordant counts must be >= 0, got b={b}, c={c}")
    if b + c == 0:
        return 0.0, 1.0, 1.0
    stat = (abs(b - c) - 1) ** 2 / (b + c)
    p_exact = float(stats.binomtest(min(b, c), b + c, 0.5).pvalue)
    return float(stat), min(1.0, p_exact), float(stats.chi2.sf(stat, 1))
