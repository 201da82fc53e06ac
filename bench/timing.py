"""Timing helpers the bench modules share (wall clock, ``time.perf_counter``)."""
from __future__ import annotations

import functools
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


def restores_torch_threads(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: ``torch.set_num_threads`` back to its value at the call once ``fn`` returns or raises
    (bench rows pin torch's thread count; the caller, e.g. a test process, keeps its own)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import torch

        threads = torch.get_num_threads()
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return wrapper
