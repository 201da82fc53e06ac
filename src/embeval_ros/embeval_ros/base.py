"""The common base of every embeval node: described parameters, per-stage latency log, clock helpers."""
from __future__ import annotations

import time
from collections import deque
from typing import Any

from rclpy.node import Node

from embeval_ros.runtime import declare


class StageLog:
    """Per-message processing latency of one stage (seconds, callback entry -> publish) and counts."""

    def __init__(self, maxlen: int = 100_000):
        self.latency_s: deque[float] = deque(maxlen=maxlen)
        self.received = 0
        self.published = 0

    def add(self, t_in: float) -> None:
        self.latency_s.append(time.perf_counter() - t_in)
        self.published += 1


class EmbevalNode(Node):
    """A node with described parameters; ``shared`` carries in-process objects when composed by ``embeval graph``."""

    def __init__(self, name: str, *, parameter_overrides: list | None = None, shared: dict | None = None, **kw: Any):
        super().__init__(name, parameter_overrides=parameter_overrides or [], **kw)
        self.shared = shared if shared is not None else {}
        self.log = StageLog()

    def param(self, name: str, default, description: str, checked: bool = True, lo=None, hi=None):
        """The parameter's value, of the type of ``default`` and within ``lo .. hi`` for a number
        (:func:`embeval_ros.runtime.typed`; a wrong one is a ConfigError naming it, which ends the node with one
        line and exit 2)."""
        return declare(self, name, default, description, checked, lo, hi)

    @staticmethod
    def now_ns() -> int:
        return time.time_ns()

    def close(self) -> None:
        """Release hardware/files; called before destroy_node()."""

    def abort(self) -> None:
        """The graph stopped before it ran (a later node's configuration error): undo what this node created
        for the run (e.g. an empty bag folder). Called before :meth:`close`."""
