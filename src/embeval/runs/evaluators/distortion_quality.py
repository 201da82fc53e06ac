"""``distortion-quality``: full-reference quality of distorted images against their reference.

For every item (a reference image, see :mod:`._images`) x distortion x level x seed, the image is
distorted with :func:`embeval.distortion.distort` (seeded with the unit seed) and scored against
the reference by each metric of the subject (kind ``metric``): ``psnr`` (dB, data range 255; null
for identical images), ``ssim`` (scikit-image, RGB, data range 255, 7x7 window), ``mse`` and
``mae`` (on 0..255). The outputs carry a fingerprint of the distorted pixels, so every number
traces back to the exact image.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from embeval.distortion.measures import psnr
from embeval.errors import ConfigError
from embeval.runs.evaluators._images import DistortedImageEvaluator, fingerprint, level_figures
from embeval.runs.registry import EvaluatorParams, ReportSection
from embeval.runs.spec import SubjectEntry


def _psnr(ref: np.ndarray, dist: np.ndarray) -> float | None:
    db = psnr(ref, dist)  # embeval's one PSNR (inf for identical images; bit-equal to skimage's)
    return None if math.isinf(db) else db  # JSON has no inf: identical images are null


def _ssim(ref: np.ndarray, dist: np.ndarray) -> float:
    from skimage.metrics import structural_similarity

    return float(structural_similarity(ref, dist, channel_axis=2, data_range=255))


def _mse(ref: np.ndarray, dist: np.ndarray) -> float:
    return float(np.mean((ref.astype(np.float64) - dist.astype(np.float64)) ** 2))


def _mae(ref: np.ndarray, dist: np.ndarray) -> float:
    return float(np.mean(np.abs(ref.astype(np.float64) - dist.astype(np.float64))))


#: metric name -> fn(reference, distorted) -> float (RGB uint8 images)
METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float | None]] = {"psnr": _psnr, "ssim": _ssim, "mse": _mse, "mae": _mae}
_LABELS = {"psnr": "PSNR (dB)", "ssim": "SSIM", "mse": "MSE", "mae": "MAE"}


class DistortionQualityEvaluator(DistortedImageEvaluator):
    subject_kinds = ("metric",)
    params_type = EvaluatorParams  # no parameters (the metrics are the subjects')

    def default_subjects(self, spec):
        return (SubjectEntry(id="fr-psnr-ssim", kind="metric", params={"metrics": ["psnr", "ssim"]}),)

    def validate_subject(self, spec, index, subject) -> None:
        metrics = subject.params.get("metrics", ["psnr", "ssim"])
        if not isinstance(metrics, list) or not metrics:
            raise ConfigError(f"spec.subjects[{index}].params.metrics: must be a non-empty list of {', '.join(METRICS)}")
        for j, m in enumerate(metrics):
            if m not in METRICS:
                raise ConfigError(f"spec.subjects[{index}].params.metrics[{j}]: unknown metric {m!r}; choose from {', '.join(METRICS)}")

    def setup(self, spec, subject) -> dict[str, Any]:
        return {"metrics": list(subject.params.get("metrics", ["psnr", "ssim"]))}

    def run_unit(self, spec, state, unit, unit_seed) -> dict[str, Any]:
        ref, dist = self.pair(spec, state, unit, unit_seed)
        out: dict[str, Any] = {m: METRICS[m](ref, dist) for m in state["metrics"]}
        out["distorted_sha256"] = fingerprint(dist)
        out["shape"] = list(ref.shape)
        return out

    def report_sections(self, spec, frame, stamp):
        metrics = [m for m in METRICS if f"out.{m}" in frame]
        d = frame[frame["distortion"] != "none"] if not frame.empty else frame
        if d.empty or not metrics:
            return []
        table = d.groupby(["distortion", "level"])[[f"out.{m}" for m in metrics]].mean().reset_index()
        table.columns = ["distortion", "level"] + metrics
        return [ReportSection("Full-reference quality by distortion and level",
                              html=table.to_html(index=False, float_format="%.4f"),
                              figures=level_figures(table, metrics, _LABELS, stamp, "of distorted vs reference, mean over items"),
                              caption="PSNR null (infinite) for identical images is left out of the means.")]
