"""Run specs: what to evaluate, on which subjects, items, distortions, levels and seeds, and how.

A run spec is a YAML file parsed into the typed :class:`RunSpec`::

    name: quality-smoke                 # cosmetic (not hashed)
    description: PSNR/SSIM sweep        # cosmetic
    evaluator: distortion-quality       # a registered evaluation kind (`embeval run --list`)
    subjects:                           # what is evaluated; each an inline mapping or a path to a subject YAML
      - {id: skimage-fr, kind: metric, params: {metrics: [psnr, ssim]}}
    items: {source: synthetic, count: 4, params: {size: 32}}   # or {source: folder, path: images/, glob: "*.png"}
    distortions: [gaussian_blur, gaussian_noise]
    levels: [1, 3, 5]
    seeds: [0]
    params: {}                          # evaluator parameters
    sim: {backend: maniskill, env: PickCube-v1}  # simulator of episode evaluators (embeval.sim.backends.SimSpec)
    plugins: []                         # modules imported first (they register evaluators)
    backend: {name: local, unit_timeout_s: 60}   # execution settings (not hashed)
    output_dir: runs/quality-smoke      # the run folder, relative to the current folder (not hashed)

Relative paths (items, subjects) resolve against the spec file's folder; ``output_dir`` against
the current folder, and it must stay inside it (no absolute path, no ``..``); ``name`` is one folder-name
component. Every number is bounded (the ``MAX_*`` constants below) and no string may hold a NUL character, so
a spec from someone else is answered with one line naming the field, never a traceback, an endless plan or a
folder outside the output root (docs/runs.md, "Threat model: run specs"). The run's identity is :func:`spec_hash`: a
stable hash of the fields that change results (evaluator, subjects, items, distortions, levels,
seeds, params, plugins); ``name``, ``description``, ``backend`` and ``output_dir`` are cosmetic, so a
run started locally can be resumed on Ray. Validation happens before any work starts and every
error names the field, e.g. ``spec.subjects[2].path: file not found``.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from embeval.config import (
    check_keys,
    config_fields,
    from_mapping,
    mapping,
    no_nul,
    non_empty_str,
    number,
    opts,
)
from embeval.errors import ConfigError, MissingFileError, load_yaml
from embeval.provenance import stable_hash

#: Fields that do not change results: excluded from the spec hash.
COSMETIC_FIELDS = ("name", "description", "backend", "output_dir", "trackers", "record_video", "video_dir")
#: Where items come from (:class:`ItemsSpec`).
ITEM_SOURCES = ("synthetic", "folder", "list", "file")

# Bounds of a run spec (each checked at `embeval run --check`, before anything is created).
#: items of a run (items.count, items.limit, and the ids a list, folder or file yields)
MAX_ITEMS = 1_000_000
#: units of a run (subjects x items x distortions x levels x seeds, checked before the units are made)
MAX_UNITS = 1_000_000
#: seeds are 32-bit unsigned integers
MAX_SEED = 2**32 - 1
#: distortion levels (the shipped image evaluators take 1..5)
MAX_LEVEL = 1_000_000
#: entries of each of the lists distortions, levels, seeds, plugins
MAX_LIST = 10_000
#: backend.unit_timeout_s and --unit-timeout, seconds (a week; 0 or null: no watchdog)
MAX_UNIT_TIMEOUT_S = 7 * 24 * 3600.0
#: backend.batch_size, backend.num_workers, backend.retries, backend.num_cpus/gpus_per_worker
MAX_BATCH, MAX_WORKERS, MAX_RETRIES, MAX_RESOURCES_PER_WORKER = 10_000, 10_000, 100, 1024.0
#: backend.model_max_batch (requests per model call) and backend.model_max_wait_ms (milliseconds)
MAX_MODEL_BATCH, MAX_MODEL_WAIT_MS = 1024, 10_000.0
#: characters of ``name`` (it becomes the folder name runs/<name>-<hash8>) and of ``output_dir``
MAX_NAME_CHARS, MAX_PATH_CHARS = 100, 1024
#: entries of ``trackers`` (each name at most once)
MAX_TRACKERS = 16


def _text(x: Any, where: str) -> str:
    """Free text: anything, read as a string (None = "")."""
    return str(x or "")


def _name(x: Any, where: str) -> str:
    """The run's name: one folder-name component (it names the default run folder ``runs/<name>-<hash8>``)."""
    if x is None:
        return ""
    if isinstance(x, (dict, list, tuple)):
        raise ConfigError(f"{where}: must be a short name, got a {type(x).__name__}; give e.g. quality-smoke")
    name = str(x)
    bad = next((c for c in name if c in "/\\" or ord(c) < 32 or ord(c) == 127), None)
    if bad is not None or name in (".", "..") or len(name) > MAX_NAME_CHARS:
        problem = (f"is {len(name)} characters long (at most {MAX_NAME_CHARS})" if len(name) > MAX_NAME_CHARS
                   else f"holds {bad!r}" if bad is not None else f"is {name!r}")
        shown = name if len(name) <= 60 else name[:60] + "..."
        raise ConfigError(f"{where}: {problem}; the name becomes a folder name, so it must be one path component "
                          f"(no '/', '\\', '..', NUL or control characters, at most {MAX_NAME_CHARS} characters), "
                          f"got {shown!r}; give a plain name such as quality-smoke")
    return name


def _output_dir(x: Any, where: str) -> str | None:
    """``output_dir``: a relative folder inside the current folder (the spec may not place a run anywhere else;
    ``--out`` on the command line may)."""
    return _folder_inside(x, where, "output_dir", "such as runs/my-run (to write anywhere else, give --out DIR on the "
                                                 "command line)")


def _folder_inside(x: Any, where: str, what: str, example: str) -> str | None:
    """A folder the spec names (``what``): a relative path inside the current folder, else a ConfigError that
    names the problem and ends with ``example``."""
    if x is None:
        return None
    if not isinstance(x, str) or not x.strip():
        raise ConfigError(f"{where}: must be a folder path (a non-empty string), got {x!r}")
    shown = x if len(x) <= 80 else x[:80] + "..."
    bad = next((c for c in x if ord(c) < 32 or ord(c) == 127), None)
    parts = x.replace("\\", "/").split("/")
    problem = (f"holds {bad!r}" if bad is not None
               else f"is {len(x)} characters long (at most {MAX_PATH_CHARS})" if len(x) > MAX_PATH_CHARS
               else "is an absolute path" if x.startswith(("/", "\\")) or (len(x) > 1 and x[1] == ":")
               else "starts with '~' (not expanded here)" if x.startswith("~")
               else "names '$' variables (not expanded here)" if "$" in x
               else "leaves the current folder through '..'" if ".." in parts
               else "has a component longer than 255 bytes" if any(len(q.encode()) > 255 for q in parts)
               else "")
    if problem:
        raise ConfigError(f"{where}: {problem}, got {shown!r}; a spec's {what} must be a relative folder inside the "
                          f"current folder, {example}")
    return x


def _adapter(x: Any, where: str) -> str:
    if not isinstance(x or "", str):
        raise ConfigError(f"{where}: must be a string, got {x!r}")
    return x or ""


def _item_id(x: Any, where: str) -> str:
    return non_empty_str(str(x), where)


def check_unit_timeout(x: Any, where: str) -> float | None:
    """Seconds, 0..:data:`MAX_UNIT_TIMEOUT_S` (0 or None: no watchdog)."""
    return None if x is None else number(x, where, minimum=0, maximum=MAX_UNIT_TIMEOUT_S,
                                         why="at most a week; 0 or null turns the watchdog off") or None


def _num_envs(x: Any, where: str) -> int:
    """``backend.num_envs``: environments stepped together, 1..:data:`embeval.sim.vector.MAX_ENVS`."""
    from embeval.sim.vector import check_num_envs

    return check_num_envs(x, where)


def _backend_names():
    from embeval.runs.backends import BACKENDS

    return BACKENDS


_LIST = opts(nonempty=True, unique=True, scalar=True, max_len=MAX_LIST)
_LEVELS = opts(nonempty=True, unique=True, scalar=True, min=0, max=MAX_LEVEL, max_len=MAX_LIST)
_SEEDS = opts(nonempty=True, unique=True, scalar=True, min=0, max=MAX_SEED, max_len=MAX_LIST,
              why="a seed is a 32-bit unsigned integer")
_ITEMS_WHY = f"at most {MAX_ITEMS} items per run; split a bigger evaluation into several specs"


@dataclass(frozen=True)
class SubjectEntry:
    """One subject of a run. ``kind``/``adapter`` follow :mod:`embeval.subjects.registry` for
    vlm/policy/llm subjects; evaluators may accept their own kinds (e.g. ``metric``)."""

    id: str
    kind: str
    adapter: str = field(default="", metadata=opts(parse=_adapter))
    path: str | None = None  # weights file/folder as written (resolved against base_dir when used)
    url: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    cache: str | None = None  # llm/vlm call cache (see embeval.subjects.registry)
    description: str = field(default="", metadata=opts(parse=_text))

    def to_subject_mapping(self) -> dict[str, Any]:
        """The mapping :func:`embeval.subjects.registry.SubjectSpec.from_mapping` takes."""
        d = {"id": self.id, "kind": self.kind, "adapter": self.adapter, "params": dict(self.params)}
        if self.path is not None:
            d["path"] = self.path
        if self.url is not None:
            d["url"] = self.url
        if self.cache is not None:
            d["cache"] = self.cache
        return d


@dataclass(frozen=True)
class ItemsSpec:
    """Where the items (images, VQA items, examples) come from.

    ``source``: ``synthetic`` (``count`` generated items, seeded), ``folder`` (files matching
    ``glob`` under ``path``, sorted), ``list`` (the explicit ``ids``) or ``file`` (one id per line /
    a JSONL file with an ``id`` field at ``path``). ``limit`` keeps the first N.
    """

    source: str = field(default="synthetic", metadata=opts(choices=ITEM_SOURCES, noun="item source"))
    path: str | None = None
    glob: str = "*"
    count: int | None = field(default=None, metadata=opts(min=1, max=MAX_ITEMS, why=_ITEMS_WHY))
    ids: tuple[str, ...] = field(default=(), metadata=opts(unique=True, scalar=True, item=_item_id, max_len=MAX_ITEMS,
                                                           why=_ITEMS_WHY))
    limit: int | None = field(default=None, metadata=opts(min=1, max=MAX_ITEMS, why=_ITEMS_WHY))
    params: dict[str, Any] = field(default_factory=dict)

    def check_config(self, where: str) -> None:
        """The fields each source needs (called by :func:`embeval.config.from_mapping`)."""
        if self.source == "synthetic" and self.count is None:
            raise ConfigError(f"{where}.count: is required for source 'synthetic' (how many items to generate)")
        if self.source in ("folder", "file") and self.path is None:
            raise ConfigError(f"{where}.path: is required for source {self.source!r}")
        if self.source == "list" and not self.ids:
            raise ConfigError(f"{where}.ids: is required for source 'list' (the item ids)")


@dataclass(frozen=True)
class BackendSpec:
    """How to execute (never changes results). ``unit_timeout_s`` is the watchdog: a unit running
    longer is recorded as failed with the reason and retried on resume (None: no watchdog)."""

    name: str = field(default="local", metadata=opts(choices=_backend_names, noun="backend"))  # local | ray
    unit_timeout_s: float | None = field(default=300.0, metadata=opts(parse=check_unit_timeout))  # 0 or None: no watchdog
    batch_size: int = field(default=1, metadata=opts(min=1, max=MAX_BATCH))  # units per call where the evaluator batches (Ray: per actor call)
    num_workers: int = field(default=2, metadata=opts(min=1, max=MAX_WORKERS))  # Ray: actors in total (at least one per subject)
    num_cpus_per_worker: float = field(default=1.0, metadata=opts(min=0, max=MAX_RESOURCES_PER_WORKER))
    num_gpus_per_worker: float = field(default=0.0, metadata=opts(min=0, max=MAX_RESOURCES_PER_WORKER))
    address: str | None = None  # Ray: cluster address; None starts/uses a local instance
    retries: int = field(default=0, metadata=opts(min=0, max=MAX_RETRIES))  # extra attempts for a failed unit within one run (failed units are retried on resume anyway)
    progress: bool = field(default=True, metadata=opts(parse=lambda v, where: bool(v)))  # tqdm progress bar
    # Ray, model-actor split (docs/runs.md "Backends"): one actor per policy subject holds the model and answers
    # the episodes of all workers in batches; the workers (num_*_per_worker) step the episodes without a model
    model_actor: bool = False
    num_gpus_per_model: float = field(default=0.0, metadata=opts(min=0, max=MAX_RESOURCES_PER_WORKER))
    num_cpus_per_model: float = field(default=1.0, metadata=opts(min=0, max=MAX_RESOURCES_PER_WORKER))
    model_max_batch: int | None = field(default=None, metadata=opts(min=1, max=MAX_MODEL_BATCH))  # None: num_workers
    model_max_wait_ms: float = field(default=5.0, metadata=opts(min=0, max=MAX_MODEL_WAIT_MS))  # a batch's fill wait
    # vectorised episodes (evaluators with episodes: sim-iqa; docs/scale.md): a batch of one subject's units runs on
    # num_envs environments in worker processes, ONE batched policy call per step; exact: every environment through
    # the policy's batch-1 path (records bit for bit the num_envs 1 run's, also for policies with a batched forward)
    num_envs: int = field(default=1, metadata=opts(parse=_num_envs))
    exact: bool = False

    def check_config(self, where: str) -> None:
        """The model-actor fields apply only with ``model_actor: true`` (used by the Ray backend; local ignores it)."""
        set_ = [f for f, d in (("num_gpus_per_model", 0.0), ("num_cpus_per_model", 1.0), ("model_max_batch", None),
                               ("model_max_wait_ms", 5.0)) if getattr(self, f) != d]
        if set_ and not self.model_actor:
            raise ConfigError(f"{where}.{set_[0]}: applies to the model actor only; set {where}.model_actor: true "
                              f"(backend ray) or remove {set_[0]}")
        if self.exact and self.num_envs == 1:
            raise ConfigError(f"{where}.exact: applies to vectorised episodes only; set {where}.num_envs to 2..64 "
                              "or remove exact (with num_envs 1 every episode runs through the batch-1 path anyway)")


def _tracker_names():
    from embeval.runs.trackers import TRACKERS

    return TRACKERS.names()


def _tracker_name(x: Any, where: str) -> str:
    from embeval.runs.trackers import TRACKERS

    if not isinstance(x, str) or x not in TRACKERS:
        raise TRACKERS.unknown(x, where)
    return x


def _tracker_mode(x: Any, where: str) -> str:
    """Trackers write offline only: nothing leaves the machine during a run (docs/runs.md, "Trackers")."""
    if x in (None, "offline"):
        return "offline"
    if x == "online":
        raise ConfigError(f"{where}: 'online' is refused: embeval logs to trackers offline only, so a run never sends "
                          "anything over the network; upload a W&B run afterwards with `wandb sync "
                          "RUN/trackers/wandb/offline-run-*` (or your tracker dir)")
    raise ConfigError(f"{where}: unknown tracker mode {x!r}; the only mode is 'offline'")


def _tracker_dir(x: Any, where: str) -> str | None:
    return _folder_inside(x, where, "tracker dir", "such as runs/tensorboard (default: the run folder's trackers/)")


@dataclass(frozen=True)
class TrackerSpec:
    """One experiment tracker of a run (:mod:`embeval.runs.trackers`): ``name`` (tensorboard | wandb), ``dir``
    (default ``<run folder>/trackers``; else a relative folder inside the current folder, shared by runs), the
    W&B ``project``, and ``mode``, which is always ``offline``. Cosmetic: never part of the spec hash."""

    name: str = field(metadata=opts(parse=_tracker_name))
    dir: str | None = field(default=None, metadata=opts(parse=_tracker_dir))
    project: str = field(default="embeval", metadata=opts(parse=lambda v, where: non_empty_str(v, where)))
    mode: str = field(default="offline", metadata=opts(parse=_tracker_mode))

    def check_config(self, where: str) -> None:
        """The tracker's package is installed (cheap: found, not imported)."""
        from embeval.runs.trackers import TRACKERS

        missing = TRACKERS.get(self.name).missing_package()
        if missing:
            raise ConfigError(f"{where}: tracker {self.name!r} needs the {missing} package, which is not installed; "
                              f"install it (pip install {missing}) or remove {self.name!r} from spec.trackers")


def _tracker_entry(x: Any, where: str) -> TrackerSpec:
    """A tracker given by name (``tensorboard``) or as a mapping (``{name: wandb, dir: runs/wandb}``)."""
    if isinstance(x, str):
        x = {"name": _tracker_name(x, where)}  # a bare name's error names the entry, not a '.name' it never had
    if not isinstance(x, Mapping):
        raise ConfigError(f"{where}: must be a tracker name ({', '.join(_tracker_names())}) or a mapping with 'name', "
                          f"got {type(x).__name__}")
    return from_mapping(TrackerSpec, x, where, strict=True)


def _record_video(x: Any, where: str) -> str:
    """``record_video``: none | failures | all | N (:class:`embeval.recording.video.VideoPolicy`), normalised."""
    from embeval.recording.video import VideoPolicy

    if isinstance(x, bool) or not isinstance(x, (str, int)):
        raise ConfigError(f"{where}: none, failures, all or a whole number N >= 1, got {x!r}")
    try:
        return str(VideoPolicy.parse(x))
    except ConfigError as exc:
        raise ConfigError(f"{where}: {x!r}: {str(exc).split(': ', 1)[1]}") from None


def _video_dir(x: Any, where: str) -> str | None:
    return _folder_inside(x, where, "video_dir", "such as runs/videos (default: the run folder's videos/)")


@dataclass(frozen=True)
class RunSpec:
    evaluator: str
    subjects: tuple[SubjectEntry, ...] = ()
    items: ItemsSpec = field(default_factory=ItemsSpec)
    distortions: tuple[str, ...] = field(default=("none",), metadata=_LIST)
    levels: tuple[int, ...] = field(default=(0,), metadata=_LEVELS)
    seeds: tuple[int, ...] = field(default=(0,), metadata=_SEEDS)
    params: dict[str, Any] = field(default_factory=dict)
    plugins: tuple[str, ...] = field(default=(), metadata=opts(unique=True, scalar=True, max_len=MAX_LIST))
    sim: dict[str, Any] = field(default_factory=dict)  # simulator (embeval.sim.backends.SimSpec); {} = none
    backend: BackendSpec = field(default_factory=BackendSpec)
    output_dir: str | None = field(default=None, metadata=opts(parse=_output_dir))
    name: str = field(default="", metadata=opts(parse=_name))
    description: str = field(default="", metadata=opts(parse=_text))
    #: experiment trackers (cosmetic): logged offline as units finish (embeval.runs.trackers); () = none
    trackers: tuple[TrackerSpec, ...] = field(default=(), metadata=opts(scalar=True, max_len=MAX_TRACKERS, item=_tracker_entry))
    #: episode videos of the units (cosmetic): none | failures | all | N, into video_dir (default RUN/videos)
    record_video: str = field(default="none", metadata=opts(parse=_record_video))
    video_dir: str | None = field(default=None, metadata=opts(parse=_video_dir))
    #: folder that relative paths resolve against (the spec file's folder); not part of the spec
    base_dir: str = field(default=".", compare=False, metadata=opts(config=False))

    def check_config(self, where: str) -> None:
        """Subject ids are unique (called by :func:`embeval.config.from_mapping`)."""
        ids = [s.id for s in self.subjects]
        for i, sid in enumerate(ids):
            if sid in ids[:i]:
                raise ConfigError(f"{where}.subjects[{i}].id: duplicate subject id {sid!r}; subject ids must be unique")
        names = [t.name for t in self.trackers]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ConfigError(f"{where}.trackers[{i}]: duplicate tracker {name!r}; list each tracker once")

    # ----------------------------------------------------------------- identity
    def hashed_dict(self) -> dict[str, Any]:
        d = self.to_dict()
        for k in COSMETIC_FIELDS:
            d.pop(k, None)
        if not d.get("sim"):
            d.pop("sim", None)  # specs without a simulator keep the hashes they had before the field existed
        for s in d["subjects"]:
            s.pop("description", None)
        return d

    @property
    def hash(self) -> str:
        return spec_hash(self)

    @property
    def run_id(self) -> str:
        """The run's key in the results store: the spec hash."""
        return self.hash

    def to_dict(self) -> dict[str, Any]:
        """Plain data (YAML/JSON-ready), without ``base_dir``."""
        d = asdict(self)
        d.pop("base_dir")
        return _plain(d)

    def resolve_path(self, p: str | os.PathLike | None) -> Path | None:
        """``p`` made absolute against :attr:`base_dir` (``~`` and ``$VARS`` expanded)."""
        if p in (None, ""):
            return None
        q = Path(os.path.expanduser(os.path.expandvars(str(p))))
        return q if q.is_absolute() else Path(self.base_dir) / q

    def default_run_dir(self) -> Path:
        """``output_dir`` (relative to the current folder), else ``runs/<name>-<hash8>``; both inside the current
        folder (checked when the spec is read, and again here: a ConfigError, never a folder elsewhere)."""
        if self.output_dir:
            d = Path(_output_dir(self.output_dir, "spec.output_dir"))
        else:
            d = Path("runs") / f"{_name(self.name, 'spec.name') or self.evaluator}-{self.hash[:8]}"
            if len(d.parts) != 2:  # an evaluator registered under a name with '/' in it
                raise ConfigError(f"the run folder {d} is not one folder under runs/; give the spec a plain name "
                                  "(spec.name), or choose the folder with --out")
        return d


def spec_hash(spec: RunSpec) -> str:
    """Stable hash of the result-changing fields (see :data:`COSMETIC_FIELDS`)."""
    return stable_hash({"run_spec": spec.hashed_dict()})


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


# ---------------------------------------------------------------------- parsing
def _subject_file(raw: str, where: str, base_dir: Path) -> dict[str, Any]:
    """A subject given as a path to a subject YAML (embeval.subjects format), read into a mapping."""
    p = Path(os.path.expanduser(raw))
    p = p if p.is_absolute() else base_dir / p
    try:
        data = load_yaml(p, "subject file", missing=f"{where}: subject file not found: {p}; give a subject YAML "
                                                     "(see config/subjects/) or an inline mapping") or {}
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    data = dict(no_nul(mapping(data, where), where))
    # a subject file's ``serve:`` block says how `embeval serve` exposes it; a run calls the subject in-process
    data.pop("serve", None)
    data.setdefault("id", p.stem)
    rel = data.get("path")
    if rel and not os.path.isabs(os.path.expanduser(str(rel))) and (p.parent / str(rel)).exists():
        # relative to the subject YAML's folder; stored relative to the run spec's folder
        data["path"] = os.path.relpath(p.parent / str(rel), base_dir)
    return data


def _checked_subject(raw: Any, where: str) -> Mapping:
    from_mapping(SubjectEntry, mapping(raw, where), where, strict=True)  # errors in the order the subjects come
    return raw


def parse_spec(data: Any, base_dir: str | os.PathLike = ".") -> RunSpec:
    """Parse and structurally check a spec mapping; raise :class:`ConfigError` naming the field.

    This checks shapes and types only (:func:`embeval.config.from_mapping`, strict, with the field
    options declared on the dataclasses above); :func:`embeval.runs.validate.validate_spec` then checks
    the evaluator, subjects, files and distortions before any work starts.
    """
    data = mapping(data, "spec")
    if not data:
        raise ConfigError("spec: the run spec is empty; it needs at least 'evaluator' (see config/runs/*.yaml)")
    check_keys(data, config_fields(RunSpec), "spec")
    no_nul(data, "spec")  # no path, name or module can hold a NUL: one line naming the field, not a ValueError later
    base = Path(base_dir).resolve()
    subjects = data.get("subjects") or []
    if isinstance(subjects, (list, tuple)) and len(subjects) > MAX_LIST:
        raise ConfigError(f"spec.subjects: has {len(subjects)} entries, at most {MAX_LIST} are allowed; "
                          "split the subjects over several specs")
    if isinstance(subjects, (list, tuple)):  # in order, reading subjects given as paths to subject YAML files
        subjects = [_subject_file(s, f"spec.subjects[{i}]", base) if isinstance(s, str)
                    else _checked_subject(s, f"spec.subjects[{i}]") for i, s in enumerate(subjects)]
    elif subjects:
        raise ConfigError(f"spec.subjects: must be a list of subjects, got {type(subjects).__name__}")
    spec = from_mapping(RunSpec, {**data, "subjects": subjects}, "spec", strict=True)
    return replace(spec, base_dir=str(base))


def load_spec(path: str | os.PathLike) -> RunSpec:
    """Read a run spec YAML file (structural checks only; see :func:`parse_spec`)."""
    p = Path(os.path.expanduser(str(path)))
    if (p / "run.json").is_file():
        raise ConfigError(f"{p} is a run folder, not a run spec; continue it with `embeval resume {p}` "
                          f"(or see its progress with `embeval status {p}`)")
    data = load_yaml(p, "run spec", missing=f"run spec not found: {p}; see config/runs/*.yaml for examples")
    try:
        return parse_spec(data, base_dir=p.parent)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    except MissingFileError as exc:
        raise MissingFileError(f"{p}: {exc}") from None


def with_backend(spec: RunSpec, **changes: Any) -> RunSpec:
    """A copy of ``spec`` with backend settings changed (the hash stays the same)."""
    from dataclasses import replace

    return replace(spec, backend=replace(spec.backend, **changes))
