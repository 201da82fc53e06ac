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
the current folder. The run's identity is :func:`spec_hash`: a
stable hash of the fields that change results (evaluator, subjects, items, distortions, levels,
seeds, params, plugins); ``name``, ``description``, ``backend`` and ``output_dir`` are cosmetic, so a
run started locally can be resumed on Ray. Validation happens before any work starts and every
error names the field, e.g. ``spec.subjects[2].path: file not found``.
"""
from __future__ import annotations

import difflib
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from embeval.errors import ConfigError, MissingFileError, read_text, yaml_problem
from embeval.provenance import stable_hash

#: Fields that do not change results: excluded from the spec hash.
COSMETIC_FIELDS = ("name", "description", "backend", "output_dir")


@dataclass(frozen=True)
class SubjectEntry:
    """One subject of a run. ``kind``/``adapter`` follow :mod:`embeval.subjects.registry` for
    vlm/policy/llm subjects; evaluators may accept their own kinds (e.g. ``metric``)."""

    id: str
    kind: str
    adapter: str = ""
    path: str | None = None  # weights file/folder as written (resolved against base_dir when used)
    url: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    cache: str | None = None  # llm/vlm call cache (see embeval.subjects.registry)
    description: str = ""

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

    source: str = "synthetic"
    path: str | None = None
    glob: str = "*"
    count: int | None = None
    ids: tuple[str, ...] = ()
    limit: int | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendSpec:
    """How to execute (never changes results). ``unit_timeout_s`` is the watchdog: a unit running
    longer is recorded as failed with the reason and retried on resume (None: no watchdog)."""

    name: str = "local"  # local | ray
    unit_timeout_s: float | None = 300.0
    batch_size: int = 1  # units per call where the evaluator batches (Ray: per actor call)
    num_workers: int = 2  # Ray: actors in total (at least one per subject)
    num_cpus_per_worker: float = 1.0
    num_gpus_per_worker: float = 0.0
    address: str | None = None  # Ray: cluster address; None starts/uses a local instance
    retries: int = 0  # extra attempts for a failed unit within one run (failed units are retried on resume anyway)
    progress: bool = True  # tqdm progress bar


@dataclass(frozen=True)
class RunSpec:
    evaluator: str
    subjects: tuple[SubjectEntry, ...] = ()
    items: ItemsSpec = field(default_factory=ItemsSpec)
    distortions: tuple[str, ...] = ("none",)
    levels: tuple[int, ...] = (0,)
    seeds: tuple[int, ...] = (0,)
    params: dict[str, Any] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()
    sim: dict[str, Any] = field(default_factory=dict)  # simulator (embeval.sim.backends.SimSpec); {} = none
    backend: BackendSpec = field(default_factory=BackendSpec)
    output_dir: str | None = None
    name: str = ""
    description: str = ""
    #: folder that relative paths resolve against (the spec file's folder); not part of the spec
    base_dir: str = field(default=".", compare=False)

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
        """``output_dir`` (relative to the current folder), else ``runs/<name>-<hash8>``."""
        if self.output_dir:
            return Path(os.path.expanduser(os.path.expandvars(self.output_dir)))
        return Path("runs") / f"{self.name or self.evaluator}-{self.hash[:8]}"


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
class _Field:
    """A dotted field path for error messages: ``spec.subjects[2].path``."""

    def __init__(self, path: str = "spec"):
        self.path = path

    def __truediv__(self, key: str | int) -> "_Field":
        return _Field(f"{self.path}[{key}]" if isinstance(key, int) else f"{self.path}.{key}")

    def error(self, msg: str) -> ConfigError:
        return ConfigError(f"{self.path}: {msg}")

    def __str__(self) -> str:
        return self.path


def _check_keys(data: Mapping, allowed: list[str], where: _Field) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; allowed: {', '.join(allowed)}"
            raise (where / str(key)).error(f"unknown field{hint}")


def _mapping(x: Any, where: _Field) -> Mapping:
    if x is None:
        return {}
    if not isinstance(x, Mapping):
        raise where.error(f"must be a mapping, got {type(x).__name__} {x!r}")
    return x


def _str(x: Any, where: _Field, allow_none: bool = False) -> str | None:
    if x is None and allow_none:
        return None
    if not isinstance(x, str) or not x.strip():
        raise where.error(f"must be a non-empty string, got {x!r}")
    return x


def _int(x: Any, where: _Field, minimum: int | None = None, allow_none: bool = False) -> int | None:
    if x is None and allow_none:
        return None
    if isinstance(x, bool) or not isinstance(x, int):
        raise where.error(f"must be an integer, got {x!r}")
    if minimum is not None and x < minimum:
        raise where.error(f"must be >= {minimum}, got {x}")
    return x


def _num(x: Any, where: _Field, allow_none: bool = False) -> float | None:
    if x is None and allow_none:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        raise where.error(f"must be a finite number >= 0, got {x!r}")
    return float(x)


def _list(x: Any, where: _Field, item, nonempty: bool = True) -> tuple:
    if x is None:
        x = []
    if isinstance(x, (str, int)) and not isinstance(x, bool):
        x = [x]
    if not isinstance(x, (list, tuple)):
        raise where.error(f"must be a list, got {type(x).__name__}")
    if nonempty and not x:
        raise where.error("must not be empty")
    out = tuple(item(v, where / i) for i, v in enumerate(x))
    if len(set(out)) != len(out):
        dup = next(v for v in out if out.count(v) > 1)
        raise where.error(f"duplicate entry {dup!r}")
    return out


def _subject(raw: Any, where: _Field, base_dir: Path) -> SubjectEntry:
    allowed = [f.name for f in fields(SubjectEntry)]
    if isinstance(raw, str):  # a path to a subject YAML (embeval.subjects format)
        import yaml

        p = Path(os.path.expanduser(raw))
        p = p if p.is_absolute() else base_dir / p
        if not p.is_file():
            raise MissingFileError(f"{where}: subject file not found: {p}; give a subject YAML (see config/subjects/) or an inline mapping")
        try:
            data = yaml.safe_load(read_text(p, "subject file")) or {}
        except yaml.YAMLError as exc:
            raise where.error(f"{p} is not valid YAML ({yaml_problem(exc)})") from None
        data = dict(_mapping(data, where))
        data.setdefault("id", p.stem)
        rel = data.get("path")
        if rel and not os.path.isabs(os.path.expanduser(str(rel))) and (p.parent / str(rel)).exists():
            # relative to the subject YAML's folder; stored relative to the run spec's folder
            data["path"] = os.path.relpath(p.parent / str(rel), base_dir)
        raw = data
    raw = _mapping(raw, where)
    _check_keys(raw, allowed, where)
    params = dict(_mapping(raw.get("params"), where / "params"))
    sid = _str(raw.get("id"), where / "id")
    kind = _str(raw.get("kind"), where / "kind")
    adapter = raw.get("adapter") or ""
    if not isinstance(adapter, str):
        raise (where / "adapter").error(f"must be a string, got {adapter!r}")
    return SubjectEntry(
        id=sid, kind=kind, adapter=adapter,
        path=_str(raw.get("path"), where / "path", allow_none=True),
        url=_str(raw.get("url"), where / "url", allow_none=True),
        params=params,
        cache=_str(raw.get("cache"), where / "cache", allow_none=True),
        description=str(raw.get("description") or ""),
    )


def _items(raw: Any, where: _Field) -> ItemsSpec:
    raw = _mapping(raw, where)
    _check_keys(raw, [f.name for f in fields(ItemsSpec)], where)
    sources = ("synthetic", "folder", "list", "file")
    source = raw.get("source", "synthetic")
    if source not in sources:
        raise (where / "source").error(f"unknown item source {source!r}; choose from {', '.join(sources)}")
    spec = ItemsSpec(
        source=source,
        path=_str(raw.get("path"), where / "path", allow_none=True),
        glob=_str(raw.get("glob", "*"), where / "glob"),
        count=_int(raw.get("count"), where / "count", minimum=1, allow_none=True),
        ids=_list(raw.get("ids"), where / "ids", lambda v, w: str(_str(str(v), w)), nonempty=False),
        limit=_int(raw.get("limit"), where / "limit", minimum=1, allow_none=True),
        params=dict(_mapping(raw.get("params"), where / "params")),
    )
    if source == "synthetic" and spec.count is None:
        raise (where / "count").error("is required for source 'synthetic' (how many items to generate)")
    if source in ("folder", "file") and spec.path is None:
        raise (where / "path").error(f"is required for source {source!r}")
    if source == "list" and not spec.ids:
        raise (where / "ids").error("is required for source 'list' (the item ids)")
    return spec


def _backend(raw: Any, where: _Field) -> BackendSpec:
    raw = _mapping(raw, where)
    _check_keys(raw, [f.name for f in fields(BackendSpec)], where)
    d = BackendSpec()
    name = raw.get("name", d.name)
    from embeval.runs.backends import BACKENDS

    if name not in BACKENDS:
        raise (where / "name").error(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
    timeout = raw.get("unit_timeout_s", d.unit_timeout_s)
    return BackendSpec(
        name=name,
        unit_timeout_s=_num(timeout, where / "unit_timeout_s", allow_none=True) or None,
        batch_size=_int(raw.get("batch_size", d.batch_size), where / "batch_size", minimum=1),
        num_workers=_int(raw.get("num_workers", d.num_workers), where / "num_workers", minimum=1),
        num_cpus_per_worker=_num(raw.get("num_cpus_per_worker", d.num_cpus_per_worker), where / "num_cpus_per_worker"),
        num_gpus_per_worker=_num(raw.get("num_gpus_per_worker", d.num_gpus_per_worker), where / "num_gpus_per_worker"),
        address=_str(raw.get("address"), where / "address", allow_none=True),
        retries=_int(raw.get("retries", d.retries), where / "retries", minimum=0),
        progress=bool(raw.get("progress", d.progress)),
    )


def parse_spec(data: Any, base_dir: str | os.PathLike = ".") -> RunSpec:
    """Parse and structurally check a spec mapping; raise :class:`ConfigError` naming the field.

    This checks shapes and types only; :func:`embeval.runs.validate.validate_spec` then checks
    the evaluator, subjects, files and distortions before any work starts.
    """
    where = _Field("spec")
    data = _mapping(data, where)
    if not data:
        raise where.error("the run spec is empty; it needs at least 'evaluator' (see config/runs/*.yaml)")
    _check_keys(data, [f.name for f in fields(RunSpec) if f.name != "base_dir"], where)
    base = Path(base_dir).resolve()
    subjects_raw = data.get("subjects") or []
    if not isinstance(subjects_raw, (list, tuple)):
        raise (where / "subjects").error(f"must be a list of subjects, got {type(subjects_raw).__name__}")
    subjects = tuple(_subject(s, where / "subjects" / i, base) for i, s in enumerate(subjects_raw))
    ids = [s.id for s in subjects]
    for i, sid in enumerate(ids):
        if sid in ids[:i]:
            raise (where / "subjects" / i / "id").error(f"duplicate subject id {sid!r}; subject ids must be unique")
    return RunSpec(
        evaluator=_str(data.get("evaluator"), where / "evaluator"),
        subjects=subjects,
        items=_items(data.get("items"), where / "items"),
        distortions=_list(data.get("distortions", ["none"]), where / "distortions", lambda v, w: _str(v, w)),
        levels=_list(data.get("levels", [0]), where / "levels", lambda v, w: _int(v, w, minimum=0)),
        seeds=_list(data.get("seeds", [0]), where / "seeds", lambda v, w: _int(v, w, minimum=0)),
        params=dict(_mapping(data.get("params"), where / "params")),
        plugins=_list(data.get("plugins"), where / "plugins", lambda v, w: _str(v, w), nonempty=False),
        sim=dict(_mapping(data.get("sim"), where / "sim")),
        backend=_backend(data.get("backend"), where / "backend"),
        output_dir=_str(data.get("output_dir"), where / "output_dir", allow_none=True),
        name=str(data.get("name") or ""),
        description=str(data.get("description") or ""),
        base_dir=str(base),
    )


def load_spec(path: str | os.PathLike) -> RunSpec:
    """Read a run spec YAML file (structural checks only; see :func:`parse_spec`)."""
    import yaml

    p = Path(os.path.expanduser(str(path)))
    if not p.is_file():
        raise MissingFileError(f"run spec not found: {p}; see config/runs/*.yaml for examples")
    try:
        data = yaml.safe_load(read_text(p, "run spec"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({yaml_problem(exc)})") from None
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
