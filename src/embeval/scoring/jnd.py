"""JND sensitivity groups: split samples into mild / medium / severe thirds by score.

Samples are ranked by score (by default a higher score = a milder distortion effect, e.g. a
cognition, decision or execution score that is high when the distorted image behaves like the
reference). Ranks are tied ranks (average method), so samples with equal scores always fall in the
same group; a group boundary at ranks n/3 and 2n/3 therefore moves with a tie and groups may differ
in size by the size of the tie.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.stats import rankdata

from embeval.errors import InvalidInputError

GROUPS: tuple[str, ...] = ("mild", "medium", "severe")


def jnd_groups(scores: Sequence[float], higher_is_milder: bool = True) -> np.ndarray:
    """Label each sample "mild", "medium" or "severe" (array of str, input order)."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if s.size == 0:
        return np.array([], dtype="<U6")
    if not np.all(np.isfinite(s)):
        raise InvalidInputError("scores contain NaN or inf; drop those samples before grouping")
    key = -s if higher_is_milder else s  # rank 1 = mildest
    r = rankdata(key, method="average")  # 1..n
    frac = (r - 0.5) / s.size  # tied samples share a fraction in (0, 1)
    g = np.minimum((frac * 3).astype(int), 2)
    return np.array(GROUPS, dtype="<U6")[g]


def jnd_split(scores: Sequence[float], higher_is_milder: bool = True) -> dict[str, np.ndarray]:
    """Group name -> indices of its samples."""
    labels = jnd_groups(scores, higher_is_milder)
    return {g: np.flatnonzero(labels == g) for g in GROUPS}
