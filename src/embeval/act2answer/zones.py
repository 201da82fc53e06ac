"""Answer zones on the table: a pure function of where the cube ended up.

Zones: ``correct`` (cube centre within ``eps`` metres, in the table plane, of the correct card's
centre), ``incorrect`` (within ``eps`` of the other card's centre), ``out_of_bounds`` (neither).
The *choice* is the card whose zone holds the cube ("left"/"right"), or None.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from embeval.errors import ConfigError

ZONES = ("correct", "incorrect", "out_of_bounds")


@dataclass(frozen=True)
class ZoneResult:
    zone: str  # one of ZONES
    choice: str | None  # "left" | "right" | None (out of bounds)
    distance_correct: float  # m, table-plane distance of the cube to the correct card's centre
    distance_incorrect: float  # m, to the other card's centre


def classify(cube_xy: Sequence[float], left_xy: Sequence[float], right_xy: Sequence[float], correct_side: str,
             eps: float) -> ZoneResult:
    """Zone of a cube at ``cube_xy`` (metres, frame base) for cards centred at ``left_xy``/``right_xy``.

    Raises :class:`ConfigError` when ``eps`` is not positive or the two zones overlap
    (``2 * eps`` must be smaller than the distance between the card centres).
    """
    if correct_side not in ("left", "right"):
        raise ConfigError(f"correct_side must be 'left' or 'right', got {correct_side!r}")
    sep = math.dist(left_xy[:2], right_xy[:2])
    if not eps > 0 or 2 * eps >= sep:
        raise ConfigError(f"zone radius eps={eps} m must be > 0 and < half the card distance ({sep / 2:.3f} m)")
    d_left = math.dist(cube_xy[:2], left_xy[:2])
    d_right = math.dist(cube_xy[:2], right_xy[:2])
    choice = "left" if d_left <= eps else "right" if d_right <= eps else None
    d_c, d_i = (d_left, d_right) if correct_side == "left" else (d_right, d_left)
    zone = "out_of_bounds" if choice is None else "correct" if choice == correct_side else "incorrect"
    return ZoneResult(zone, choice, d_c, d_i)
