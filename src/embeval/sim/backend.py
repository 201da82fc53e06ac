"""Simulator backends: one :class:`SimBackend` record per backend, one registry (:data:`SIM_BACKENDS`).

A backend is one folder: a sub-package of :mod:`embeval.sim` holding a ``backend.py`` that defines
``BACKEND = SimBackend(...)`` (:mod:`embeval.sim.pybullet`, :mod:`embeval.sim.maniskill`, :mod:`embeval.sim.libero`).
The registry names every such folder without importing it; a backend's module is imported when it is first looked
up. Installed packages add one through the ``embeval.sim_backends`` entry-point group
(``my_sim = "my_pkg.sim:BACKEND"``). Everything that runs simulated episodes (``embeval sim``, a run spec's ``sim:``,
perturbation studies, the IQA database's closed-loop replays) looks the backend up here and branches on nothing;
docs/contributing.md adds one.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from embeval.errors import ConfigError
from embeval.registry import RecordKind, Registry, load_target

if TYPE_CHECKING:
    from embeval.sim.backends import SimSpec
    from embeval.sim.episode_env import EpisodeEnv


def _check(rec: SimBackend) -> None:
    if not rec.name.isidentifier() or not rec.name.islower():
        raise ConfigError(f"simulator backend names are lower-case words such as 'mujoco', got {rec.name!r}")
    if not rec.default_task:
        raise ConfigError(f"simulator backend {rec.name}: give default_task, the task `embeval sim` runs without --task")


@dataclass(frozen=True)
class SimBackend:
    """Everything embeval needs to know of one simulator backend.

    ``episodes``: the :class:`~embeval.sim.episode_env.EpisodeEnv` class (or ``"module:attr"``, imported when first
    built), called with a :class:`~embeval.sim.backends.SimSpec`. ``default_task``: the task run without ``--task``;
    ``tasks``: how tasks are named, in words (help texts). ``cameras``: the camera names of its observations (empty:
    they depend on the task). ``action_convention``: the registered action convention (:mod:`embeval.conventions`)
    its simulator's own actions follow (policies always act in embeval's convention: the backend converts).
    ``perturb_unsupported``: scene-perturbation axis -> why this backend does not implement it (axes absent:
    implemented); None: no scene perturbations at all. ``render``: ``render_cli(args, perturb) -> int`` for
    ``embeval sim render`` (or ``"module:attr"``; None: it cannot render stills). ``check_run``:
    ``check_run(task, seeds, scripted)``, called before any env is built by ``embeval sim episodes`` to refuse bad
    tasks or seeds in one line (None: nothing to check). ``normalise_task``: the canonical spelling of a task name
    (None: as given).
    """

    name: str
    description: str
    episodes: type[EpisodeEnv] | str = field(repr=False)
    default_task: str = ""
    tasks: str = ""
    cameras: tuple[str, ...] = ()
    action_convention: str = "embeval"
    perturb_unsupported: Mapping[str, str] | None = None
    render: Callable[..., int] | str | None = field(default=None, repr=False)
    check_run: Callable[..., None] | str | None = field(default=None, repr=False)
    normalise_task: Callable[[str], str] | str | None = field(default=None, repr=False)

    def _fn(self, value):
        return load_target(value) if isinstance(value, str) else value

    def make(self, spec: SimSpec) -> EpisodeEnv:
        """The backend's episode env for ``spec``."""
        return self._fn(self.episodes)(spec)

    def task(self, name: str | None) -> str:
        """``name`` (or the default task) in its canonical spelling."""
        name = name or self.default_task
        return self._fn(self.normalise_task)(name) if self.normalise_task else name

    def check(self, task: str, seeds: range, scripted: bool) -> None:
        """Refuse a task or seeds this backend cannot run, before anything is built (``scripted``: no --subject)."""
        if self.check_run:
            self._fn(self.check_run)(task, seeds, scripted)

    def render_cli(self, args, perturb=None) -> int:
        if self.render is None:
            raise ConfigError(f"backend {self.name} renders no stills; choose from "
                              f"{', '.join(n for n in SIM_BACKENDS.names() if get_sim_backend(n).render)}")
        return self._fn(self.render)(args, perturb)

    def supported_axes(self) -> tuple[str, ...]:
        """The scene-perturbation axes this backend applies (registry order)."""
        from embeval.sim.perturb.axis import AXES

        if self.perturb_unsupported is None:
            return ()
        return tuple(a for a in AXES.names() if a not in self.perturb_unsupported)


def _folders() -> dict[str, str]:
    """``name -> "embeval.sim.<name>.backend:BACKEND"`` for every sub-package of :mod:`embeval.sim` (on any folder of
    its ``__path__``) that holds a ``backend.py``; nothing is imported."""
    import embeval.sim as pkg

    found: dict[str, str] = {}
    for root in pkg.__path__:
        for p in sorted(Path(root).glob("*/backend.py")):
            if p.parent.name.isidentifier() and (p.parent / "__init__.py").exists():  # importable names only
                found.setdefault(p.parent.name, f"embeval.sim.{p.parent.name}.backend:BACKEND")
    return found


def discover() -> list[str]:
    """Register every backend folder not yet registered (lazily: imported on first lookup); the names added. The
    registry starts with the folders there are when this module is imported; call this after a folder is added to
    ``embeval.sim.__path__`` (a plugin folder; docs/contributing.md's example)."""
    new = [n for n in _folders() if n not in SIM_BACKENDS]
    for name in new:
        SIM_BACKENDS.register(name, _folders()[name])
    return new


#: simulator backends by name (``--backend`` of ``embeval sim``, ``sim.backend`` of a run spec)
SIM_BACKENDS: Registry[SimBackend] = Registry(
    "simulator backend", group="embeval.sim_backends", entries=_folders(),
    hint="add one as a folder embeval/sim/<name>/ with backend.py defining BACKEND = SimBackend(...) "
         "(docs/contributing.md), or register_record(SimBackend(...)) on embeval.sim.backend.SIM_BACKENDS",
    record=RecordKind(SimBackend, home="embeval.sim.backend", check=_check))


def get_sim_backend(name: str) -> SimBackend:
    """The backend named ``name``; a ConfigError naming the choices otherwise."""
    return SIM_BACKENDS.get_record(name, "backend")
