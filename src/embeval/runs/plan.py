"""Validate a run spec and plan its units, before any work starts."""
from __future__ import annotations

from dataclasses import dataclass

from embeval.errors import ConfigError
from embeval.runs.registry import Evaluator, get_evaluator, import_plugins, iter_subjects
from embeval.runs.spec import MAX_UNITS, RunSpec, SubjectEntry
from embeval.runs.units import Unit


@dataclass
class Plan:
    """A validated spec: its evaluator, subjects and every unit (in a stable order)."""

    spec: RunSpec
    evaluator: Evaluator
    subjects: dict[str, SubjectEntry]
    units: list[Unit]

    @property
    def run_id(self) -> str:
        return self.spec.run_id


def check_size(spec: RunSpec, evaluator: Evaluator, subjects) -> None:
    """Refuse a spec whose grid (subjects x items x distortions x levels x seeds) is over
    :data:`~embeval.runs.spec.MAX_UNITS` before a single unit is made (a ConfigError naming each factor)."""
    n_items = len(evaluator.items(spec))
    factors = {"subjects": len(subjects), "items": n_items, "distortions": len(spec.distortions),
               "levels": len(spec.levels), "seeds": len(spec.seeds)}
    total = 1
    for n in factors.values():
        total *= n
    if total > MAX_UNITS:
        grid = " x ".join(f"{n} {k}" for k, n in factors.items())
        raise ConfigError(f"spec: {grid} = {total} units, more than the {MAX_UNITS} a run may have; "
                          "split it into several specs (e.g. by subject or seed) or lower items.count / items.limit")


def plan_run(spec: RunSpec) -> Plan:
    """Check everything a run needs without loading a model; raise ConfigError/MissingFileError
    naming the field (``spec.subjects[2].path: file not found ...``). Returns the :class:`Plan`."""
    import_plugins(spec)
    evaluator = get_evaluator(spec.evaluator)
    subjects = tuple(iter_subjects(spec, evaluator))
    if not subjects:
        raise ConfigError(f"spec.subjects: evaluator {spec.evaluator!r} needs at least one subject")
    for i, s in enumerate(subjects):
        if s.kind not in evaluator.subject_kinds:
            raise ConfigError(
                f"spec.subjects[{i}].kind: evaluator {spec.evaluator!r} takes subjects of kind "
                f"{', '.join(evaluator.subject_kinds)}; got {s.kind!r}"
            )
        evaluator.validate_subject(spec, i, s)
    evaluator.params(spec)
    evaluator.validate(spec)
    if spec.record_video != "none" and not getattr(evaluator, "records_video", False):
        raise ConfigError(f"spec.record_video: evaluator {spec.evaluator!r} runs no episodes to record; remove record_video "
                          "(the evaluators sim-iqa and policy-decision record unit videos)")
    if spec.backend.num_envs > 1 and not getattr(evaluator, "vectorises", False):
        raise ConfigError(f"spec.backend.num_envs: evaluator {spec.evaluator!r} runs no vectorised episodes; remove "
                          "num_envs (the evaluator sim-iqa steps num_envs environments together)")
    check_size(spec, evaluator, subjects)
    units = evaluator.units(spec)
    if not units:
        raise ConfigError("spec: the spec yields no units of work (no items?)")
    keys = set()
    for u in units:
        if u.key in keys:
            raise ConfigError(f"spec: evaluator {spec.evaluator!r} produced the unit {u.key} twice")
        keys.add(u.key)
    return Plan(spec=spec, evaluator=evaluator, subjects={s.id: s for s in subjects}, units=units)
