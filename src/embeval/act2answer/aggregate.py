"""Act2Answer statistics: pure functions of episode records (no simulator, no model).

Records are :class:`~embeval.act2answer.episode.Act2AnswerRecord` objects or dicts with at least
``item``, ``category``, ``layout`` ("original"/"swapped"), ``success`` (0/1) and ``choice``
("left"/"right"/None); VLM text answers (:mod:`embeval.act2answer.baseline`) have the same keys.

- soft success rate (SR) per category = mean success over all its episodes, i.e. the average of
  the original-layout and swapped-layout rates when every item ran in both (swap-averaged);
- Wilson score interval of SR over the episodes (:func:`embeval.scoring.stats.wilson_interval`);
- regime against chance 0.5 with margin ``delta``: ``failure`` (SR < 0.5 - delta),
  ``no usable knowledge`` (within), ``usable knowledge`` (SR > 0.5 + delta);
- swap consistency per item (the same *image* chosen in both layouts), the position-bias index
  (n_left - n_right) / (n_left + n_right) over episodes with a choice, and McNemar's test of the
  paired original/swapped outcomes (:func:`embeval.scoring.stats.mcnemar`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from embeval.errors import ConfigError, InvalidInputError
from embeval.scoring.stats import mcnemar, wilson_interval

REGIMES = ("failure", "no usable knowledge", "usable knowledge")


def _row(r: Any) -> Mapping[str, Any]:
    d = r if isinstance(r, Mapping) else r.to_dict() if hasattr(r, "to_dict") else None
    if d is None:
        raise InvalidInputError(f"an Act2Answer record must be a mapping or Act2AnswerRecord, got {type(r).__name__}")
    for k in ("item", "category", "layout", "success"):
        if k not in d:
            raise InvalidInputError(f"Act2Answer record misses {k!r}: {dict(d)}")
    return d


def rows(records: Iterable[Any]) -> list[Mapping[str, Any]]:
    return [_row(r) for r in records]


# --------------------------------------------------------------------------- regimes
def regime(rate: float, delta: float = 0.1, chance: float = 0.5) -> str:
    """``failure`` / ``no usable knowledge`` / ``usable knowledge`` for a rate against chance +- delta."""
    if not 0 <= delta < chance:
        raise ConfigError(f"delta must lie in [0, {chance}), got {delta}")
    if rate < chance - delta:
        return "failure"
    if rate > chance + delta:
        return "usable knowledge"
    return "no usable knowledge"


@dataclass
class CategoryRate:
    """Soft success rate of one category (rates 0..1)."""

    category: str
    n_items: int
    n_episodes: int
    rate: float  # swap-averaged soft success rate
    rate_original: float
    rate_swapped: float
    ci_low: float
    ci_high: float
    regime: str
    separated: bool  # the Wilson interval lies entirely outside chance +- delta

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else float("nan")


def category_rates(records: Iterable[Any], delta: float = 0.1, confidence: float = 0.95,
                   overall: bool = True) -> list[CategoryRate]:
    """One :class:`CategoryRate` per category (sorted by name), plus ``"all"`` when ``overall``."""
    rs = rows(records)
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rs:
        groups.setdefault(str(r["category"]), []).append(r)
    if overall and rs:
        groups["all"] = rs
    out = []
    for cat in sorted(groups, key=lambda c: (c == "all", c)):
        g = groups[cat]
        succ = [float(r["success"]) for r in g]
        orig = [float(r["success"]) for r in g if r["layout"] == "original"]
        swap = [float(r["success"]) for r in g if r["layout"] == "swapped"]
        rate = 0.5 * (_mean(orig) + _mean(swap)) if orig and swap else _mean(succ)
        lo, hi = wilson_interval(sum(succ), len(succ), confidence)
        sep = lo > 0.5 + delta or hi < 0.5 - delta
        out.append(CategoryRate(cat, len({r["item"] for r in g}), len(g), rate, _mean(orig), _mean(swap), lo, hi,
                                regime(rate, delta), sep))
    return out


# --------------------------------------------------------------------------- swap statistics
def _pairs(records: Iterable[Any]) -> dict[str, dict[str, Mapping[str, Any]]]:
    pairs: dict[str, dict[str, Mapping[str, Any]]] = {}
    for r in rows(records):
        pairs.setdefault(str(r["item"]), {})[str(r["layout"])] = r
    return {k: v for k, v in pairs.items() if "original" in v and "swapped" in v}


@dataclass
class SwapStats:
    """Per-item swap statistics over the items that ran in both layouts."""

    n_pairs: int
    consistency: float  # share of items where the same image was chosen in both layouts (over n_chosen pairs)
    same_side: float  # share of items where the same side was chosen in both layouts (position-driven; n_chosen)
    position_bias: float  # (n_left - n_right) / (n_left + n_right) over episodes with a choice, in [-1, 1]
    both_correct: int  # McNemar table: a (both), b (original only), c (swapped only), d (neither)
    original_only: int
    swapped_only: int
    neither: int
    mcnemar_statistic: float  # chi-square with continuity correction, (|b - c| - 1)^2 / (b + c)
    mcnemar_p_exact: float  # two-sided exact binomial p (b vs c), 1.0 when b + c == 0
    mcnemar_p_chi2: float
    n_chosen: int = 0  # pairs where both layouts chose a card: the denominator of consistency and same_side

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def consistency_text(self) -> str:
        """``consistency 1.000`` plus, when some pairs do not count (an episode ended off both cards), ``over K of
        N pairs (M with an episode off both cards)``: the denominator of consistency and same side."""
        text = f"consistency {self.consistency:.3f}"
        off = self.n_pairs - self.n_chosen
        return text if off <= 0 else f"{text} over {self.n_chosen} of {self.n_pairs} pairs ({off} with an episode off both cards)"


def item_consistency(records: Iterable[Any]) -> dict[str, bool | None]:
    """Per item: True when both layouts chose the same image, False when different images, None when
    a layout chose nothing (out of bounds) or is missing."""
    out: dict[str, bool | None] = {}
    for item, p in _pairs(records).items():
        o, s = p["original"], p["swapped"]
        if o.get("choice") is None or s.get("choice") is None:
            out[item] = None
        else:
            out[item] = bool(float(o["success"]) == float(s["success"]))
    return out


def position_bias_index(records: Iterable[Any]) -> float:
    """(n_left - n_right) / (n_left + n_right) over episodes with a choice; 0.0 when none chose."""
    rs = rows(records)
    nl = sum(1 for r in rs if r.get("choice") == "left")
    nr = sum(1 for r in rs if r.get("choice") == "right")
    return 0.0 if nl + nr == 0 else (nl - nr) / (nl + nr)


def swap_stats(records: Iterable[Any]) -> SwapStats:
    rs = rows(records)
    pairs = _pairs(rs)
    cons = item_consistency(rs)
    chosen = [v for v in cons.values() if v is not None]
    same_side = [p["original"].get("choice") == p["swapped"].get("choice") for p in pairs.values()
                 if p["original"].get("choice") is not None and p["swapped"].get("choice") is not None]
    a = b = c = d = 0
    for p in pairs.values():
        o, s = float(p["original"]["success"]) > 0.5, float(p["swapped"]["success"]) > 0.5
        a += o and s
        b += o and not s
        c += s and not o
        d += not o and not s
    stat, p_exact, p_chi2 = mcnemar(b, c)
    return SwapStats(len(pairs), _mean([float(x) for x in chosen]) if chosen else float("nan"),
                     _mean([float(x) for x in same_side]) if same_side else float("nan"),
                     position_bias_index(rs), a, b, c, d, stat, p_exact, p_chi2, len(chosen))


# --------------------------------------------------------------------------- tables
def category_table(results: Mapping[str, Iterable[Any]], delta: float = 0.1, confidence: float = 0.95):
    """The paper's per-category table for any set of subjects: a pandas DataFrame, one row per
    (subject, category) with rate, Wilson interval, regime, and per-subject swap statistics in
    the ``all`` rows. ``results``: subject id -> records (episodes or VLM text answers)."""
    import pandas as pd

    out = []
    for subject, recs in results.items():
        recs = rows(recs)
        ss = swap_stats(recs)
        for cr in category_rates(recs, delta, confidence):
            d = {"subject": subject, **cr.to_dict()}
            if cr.category == "all":
                d.update(consistency=ss.consistency, position_bias=ss.position_bias, mcnemar_p=ss.mcnemar_p_exact)
            out.append(d)
    return pd.DataFrame(out)


def format_table(frame, wide: bool = True) -> str:
    """Text table: categories as rows, one ``SR [lo, hi] regime`` column per subject (``wide``)."""
    if frame.empty:
        return "(no results)"
    abbrev = {"failure": "F", "no usable knowledge": "N", "usable knowledge": "U"}
    cell = frame.apply(lambda r: f"{100 * r['rate']:5.1f} [{100 * r['ci_low']:4.1f},{100 * r['ci_high']:5.1f}] {abbrev[r['regime']]}",
                       axis=1)
    t = frame.assign(cell=cell)
    if not wide:
        return t[["subject", "category", "cell"]].to_string(index=False)
    pivot = t.pivot(index="category", columns="subject", values="cell")
    order = sorted(pivot.index, key=lambda c: (c == "all", c))
    pivot = pivot.loc[order, list(dict.fromkeys(frame["subject"]))].fillna("-")
    return (pivot.to_string() + "\n  SR % [Wilson 95% CI] regime: F = failure, N = no usable knowledge, "
            "U = usable knowledge (chance 50 +- delta)")
