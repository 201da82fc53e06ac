"""Shared base of evaluators whose items are reference images that get distorted.

Items: ``source: synthetic`` renders seeded tabletop scenes
(:func:`embeval.distortion.samples.synthetic_tabletop`, size ``items.params.size`` = [w, h],
default [96, 72]); ``source: folder`` reads images (PNG/JPEG, converted to RGB uint8).
Distortions come from :mod:`embeval.distortion` (seeded with the unit seed); ``none`` is the
reference itself, scored once per seed at level 0. A reference and all its distorted copies
form one shard group, so each shard reads a reference once (a small per-worker cache).
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from embeval.errors import ConfigError, InvalidInputError
from embeval.image_io import strict_decoding
from embeval.provenance import derive_seed
from embeval.runs.registry import Evaluator
from embeval.runs.units import one_reference_unit

_CACHE = 8  # reference images kept per worker


class DistortedImageEvaluator(Evaluator):
    #: extra keys allowed under spec.items.params
    item_params: tuple[str, ...] = ("size",)

    def validate(self, spec) -> None:
        from embeval import distortion

        for i, name in enumerate(spec.distortions):
            if name != "none":
                try:
                    distortion.get(name)
                except ConfigError as exc:
                    raise ConfigError(f"spec.distortions[{i}]: {exc}") from None
        real = [d for d in spec.distortions if d != "none"]
        for i, level in enumerate(spec.levels if real else ()):  # 'none' alone needs no levels
            if not 1 <= level <= distortion.N_LEVELS:
                raise ConfigError(f"spec.levels[{i}]: distortion levels run 1..{distortion.N_LEVELS}, got {level} "
                                  "(the undistorted reference is the distortion 'none')")
        for k in spec.items.params:
            if k not in self.item_params:
                raise ConfigError(f"spec.items.params.{k}: unknown; allowed: {', '.join(self.item_params)}")
        from embeval.image_io import MAX_IMAGE_SIDE

        size = spec.items.params.get("size", [96, 72])
        if not (isinstance(size, list) and len(size) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and 8 <= v <= MAX_IMAGE_SIDE for v in size)):
            raise ConfigError(f"spec.items.params.size: must be [width, height] in pixels, each in 8..{MAX_IMAGE_SIDE}; "
                              f"got {size!r}")
        if spec.items.source not in ("synthetic", "folder"):
            raise ConfigError(f"spec.items.source: evaluator {self.name!r} reads 'synthetic' or 'folder' items (images)")

    def group_key(self, unit) -> str:
        return unit.item  # a reference and all its distorted copies (for every subject) stay together

    def units(self, spec):
        return one_reference_unit(super().units(spec))

    def reference(self, spec, state: dict, item: str) -> np.ndarray:
        """The reference image of ``item`` (RGB uint8), cached in ``state["images"]``."""
        cache = state.setdefault("images", OrderedDict())
        if item in cache:
            cache.move_to_end(item)
            return cache[item]
        if spec.items.source == "synthetic":
            from embeval.distortion.samples import synthetic_tabletop

            w, h = spec.items.params.get("size", [96, 72])
            img = synthetic_tabletop(w, h, seed=derive_seed("synthetic-image-item", item) % (2**32))
        else:
            from PIL import Image

            path = spec.resolve_path(spec.items.path) / item
            try:
                with strict_decoding(), Image.open(path) as im:
                    img = np.asarray(im.convert("RGB"))
            except OSError as exc:
                raise InvalidInputError(f"cannot read image {path}: {exc}") from None
        cache[item] = img
        if len(cache) > _CACHE:
            cache.popitem(last=False)
        return img

    def pair(self, spec, state: dict, unit, unit_seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(reference, distorted) images of a unit."""
        from embeval.distortion import distort

        ref = self.reference(spec, state, unit.item)
        dist = ref if unit.distortion == "none" else distort(ref, unit.distortion, unit.level, seed=unit_seed)
        return ref, dist


def fingerprint(img: np.ndarray) -> str:
    """First 16 hex digits of the sha256 of the pixels (traces a result to the exact image)."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(img).tobytes()).hexdigest()[:16]


def level_figures(table, metrics: list[str], labels: dict[str, str], stamp: str, what: str) -> list:
    """One line plot per metric: mean over items against the level, one line per distortion."""
    import matplotlib.pyplot as plt

    figs = []
    for m in metrics:
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        for name, g in table.groupby("distortion"):
            ax.plot(g["level"], g[m], marker="o", label=name)
        ax.set_xlabel("distortion level")
        ax.set_ylabel(labels.get(m, m))
        ax.set_xticks(sorted(table["level"].unique()))
        ax.legend(fontsize=6, ncol=2)
        ax.set_title(f"{labels.get(m, m)} {what}\n{stamp}", fontsize=8)
        fig.tight_layout()
        figs.append(fig)
    return figs
