"""Claims that hold on every seed: one statistic per row and seed, its mean and range, and
"a beats b" claims checked seed by seed, so that a document states only what every seed supports.

Used by the IQA metric seed study (:mod:`embeval_analysis.iqa.seeds`, ``embeval iqa bench --seeds``) and the
A2Eval subset seed study (:mod:`embeval_analysis.a2eval.seeds`, ``embeval a2eval seeds``); the Act2Answer
recipes have their own (:mod:`embeval.act2answer.seeds`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from embeval.errors import ConfigError

#: fewest distinct seeds a claim across seeds is made on
MIN_SEEDS = 3


def check_seeds(seeds: Sequence[int], option: str = "--seeds", min_seeds: int = MIN_SEEDS) -> list[int]:
    """The distinct seeds, sorted; :class:`ConfigError` in one line when fewer than ``min_seeds``."""
    uniq = sorted(set(int(s) for s in seeds))
    if len(uniq) < min_seeds:
        raise ConfigError(f"{option}: a claim across seeds needs at least {min_seeds} distinct seeds, got {uniq}; "
                          f"e.g. {option} 0 1 2")
    return uniq


@dataclass(frozen=True)
class Claim:
    """``a`` beats ``b``: row ``a``'s statistic above row ``b``'s (``higher=True``) or below it, on a seed.
    ``margin``: by more than this. ``label``: how the docs say it."""

    label: str
    a: str
    b: str
    higher: bool = True
    margin: float = 0.0

    def on(self, values: Mapping[str, Mapping[int, float]], s: int) -> bool | None:
        """Whether it holds on seed ``s`` (None: a row has no finite value on that seed)."""
        va, vb = values.get(self.a, {}).get(s), values.get(self.b, {}).get(s)
        if va is None or vb is None or not (math.isfinite(va) and math.isfinite(vb)):
            return None
        return va - vb > self.margin if self.higher else vb - va > self.margin


def row_stats(per_seed: Mapping[int, float]) -> dict:
    """``{seed: value}`` -> ``{"seeds", "mean", "min", "max", "n"}`` over the finite values (NaN when none)."""
    vals = [float(v) for v in per_seed.values() if v is not None and math.isfinite(v)]
    nan = float("nan")
    return {"seeds": {int(s): (None if v is None else float(v)) for s, v in sorted(per_seed.items())},
            "mean": sum(vals) / len(vals) if vals else nan, "min": min(vals) if vals else nan,
            "max": max(vals) if vals else nan, "n": len(vals)}


def claim_verdicts(values: Mapping[str, Mapping[int, float]], claims: Sequence[Claim], seeds: Sequence[int]) -> list[dict]:
    """Per claim: whether it holds on each seed, how many, and ``holds`` = on every seed (a seed where a row
    is missing counts as not holding)."""
    out = []
    for c in claims:
        per = {int(s): c.on(values, s) for s in seeds}
        n_true = sum(v is True for v in per.values())
        out.append({"claim": c.label, "a": c.a, "b": c.b, "per_seed": per, "seeds_holding": n_true,
                    "n_seeds": len(per), "holds": n_true == len(per) and len(per) > 0})
    return out


def verdict_text(v: dict) -> str:
    """``yes (3/3)`` or ``no (2/3)``."""
    return f"{'yes' if v['holds'] else 'no'} ({v['seeds_holding']}/{v['n_seeds']})"


def format_rows(rows: Sequence[tuple[Sequence[str], Mapping[int, float]]], head: Sequence[str], seeds: Sequence[int],
                extra: Sequence[str] = (), extra_cells: Callable[[int], Sequence[str]] | None = None,
                fmt: str = "{:.3f}") -> str:
    """Markdown: ``head`` label columns, the value on each seed, mean, min..max, then ``extra`` columns
    (``extra_cells(i)`` for row ``i``)."""
    def f(v):
        return "-" if v is None or not math.isfinite(v) else fmt.format(v)

    cols = list(head) + [f"seed {s}" for s in seeds] + ["mean", "min..max"] + list(extra)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for i, (labels, per) in enumerate(rows):
        st = row_stats({s: per.get(s) for s in seeds})
        cells = list(labels) + [f(per.get(s)) for s in seeds] + [f(st["mean"]), f"{f(st['min'])}..{f(st['max'])}"]
        if extra_cells is not None:
            cells += list(extra_cells(i))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_claims(verdicts: Sequence[dict], seeds: Sequence[int]) -> str:
    """Markdown: per claim, whether it holds on each seed and on every seed."""
    lines = ["| claim | " + " | ".join(f"seed {s}" for s in seeds) + " | holds on every seed |",
             "|" + "---|" * (len(seeds) + 2)]
    sym = {True: "yes", False: "no", None: "-"}
    for v in verdicts:
        lines.append(f"| {v['claim']} | " + " | ".join(sym[v["per_seed"].get(s)] for s in seeds)
                     + f" | **{verdict_text(v)}** |")
    return "\n".join(lines)
