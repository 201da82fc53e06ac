"""The episode interface every simulator backend implements (:class:`EpisodeEnv`), and :class:`DistortedCameras`,
the per-camera distortion of a backend whose simulator returns clean images. Each backend is a folder
(``embeval/sim/<name>/backend.py``, registered in :mod:`embeval.sim.backend`) whose env subclasses these;
:func:`embeval.sim.backends.make_episode_env` builds one from a :class:`~embeval.sim.backends.SimSpec`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from embeval.action import Action, Observation
from embeval.errors import ConfigError
from embeval.scoring.execution import ExecutionOutcome

if TYPE_CHECKING:
    from embeval.sim.backends import SimSpec


@dataclass
class StepResult:
    """Outcome of one step of a simulator env (pybullet's SimEnv, ManiSkill's, LIBERO's)."""

    observation: Observation
    success: bool  # task predicate after this step
    done: bool  # success, safety stop, or step budget used up
    stopped: bool = False  # protective stop (collision / limit); the episode scores 0 in Execution
    reason: str = ""  # why the episode ended ("success", stop reason, "max_steps"), "" while running
    info: dict[str, Any] = field(default_factory=dict)


class EpisodeEnv:
    """The common episode interface (see module docstring)."""

    cameras: tuple[str, ...] = ()
    instruction: str = ""

    def reset(self, seed: int, distortion: tuple[str, int, int] | None = None) -> Observation:
        raise NotImplementedError

    def step(self, action: Action):
        raise NotImplementedError

    @property
    def done(self) -> bool:
        raise NotImplementedError

    def outcome(self, n_actions: int) -> ExecutionOutcome:
        raise NotImplementedError

    def close(self) -> None:
        pass


class DistortedCameras:
    """For an :class:`EpisodeEnv` whose simulator returns clean images: ``(name, level, seed)`` distorts every
    frame of every camera in ``self.cameras`` (seeded per camera and frame), keeps the clean ones in
    ``clean_images``, and adds ``spec.aliases``."""

    cameras: tuple[str, ...] = ()
    spec: SimSpec

    def _start_distortion(self, distortion: tuple[str, int, int] | None) -> None:
        from embeval.distortion import FrameDistorter

        self._distorters = ({c: FrameDistorter(distortion[0], distortion[1], seed=distortion[2], stream=c) for c in self.cameras}
                            if distortion else {})

    def _stepped(self, result):
        """``result`` of the simulator's step (anything with an ``observation``), its observation wrapped."""
        result.observation = self._wrap(result.observation)
        return result

    def _wrap(self, obs: Observation) -> Observation:
        self.clean_images = dict(obs.images)
        imgs = {c: self._distorters[c](im) if c in self._distorters else im for c, im in obs.images.items()}
        for alias, cam in self.spec.aliases.items():
            if cam not in imgs:
                raise ConfigError(f"sim.aliases: {alias}={cam}: no camera {cam!r}; cameras: {', '.join(imgs) or 'none'}")
            imgs[alias] = imgs[cam]
        return Observation(imgs, obs.instruction, obs.state, obs.timestamp)
