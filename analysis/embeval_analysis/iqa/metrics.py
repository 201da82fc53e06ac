"""Quality metrics of the Embodied-IQA benchmark.

Every metric is one :class:`~embeval_analysis.iqa.metric_registry.Metric` record on
:data:`~embeval_analysis.iqa.metric_registry.METRICS` (built-ins: :mod:`embeval_analysis.iqa.builtin_metrics`);
the tables here (``ZERO_SHOT``, ``NEEDS_FILES``, ``BATCH_SIZE``, ``FEATURE_METRICS``, ``TRAINED``) are its views.

Zero-shot metrics are computed through pyiqa (:data:`ZERO_SHOT`: no weight files needed) or by the record's
own function. Metrics
whose files pyiqa would download (NIQE, BRISQUE, LPIPS, DISTS, ...) work when the user puts the
file where pyiqa looks (``~/.cache/torch/hub/pyiqa/`` or ``.../checkpoints/``); otherwise
:func:`zero_shot_scores` reports them as unavailable with the file that is missing.

Trained metrics (:data:`TRAINED`), fitted on the training split only:
- ``cnniqa`` (NR): pyiqa's CNNIQA architecture trained from scratch (:mod:`embeval.iqa.predictor`),
  or fine-tuned from a user-given pyiqa weight file (``init_weights``);
- ``brisque-svr`` (NR): BRISQUE's NSS features with its SVR retrained on our target;
- ``nr-fusion`` (NR): the same plus colour moments, image and signal statistics (:mod:`embeval.iqa.features`),
  fitted to the normal scores of the target's ranks;
- ``fr-fusion`` (FR): an SVR (RBF, scikit-learn) over the zero-shot FR metrics (VMAF-style fusion).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from embeval_analysis.iqa.metric_registry import (  # noqa: F401 - the tables, re-exported for their readers
    BATCH_SIZE,
    FEATURE_METRICS,
    NEEDS_FILES,
    TRAINED,
    ZERO_SHOT,
    get_metric,
    zero_shot_record,
)


@contextmanager
def torch_threads(n: int = 1):
    """Run torch with ``n`` intra-op threads (1 is 3x faster than 2 for these small images on a
    busy 2-core machine), restoring the previous setting."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _tensor(img: np.ndarray):
    import torch

    return torch.from_numpy(np.array(img, copy=True)).permute(2, 0, 1)[None].float().div_(255.0)


def zero_shot_scores(dist: list[np.ndarray], refs: list[np.ndarray], names=("psnr", "ssim", "gmsd", "piqe"),
                     log: Callable[[str], None] | None = None, batch_size: int = 32) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, bool]]:
    """({metric: values (N,)}, {unavailable metric: reason}, {metric: higher_is_better}).

    A registered metric's record says how (:func:`~embeval_analysis.iqa.metric_registry.zero_shot_record`): its
    own ``fn``, or pyiqa; a name without a record goes to pyiqa as is. Equal-size images go to pyiqa
    ``batch_size`` at a time, except the metrics with their own ``batch_size`` (:data:`BATCH_SIZE`: faster, same
    values). Values above a record's ``cap`` are capped (PSNR of identical images: 60 dB)."""
    import warnings

    import pyiqa
    import torch

    from embeval_analysis.iqa.pyiqa_archs import import_metric_arch, llama_kept_if_it_fails

    values, missing, hib = {}, {}, {}
    cache = Path(torch.hub.get_dir()) / "pyiqa"
    for name in names:
        rec = zero_shot_record(name)  # None: a name only pyiqa knows (its own defaults)
        if rec is not None and rec.fn is not None:
            out = np.asarray(rec.fn(list(dist), list(refs)), dtype=float).reshape(-1)
            if out.shape != (len(dist),):
                raise ValueError(f"IQA metric {name!r}: fn returned {out.size} values for {len(dist)} images")
            values[name], hib[name] = _capped(out, rec), rec.higher_is_better
            if log:
                log(f"  {name}: {len(out)} images")
            continue
        need = rec.weights if rec is not None else ""
        if need and need.endswith((".pth", ".mat")) and not (cache / need).exists():
            # never reach for a hub at run time: pyiqa would try to download the file
            missing[name] = f"needs {need} in {cache} (a file you provide; pyiqa's weights page has it)"
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pyiqa_name = rec.pyiqa_name if rec is not None else name
                with llama_kept_if_it_fails(pyiqa_name):  # pyiqa_archs: Q-Align's module replaces transformers' Llama
                    import_metric_arch(pyiqa_name)  # only its module
                    m = pyiqa.create_metric(pyiqa_name, device="cpu", as_loss=False)
        except Exception as exc:  # noqa: BLE001 - pyiqa raises URLError/HTTPError/OSError for missing downloads
            missing[name] = missing_reason(exc, need, cache)
            continue
        out = np.empty(len(dist))
        by_shape: dict[tuple, list[int]] = {}
        for i, (d, r) in enumerate(zip(dist, refs)):
            by_shape.setdefault((d.shape, r.shape), []).append(i)
        with torch.no_grad(), torch_threads(1):
            step = (rec.batch_size if rec is not None else None) or batch_size
            for idx in by_shape.values():  # batches of equal-size images: pyiqa's per-call overhead dominates
                for k in range(0, len(idx), step):
                    b = idx[k:k + step]
                    x = torch.cat([_tensor(dist[i]) for i in b])
                    v = m(x, torch.cat([_tensor(refs[i]) for i in b])) if m.metric_mode == "FR" else m(x)
                    out[b] = np.asarray(v.detach().reshape(-1).numpy() if hasattr(v, "detach") else v, dtype=float)
        values[name], hib[name] = _capped(out, rec), not m.lower_better
        if log:
            log(f"  {name}: {len(out)} images")
    return values, missing, hib


def missing_reason(exc: BaseException, need: str, cache: Path) -> str:
    """Why a pyiqa metric could not be built (a download it tried, offline), in one line: the Hugging Face model or
    the file it wanted and where it has to be."""
    text = str(exc)
    hub = re.search(r"huggingface\.co/([\w.-]+/[\w.-]+)/", text)
    if hub:
        return f"needs the Hugging Face model {hub.group(1)} in the Hugging Face cache (no network): {type(exc).__name__}"
    f = re.search(r"/([^/\s'\"]+\.(?:pth|mat|pt|bin|safetensors))", text)
    return f"needs {f.group(1) if f else need or 'its pretrained files'} in {cache} (no network): {type(exc).__name__}"


def _capped(values: np.ndarray, rec) -> np.ndarray:
    """``values`` with +inf and everything above the record's ``cap`` set to the cap (no cap: unchanged)."""
    if rec is None or rec.cap is None:
        return values
    return np.minimum(np.nan_to_num(values, posinf=rec.cap), rec.cap)


@dataclass
class TrainConfig:
    """Training of the learned metrics (CPU, from scratch)."""

    epochs: int = 12
    batch_size: int = 32
    lr: float = 1e-3
    input_size: list[int] = field(default_factory=lambda: [96, 128])  # [height, width]
    n_kers: int = 50
    n_nodes: int = 256
    init_weights: str | None = None  # a pyiqa CNNIQA weight file to start from (user-given)
    threads: int = 1  # torch intra-op threads while training


def train_cnniqa(images: list[np.ndarray], y: np.ndarray, cfg: TrainConfig, seed: int = 0, target: str = "decision"):
    """Train CNNIQA (L1 loss on the z-scored target, Adam, random horizontal flips); returns an
    :class:`embeval.iqa.predictor.NRPredictor`."""
    import torch

    from embeval.iqa.predictor import NRPredictor, PredictorConfig, build_net, to_tensor

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    y = np.asarray(y, dtype=np.float64)
    mu, sd = float(y.mean()), float(y.std() or 1.0)
    pcfg = PredictorConfig(input_size=list(cfg.input_size), n_kers=cfg.n_kers, n_nodes=cfg.n_nodes, target=target,
                           target_mean=mu, target_std=sd)
    net = build_net(pcfg)
    if cfg.init_weights:
        from pyiqa.archs.arch_util import load_pretrained_network

        load_pretrained_network(net, cfg.init_weights, True, "params")
    x = to_tensor(images, cfg.input_size)
    z = torch.from_numpy((y - mu) / sd).float()
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    with torch_threads(cfg.threads):
        _fit(net, x, z, opt, cfg, rng)
    return NRPredictor(net.eval(), pcfg)


def _fit(net, x, z, opt, cfg: TrainConfig, rng) -> None:
    import torch

    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, cfg.epochs))
    net.train()
    for _ in range(cfg.epochs):
        order = rng.permutation(len(x))
        for i in range(0, len(order), cfg.batch_size):
            idx = torch.from_numpy(order[i:i + cfg.batch_size])
            xb = x[idx]
            flip = torch.from_numpy(rng.random(len(idx)) < 0.5)
            xb[flip] = xb[flip].flip(-1)
            loss = torch.nn.functional.l1_loss(net(xb).reshape(-1), z[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()


class FRFusion:
    """SVR over zero-shot FR metric values (features standardised on the training split)."""

    def __init__(self, features=None, seed: int = 0):
        """``features``: the zero-shot FR metrics fused (default: those of ``fr-fusion``'s record)."""
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import SVR

        self.features = tuple(features if features is not None else get_metric("fr-fusion").fusion_of)
        self.model = make_pipeline(StandardScaler(), SVR(C=3.0, epsilon=0.05))

    def _x(self, feats: dict[str, np.ndarray], idx) -> np.ndarray:
        return np.stack([feats[f][idx] for f in self.features], axis=1)

    def fit(self, feats, idx, y) -> "FRFusion":
        self.model.fit(self._x(feats, idx), y)
        return self

    def predict(self, feats, idx) -> np.ndarray:
        return self.model.predict(self._x(feats, idx))


