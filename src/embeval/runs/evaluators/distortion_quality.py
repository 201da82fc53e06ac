"""``distortion-quality``: full-reference quality of distorted images against their reference.

For every item (a reference image) x distortion x level x seed, the image is distorted with
:func:`embeval.distortion.distort` (seeded with the unit seed) and scored against the reference
by each metric of the subject (kind ``metric``): ``psnr`` (dB, data range 255), ``ssim``
(scikit-image, RGB, data range 255, 7x7 window), ``mse`` and ``mae`` (on 0..255). The outputs also
carry a fingerprint of the distorted pixels, so every number traces back to the exact image.

Items: ``source: synthetic`` renders seeded tabletop scenes
(:func:`embeval.distortion.samples.synthetic_tabletop`, size ``items.params.size`` = [w, h],
default [96, 72]); ``source: folder`` reads images (PNG/JPEG, converted to RGB). The distortion
``none`` (level 0) scores the reference against itself (PSNR is then null: infinite).
A reference and all its distorted copies form one shard group, so the reference is read once per shard.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from embeval.errors import ConfigError, InvalidInputError
from embeval.provenance import derive_seed
from embeval.runs.registry import Evaluator, ReportSection
from embeval.runs.spec import SubjectEntry


def _psnr(ref: np.ndarray, dist: np.ndarray) -> float | None:
    from skimage.metrics import peak_signal_noise_ratio

    if np.array_equal(ref, dist):
        return None  # infinite
    return float(peak_signal_noise_ratio(ref, dist, data_range=255))


def _ssim(ref: np.ndarray, dist: np.ndarray) -> float:
    from skimage.metrics import structural_similarity

    return float(structural_similarity(ref, dist, channel_axis=2, data_range=255))


def _mse(ref: np.ndarray, dist: np.ndarray) -> float:
    return float(np.mean((ref.astype(np.float64) - dist.astype(np.float64)) ** 2))


def _mae(ref: np.ndarray, dist: np.ndarray) -> float:
    return float(np.mean(np.abs(ref.astype(np.float64) - dist.astype(np.float64))))


#: metric name -> fn(reference, distorted) -> float (RGB uint8 images)
METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float | None]] = {"psnr": _psnr, "ssim": _ssim, "mse": _mse, "mae": _mae}
_ITEM_PARAMS = ("size",)
_CACHE = 8  # reference images kept per worker


class DistortionQualityEvaluator(Evaluator):
    subject_kinds = ("metric",)

    def default_subjects(self, spec):
        return (SubjectEntry(id="fr-psnr-ssim", kind="metric", params={"metrics": ["psnr", "ssim"]}),)

    def validate_subject(self, spec, index, subject) -> None:
        metrics = subject.params.get("metrics", ["psnr", "ssim"])
        if not isinstance(metrics, list) or not metrics:
            raise ConfigError(f"spec.subjects[{index}].params.metrics: must be a non-empty list of {', '.join(METRICS)}")
        for j, m in enumerate(metrics):
            if m not in METRICS:
                raise ConfigError(f"spec.subjects[{index}].params.metrics[{j}]: unknown metric {m!r}; choose from {', '.join(METRICS)}")

    def validate(self, spec) -> None:
        from embeval import distortion

        for i, name in enumerate(spec.distortions):
            if name != "none":
                try:
                    distortion.get(name)
                except ConfigError as exc:
                    raise ConfigError(f"spec.distortions[{i}]: {exc}") from None
        for i, level in enumerate(spec.levels):
            if not 1 <= level <= distortion.N_LEVELS:
                raise ConfigError(f"spec.levels[{i}]: distortion levels run 1..{distortion.N_LEVELS}, got {level} "
                                  "(the undistorted reference is the distortion 'none')")
        for k in spec.items.params:
            if k not in _ITEM_PARAMS:
                raise ConfigError(f"spec.items.params.{k}: unknown; allowed: {', '.join(_ITEM_PARAMS)}")
        size = spec.items.params.get("size", [96, 72])
        if not (isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) and v >= 8 for v in size)):
            raise ConfigError(f"spec.items.params.size: must be [width, height] in pixels, each >= 8; got {size!r}")
        if spec.items.source not in ("synthetic", "folder"):
            raise ConfigError("spec.items.source: distortion-quality reads 'synthetic' or 'folder' items")

    def group_key(self, unit) -> str:
        return unit.item  # a reference and all its distorted copies (for every subject) stay together

    def units(self, spec):
        units = super().units(spec)
        # the reference itself is scored once per seed, at level 0
        seen, out = set(), []
        for u in units:
            if u.distortion == "none":
                from dataclasses import replace

                u = replace(u, level=0)
            if u.key not in seen:
                seen.add(u.key)
                out.append(u)
        return out

    def setup(self, spec, subject) -> dict[str, Any]:
        return {"metrics": list(subject.params.get("metrics", ["psnr", "ssim"])), "cache": OrderedDict()}

    def reference(self, spec, state, item: str) -> np.ndarray:
        cache = state["cache"]
        if item in cache:
            cache.move_to_end(item)
            return cache[item]
        if spec.items.source == "synthetic":
            from embeval.distortion.samples import synthetic_tabletop

            w, h = spec.items.params.get("size", [96, 72])
            img = synthetic_tabletop(w, h, seed=derive_seed("distortion-quality-item", item) % (2**32))
        else:
            from PIL import Image

            path = spec.resolve_path(spec.items.path) / item
            try:
                with Image.open(path) as im:
                    img = np.asarray(im.convert("RGB"))
            except OSError as exc:
                raise InvalidInputError(f"cannot read image {path}: {exc}") from None
        cache[item] = img
        if len(cache) > _CACHE:
            cache.popitem(last=False)
        return img

    def run_unit(self, spec, state, unit, unit_seed) -> dict[str, Any]:
        from embeval.distortion import distort

        ref = self.reference(spec, state, unit.item)
        dist = ref if unit.distortion == "none" else distort(ref, unit.distortion, unit.level, seed=unit_seed)
        out: dict[str, Any] = {m: METRICS[m](ref, dist) for m in state["metrics"]}
        out["distorted_sha256"] = hashlib.sha256(np.ascontiguousarray(dist).tobytes()).hexdigest()[:16]
        out["shape"] = list(ref.shape)
        return out

    def report_sections(self, spec, frame, stamp):
        if frame.empty:
            return []
        import matplotlib.pyplot as plt

        metrics = [m for m in METRICS if f"out.{m}" in frame]
        d = frame[frame["distortion"] != "none"]
        if d.empty or not metrics:
            return []
        table = d.groupby(["distortion", "level"])[[f"out.{m}" for m in metrics]].mean().reset_index()
        table.columns = ["distortion", "level"] + metrics
        figs = []
        for m in metrics:
            fig, ax = plt.subplots(figsize=(6.4, 3.6))
            for name, g in table.groupby("distortion"):
                ax.plot(g["level"], g[m], marker="o", label=name)
            ax.set_xlabel("distortion level")
            ax.set_ylabel({"psnr": "PSNR (dB)", "ssim": "SSIM"}.get(m, m.upper()))
            ax.set_xticks(sorted(table["level"].unique()))
            ax.legend(fontsize=6, ncol=2)
            ax.set_title(f"{m.upper()} of distorted vs reference, mean over items\n{stamp}", fontsize=8)
            fig.tight_layout()
            figs.append(fig)
        return [ReportSection("Full-reference quality by distortion and level",
                              html=table.to_html(index=False, float_format="%.4f"), figures=figs,
                              caption="PSNR null (infinite) for identical images is left out of the means.")]
