"""The live quality gate: a no-reference predictor scores every camera frame (predicted
Decision score: higher = the policy's action is expected to change less); frames scoring below
``threshold`` are withheld from the policy.

Used by the ROS distortion/camera node (pure Python here, no rclpy)::

    gate = QualityGate.load("runs/demo/iqa/predictor", threshold=3.5)
    d = gate.check(rgb_uint8)        # GateDecision(passed, score, threshold)
    if d.passed: publish(frame)      # else: publish nothing to the policy; report d.score
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embeval.errors import ConfigError, read_json


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    score: float  # predicted score (target units, e.g. Decision 0..5)
    threshold: float


class QualityGate:
    """Withholds frames whose predicted score is below ``threshold``."""

    def __init__(self, predictor, threshold: float):
        if not np.isfinite(threshold):
            raise ConfigError(f"quality gate threshold must be a finite number, got {threshold!r}")
        self.predictor = predictor
        self.threshold = float(threshold)
        self.seen = 0
        self.withheld = 0

    @classmethod
    def load(cls, path: str | Path, threshold: float | None = None) -> "QualityGate":
        """A gate from a saved predictor (:func:`~embeval.iqa.predictor.load_predictor`); ``threshold`` defaults
        to the one stored next to it (``gate.json``, written by ``embeval iqa gate``)."""
        from embeval.iqa.predictor import load_predictor

        predictor = load_predictor(path)  # first: a missing predictor is the more basic problem
        if threshold is None:
            g = Path(path).expanduser() / "gate.json"
            if not g.exists():
                raise ConfigError(f"no threshold given and no {g}; pass threshold= or calibrate with `embeval iqa gate`")
            doc = read_json(g, "gate file", "calibrate it again with `embeval iqa gate --predictor P --rate R IMAGES`")
            threshold = doc.get("threshold")
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not np.isfinite(threshold):
                raise ConfigError(f"gate file {g} has no finite 'threshold' (got {threshold!r}); calibrate it again with "
                                  "`embeval iqa gate --predictor P --rate R IMAGES`")
            threshold = float(threshold)
        return cls(predictor, threshold)

    def check(self, image: np.ndarray) -> GateDecision:
        score = float(self.predictor(image))
        passed = score >= self.threshold
        self.seen += 1
        self.withheld += int(not passed)
        return GateDecision(passed, score, self.threshold)

    @property
    def withheld_rate(self) -> float:
        return self.withheld / self.seen if self.seen else 0.0


def threshold_for_rate(scores: np.ndarray, rate: float) -> float:
    """The threshold that withholds the fraction ``rate`` of frames with the lowest ``scores``."""
    if not 0.0 <= rate < 1.0:
        raise ConfigError(f"withhold rate must lie in [0, 1), got {rate}")
    return float(np.quantile(np.asarray(scores, dtype=float), rate))
