"""Fine-tune pyiqa's learned metrics on an Embodied-IQA database, as the paper does.

Training goes through pyiqa's own code path: the database is exported in pyiqa's format
(:func:`.export.export_pyiqa`: meta CSV + split file; ``split_by`` random, the paper's, by default,
or scene-disjoint), read with pyiqa's
``GeneralNRDataset`` / ``GeneralFRDataset`` and ``build_dataloader``, and trained with pyiqa's
``GeneralIQAModel`` (``build_network`` from the metric's ``DEFAULT_CONFIGS`` entry, ``feed_data``,
``optimize_parameters`` with the configured optimiser and loss, ``test``). Labels are min-max
normalised to 0..1 with the training part's range (pyiqa's ``mos_normalize``).

Weights: by default training starts from the metric's pretrained weights, which must already lie in
pyiqa's cache (``~/.cache/torch/hub/pyiqa``) or torch hub's (``.../hub/checkpoints`` for torchvision
backbones); nothing is downloaded, and a missing file stops with an error naming it and the folder.
``random_init`` builds every weight at random instead (backbones included; offline tests and smoke
runs); architectures whose code loads a file unconditionally (CLIP-based: CLIP-IQA, LIQE; Q-Align)
cannot be built that way and say so.

Defaults are the paper's settings: Adam, learning rate 1e-5, 50 epochs, batch 8, the database's own
resolution; ``max_steps`` / ``epochs`` / ``size`` / ``splits`` are the CPU overrides.
"""
from __future__ import annotations

import inspect
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from embeval.errors import ConfigError, MissingWeightsError
from embeval_analysis.iqa.metric_registry import FINETUNABLE, NO_RANDOM_INIT
from embeval_analysis.iqa.pyiqa_archs import import_arch

#: the paper's learned metrics that pyiqa 0.1.15 has (names of pyiqa's DEFAULT_CONFIGS): the records marked
#: ``finetune`` (embeval_analysis.iqa.builtin_metrics), a live view
PAPER_METRICS = FINETUNABLE
#: NO_RANDOM_INIT: those that cannot be built with random weights (their code loads a file whatever the options
#: say) -> that file (the records' ``no_random_init``)

Log = Callable[[str], None]


@dataclass
class FinetuneConfig:
    """Fine-tuning settings (defaults: the Embodied-IQA paper's)."""

    epochs: int = 50
    batch_size: int = 8
    lr: float = 1e-5
    optimizer: str = "Adam"  # a torch.optim class name (pyiqa's get_optimizer)
    loss: str = "MSELoss"  # a pyiqa loss type (pyiqa.losses), on the 0..1-normalised target
    size: list[int] | None = None  # [height, width] resize; None = the database's resolution
    hflip: bool = True  # pyiqa's paired random horizontal flip while training
    splits: int | None = None  # fine-tune on the first K splits only (None: all)
    max_steps: int | None = None  # CPU override: at most this many optimisation steps per split
    random_init: bool = False  # every weight random (offline tests); default: pretrained weights from the cache
    network: dict[str, Any] = field(default_factory=dict)  # network option overrides, applied to every metric
    #                                 whose architecture has the option (e.g. semantic_model_name: resnet18)
    threads: int = 1  # torch intra-op threads
    device: str = "auto"  # "auto" (CUDA when available), "cpu" or "cuda" (pyiqa's num_gpu)
    seed: int = 0


def _pyiqa_modules():
    return [m for name, m in list(sys.modules.items()) if name.startswith("pyiqa") and m is not None]


_MISSING = object()


@contextmanager
def _patched(targets: list[tuple[Any, str, Any]]):
    """Set attributes for the duration; restores the raw values (classmethods stay classmethods,
    inherited attributes are removed again)."""
    old = [(obj, name, vars(obj).get(name, _MISSING)) for obj, name, _ in targets]
    try:
        for obj, name, new in targets:
            setattr(obj, name, new)
        yield
    finally:
        for obj, name, value in reversed(old):
            if value is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


@contextmanager
def cached_weights_only(metric: str):
    """While building ``metric``: files come from pyiqa's / torch hub's cache or raise a
    :class:`MissingWeightsError` naming the file and the folder (never a download)."""
    import os

    import timm
    import torch.hub
    import torchvision.models._api as tv_api
    from pyiqa.utils import download_util

    create = timm.create_model

    def timm_cached(name, *a, **kw):
        try:
            return create(name, *a, **kw)
        except Exception as exc:
            if kw.get("pretrained") and type(exc).__name__ in ("LocalEntryNotFoundError", "OfflineModeIsEnabled"):
                cfg = timm.models.get_pretrained_cfg(str(name).split(".")[0])
                repo = getattr(cfg, "hf_hub_id", None) or f"timm/{name}"
                raise MissingWeightsError(f"{metric}: backbone {name} (Hugging Face repo {repo}) is not in the Hugging Face "
                                          f"cache; download it there (huggingface-cli download {repo})") from None
            raise

    def pyiqa_file(url, model_dir=None, progress=True, file_name=None):
        d = model_dir or download_util.DEFAULT_CACHE_DIR
        f = os.path.join(d, file_name or os.path.basename(url.split("?")[0]))
        if not os.path.isfile(f):
            raise MissingWeightsError(f"{metric}: pretrained file {os.path.basename(f)} is not in pyiqa's cache {d}; "
                                      f"put it there (from {url}) or use random_init for a smoke run")
        return f

    def hub_state(url, model_dir=None, map_location=None, progress=True, check_hash=False, file_name=None, weights_only=False):
        d = model_dir or os.path.join(torch.hub.get_dir(), "checkpoints")
        f = os.path.join(d, file_name or os.path.basename(url.split("?")[0]))
        if not os.path.isfile(f):
            raise MissingWeightsError(f"{metric}: backbone file {os.path.basename(f)} is not in torch hub's cache {d}; "
                                      f"put it there (from {url})")
        return torch.load(f, map_location=map_location or "cpu", weights_only=weights_only)

    targets = [(m, "load_file_from_url", pyiqa_file) for m in _pyiqa_modules() if hasattr(m, "load_file_from_url")]
    targets += [(torch.hub, "load_state_dict_from_url", hub_state), (tv_api, "load_state_dict_from_url", hub_state)]
    if getattr(timm.create_model, "__name__", "") != "create_random":
        targets.append((timm, "create_model", timm_cached))
    with _patched(targets):
        try:
            yield
        except MissingWeightsError:
            raise
        except Exception as exc:  # timm / Hugging Face backbones: offline cache miss
            if type(exc).__name__ in ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "URLError"):
                raise MissingWeightsError(f"{metric}: a backbone file is not in the local cache ({type(exc).__name__}: "
                                          f"{str(exc).splitlines()[0][:160]}); put it in the Hugging Face / torch hub cache") from None
            raise


@contextmanager
def random_weights(metric: str):
    """While building ``metric``: timm and torchvision backbones are built without weights and
    pyiqa's ``load_pretrained_network`` is skipped, so every weight is random (nothing is read)."""
    import timm
    import torchvision.models._api as tv_api

    create = timm.create_model

    def create_random(*a, **kw):
        kw["pretrained"] = False
        return create(*a, **kw)

    def skip(*a, **kw):
        return None

    targets = [(timm, "create_model", create_random), (tv_api.WeightsEnum, "verify", classmethod(lambda cls, obj: None))]
    targets += [(m, "load_pretrained_network", skip) for m in _pyiqa_modules() if hasattr(m, "load_pretrained_network")
                and m.__name__ != "pyiqa.archs.arch_util"]
    with _patched(targets), cached_weights_only(metric):
        yield


def network_options(metric: str, random_init: bool = False, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """pyiqa's network options of ``metric`` (its DEFAULT_CONFIGS entry); ``random_init`` turns off
    every pretrained flag the architecture has; ``overrides`` set the options the architecture has."""
    import pyiqa.archs
    from pyiqa.default_model_configs import DEFAULT_CONFIGS
    from pyiqa.utils.registry import ARCH_REGISTRY

    if metric not in DEFAULT_CONFIGS:
        raise ConfigError(f"{metric!r} is not a pyiqa metric; the paper's learned metrics in pyiqa: {', '.join(PAPER_METRICS)}")
    opt = dict(DEFAULT_CONFIGS[metric]["metric_opts"])
    import_arch(opt["type"])  # its module now, before any patching (and not every module: pyiqa_archs)
    if opt["type"] not in ARCH_REGISTRY:
        pyiqa.archs._lazy_import_arch(opt["type"])
    params = inspect.signature(ARCH_REGISTRY.get(opt["type"]).__init__).parameters
    opt.update({k: v for k, v in (overrides or {}).items() if k in params})
    if random_init:
        if metric in NO_RANDOM_INIT:
            raise ConfigError(f"{metric} cannot be built with random weights (its code always loads "
                              f"{NO_RANDOM_INIT[metric]}); fine-tune it from its pretrained files instead")
        for k in ("pretrained", "backbone_pretrain"):
            if k in params:
                opt[k] = False
        if "pretrained_model_path" in params:
            opt["pretrained_model_path"] = None
    return opt


def metric_mode(metric: str) -> str:
    from pyiqa.default_model_configs import DEFAULT_CONFIGS

    return DEFAULT_CONFIGS[metric]["metric_mode"]


def _num_gpu(device: str) -> int:
    import torch

    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"fine-tuning device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("fine-tuning device 'cuda' asked for, but torch sees no CUDA device; use 'auto' or 'cpu'")
    return 1 if device == "cuda" or (device == "auto" and torch.cuda.is_available()) else 0


def check_config(metrics: list[str], cfg: FinetuneConfig, weights: bool = False) -> None:
    """Fail before any work: an unknown metric, one without random init, a missing CUDA device, bad epochs / batch /
    lr; with ``weights`` (and pretrained weights asked for), a pretrained file missing from the local caches
    (:class:`MissingWeightsError` naming it; each network is built once on the CPU and dropped)."""
    for m in metrics:
        network_options(m, cfg.random_init, cfg.network)
    _num_gpu(cfg.device)
    if cfg.epochs < 1 or cfg.batch_size < 1 or cfg.lr <= 0:
        raise ConfigError(f"fine-tuning needs epochs >= 1, batch >= 1 and lr > 0; got {cfg.epochs}, {cfg.batch_size}, {cfg.lr}")
    if not weights or cfg.random_init:
        return
    from pyiqa.utils.registry import ARCH_REGISTRY

    for m in metrics:
        opt = network_options(m, False, cfg.network)
        arch = opt.pop("type")
        with cached_weights_only(m):
            ARCH_REGISTRY.get(arch)(**opt)


def _model(metric: str, cfg: FinetuneConfig):
    from pyiqa.models import build_model

    opt = {"model_type": "GeneralIQAModel", "num_gpu": _num_gpu(cfg.device), "is_train": True, "dist": False, "rank": 0, "world_size": 1,
           "name": f"embeval-finetune-{metric}", "network": network_options(metric, cfg.random_init, cfg.network),
           "path": {"pretrain_network": None},
           "train": {"optim": {"type": cfg.optimizer, "lr": cfg.lr},
                     "scheduler": {"type": "MultiStepLR", "milestones": [10**9], "gamma": 1.0},
                     "mos_loss_opt": {"type": cfg.loss, "loss_weight": 1.0}},
           "val": {"metrics": {"srcc": {"type": "calculate_srcc"}}}}
    guard = random_weights if cfg.random_init else cached_weights_only
    with guard(metric):
        return build_model(opt)


def _loader(files: dict[str, Path], db: Path, target: str, mode: str, split: int, phase: str, rng_range, cfg: FinetuneConfig):
    from pyiqa.data import build_dataloader, build_dataset

    augment: dict[str, Any] = {}
    if cfg.size:
        augment["resize"] = [int(cfg.size[0]), int(cfg.size[1])]
    if cfg.hflip and phase == "train":
        augment["hflip"] = True
    opt = {"name": f"embeval-{target}", "type": "GeneralFRDataset" if mode == "FR" else "GeneralNRDataset",
           "dataroot_target": str(db), "dataroot_ref": str(db), "meta_info_file": str(files[f"meta_{mode.lower()}_{target}"]),
           "split_file": str(files["splits"]), "split_index": split, "phase": phase, "augment": augment or None,
           "mos_normalize": True, "mos_range": list(rng_range), "lower_better": False,
           "batch_size_per_gpu": cfg.batch_size, "num_worker_per_gpu": 0, "use_shuffle": True}
    ds = build_dataset(opt)
    return ds, build_dataloader(ds, opt, num_gpu=_num_gpu(cfg.device), dist=False, sampler=None, seed=cfg.seed)


def _predict(model, loader) -> tuple[np.ndarray, np.ndarray]:
    preds, ys = [], []
    for batch in loader:
        model.feed_data(batch)
        model.test()
        preds.append(model.output_score.detach().reshape(-1).cpu().numpy())
        ys.append(batch["mos_label"].reshape(-1).numpy())
    return np.concatenate(preds), np.concatenate(ys)


@dataclass
class FinetuneResult:
    per_split: Any  # DataFrame: metric, target, split, srcc, krcc, plcc, steps, loss_first, loss_last, train_mse_before/after
    summary: Any  # DataFrame: mean and median over splits per metric/target
    losses: dict[str, list[float]] = field(default_factory=dict)  # "metric/target/split" -> loss per step
    config: dict[str, Any] = field(default_factory=dict)


def finetune(db: str | Path, metrics: list[str], out: str | Path, cfg: FinetuneConfig | None = None,
             targets: tuple[str, ...] = ("decision",), n_splits: int = 10, test_size: float = 0.2,
             log: Log | None = print, split_by: str = "random") -> FinetuneResult:
    """Fine-tune every metric in ``metrics`` on each split's training part of ``db`` for each target (splits
    of protocol ``split_by``: ``random``, the paper's 8:2 over image pairs, or ``scene``), test
    on the split's test part (SRCC / KRCC / PLCC by :func:`embeval.scoring.stats.corr`; NaN on constant predictions), write ``finetune_per_split.csv`` and
    ``finetune_summary.csv`` (mean and median over splits) to ``out``."""
    import pandas as pd
    import torch

    from embeval.scoring.stats import corr
    from embeval_analysis.iqa.export import export_pyiqa
    from embeval_analysis.iqa.metrics import torch_threads

    cfg = cfg or FinetuneConfig()
    db, out = Path(db), Path(out)
    from embeval_analysis.iqa.database import read_table

    scores = read_table(db)
    check_config(metrics, cfg)
    files = export_pyiqa(scores, out / "pyiqa", targets=targets, n_splits=n_splits, test_size=test_size, seed=cfg.seed,
                         split_by=split_by)
    import pickle

    with open(files["splits"], "rb") as fh:
        split_doc = pickle.load(fh)
    k_max = min(n_splits, cfg.splits or n_splits)
    rows, losses = [], {}
    t_all = time.perf_counter()
    import logging

    pyiqa_log = logging.getLogger("pyiqa")
    old_level = pyiqa_log.level
    pyiqa_log.setLevel(logging.ERROR)  # pyiqa logs every frozen parameter and the whole network
    with ExitStack() as stack:
        stack.callback(pyiqa_log.setLevel, old_level)
        stack.enter_context(torch_threads(cfg.threads))
        for metric in metrics:
            mode = metric_mode(metric)
            for target in targets:
                if f"meta_nr_{target}" not in files:
                    continue
                y_all = scores[target].to_numpy(float)
                for split in range(1, k_max + 1):
                    torch.manual_seed(cfg.seed + split)
                    tr = split_doc[split]["train"]
                    rng_range = (float(np.nanmin(y_all[tr])), float(np.nanmax(y_all[tr])))
                    t0 = time.perf_counter()
                    model = _model(metric, cfg)
                    _, train_loader = _loader(files, db, target, mode, split, "train", rng_range, cfg)
                    eval_cfg = FinetuneConfig(**{**asdict(cfg), "hflip": False})
                    _, train_eval = _loader(files, db, target, mode, split, "val", rng_range, eval_cfg)
                    _, test_loader = _loader(files, db, target, mode, split, "test", rng_range, eval_cfg)
                    # the training part, scored in evaluation mode before and after (loss-falls check)
                    train_eval.dataset.paths_mos = list(train_loader.dataset.paths_mos)
                    p0, y0 = _predict(model, train_eval)
                    step, trace = 0, []
                    for _epoch in range(cfg.epochs):
                        for batch in train_loader:
                            model.feed_data(batch)
                            model.optimize_parameters(step)
                            trace.append(float(model.log_dict["l_mos"]))
                            step += 1
                            if cfg.max_steps and step >= cfg.max_steps:
                                break
                        if cfg.max_steps and step >= cfg.max_steps:
                            break
                    p1, y1 = _predict(model, train_eval)
                    pred, y = _predict(model, test_loader)
                    nan = float("nan")  # undefined on constant predictions: shown as such, not as 0
                    rows.append({"metric": metric, "mode": mode, "target": target, "split": split,
                                 "srcc": corr(pred, y, "spearman", nan), "krcc": corr(pred, y, "kendall", nan),
                                 "plcc": corr(pred, y, "pearson", nan),
                                 "n_train": len(tr), "n_test": len(y), "steps": step,
                                 "loss_first": trace[0] if trace else float("nan"),
                                 "loss_last": trace[-1] if trace else float("nan"),
                                 "train_mse_before": float(np.mean((p0 - y0) ** 2)),
                                 "train_mse_after": float(np.mean((p1 - y1) ** 2)),
                                 "seconds": time.perf_counter() - t0, "random_init": cfg.random_init})
                    losses[f"{metric}/{target}/{split}"] = trace
                    if log:
                        r = rows[-1]
                        log(f"  {metric} {target} split {split}: {step} steps, train MSE {r['train_mse_before']:.4f} -> "
                            f"{r['train_mse_after']:.4f}, test SRCC {r['srcc']:.3f} ({r['seconds']:.1f} s)")
    per = pd.DataFrame(rows)
    g = per.groupby(["metric", "mode", "target"], sort=False)
    summary = g[["srcc", "krcc", "plcc"]].mean().add_suffix("_mean").join(g[["srcc", "krcc", "plcc"]].median()
                                                                           .add_suffix("_median"))
    summary["n_splits"] = g["split"].nunique()
    summary = summary.reset_index()
    out.mkdir(parents=True, exist_ok=True)
    per.to_csv(out / "finetune_per_split.csv", index=False)
    summary.to_csv(out / "finetune_summary.csv", index=False)
    if log:
        log(f"fine-tuned {len(metrics)} metric(s) on {k_max} split(s) in {time.perf_counter() - t_all:.0f} s -> "
            f"{out / 'finetune_summary.csv'}")
    return FinetuneResult(per, summary, losses, asdict(cfg))


def print_finetune(res: FinetuneResult, out=print) -> None:
    out(f"{'metric':10s} {'mode':4s} {'target':9s} {'SRCC mean':>9s} {'median':>7s} {'KRCC mean':>9s} {'PLCC mean':>9s} "
        f"{'median':>7s} {'splits':>6s}")
    for _, r in res.summary.iterrows():
        out(f"{r.metric:10s} {r['mode']:4s} {r.target:9s} {r.srcc_mean:9.3f} {r.srcc_median:7.3f} {r.krcc_mean:9.3f} "
            f"{r.plcc_mean:9.3f} {r.plcc_median:7.3f} {int(r.n_splits):6d}")
