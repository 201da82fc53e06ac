"""The IQA-metric registry: one :class:`Metric` record per metric, registered once on :data:`METRICS`.

A metric's facts live in its record (mode FR/NR, zero-shot or trained, which way is better, its pyiqa name,
the weight file it needs, the pyiqa batch size, the value cap, what a trained one is fitted on, whether the
benchmark runs it by default, whether ``--finetune`` can fine-tune it), as pyiqa keeps each metric's facts in
one ``DEFAULT_CONFIGS`` entry. The tables other code reads (``ZERO_SHOT``, ``NEEDS_FILES``, ``BATCH_SIZE``,
``FEATURE_METRICS``, ``TRAINED``, ``PAPER_METRICS``, ``NO_RANDOM_INIT``) are live read-only views of
:data:`METRICS` made here (:class:`MetricTable`), so a metric added later shows up in all of them.

The built-in metrics are the records of :mod:`embeval_analysis.iqa.builtin_metrics`, registered on the first
use of :data:`METRICS`. Other code adds one with :func:`register_metric`, and installed packages through the
``embeval.iqa_metrics`` entry-point group (``my_metric = "my_pkg.metric:METRIC"``). See docs/contributing.md.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from embeval.errors import ConfigError
from embeval.iqa.features import FEATURE_SETS
from embeval.registry import RecordKind, Registry

MODES = ("FR", "NR")  # full reference (needs the clean frame) / no reference
KINDS = ("zero-shot", "trained")  # used as is / fitted on each split's training part
#: how a trained metric is fitted (embeval_analysis.iqa.bench): an SVR over zero-shot FR values, an SVR over NR
#: image features (embeval.iqa.features), or pyiqa's CNNIQA architecture trained from scratch
TRAINERS = ("fusion", "features", "cnniqa")
TARGET_TRANSFORMS = ("none", "rank")

#: ``fn(distorted, references) -> values (N,)``: a zero-shot metric computed here; RGB uint8 (H, W, 3) lists of
#: equal length (``references`` is there for FR metrics; an NR metric ignores it)
MetricFn = Callable[[list[np.ndarray], list[np.ndarray]], np.ndarray]


@dataclass(frozen=True)
class Metric:
    """Everything embeval knows about one image-quality metric.

    ``name``: the benchmark's name (lower case, digits, ``-`` and ``_``). ``mode``: ``FR`` (compares with the
    clean reference frame) or ``NR``. ``kind``: ``zero-shot`` (used as is) or ``trained`` (fitted on the
    training part of each split). ``higher_is_better``: the direction of quality (pyiqa's ``lower_better``
    negated). ``description``: one line for tables.

    Zero-shot: ``fn`` computes it here (:data:`MetricFn`); otherwise pyiqa's metric ``pyiqa`` (default: the
    name). ``weights``: the file pyiqa would download, which the user must provide (``""``: none; a ``.pth`` /
    ``.mat`` name is looked for in pyiqa's cache before pyiqa is asked). ``batch_size``: images per pyiqa call
    when not the caller's default (same values, faster). ``cap``: values above it (and +inf) become ``cap``
    (PSNR of identical images). ``bench``: part of ``embeval iqa bench``'s default metric set.

    Trained: ``trainer`` (one of :data:`TRAINERS`); ``fusion`` fits an SVR over the zero-shot FR metrics
    ``fusion_of``; ``features`` an SVR over the NR feature sets ``features`` (``target_transform``, ``epsilon``:
    :class:`embeval.iqa.predictor.FeatureSVRPredictor` options; None: its default).

    Fine-tuning (``embeval iqa bench --finetune``): ``finetune`` marks one of the Embodied-IQA paper's learned
    pyiqa metrics; ``no_random_init`` names the file its code always loads (it cannot be built at random).
    """

    name: str
    mode: str
    kind: str = "zero-shot"
    higher_is_better: bool = True
    description: str = ""
    pyiqa: str | None = None
    fn: MetricFn | None = None
    weights: str = ""
    batch_size: int | None = None
    cap: float | None = None
    bench: bool = False
    trainer: str = ""
    fusion_of: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    target_transform: str = "none"
    epsilon: float | None = None
    finetune: bool = False
    no_random_init: str = ""

    def __post_init__(self):
        where = f"IQA metric {self.name!r}"
        if not isinstance(self.name, str) or not re.fullmatch(r"[a-z][a-z0-9_-]*", self.name):
            raise ConfigError(f"IQA metric names are lower-case words ('ms_ssim', 'nr-fusion'), got {self.name!r}")
        if self.mode not in MODES:
            raise ConfigError(f"{where}: mode must be FR (needs the reference frame) or NR, got {self.mode!r}")
        if self.kind not in KINDS:
            raise ConfigError(f"{where}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.fn is not None and not callable(self.fn):
            raise ConfigError(f"{where}: fn must be a function fn(distorted, references) -> values, got "
                              f"{type(self.fn).__name__}")
        if self.batch_size is not None and (isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int)
                                            or self.batch_size < 1):
            raise ConfigError(f"{where}: batch_size must be a whole number >= 1 (images per pyiqa call), got "
                              f"{self.batch_size!r}")
        if self.kind == "trained":
            if self.trainer not in TRAINERS:
                raise ConfigError(f"{where}: a trained metric needs trainer, one of {', '.join(TRAINERS)}; got "
                                  f"{self.trainer!r}")
            if self.fn is not None:
                raise ConfigError(f"{where}: fn is for zero-shot metrics; a trained one is fitted by its trainer")
        elif self.trainer:
            raise ConfigError(f"{where}: trainer {self.trainer!r} needs kind='trained'")
        if self.trainer == "fusion" and (self.mode != "FR" or not self.fusion_of):
            raise ConfigError(f"{where}: a fusion metric is FR and names the zero-shot FR metrics it fuses (fusion_of)")
        bad = [s for s in self.features if s not in FEATURE_SETS]
        if (self.trainer == "features") != bool(self.features) or bad:
            raise ConfigError(f"{where}: a features metric (and only one) names its NR feature sets, a subset of "
                              f"{', '.join(FEATURE_SETS)}; got {list(self.features)}")
        if self.target_transform not in TARGET_TRANSFORMS:
            raise ConfigError(f"{where}: target_transform must be one of {', '.join(TARGET_TRANSFORMS)}, got "
                              f"{self.target_transform!r}")

    @property
    def pyiqa_name(self) -> str | None:
        """The pyiqa metric computing this zero-shot metric (None: ``fn`` computes it, or it is trained)."""
        if self.kind != "zero-shot" or self.fn is not None:
            return None
        return self.pyiqa or self.name

    @property
    def needs(self) -> str:
        """What the user must provide before it runs, in words (``nothing``)."""
        return self.weights or self.no_random_init or "nothing"

    def feature_kwargs(self) -> dict[str, Any]:
        """The :class:`embeval.iqa.predictor.FeatureSVRPredictor` options of a ``features`` metric (only those set)."""
        kw: dict[str, Any] = {"sets": self.features}
        if self.target_transform != "none":
            kw["target_transform"] = self.target_transform
        if self.epsilon is not None:
            kw["epsilon"] = self.epsilon
        return kw


METRICS: Registry[Metric] = Registry(
    "IQA metric", group="embeval.iqa_metrics", builtins="embeval_analysis.iqa.builtin_metrics",
    record=RecordKind(Metric, adder="register_metric"),
    hint="add one with register_metric(Metric(...)) from embeval_analysis.iqa.metric_registry; docs/contributing.md")

#: ``register_metric(metric) -> metric``: register under its name (replacing one of the same name)
register_metric = METRICS.register_record
#: ``unregister_metric(name)``: remove it (:class:`ConfigError` naming the metrics when absent)
unregister_metric = METRICS.remove
#: ``get_metric(name, field="") -> Metric``: :class:`ConfigError` (did you mean, the choices) when unknown
get_metric = METRICS.get_record
#: ``metrics() -> list[Metric]``: in registry order (built-ins, then registered, then plugins)
metrics = METRICS.records


def zero_shot_record(name: str) -> Metric | None:
    """The record of zero-shot metric ``name``; None for a name only pyiqa knows (or a trained metric's name)."""
    if name not in METRICS:
        return None
    m = get_metric(name)
    return m if m.kind == "zero-shot" else None


def bench_defaults(kind: str) -> list[str]:
    """The metrics of ``kind`` that ``embeval iqa bench`` runs by default, in registry order."""
    return [m.name for m in metrics() if m.kind == kind and m.bench]


class MetricTable(Mapping[str, Any]):
    """Live read-only view ``name -> value(metric)`` of :data:`METRICS` over the metrics that ``keep`` selects."""

    def __init__(self, keep: Callable[[Metric], bool], value: Callable[[Metric], Any]):
        self._keep, self._value = keep, value

    def __getitem__(self, name: str) -> Any:
        if name not in METRICS or not self._keep(m := get_metric(name)):
            raise KeyError(name)
        return self._value(m)

    def __iter__(self) -> Iterator[str]:
        return (m.name for m in metrics() if self._keep(m))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


#: zero-shot name -> (mode, higher_is_better), of those computed without any weight file
ZERO_SHOT = MetricTable(lambda m: m.kind == "zero-shot" and not m.weights, lambda m: (m.mode, m.higher_is_better))
#: zero-shot name -> the file the user provides (pyiqa would download it)
NEEDS_FILES = MetricTable(lambda m: m.kind == "zero-shot" and bool(m.weights), lambda m: m.weights)
#: zero-shot name -> images per pyiqa call, where the caller's default is not the fastest
BATCH_SIZE = MetricTable(lambda m: m.batch_size is not None, lambda m: m.batch_size)
#: feature-SVR metric -> keyword arguments of embeval.iqa.predictor.FeatureSVRPredictor
FEATURE_METRICS = MetricTable(lambda m: m.trainer == "features", Metric.feature_kwargs)
#: trained name -> (mode, description)
TRAINED = MetricTable(lambda m: m.kind == "trained", lambda m: (m.mode, m.description))
#: the paper's learned metrics that fine-tuning takes (pyiqa names) -> the file their code always loads ("" none)
FINETUNABLE = MetricTable(lambda m: m.finetune, lambda m: m.no_random_init)
#: metric -> the file its code always loads (it cannot be built with random weights)
NO_RANDOM_INIT = MetricTable(lambda m: bool(m.no_random_init), lambda m: m.no_random_init)


def markdown_table() -> str:
    """The metric table: name, mode, kind, direction, what it needs, description (registry order)."""
    rows = ["| metric | mode | kind | better | in the bench by default | needs | description |",
            "|---|---|---|---|---|---|---|"]
    rows += [f"| `{m.name}` | {m.mode} | {m.kind} | {'higher' if m.higher_is_better else 'lower'} | "
             f"{'yes' if m.bench else 'no'} | {m.needs} | {m.description} |" for m in metrics()]
    return "\n".join(rows)
