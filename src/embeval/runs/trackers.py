"""Experiment trackers: a run's numbers logged, offline, to TensorBoard and Weights & Biases.

Chosen in the run spec (cosmetic: never part of the hash), nothing is logged without it::

    trackers: [tensorboard, wandb]                 # or {name: wandb, dir: runs/wandb, project: my-study}

What is logged, as the run goes:

- per unit, the moment it is recorded: every top-level numeric output as ``unit/<subject>/<output>``, at step =
  the unit's position in the plan (so a resumed or sharded run lands each unit on its own step);
- at the end, over every done unit in the store (earlier sessions too): the mean of each numeric output per
  subject, distortion and level (TensorBoard: ``mean/<subject>/<distortion>/<output>`` at step = level; W&B: run
  summary ``mean/<subject>/<distortion>/L<level>/<output>``), ``units/done|failed|total``, the same means as one
  table (``summary``), and every ``*.mp4`` under the run folder (W&B: a ``wandb.Video``; TensorBoard cannot show
  video without moviepy, so it gets the video's first frame as an image ``video/<path>``).

Files go to ``<dir>/tensorboard/<run label>/`` and ``<dir>/wandb/offline-run-*/`` where ``dir`` defaults to
``<run folder>/trackers``. W&B runs in offline mode only (``WANDB_MODE=offline`` while the run starts, no login,
no network); upload later with ``wandb sync <dir>/wandb/offline-run-*``. A tracker that fails (to start or to
log) is reported in one line on stderr and turned off; the run and its results store go on untouched.

Add a tracker by subclassing :class:`Tracker` and registering it in :data:`TRACKERS` (or through the entry-point
group ``embeval.run_trackers``).
"""
from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from embeval.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from embeval.runs.spec import RunSpec, TrackerSpec
    from embeval.runs.store import ResultsStore

#: name -> Tracker subclass ("module:Class" imported on first use)
TRACKERS: Registry[type] = Registry("tracker", group="embeval.run_trackers", entries={
    "tensorboard": "embeval.runs.trackers:TensorBoardTracker",
    "wandb": "embeval.runs.trackers:WandbTracker",
})
#: videos logged per run at most (the first ones in path order)
MAX_VIDEOS = 64
#: columns of the summary table
SUMMARY_COLUMNS = ("subject", "distortion", "level", "output", "mean", "n")


@dataclass(frozen=True)
class MeanRow:
    """The mean of one numeric output over the done units of one subject, distortion and level."""

    subject: str
    distortion: str
    level: int
    output: str
    mean: float
    n: int

    def as_row(self) -> list[Any]:
        return [self.subject, self.distortion, self.level, self.output, self.mean, self.n]


def numeric_outputs(outputs: Any) -> dict[str, float]:
    """The top-level finite numbers of a unit's outputs, integers kept exact (bools, lists, nested values and NaN
    left out)."""
    if not isinstance(outputs, dict):
        return {}
    return {str(k): v if isinstance(v, int) else float(v) for k, v in outputs.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def mean_rows(results: dict[tuple, Any]) -> list[MeanRow]:
    """:class:`MeanRow` per (subject, distortion, level, output) over ``results`` (key -> outputs), sorted."""
    acc: dict[tuple, list[float]] = defaultdict(list)
    for (subject, _item, distortion, level, _seed), outputs in results.items():
        for k, v in numeric_outputs(outputs).items():
            acc[(subject, distortion, int(level), k)].append(v)
    return [MeanRow(s, d, lv, k, math.fsum(vs) / len(vs), len(vs)) for (s, d, lv, k), vs in sorted(acc.items())]


class Tracker:
    """Base class: one tracker of one run invocation. ``root`` is the tracker folder (``dir``), ``label`` names
    the run (``<name>-<hash8>``), ``config`` is the spec as plain data."""

    name: ClassVar[str] = ""
    #: Python packages that must be installed, tried in order (the first found is used)
    packages: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cfg: "TrackerSpec", root: Path, label: str, config: dict[str, Any]):
        self.cfg, self.root, self.label = cfg, root, label

    @classmethod
    def missing_package(cls) -> str | None:
        """The package to install when none of :attr:`packages` is (None: ready)."""
        if not cls.packages or any(importlib.util.find_spec(p) is not None for p in cls.packages):
            return None
        return cls.packages[-1]

    def log_scalars(self, values: dict[str, float], step: int) -> None:
        """Numbers of one unit (tag -> value) at ``step``, the unit's position in the plan."""
        raise NotImplementedError

    def log_summary(self, rows: Sequence[MeanRow], counts: dict[str, int]) -> None:
        """The means at the end of the invocation and the unit counts (``done``, ``failed``, ``total``)."""
        raise NotImplementedError

    def log_table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def log_video(self, name: str, path: Path) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Flush and close; the files are complete afterwards."""


def first_frame(path: Path):
    """The first frame of a video as an RGB uint8 array (H, W, 3), decoded with PyAV."""
    import av

    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            return frame.to_ndarray(format="rgb24")
    raise ValueError(f"{path} holds no video frame")


def _markdown(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.6g}" if isinstance(v, float) else str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows])


class TensorBoardTracker(Tracker):
    """Event files under ``<dir>/tensorboard/<label>/`` (tensorboardX's SummaryWriter when installed, else
    torch's). Videos: their first frame as an image."""

    name = "tensorboard"
    packages = ("tensorboardX", "tensorboard")

    def __init__(self, cfg, root, label, config):
        super().__init__(cfg, root, label, config)
        if importlib.util.find_spec("tensorboardX") is not None:
            from tensorboardX import SummaryWriter
        else:
            from torch.utils.tensorboard import SummaryWriter
        self.logdir = root / "tensorboard" / label
        self.writer = SummaryWriter(log_dir=str(self.logdir))
        self.writer.add_text("spec", "```\n" + _yaml(config) + "\n```", 0)

    def log_scalars(self, values, step):
        for tag, v in values.items():
            self.writer.add_scalar(tag, v, step)

    def log_summary(self, rows, counts):
        for r in rows:
            self.writer.add_scalar(f"mean/{r.subject}/{r.distortion}/{r.output}", r.mean, r.level)
        for k, v in counts.items():
            self.writer.add_scalar(f"units/{k}", v, 0)

    def log_table(self, name, columns, rows):
        self.writer.add_text(name, _markdown(columns, rows), 0)

    def log_video(self, name, path):
        self.writer.add_image(f"video/{name}", first_frame(path), 0, dataformats="HWC")

    def close(self):
        self.writer.close()


class WandbTracker(Tracker):
    """A W&B run in offline mode under ``<dir>/wandb/offline-run-*/`` (synced later with ``wandb sync``)."""

    name = "wandb"
    packages = ("wandb",)

    def __init__(self, cfg, root, label, config):
        super().__init__(cfg, root, label, config)
        if cfg.mode != "offline":  # the spec refuses it already; never trust a caller to have parsed one
            raise ValueError(f"W&B mode {cfg.mode!r}: embeval logs offline only")
        root.mkdir(parents=True, exist_ok=True)
        forced = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true",
                  "WANDB_DISABLE_CODE": "true", "WANDB_ERROR_REPORTING": "false",  # no crash reports to Sentry either
                  # wandb-core's debug logs, artifact cache and settings go under the tracker folder, not ~/.cache
                  "WANDB_CACHE_DIR": str(root / ".wandb_cache"), "WANDB_DATA_DIR": str(root / ".wandb_data"),
                  "WANDB_CONFIG_DIR": str(root / ".wandb_config")}
        saved = {k: os.environ.get(k) for k in forced}
        os.environ.update(forced)
        try:
            import wandb

            settings = wandb.Settings(mode="offline", silent=True, console="off", x_disable_stats=True,
                                      x_disable_machine_info=True, disable_git=True, save_code=False)
            self.run = wandb.init(mode="offline", dir=str(root), project=cfg.project, name=label,
                                  group=str(config.get("hash", "")) or None, config=config, settings=settings,
                                  reinit="create_new")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.wandb = wandb
        self.run.define_metric("unit/index")
        self.run.define_metric("unit/*", step_metric="unit/index")

    def log_scalars(self, values, step):
        self.run.log({**values, "unit/index": step})

    def log_summary(self, rows, counts):
        for r in rows:
            self.run.summary[f"mean/{r.subject}/{r.distortion}/L{r.level}/{r.output}"] = r.mean
        for k, v in counts.items():
            self.run.summary[f"units/{k}"] = v

    def log_table(self, name, columns, rows):
        self.run.log({name: self.wandb.Table(columns=list(columns), data=[list(r) for r in rows])})

    def log_video(self, name, path):
        self.run.log({f"video/{name}": self.wandb.Video(str(path), format="mp4")})

    def close(self):
        self.run.finish()


def _yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


def _warn(name: str, what: str, exc: BaseException, where: str) -> None:
    msg = str(exc).splitlines()[0] if str(exc) else ""
    print(f"embeval: warning: tracker {name} failed to {what} ({type(exc).__name__}: {msg}); it is off for the rest of "
          f"this run, the results are safe in {where}", file=sys.stderr, flush=True)


def tracker_root(cfg: "TrackerSpec", run_dir: Path) -> Path:
    """The tracker folder: ``cfg.dir`` (relative to the current folder) or ``<run dir>/trackers``."""
    return Path(cfg.dir) if cfg.dir else Path(run_dir) / "trackers"


def run_label(spec: "RunSpec", shard_index: int = 0, num_shards: int = 1) -> str:
    """``<name>-<hash8>`` (plus ``-shard<i>of<n>`` for a shard): the run's name in the trackers."""
    base = f"{spec.name or spec.evaluator}-{spec.hash[:8]}"
    return base + (f"-shard{shard_index}of{num_shards}" if num_shards > 1 else "")


class RunTrackers:
    """The trackers of one run invocation; every call is shielded (a failing tracker is warned about once and
    dropped). Empty (and free) when the spec names none."""

    def __init__(self, spec: "RunSpec", run_dir: Path, shard_index: int = 0, num_shards: int = 1):
        self.run_dir = Path(run_dir)
        self.where = str(self.run_dir / "results.sqlite")
        self.roots = [tracker_root(t, self.run_dir) for t in spec.trackers]
        self.active: list[Tracker] = []
        if not spec.trackers:
            return
        config = {**spec.to_dict(), "hash": spec.hash}
        label = run_label(spec, shard_index, num_shards)
        for cfg, root in zip(spec.trackers, self.roots):
            try:
                self.active.append(TRACKERS.get(cfg.name)(cfg, root, label, config))
            except Exception as exc:  # noqa: BLE001 - a tracker never stops a run
                _warn(cfg.name, "start", exc, self.where)

    def __bool__(self) -> bool:
        return bool(self.active)

    def _each(self, what: str, method: str, *args: Any) -> None:
        for t in list(self.active):
            try:
                getattr(t, method)(*args)
            except Exception as exc:  # noqa: BLE001 - results are in the store already
                _warn(t.name, what, exc, self.where)
                self.active.remove(t)
                try:
                    t.close()
                except Exception:  # noqa: BLE001 - already reported
                    pass

    def unit_done(self, step: int, subject: str, outputs: Any) -> None:
        """Log one done unit's numeric outputs at ``step`` (its position in the plan)."""
        values = {f"unit/{subject}/{k}": v for k, v in numeric_outputs(outputs).items()}
        if self.active and values:
            self._each("log a unit", "log_scalars", values, step)

    def videos(self) -> list[Path]:
        """``*.mp4`` under the run folder (not the trackers' own copies), in path order, at most :data:`MAX_VIDEOS`."""
        roots = [r.resolve() for r in self.roots]
        found = [p for p in sorted(self.run_dir.rglob("*.mp4"))
                 if p.is_file() and not any(r == p.resolve() or r in p.resolve().parents for r in roots)]
        return found[:MAX_VIDEOS]

    def finish(self, store: "ResultsStore", run_id: str) -> None:
        """Log the means, counts, summary table and videos, then close every tracker."""
        if self.active:
            rows = mean_rows(store.results(run_id))
            counts = store.counts(run_id)
            total = store.run_info(run_id)["total"]
            summary = {"done": counts.get("done", 0), "failed": counts.get("failed", 0), "total": int(total or 0)}
            self._each("log the summary", "log_summary", rows, summary)
            self._each("log the summary table", "log_table", "summary", SUMMARY_COLUMNS, [r.as_row() for r in rows])
            for path in self.videos():
                name = path.relative_to(self.run_dir).as_posix()
                self._each(f"log the video {name}", "log_video", name, path)
        self.close()

    def close(self) -> None:
        for t in self.active:
            try:
                t.close()
            except Exception as exc:  # noqa: BLE001
                _warn(t.name, "close", exc, self.where)
        self.active = []
