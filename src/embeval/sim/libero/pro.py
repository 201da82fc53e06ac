"""LIBERO-PRO's fixed variant suites as a perturbation family beside embeval's axes (the sensitivity table's
``family`` column).

A paired LIBERO-PRO variant ``SUITE_VARIANT`` (:data:`PAIRED_VARIANTS`) has its base suite's task count and task
names at the same task id, so ``SUITE_VARIANT:ID`` at initial state *i* is the perturbed twin of ``SUITE:ID`` at
initial state *i* (the episode seed). :func:`score_family` runs, per base task and policy, every seed once on the
base suite (the reference), under each embeval axis LIBERO applies (:func:`embeval.sim.perturb.backends.supported`)
and on every variant suite, and scores each against the reference exactly as
:func:`embeval.sim.perturb.score.score_grid` does (Decision: first action per pair; Execution: final TCP, success).
Rows carry ``family`` ``embeval`` or ``LIBERO-PRO`` (kind ``suite``, axis the variant suite, level 0: none).

One LIBERO worker is open at a time (each costs a task build, ~15 s here): the base task's, then each variant's.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from embeval.errors import ConfigError
from embeval.sim.perturb.score import EMBEVAL, score_seed

#: family of a LIBERO-PRO variant row
FAMILY = "LIBERO-PRO"
#: row ``kind`` of a LIBERO-PRO variant (a whole suite, no severity level)
SUITE_KIND = "suite"
#: LIBERO-PRO's variants that keep the base suite's tasks one to one (task id and name), what each changes
PAIRED_VARIANTS: dict[str, str] = {
    "swap": "object positions swapped",
    "object": "objects changed",
    "lan": "instruction reworded",
    "env": "environment (scene) changed",
    "task": "another task in the same scene",
    "temp": "LIBERO-PRO's temp variant",
}
#: the base suites LIBERO-PRO varies
BASE_SUITES = ("libero_goal", "libero_spatial", "libero_10", "libero_object")
#: what the unpaired variants do instead (refused with this reason)
UNPAIRED = ("object_ood", "relation_ood", "semantic_ood", "with_")


@dataclass(frozen=True)
class FamilyStudy:
    """Base ``suite`` tasks ``task_ids`` x episode ``seeds`` (LIBERO initial states), each paired with ``variants``
    (keys of :data:`PAIRED_VARIANTS`) and with ``axes`` x ``levels`` (embeval axes LIBERO applies); cameras
    ``width`` x ``height`` px, ``max_steps`` (None: the suite's limit), ``options`` (``sim.options``: render_mode)."""

    suite: str
    task_ids: tuple[int, ...]
    seeds: tuple[int, ...]
    variants: tuple[str, ...] = tuple(PAIRED_VARIANTS)
    axes: tuple[str, ...] = ()
    levels: tuple[int, ...] = (1, 3, 5)
    width: int = 128
    height: int = 128
    max_steps: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        from embeval.sim.perturb.backends import check

        if self.suite not in BASE_SUITES:
            raise ConfigError(f"LIBERO-PRO family: {self.suite!r} is not a base suite LIBERO-PRO varies; choose from "
                              f"{', '.join(BASE_SUITES)} (e.g. --task libero_goal:0)")
        for v in self.variants:
            if v not in PAIRED_VARIANTS:
                why = (" (its tasks do not map one to one onto the base suite's: run it as a suite of its own with "
                       "`embeval sim episodes --backend libero`)" if v.startswith(UNPAIRED) else "")
                raise ConfigError(f"--variants {v}: not a paired LIBERO-PRO variant{why}; choose from "
                                  f"{', '.join(PAIRED_VARIANTS)}")
        if not self.task_ids or not self.seeds:
            raise ConfigError("LIBERO-PRO family: give at least one task id and one seed")
        if not self.variants and not self.axes:
            raise ConfigError("LIBERO-PRO family: nothing to score; give --variants or --axes")
        for cell in self.cells():
            check(cell, "libero")  # an axis LIBERO does not apply: refused with why

    def cells(self):
        from embeval.sim.perturb import Perturbation, Perturbations

        return [Perturbations([Perturbation(a, lv)]) for a in self.axes for lv in self.levels]

    def spec(self, suite: str, task_id: int):
        from embeval.sim.backends import SimSpec

        return SimSpec(backend="libero", env=f"{suite}:{task_id}", width=self.width, height=self.height,
                       max_steps=self.max_steps, options=dict(self.options), aliases=dict(self.aliases))

    @property
    def episodes(self) -> int:
        """Episodes per policy: per task and seed the reference, one per axis cell and one per variant."""
        return len(self.task_ids) * len(self.seeds) * (1 + len(self.axes) * len(self.levels) + len(self.variants))


def variant_suite(suite: str, variant: str) -> str:
    return f"{suite}_{variant}"


def score_family(study: FamilyStudy, policies: dict[str, Any], make_env: Callable | None = None,
                 progress: Callable[[str], None] | None = None,
                 skipped: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The rows of ``study`` for each named policy (``{subject: policy}``): see the module docstring. Each row has
    ``subject``, ``family``, ``kind``, ``axis``, ``level``, ``seed``, ``task`` (the base task), ``decision``,
    ``execution``, ``reference_success``, ``success``, ``perturbation``. ``make_env(spec)`` builds an episode env
    (default :func:`embeval.sim.backends.make_episode_env`); every env it returns is closed here. ``progress``
    gets one message per episode. An axis a task's scene cannot take (a table texture where the scene has only a
    floor, ...) is not scored there: it goes to ``skipped`` (``{"subject", "task", "axis", "level", "seed",
    "reason"}``) and the study goes on; without ``skipped`` it stops the study."""
    from embeval.sim.backends import make_episode_env, run_episode, score_runs

    make_env = make_env or make_episode_env
    rows: list[dict[str, Any]] = []
    for tid in study.task_ids:
        base_task = f"{study.suite}:{tid}"
        refs: dict[tuple[str, int], Any] = {}
        env = make_env(study.spec(study.suite, tid))
        try:
            base_name = _task_name(env)
            for subject, policy in policies.items():
                for seed in study.seeds:
                    env.env.perturb = None
                    refs[(subject, seed)] = ref = run_episode(env, policy, seed)
                    if progress:
                        progress(f"{base_task} seed {seed} unperturbed")
                    left: list[dict[str, Any]] | None = None if skipped is None else []
                    rows += [{"subject": subject, "family": EMBEVAL, "task": base_task, **r}
                             for r in score_seed(env, policy, seed, study.cells(), reference=ref, progress=progress,
                                                 skipped=left)]
                    if left:
                        skipped += [{"subject": subject, "task": base_task, **s} for s in left]
        finally:
            env.close()
        for variant in study.variants:
            suite = variant_suite(study.suite, variant)
            env = make_env(study.spec(suite, tid))
            try:
                name = _task_name(env)
                for subject, policy in policies.items():
                    for seed in study.seeds:
                        ref = refs[(subject, seed)]
                        dis = run_episode(env, policy, seed)
                        sc = score_runs(ref, dis)
                        rows.append({"subject": subject, "family": FAMILY, "task": base_task, "kind": SUITE_KIND,
                                     "axis": suite, "level": 0, "seed": seed, "decision": sc.decision,
                                     "execution": sc.execution.score, "reference_success": bool(ref.outcome.success),
                                     "success": bool(dis.outcome.success),
                                     "perturbation": {"variant": variant, "suite": suite, "task": name,
                                                      "base_task": base_name}})
                        if progress:
                            progress(f"{suite}:{tid} seed {seed}")
            finally:
                env.close()
    return rows


def _task_name(env) -> str:
    """LIBERO's task name of an episode env (its worker's ``info['task']``), "" when it has none."""
    info = getattr(getattr(env, "env", None), "info", None) or {}
    return str(info.get("task", ""))

