"""Timing helpers the bench modules share (wall clock, ``time.perf_counter``)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def per_call(fn: Callable[[], Any], n: int) -> float:
    """Mean seconds per call of ``fn`` over ``n`` calls, after one warm-up call."""
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def timed(fn: Callable[[], Any], reps: int = 1) -> tuple[float, Any]:
    """``(mean seconds per call over reps calls, the last result)``; no warm-up."""
    t0 = time.perf_counter()
    for _ in range(reps):
        out = fn()
    return (time.perf_counter() - t0) / reps, out
