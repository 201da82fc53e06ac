"""Fidelity of a compressed benchmark: does it rank models like the full one, at what cost?

- :func:`rank_agreement`: Spearman rho, Kendall tau-b and Pearson r between two score vectors over
  the same models, percentile-bootstrap intervals (resampling models), and the discordant pairs.
- :func:`subset_fidelity`: full-pool model scores vs scores estimated from a subset (optionally
  cluster-mass weighted), intervals by resampling the subset's items; score MAE.
- :func:`random_baseline`: the same statistics for ``n_seeds`` (>= 20) random subsets of equal size.
- :func:`kcenter`: the greedy k-center baseline subset on the same embeddings.
- :func:`redundancy`: per-dimension near-duplicate statistics of the pool's embeddings.
- :func:`cost_summary`: items of the full pool vs the subset, and the measured wall-clock speed-up.
- :func:`dimension_fidelity`: the paper's score fidelity ``1 - |S_agent - S_ref| / |S_ref|`` per capability
  dimension plus the final score (mean over dimensions), as its Table 6 reports it (the default report).
- :func:`final_score_fidelity`: the same formula per benchmark (source) with the item mean over all items.
- :func:`inference_fidelity`: normalised edit similarity of the synthesised inference's outputs to
  the reference harness's outputs.
- :func:`pair_correlation` / :func:`pairwise_table`: Spearman, Kendall tau-b and tau-a of two columns.

Statistics come from scipy (``spearmanr``, ``kendalltau`` variant b, ``pearsonr``); model-resampling
intervals from :func:`embeval.scoring.stats.bootstrap_ci`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from embeval.errors import InvalidInputError
from embeval.scoring.stats import corr


#: scores are rounded to this many decimals before ranking, so float noise never breaks a tie
TIE_DECIMALS = 12


def _corrs(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(rho, tau-b, r) by :func:`embeval.scoring.stats.corr`; undefined (a constant vector) is NaN here, so the
    model-resampling bootstrap drops such resamples instead of counting them as zero agreement."""
    nan = float("nan")
    return corr(a, b, "spearman", nan), corr(a, b, "kendall", nan), corr(a, b, "pearson", nan)


def discordant_pairs(a: Sequence[float], b: Sequence[float], names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """Pairs (i, j) ordered one way by ``a`` and the other way by ``b`` (ties in either are not discordant)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    names = list(names) if names is not None else [str(i) for i in range(len(a))]
    out = []
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            if (a[i] - a[j]) * (b[i] - b[j]) < 0:
                out.append((names[i], names[j]))
    return out


@dataclass
class Interval:
    value: float
    lo: float
    hi: float

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.lo:.3f}, {self.hi:.3f}]"


@dataclass
class RankAgreement:
    """Agreement between two rankings of the same models (95% percentile-bootstrap intervals)."""

    n_models: int
    spearman: Interval
    kendall: Interval
    pearson: Interval
    discordant: list[tuple[str, str]] = field(default_factory=list)
    mae: float | None = None  # mean absolute score difference, same units as the scores

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _interval(value: float, boots: np.ndarray, level: float) -> Interval:
    boots = boots[np.isfinite(boots)]
    if len(boots) == 0:
        return Interval(value, float("nan"), float("nan"))
    a = (1 - level) / 2
    return Interval(value, float(np.quantile(boots, a)), float(np.quantile(boots, 1 - a)))


def rank_agreement(reference: Sequence[float], other: Sequence[float], names: Sequence[str] | None = None,
                   n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> RankAgreement:
    """Spearman / Kendall tau-b / Pearson between ``reference`` and ``other`` (one score per model),
    percentile intervals from resampling models with replacement (``n_boot`` draws, ``seed``),
    computed by :func:`embeval.scoring.stats.bootstrap_ci`."""
    from embeval.scoring.stats import bootstrap_ci

    a, b = np.asarray(reference, float), np.asarray(other, float)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 3:
        raise InvalidInputError(f"rank_agreement needs two equal-length score vectors of >= 3 models, got {a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise InvalidInputError("rank_agreement: scores contain NaN or inf")
    # equal scores reached by different float sums (4/9 as 0.4444444444444444 and ...45) are one tie, not an order
    a, b = np.round(a, TIE_DECIMALS), np.round(b, TIE_DECIMALS)
    rho, tau, r = _corrs(a, b)
    ivs = []
    for stat, value in (("srcc", rho), ("krcc", tau), ("plcc", r)):
        ci = bootstrap_ci(b, a, stat, n_resamples=n_boot, confidence=level, seed=seed)
        ivs.append(Interval(value, ci.low, ci.high))
    return RankAgreement(len(a), *ivs, discordant_pairs(a, b, names), float(np.mean(np.abs(a - b))))


def subset_fidelity(scores: np.ndarray, idx: Sequence[int], weights: Sequence[float] | None = None,
                    names: Sequence[str] | None = None, n_boot: int = 1000, seed: int = 0,
                    level: float = 0.95, groups: Sequence[str] | None = None) -> RankAgreement:
    """Full-pool means (``scores``: models x items in [0, 1]) vs the subset estimate over ``idx``:
    ``sum_i w_i s_i / sum_i w_i`` or, with ``groups`` (the capability dimension of each subset item), the mean
    over groups of each group's item mean (the A2Eval paper's headline, :mod:`.headline`). Intervals by
    resampling the subset's items (within each group when ``groups`` are given)."""
    scores = np.asarray(scores, float)
    idx = np.asarray(idx, int)
    w = np.ones(len(idx)) if weights is None else np.asarray(weights, float)
    if len(w) != len(idx) or len(idx) == 0:
        raise InvalidInputError(f"subset_fidelity: {len(idx)} indices but {len(w)} weights")
    full = scores.mean(axis=1)
    rng = np.random.default_rng(seed)
    boots = np.full((n_boot, 3), np.nan)
    if groups is not None:
        if weights is not None or len(groups) != len(idx):
            raise InvalidInputError(f"subset_fidelity: groups ({len(groups)}) need one label per index ({len(idx)}) "
                                    "and no weights")
        g = np.asarray([str(x) for x in groups])
        members = [idx[g == name] for name in dict.fromkeys(g.tolist())]
        est = np.mean([scores[:, m].mean(axis=1) for m in members], axis=0)
        rho, tau, r = _corrs(full, est)
        for k in range(n_boot):
            e = np.mean([scores[:, m[rng.integers(0, len(m), len(m))]].mean(axis=1) for m in members], axis=0)
            boots[k] = _corrs(full, e)
        return RankAgreement(len(full), _interval(rho, boots[:, 0], level), _interval(tau, boots[:, 1], level),
                             _interval(r, boots[:, 2], level), discordant_pairs(full, est, names),
                             float(np.mean(np.abs(full - est))))
    est = (scores[:, idx] * w).sum(axis=1) / w.sum()
    rho, tau, r = _corrs(full, est)
    for k in range(n_boot):
        j = rng.integers(0, len(idx), len(idx))
        e = (scores[:, idx[j]] * w[j]).sum(axis=1) / w[j].sum()
        boots[k] = _corrs(full, e)
    return RankAgreement(len(full), _interval(rho, boots[:, 0], level), _interval(tau, boots[:, 1], level),
                         _interval(r, boots[:, 2], level), discordant_pairs(full, est, names),
                         float(np.mean(np.abs(full - est))))


@dataclass
class BaselineStats:
    """Distribution over seeds of one baseline's agreement with the full ranking."""

    name: str
    n_seeds: int
    size: int
    spearman_mean: Interval  # mean over seeds, with a bootstrap interval of the mean
    kendall_mean: Interval
    mae_mean: float
    spearman_all: list[float]
    kendall_all: list[float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mean_interval(x: np.ndarray, seed: int, level: float = 0.95, n_boot: int = 2000) -> Interval:
    x = x[np.isfinite(x)]
    rng = np.random.default_rng(seed)
    means = np.array([rng.choice(x, len(x)).mean() for _ in range(n_boot)]) if len(x) else np.array([])
    return _interval(float(np.mean(x)) if len(x) else float("nan"), means, level)


#: the fewest random subsets whose mean the report compares against
MIN_RANDOM_SEEDS = 20


def random_baseline(scores: np.ndarray, size: int, n_seeds: int = 20, seed: int = 0) -> BaselineStats:
    """Uniform random subsets of ``size`` items (``n_seeds`` >= 20 draws), unweighted means."""
    if n_seeds < MIN_RANDOM_SEEDS:
        raise InvalidInputError(f"random_baseline: use at least {MIN_RANDOM_SEEDS} seeds for a stable mean, got {n_seeds}")
    from embeval.provenance import derive_seed

    scores = np.asarray(scores, float)
    full = scores.mean(axis=1)
    rhos, taus, maes = [], [], []
    for s in range(n_seeds):
        rng = np.random.default_rng(derive_seed("a2eval-random-subset", seed, s))
        idx = rng.choice(scores.shape[1], size=size, replace=False)
        est = scores[:, idx].mean(axis=1)
        rho, tau, _ = _corrs(full, est)
        rhos.append(rho), taus.append(tau), maes.append(float(np.mean(np.abs(full - est))))
    rhos_a, taus_a = np.array(rhos), np.array(taus)
    return BaselineStats("random", n_seeds, size, _mean_interval(rhos_a, seed), _mean_interval(taus_a, seed + 1),
                         float(np.mean(maes)), rhos, taus)


def kcenter(X: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Greedy k-center (farthest-point) selection on rows of ``X`` (Euclidean); first centre seeded."""
    X = np.asarray(X, float)
    n = len(X)
    k = min(k, n)
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(n))]
    d = np.linalg.norm(X - X[chosen[0]], axis=1)
    while len(chosen) < k:
        nxt = int(np.argmax(d))
        chosen.append(nxt)
        d = np.minimum(d, np.linalg.norm(X - X[nxt], axis=1))
    return np.array(chosen)


def kcenter_baseline(scores: np.ndarray, X: np.ndarray, size: int, n_seeds: int = 20, seed: int = 0) -> BaselineStats:
    """k-center subsets of ``size`` from ``n_seeds`` seeded starting points, unweighted means."""
    scores = np.asarray(scores, float)
    full = scores.mean(axis=1)
    rhos, taus, maes = [], [], []
    for s in range(n_seeds):
        idx = kcenter(X, size, seed=seed * 1000 + s)
        est = scores[:, idx].mean(axis=1)
        rho, tau, _ = _corrs(full, est)
        rhos.append(rho), taus.append(tau), maes.append(float(np.mean(np.abs(full - est))))
    return BaselineStats("k-center", n_seeds, size, _mean_interval(np.array(rhos), seed),
                         _mean_interval(np.array(taus), seed + 1), float(np.mean(maes)), rhos, taus)


def redundancy(X: np.ndarray, labels: Sequence[str], dup_threshold: float = 0.98) -> dict[str, dict[str, float]]:
    """Per label: items, mean cosine similarity to the nearest other item of the same label, and the
    share of items with a near-duplicate (cosine >= ``dup_threshold``)."""
    X = np.asarray(X, float)
    Xn = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    labels = np.asarray(labels)
    out = {}
    for lab in sorted(set(labels.tolist())):
        sel = Xn[labels == lab]
        if len(sel) < 2:
            out[lab] = {"items": float(len(sel)), "nn_cosine": float("nan"), "dup_share": 0.0}
            continue
        sim = sel @ sel.T
        np.fill_diagonal(sim, -np.inf)
        nn = sim.max(axis=1)
        out[lab] = {"items": float(len(sel)), "nn_cosine": float(nn.mean()), "dup_share": float(np.mean(nn >= dup_threshold))}
    return out


def cost_summary(n_full: int, n_subset: int, seconds_full: float | None = None,
                 seconds_subset: float | None = None) -> dict[str, float]:
    """Items full vs subset (``items_ratio``), and the measured wall-clock ``speedup`` =
    ``seconds_full / seconds_subset`` of evaluating the same subjects on both (NaN when not measured)."""
    out = {"items_full": float(n_full), "items_subset": float(n_subset),
           "reduction": 1.0 - n_subset / n_full, "items_ratio": n_full / max(n_subset, 1),
           "seconds_full": float("nan"), "seconds_subset": float("nan"), "speedup": float("nan")}
    if seconds_full is not None and seconds_subset is not None:
        out.update(seconds_full=float(seconds_full), seconds_subset=float(seconds_subset),
                   speedup=float(seconds_full) / max(float(seconds_subset), 1e-9))
    return out


def ranking_table(path: str, reference: str, others: Sequence[str] | None = None, n_boot: int = 2000,
                  seed: int = 0) -> dict[str, RankAgreement]:
    """Rank statistics of a published-style table: a CSV with a ``model`` column and one score column
    per suite (e.g. ``original,a2eval,human``); each column in ``others`` is compared with ``reference``.
    Use it to reproduce a paper's ranking table from its own numbers."""
    import pandas as pd

    from embeval.errors import ConfigError, MissingFileError

    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise MissingFileError(f"ranking table {path} not found") from None
    if "model" not in df.columns or reference not in df.columns:
        raise ConfigError(f"{path}: needs columns 'model' and {reference!r}; has {list(df.columns)}")
    others = list(others or [c for c in df.columns if c not in ("model", reference)])
    missing = [c for c in others if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: no column(s) {missing}; has {list(df.columns)}")
    return {c: rank_agreement(df[reference].to_numpy(float), df[c].to_numpy(float), df["model"].astype(str).tolist(),
                              n_boot, seed) for c in others}


@dataclass
class PairCorrelation:
    """Point rank correlations of two score columns over the same ``n`` models.

    ``kendall_a = (C - D) / (n (n - 1) / 2)``; ``kendall_b`` divides ``C - D`` by the geometric mean of the
    pairs untied in each column (scipy's ``kendalltau(variant='b')``), so the two agree when neither column
    has ties. Without ties ``C + D = n (n - 1) / 2``, hence ``kendall_a = 1 - 2 D / (n (n - 1) / 2)`` moves in
    steps of ``2 / (n (n - 1) / 2)`` (1/39 for 13 models)."""

    a: str
    b: str
    n: int
    spearman: float
    kendall_b: float
    kendall_a: float
    concordant: int
    discordant: int
    ties: int  # pairs tied in a, in b or in both


def pair_correlation(a: Sequence[float], b: Sequence[float], name_a: str = "a", name_b: str = "b") -> PairCorrelation:
    """Spearman rho, Kendall tau-b (scipy) and tau-a (counted here) of two score vectors."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 3:
        raise InvalidInputError(f"pair_correlation needs two equal-length score vectors of >= 3 models, got {x.shape} and {y.shape}")
    rho, tau_b, _ = _corrs(x, y)
    sign = np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :])
    iu = np.triu_indices(len(x), 1)
    s = sign[iu]
    c, d = int(np.sum(s > 0)), int(np.sum(s < 0))
    return PairCorrelation(name_a, name_b, len(x), rho, tau_b, (c - d) / len(s), c, d, int(len(s) - c - d))


def pairwise_table(path: str, columns: Sequence[str] | None = None) -> list[PairCorrelation]:
    """Every pair of score columns of a ``model,<suite>...`` CSV (a paper's ranking table's bottom rows)."""
    import itertools

    import pandas as pd

    df = pd.read_csv(path)
    cols = list(columns or [c for c in df.columns if c != "model"])
    return [pair_correlation(df[p].to_numpy(float), df[q].to_numpy(float), p, q) for p, q in itertools.combinations(cols, 2)]


# --------------------------------------------------------------------------- Eval Agent fidelity


def final_score_fidelity(agent: np.ndarray, reference: np.ndarray, groups: Sequence[str],
                         subjects: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The paper's score-fidelity formula ``1 - |S_agent - S_ref| / |S_ref|`` per benchmark (``groups[i]`` names
    item i's benchmark) and subject, where ``S`` is the subject's final score on the benchmark: the mean
    of its item scores (``agent``: synthesised inference + scorer; ``reference``: the reference harness;
    both subjects x items, NaN = no score, counted as 0). ``S_ref = 0`` gives NaN (undefined).
    The formula is unbounded below (a subject with a small ``S_ref`` can score far below 0), so the
    median over subjects is returned beside the mean.
    Returns ``{benchmark: {"items", "per_subject": {s: fid}, "s_agent", "s_ref", "mean", "median"}}``
    plus ``"all"`` (``S`` = the item mean over all items). This grouping is embeval's addition, reported beside
    :func:`dimension_fidelity` (the paper's Table 6 groups by capability dimension)."""
    A, R = np.nan_to_num(np.asarray(agent, float)), np.nan_to_num(np.asarray(reference, float))
    groups = np.asarray(list(groups))
    if A.shape != R.shape or A.shape[1] != len(groups):
        raise InvalidInputError(f"final_score_fidelity: shapes {A.shape} / {R.shape} for {len(groups)} items")
    out: dict[str, dict[str, Any]] = {}
    for g in sorted(set(groups.tolist())) + ["all"]:
        cols = np.ones(len(groups), bool) if g == "all" else groups == g
        sa, sr = A[:, cols].mean(axis=1), R[:, cols].mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            fid = np.where(np.abs(sr) > 0, 1.0 - np.abs(sa - sr) / np.abs(sr), np.nan)
        ok = np.isfinite(fid).any()
        out[g] = {"items": int(cols.sum()), "per_subject": dict(zip(subjects, fid.tolist())),
                  "s_agent": sa.tolist(), "s_ref": sr.tolist(),
                  "mean": float(np.nanmean(fid)) if ok else float("nan"),
                  "median": float(np.nanmedian(fid)) if ok else float("nan")}
    return out


def dimension_fidelity(agent: np.ndarray, reference: np.ndarray, dimensions: Sequence[str],
                       subjects: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Score fidelity as the A2Eval paper's Table 6 reports it: per capability dimension, plus the final score.
    Per dimension ``d``: ``1 - |S_agent,d - S_ref,d| / |S_ref,d|`` with ``S_d`` the subject's mean item score in
    ``d``; ``"final"``: the same with ``S`` the subject's final benchmark score, the mean over dimensions of the
    ``S_d`` (the paper's headline, :func:`.headline.headline_scores`). ``agent`` / ``reference``: subjects x
    items, NaN = no score, counted as 0; ``S_ref = 0`` gives NaN. Rows in order of first appearance, then
    ``"final"``; each ``{"items", "per_subject", "s_agent", "s_ref", "mean", "median"}`` like
    :func:`final_score_fidelity` (which groups by benchmark instead; its ``"all"`` is the item mean)."""
    A, R = np.nan_to_num(np.asarray(agent, float)), np.nan_to_num(np.asarray(reference, float))
    dims = np.asarray([str(d) for d in dimensions])
    if A.shape != R.shape or A.ndim != 2 or A.shape[1] != len(dims) or len(dims) == 0:
        raise InvalidInputError(f"dimension_fidelity: shapes {A.shape} / {R.shape} for {len(dims)} items")
    names = list(dict.fromkeys(dims.tolist()))
    sa_d = np.stack([A[:, dims == d].mean(axis=1) for d in names], axis=1)
    sr_d = np.stack([R[:, dims == d].mean(axis=1) for d in names], axis=1)
    out: dict[str, dict[str, Any]] = {}
    for j, d in enumerate(names + ["final"]):
        sa, sr = (sa_d.mean(axis=1), sr_d.mean(axis=1)) if d == "final" else (sa_d[:, j], sr_d[:, j])
        with np.errstate(divide="ignore", invalid="ignore"):
            fid = np.where(np.abs(sr) > 0, 1.0 - np.abs(sa - sr) / np.abs(sr), np.nan)
        ok = np.isfinite(fid).any()
        out[d] = {"items": int(len(dims) if d == "final" else np.sum(dims == d)),
                  "per_subject": dict(zip(subjects, fid.tolist())), "s_agent": sa.tolist(), "s_ref": sr.tolist(),
                  "mean": float(np.nanmean(fid)) if ok else float("nan"),
                  "median": float(np.nanmedian(fid)) if ok else float("nan")}
    return out


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions, cost 1 each) between two strings."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def normalised_edit_similarity(a: str | None, b: str | None) -> float:
    """``1 - edit_distance(a, b) / max(len(a), len(b))`` (1 for two empty strings; 0 when one output is
    missing)."""
    if a is None or b is None:
        return 0.0
    n = max(len(a), len(b))
    return 1.0 if n == 0 else 1.0 - edit_distance(a, b) / n


def inference_fidelity(agent_outputs: Sequence[Sequence[str | None]], reference_outputs: Sequence[Sequence[str | None]],
                       groups: Sequence[str]) -> dict[str, dict[str, float]]:
    """Inference fidelity of the synthesised ``run_vlm_inference``: the mean normalised edit similarity
    of its outputs to the reference harness's outputs for the same subject and item, per benchmark
    (``groups``) and ``"all"``, with the share of exactly equal outputs."""
    groups = list(groups)
    sims: dict[str, list[float]] = {}
    exact: dict[str, list[bool]] = {}
    for row_a, row_r in zip(agent_outputs, reference_outputs):
        if len(row_a) != len(groups) or len(row_r) != len(groups):
            raise InvalidInputError(f"inference_fidelity: rows of {len(row_a)} / {len(row_r)} outputs for {len(groups)} items")
        for g, a, r in zip(groups, row_a, row_r):
            for key in (g, "all"):
                sims.setdefault(key, []).append(normalised_edit_similarity(a, r))
                exact.setdefault(key, []).append(a is not None and a == r)
    return {g: {"outputs": float(len(v)), "similarity": float(np.mean(v)), "exact": float(np.mean(exact[g]))}
            for g, v in sorted(sims.items(), key=lambda kv: (kv[0] == "all", kv[0]))}
