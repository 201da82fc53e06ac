"""The A2Eval headline score: the mean over capability dimensions of each dimension's item mean.

The paper (A2Eval, arXiv 2602.01640) reports a model's score on the curated benchmark as Table 7's
"Avg", "the mean across dimensions", which is Table 3's A2Eval column: first the mean item score
within each capability dimension, then the unweighted mean of those per-dimension means. Every
dimension counts once, whatever its item count (Table 2 keeps 500 items in six dimensions, 366 in
PhysCaus and 425 in DynScene). That is the default here (``"dimension_mean"``).

``"item_mean"`` (the mean over all items, so a dimension counts in proportion to its items) is the
named option; it is what embeval reported earlier, and on Table 7 with Table 2's counts it
swaps the paper's ranks 2 and 3.

:func:`headline_scores` works on a models x items score matrix; :func:`read_item_scores` and
:func:`headline_table` serve ``embeval a2eval headline FILE`` (per-item rows with ``model``,
``dimension`` and ``score`` in [0, 1]).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embeval.errors import ConfigError, InvalidInputError

#: the headline definitions: the paper's (default) and the item mean (option)
METHODS = ("dimension_mean", "item_mean")
DEFAULT_METHOD = "dimension_mean"
METHOD_TEXT = {"dimension_mean": "mean over dimensions of each dimension's item mean (the paper's Table 7 'Avg')",
               "item_mean": "mean over all items (option: a dimension counts in proportion to its items)"}

#: the largest per-item score file read (a 13-model x 3,791-item file is about 3 MiB)
MAX_FILE_BYTES = 256 << 20
#: the longest model or dimension name accepted
MAX_NAME_CHARS = 200
REQUIRED = ("model", "dimension", "score")
_FIX = "give one row per item with columns model, dimension, score (a number in [0, 1]); see docs/a2eval.md"


def check_method(method: str) -> str:
    if method not in METHODS:
        raise ConfigError(f"headline method must be one of {', '.join(METHODS)}, got {method!r}")
    return method


def dimension_means(scores: np.ndarray, dimensions: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Per-dimension item means: ``(names, means)`` with ``means[..., j]`` the mean of ``scores[..., i]`` over
    the items ``i`` of dimension ``names[j]`` (names in order of first appearance; ``scores``: [..., items])."""
    s = np.asarray(scores, float)
    dims = np.asarray([str(d) for d in dimensions])
    if s.shape[-1] != len(dims) or len(dims) == 0:
        raise InvalidInputError(f"dimension_means: {s.shape[-1]} item scores for {len(dims)} dimension labels")
    names = list(dict.fromkeys(dims.tolist()))
    return names, np.stack([s[..., dims == d].mean(axis=-1) for d in names], axis=-1)


def headline_scores(scores: np.ndarray, dimensions: Sequence[str], method: str = DEFAULT_METHOD) -> np.ndarray:
    """The benchmark score of every model (``scores``: models x items, or one row): ``"dimension_mean"`` (default,
    the paper's: mean over dimensions of the per-dimension item means) or ``"item_mean"`` (mean over items).
    Same units as ``scores``."""
    check_method(method)
    s = np.asarray(scores, float)
    if method == "item_mean":
        if s.shape[-1] != len(dimensions) or len(dimensions) == 0:
            raise InvalidInputError(f"headline_scores: {s.shape[-1]} item scores for {len(dimensions)} dimension labels")
        return s.mean(axis=-1)
    return dimension_means(s, dimensions)[1].mean(axis=-1)


# --------------------------------------------------------------------------- per-item score files


@dataclass
class ModelHeadline:
    """One model's row of the headline table; scores in percent (0-100)."""

    model: str
    items: int
    dimensions: dict[str, float]  # dimension -> mean item score, percent
    items_per_dimension: dict[str, int]
    dimension_mean: float  # the paper's headline, percent
    item_mean: float  # the option, percent
    headline: float = float("nan")  # the chosen method's value, percent
    rank: int = 0  # 1 = best by the chosen method

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class HeadlineTable:
    method: str
    dimensions: list[str]
    models: list[ModelHeadline] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "definition": METHOD_TEXT[self.method], "units": "percent",
                "dimensions": self.dimensions, "models": [m.to_dict() for m in self.models]}


def _name(value: Any, col: str, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {col} must be a string, got {type(value).__name__} {value!r:.40}; {_FIX}")
    v = value.strip()
    if not v:
        raise ConfigError(f"{where}: {col} is empty; {_FIX}")
    if len(v) > MAX_NAME_CHARS or any(ord(c) < 32 for c in v):
        raise ConfigError(f"{where}: {col} must be a name of at most {MAX_NAME_CHARS} printable characters, "
                          f"got {v[:40]!r}{'...' if len(v) > 40 else ''}; {_FIX}")
    return v


def _score(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{where}: score must be a number in [0, 1], got {type(value).__name__} {value!r:.40}; {_FIX}")
    try:
        x = float(value)
    except ValueError:
        raise ConfigError(f"{where}: score must be a number in [0, 1], got {value!r:.40}; {_FIX}") from None
    if not math.isfinite(x) or not 0.0 <= x <= 1.0:
        hint = " (a percentage? divide by 100)" if math.isfinite(x) and 1 < x <= 100 else ""
        raise ConfigError(f"{where}: score must be a number in [0, 1], got {value!r:.40}{hint}; {_FIX}")
    return x


def read_item_scores(path: str | Path, max_bytes: int | None = None) -> list[tuple[str, str, float]]:
    """Per-item rows ``(model, dimension, score)`` of a CSV (header with ``model``, ``dimension``, ``score``; other
    columns ignored) or JSON-lines file (one object per line with those keys). JSON lines when the name ends in
    ``.jsonl``/``.ndjson``/``.json`` or the first non-blank character is ``{``; CSV otherwise. Read bounded
    (``max_bytes``, default :data:`MAX_FILE_BYTES`); :class:`ConfigError` in one line naming the file, the line and
    the fix for anything else."""
    from embeval.errors import MissingFileError, jsonl_records, read_text

    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"score file {p} is a folder; give the CSV or JSON-lines file itself")
    if not p.is_file():
        raise MissingFileError(f"score file {p} not found; {_FIX}")
    limit = MAX_FILE_BYTES if max_bytes is None else max_bytes
    if p.stat().st_size > limit:
        cap = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"
        raise ConfigError(f"score file {p} is {p.stat().st_size:,} bytes, over the {cap} limit; give per-item rows "
                          "only (model, dimension, score), or split the file by model")
    text = read_text(p, "score file", limit)
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise ConfigError(f"score file {p} is empty; {_FIX}")
    jsonl = p.suffix.lower() in (".jsonl", ".ndjson", ".json") or text.lstrip().startswith("{")
    rows: list[tuple[str, str, float]] = []
    if jsonl:
        for n, rec in jsonl_records(text, f"score file {p}", _FIX):
            where = f"score file {p} line {n}"
            missing = [k for k in REQUIRED if k not in rec]
            if missing:
                raise ConfigError(f"{where} has no {', '.join(missing)}; {_FIX}")
            rows.append((_name(rec["model"], "model", where), _name(rec["dimension"], "dimension", where),
                         _score(rec["score"], where)))
    else:
        try:
            reader = csv.reader(io.StringIO(text, newline=""))
            header = next(reader)
            cols = [h.strip() for h in header]
            missing = [k for k in REQUIRED if k not in cols]
            if missing:
                raise ConfigError(f"score file {p}: the CSV header {cols[:8]!r:.120} has no column(s) "
                                  f"{', '.join(missing)}; {_FIX}")
            dup = [k for k in REQUIRED if cols.count(k) > 1]
            if dup:
                raise ConfigError(f"score file {p}: column(s) {', '.join(dup)} appear more than once in the header; {_FIX}")
            at = {k: cols.index(k) for k in REQUIRED}
            for row in reader:
                n = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                where = f"score file {p} line {n}"
                if len(row) != len(cols):
                    raise ConfigError(f"{where} has {len(row)} fields, the header {len(cols)}; {_FIX}")
                rows.append((_name(row[at["model"]], "model", where), _name(row[at["dimension"]], "dimension", where),
                             _score(row[at["score"]].strip(), where)))
        except csv.Error as exc:
            raise ConfigError(f"score file {p} is not valid CSV (line {reader.line_num}: {exc}); {_FIX}") from None
    if not rows:
        raise ConfigError(f"score file {p} has no item rows; {_FIX}")
    return rows


def headline_of_rows(rows: Sequence[tuple[str, str, float]], method: str = DEFAULT_METHOD,
                     source: str = "score rows") -> HeadlineTable:
    """Per model (in order of first appearance): the per-dimension means, the paper's headline (mean over
    dimensions), the item mean and the chosen ``method``'s value as ``headline``, all in percent; ``rank`` by
    the chosen method (1 = best; equal values share the better rank). Every model must have items in every
    dimension that appears in the rows (the mean over dimensions compares models on the same dimensions)."""
    check_method(method)
    dims = list(dict.fromkeys(d for _, d, _ in rows))
    per: dict[str, dict[str, list[float]]] = {}
    for m, d, s in rows:
        per.setdefault(m, {}).setdefault(d, []).append(s)
    out = HeadlineTable(method, dims)
    for m, by_dim in per.items():
        lacking = [d for d in dims if d not in by_dim]
        if lacking:
            raise ConfigError(f"{source}: model {m!r} has no items in dimension(s) {', '.join(lacking[:5])}"
                              f"{' ...' if len(lacking) > 5 else ''} that other models have; the mean over dimensions "
                              "compares models on the same dimensions: add its rows or drop the dimension")
        means = {d: 100.0 * float(np.mean(by_dim[d])) for d in dims}
        n = {d: len(by_dim[d]) for d in dims}
        all_scores = [s for d in dims for s in by_dim[d]]
        row = ModelHeadline(m, len(all_scores), means, n, float(np.mean(list(means.values()))),
                            100.0 * float(np.mean(all_scores)))
        row.headline = row.dimension_mean if method == "dimension_mean" else row.item_mean
        out.models.append(row)
    values = [r.headline for r in out.models]
    for r in out.models:
        r.rank = 1 + sum(v > r.headline for v in values)
    return out


def headline_table(path: str | Path, method: str = DEFAULT_METHOD, max_bytes: int | None = None) -> HeadlineTable:
    """:func:`headline_of_rows` of the per-item rows of ``path`` (:func:`read_item_scores`)."""
    check_method(method)
    return headline_of_rows(read_item_scores(path, max_bytes), method, f"score file {path}")


def format_headline_table(tab: HeadlineTable) -> str:
    """Text table: per model the per-dimension means, the headline and the other definition beside it, in percent
    with two decimals."""
    other = "item_mean" if tab.method == "dimension_mean" else "dimension_mean"
    label = {"dimension_mean": "dim mean", "item_mean": "item mean"}
    w = max([5] + [len(m.model) for m in tab.models]) + 2
    dw = [max(8, len(d) + 2) for d in tab.dimensions]
    head = (f"{'rank':>4}  {'model':<{w}}{'items':>7}" + "".join(f"{d:>{k}}" for d, k in zip(tab.dimensions, dw))
            + f"{'headline':>10}{label[other]:>11}")
    lines = [head]
    for r in sorted(tab.models, key=lambda r: (r.rank, tab.models.index(r))):
        o = r.item_mean if other == "item_mean" else r.dimension_mean
        lines.append(f"{r.rank:>4}  {r.model:<{w}}{r.items:>7}"
                     + "".join(f"{r.dimensions[d]:>{k}.2f}" for d, k in zip(tab.dimensions, dw))
                     + f"{r.headline:>10.2f}{o:>11.2f}")
    lines.append(f"scores in percent; headline = {METHOD_TEXT[tab.method]}; {label[other]} = {METHOD_TEXT[other]}")
    return "\n".join(lines)
