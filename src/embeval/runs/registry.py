"""The evaluator registry: each evaluation kind turns a run spec into units and runs one unit.

Add a kind by subclassing :class:`Evaluator` and decorating it::

    @register_evaluator("iqa")
    class IQAEvaluator(Evaluator):
        subject_kinds = ("vlm", "policy")
        def setup(self, spec, subject): return load_model_once(subject)
        def run_unit(self, spec, state, unit, unit_seed): return {"answer": ...}

or add one lazy line to :data:`EVALUATORS` (``"name": "module:Class"``), so the module is
imported only when a spec names it. A spec's ``plugins`` list imports extra modules first; an
installed package can also add kinds through the entry-point group ``embeval.run_evaluators``.
"""
from __future__ import annotations

import importlib
import itertools
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Mapping, Sequence

from embeval.errors import ConfigError, MissingFileError
from embeval.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from embeval.runs.spec import RunSpec, SubjectEntry
    from embeval.runs.units import Unit

#: name -> Evaluator subclass, or "module:Class" imported on first use.
EVALUATORS: Registry[type] = Registry(
    "evaluator", group="embeval.run_evaluators",
    hint="or list a module that registers it under spec.plugins", entries={
        "synthetic": "embeval.runs.evaluators.synthetic:SyntheticEvaluator",
        "distortion-quality": "embeval.runs.evaluators.distortion_quality:DistortionQualityEvaluator",
        "policy-decision": "embeval.runs.evaluators.policy_decision:PolicyDecisionEvaluator",
        "sim-iqa": "embeval.runs.evaluators.sim_iqa:SimIQAEvaluator",
    })
# ``act2answer`` (embeval.act2answer) and ``iqa`` (embeval_analysis) sit above this layer: they are registered
# through the entry-point group in pyproject.toml, like any third-party evaluator, so the run machinery never
# names a higher layer.


@dataclass(frozen=True)
class EvaluatorParams:
    """Base of an evaluator's typed ``spec.params``: one frozen dataclass per evaluator, its fields the parameters
    with their defaults. :meth:`from_params` refuses a key that is not a field, then :meth:`parse` (the subclass's
    checks, one-line ConfigErrors naming ``spec.params.<name>``) builds it from the spec's mapping."""

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None, evaluator: str):
        names = [f.name for f in fields(cls)]
        for k in params or {}:
            if k not in names:
                raise ConfigError(f"spec.params.{k}: unknown parameter of evaluator '{evaluator}'; "
                                  + (f"allowed: {', '.join(names)}" if names else "it takes none: remove it"))
        return cls.parse(dict(params or {}))

    @classmethod
    def parse(cls, params: dict[str, Any]):
        """The dataclass of a mapping whose keys are all fields (override to check and convert values)."""
        return cls(**params)


@dataclass
class ReportSection:
    """A block of the HTML report: a title, optional HTML (tables) and figures (matplotlib)."""

    title: str
    html: str = ""
    figures: Sequence[Any] = ()  # matplotlib Figure objects; the report embeds them as PNG
    caption: str = ""


class Evaluator:
    """Base class of an evaluation kind. Subclasses set :attr:`name` (by the decorator) and
    implement :meth:`run_unit`; the rest has working defaults.

    Life cycle per worker and subject: ``state = setup(spec, subject)`` once (load the model),
    then ``run_unit``/``run_batch`` for each unit, then ``teardown(state)``. ``run_unit`` must be
    deterministic given ``unit_seed`` and return a JSON-serialisable dict (the raw outputs). Use
    ``unit_seed`` for every random choice; as a safety net the runner also seeds ``random``, NumPy's
    global generator and torch (when loaded) with it before each unit (a batch: its first unit's).
    """

    name: ClassVar[str] = ""
    #: subject kinds this evaluator accepts ("vlm", "policy", "llm" go through embeval.subjects)
    subject_kinds: ClassVar[tuple[str, ...]] = ("vlm", "policy", "llm")
    #: True when :meth:`run_batch` really batches (the backend then sends batch_size units per call)
    batches: ClassVar[bool] = False

    #: the dataclass of this evaluator's ``spec.params`` (None: the mapping as written, checked by validate())
    params_type: ClassVar[type[EvaluatorParams] | None] = None

    # ----------------------------------------------------------- planning
    def params(self, spec: "RunSpec") -> Any:
        """``spec.params`` as :attr:`params_type` (checked; ConfigError naming the parameter). Planning checks them
        before :meth:`validate`."""
        if self.params_type is None:  # an evaluator that checks its own mapping in validate()
            return spec.params
        return self.params_type.from_params(spec.params, self.name)

    def validate(self, spec: "RunSpec") -> None:
        """Extra checks before any work starts (raise ConfigError naming the field)."""

    def default_subjects(self, spec: "RunSpec") -> tuple["SubjectEntry", ...]:
        """Subjects used when the spec lists none (default: none, which is an error)."""
        return ()

    def validate_subject(self, spec: "RunSpec", index: int, subject: "SubjectEntry") -> None:
        """Check one subject without loading it (default: the embeval.subjects registry)."""
        where = f"spec.subjects[{index}]"
        if subject.path is not None and _looks_like_path(subject.path):
            p = spec.resolve_path(subject.path)
            if not p.exists():
                raise MissingFileError(f"{where}.path: file not found: {p}; put the model files there or fix the path")
        if subject.adapter in CHECKPOINT_CHECKS and subject.path:  # the checkpoint's own files, not loading the model
            module, func = CHECKPOINT_CHECKS[subject.adapter].split(":")
            try:
                getattr(importlib.import_module(module), func)(spec.resolve_path(subject.path))
            except (ConfigError, MissingFileError) as exc:
                raise type(exc)(f"{where}.path: {exc}") from None
        elif subject.adapter == "embedded" and subject.path and subject.kind in EMBEDDED_KINDS:
            from embeval.subjects.embedded.zoo import resolve_model

            try:  # a shipped name: a typo is an error now, not a failed unit after the run has started
                resolve_model(subject.path, EMBEDDED_KINDS[subject.kind])
            except MissingFileError as exc:
                raise MissingFileError(f"{where}.path: {exc}") from None
        if subject.kind in ("vlm", "policy", "llm"):
            try:
                from embeval.subjects.registry import SubjectSpec, resolve_adapter
            except ImportError as exc:  # pragma: no cover - the subjects registry ships with embeval
                raise ConfigError(f"{where}: the subjects registry is unavailable ({exc})") from None
            try:
                s = SubjectSpec.from_mapping(subject.to_subject_mapping(), base_dir=Path(spec.base_dir))
                resolve_adapter(s.kind, s.adapter)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None

    def items(self, spec: "RunSpec") -> list[str]:
        """Item ids, in a stable order (default: from ``spec.items``)."""
        return list_items(spec)

    def group_key(self, unit: "Unit") -> str:
        """Units with the same key never go to different shards (default: subject and item)."""
        return f"{unit.subject}|{unit.item}"

    def units(self, spec: "RunSpec") -> list["Unit"]:
        """All units: subjects x items x distortions x levels x seeds (override to change)."""
        from embeval.runs.units import Unit

        subjects = spec.subjects or self.default_subjects(spec)
        out = []
        for s, item, d, level, seed in itertools.product(subjects, self.items(spec), spec.distortions, spec.levels, spec.seeds):
            u = Unit(s.id, item, d, level, seed)
            out.append(Unit(s.id, item, d, level, seed, group=self.group_key(u)))
        return out

    # ----------------------------------------------------------- execution
    def setup(self, spec: "RunSpec", subject: "SubjectEntry") -> Any:
        """Load what a subject needs once per worker (default: the embeval.subjects model)."""
        if subject.kind in ("vlm", "policy", "llm"):
            from embeval.subjects.registry import SubjectSpec, load_subject

            return load_subject(SubjectSpec.from_mapping(subject.to_subject_mapping(), base_dir=Path(spec.base_dir)))
        return None

    def run_unit(self, spec: "RunSpec", state: Any, unit: "Unit", unit_seed: int) -> dict[str, Any]:
        raise NotImplementedError(f"evaluator {self.name!r} does not implement run_unit")

    def run_batch(self, spec: "RunSpec", state: Any, units: Sequence["Unit"], unit_seeds: Sequence[int]) -> list[dict[str, Any]]:
        """Run several units of one subject (override when the model batches)."""
        return [self.run_unit(spec, state, u, s) for u, s in zip(units, unit_seeds)]

    def teardown(self, state: Any) -> None:
        close = getattr(state, "close", None)
        if callable(close):
            close()

    # ----------------------------------------------------------- reporting
    def report_sections(self, spec: "RunSpec", frame: "pd.DataFrame", stamp: str) -> list[ReportSection]:
        """Evaluator-specific report sections from the done units (``frame`` has the key columns
        and one ``out.<name>`` column per scalar output; ``stamp`` names spec hash and code version
        and must appear on every figure)."""
        return []


#: adapter -> "module:function" that checks a checkpoint folder's files (not loading the model) before a run starts
CHECKPOINT_CHECKS = {"lerobot": "embeval.subjects.adapters.lerobot_policy:check_checkpoint"}

#: subject kind -> embedded model kind (``adapter: embedded`` subjects name shipped models by ``path``)
EMBEDDED_KINDS = {"policy": "vla", "vlm": "vlm"}


def _looks_like_path(value: str) -> bool:
    """True for ``dir/x``, ``./x``, ``~/x``, ``x.safetensors``; False for a bare name such as a
    shipped model (``tiny-vla``), which the adapter resolves itself."""
    return "/" in value or value.startswith(("~", ".")) or Path(value).suffix != ""


def register_evaluator(name: str):
    """Class decorator: register an :class:`Evaluator` subclass under ``name``."""

    def deco(cls):
        if not (isinstance(cls, type) and issubclass(cls, Evaluator)):
            raise TypeError(f"register_evaluator({name!r}) expects an Evaluator subclass, got {cls!r}")
        return EVALUATORS.register(name, cls)

    return deco


def get_evaluator(name: str) -> Evaluator:
    """A fresh instance of the evaluator registered as ``name`` (its :attr:`~Evaluator.name` set on the
    instance); ConfigError with "did you mean" and the choices otherwise."""
    evaluator = EVALUATORS.get(name, field="spec.evaluator")()
    evaluator.name = name
    return evaluator


def list_evaluators() -> list[str]:
    return EVALUATORS.names()


def import_plugins(spec: "RunSpec") -> None:
    for i, mod in enumerate(spec.plugins):
        try:
            importlib.import_module(mod)
        except ImportError as exc:
            raise ConfigError(f"spec.plugins[{i}]: cannot import module {mod!r}: {exc}; is it installed / on PYTHONPATH?") from None


# ------------------------------------------------------------------ items
def list_items(spec: "RunSpec") -> list[str]:
    """Item ids from ``spec.items`` (see :class:`embeval.runs.spec.ItemsSpec`), at most
    :data:`~embeval.runs.spec.MAX_ITEMS` (after ``limit``)."""
    from embeval.runs.spec import MAX_ITEMS

    it = spec.items
    if it.source == "synthetic":
        ids = [f"item{i:05d}" for i in range(it.count or 0)]
    elif it.source == "list":
        ids = list(it.ids)
    elif it.source == "folder":
        root = spec.resolve_path(it.path)
        if not root.is_dir():
            raise MissingFileError(f"spec.items.path: folder not found: {root}; create it or fix the path")
        ids = sorted(str(p.relative_to(root)) for p in root.glob(it.glob) if p.is_file())
        if not ids:
            raise ConfigError(f"spec.items.glob: no files match {it.glob!r} under {root}")
    elif it.source == "file":
        p = spec.resolve_path(it.path)
        if not p.is_file():
            raise MissingFileError(f"spec.items.path: file not found: {p}; give a text file with one id per line or a JSONL file with an 'id' field")
        ids = []
        for n, line in enumerate(p.read_text().splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                try:
                    ids.append(str(json.loads(line)["id"]))
                except (ValueError, KeyError):
                    raise ConfigError(f"spec.items.path: {p} line {n}: a JSONL line needs an 'id' field") from None
            else:
                ids.append(line)
    else:  # pragma: no cover - parse_spec rejects other sources
        raise ConfigError(f"spec.items.source: unknown source {it.source!r}")
    seen: set[str] = set()
    for i in ids:  # linear: a long list with a duplicate at its end is found at once
        if i in seen:
            raise ConfigError(f"spec.items: duplicate item id {i!r}")
        seen.add(i)
    ids = ids[: it.limit] if it.limit else ids
    if len(ids) > MAX_ITEMS:
        raise ConfigError(f"spec.items: {it.source} items give {len(ids)} ids, more than the {MAX_ITEMS} a run may "
                          "have; set items.limit or split the items over several specs")
    return ids


def iter_subjects(spec: "RunSpec", evaluator: Evaluator) -> Iterable["SubjectEntry"]:
    return spec.subjects or evaluator.default_subjects(spec)
