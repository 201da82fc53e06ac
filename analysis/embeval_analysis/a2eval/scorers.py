"""Reference scorers: the ground truth against which a synthesised ``eval_score`` is measured.

Every scorer maps ``(item, prediction text) -> float in [0, 1]``. Conventions:

- ``mc``: the prediction's first standalone option letter (``A``..``Z``, as ``"B"``, ``"(B)"``,
  ``"B."``, ``"Answer: B"``) or else the option text it contains; 1 if it is the gold option.
- ``numeric``: the first number in the prediction (words "zero".."twenty" accepted); 1 if
  ``|pred - gold| <= tolerance`` (default tolerance 0, so integer answers must match exactly).
- ``point``: the first two numbers ``x, y`` (pixels, x right, y down); 1 if the point lies in the
  mask (box ``[x0, y0, x1, y1]`` inclusive, a boolean array indexed ``[y, x]``, or a mask image path
  whose non-zero pixels count).
- ``exact``: case-, whitespace- and punctuation-insensitive string equality; for comma-separated
  sequences the order matters.
"""
from __future__ import annotations

import re
import string
from typing import Any, Callable, Sequence

import numpy as np

_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                     "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}
_NUM = re.compile(r"-?\d+(?:\.\d+)?")
#: the option letter after a start, "answer [is][:]" or an opening bracket or space; linear time (no two adjacent
#: repetitions can share a character: a prediction of "answer" and 2000 spaces took 43 s with ``answer\s*(?:is)?\s*:?\s*``)
_LETTER = re.compile(r"(?:^|answer(?:\s*is)?[\s:]*|[\(\[\s])([A-Z])(?:[\)\]\.:,\s]|$)")
#: longest prediction (characters) the reference scorers read: the sandbox's text outputs are refused past it
MAX_PREDICTION_CHARS = 16 * 1024


def mc_index(text: str, options: Sequence[str]) -> int | None:
    """Index of the option ``text`` names (letter first, then option text), or None."""
    t = str(text).strip()
    letters = string.ascii_uppercase[: len(options)]
    m = _LETTER.search(t)
    if m and m.group(1) in letters:
        return letters.index(m.group(1))
    if len(t) == 1 and t.upper() in letters:
        return letters.index(t.upper())
    low = norm_text(t)
    bodies = [norm_text(re.sub(r"^\(?[A-Z][\.\):]\s*", "", o)) for o in options]
    for i, b in enumerate(bodies):
        if b and low == b:
            return i
    hits = [i for i, b in enumerate(bodies) if b and re.search(rf"\b{re.escape(b)}\b", low)]
    return hits[0] if len(hits) == 1 else None


def norm_text(s: str) -> str:
    s = str(s).lower().strip()
    s = s.translate(str.maketrans({c: " " for c in string.punctuation if c != ","}))
    s = re.sub(r"\s+", " ", s)  # first, so that the comma rule below is linear (``\s*,\s*`` is quadratic on spaces)
    return re.sub(r" ?, ?", ",", s).strip(" ,")


def first_numbers(text: str, n: int = 1) -> list[float]:
    out = []
    for tok in re.finditer(r"-?\d+(?:\.\d+)?|[a-zA-Z]+", str(text)):
        w = tok.group(0)
        if w.lower() in _WORDS:
            out.append(float(_WORDS[w.lower()]))
        elif _NUM.fullmatch(w):
            out.append(float(w))
        if len(out) == n:
            break
    return out


def score_mc(item, pred: str) -> float:
    gold = mc_index(str(item.answer), item.options or [])
    got = mc_index(pred, item.options or [])
    return float(gold is not None and got == gold)


def score_numeric(item, pred: str) -> float:
    nums = first_numbers(pred, 1)
    if not nums:
        return 0.0
    tol = item.tolerance if item.tolerance is not None else 0.0
    return float(abs(nums[0] - float(item.answer)) <= tol + 1e-9)


def _mask_contains(mask: Any, x: float, y: float) -> bool:
    if isinstance(mask, (list, tuple)) and len(mask) == 4 and all(np.isscalar(v) for v in mask):
        x0, y0, x1, y1 = map(float, mask)
        return x0 <= x <= x1 and y0 <= y <= y1
    if isinstance(mask, str):
        from embeval_analysis.a2eval.media import load_image

        mask = load_image(mask, "mask").max(axis=2) > 0
    arr = np.asarray(mask, dtype=bool)
    xi, yi = int(round(x)), int(round(y))
    return 0 <= yi < arr.shape[0] and 0 <= xi < arr.shape[1] and bool(arr[yi, xi])


def score_point(item, pred: str) -> float:
    nums = first_numbers(pred, 2)
    if len(nums) < 2:
        return 0.0
    return float(_mask_contains(item.mask, nums[0], nums[1]))


def score_exact(item, pred: str) -> float:
    return float(norm_text(pred) == norm_text(str(item.answer)))


#: answer_type -> reference scorer
REFERENCE_SCORERS: dict[str, Callable[[Any, str], float]] = {
    "mc": score_mc,
    "numeric": score_numeric,
    "point": score_point,
    "exact": score_exact,
}


def reference_score(item, pred: str) -> float:
    """Score ``pred`` for ``item`` with the reference scorer of its ``answer_type``."""
    return REFERENCE_SCORERS[item.answer_type](item, pred)
