"""The pybullet UR5 cell's episodes (:class:`PybulletEpisodes`) and its backend record."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from embeval.sim.backend import SimBackend
from embeval.sim.episode_env import DistortedCameras, EpisodeEnv

if TYPE_CHECKING:
    from embeval.sim.backends import SimSpec


class PybulletEpisodes(DistortedCameras, EpisodeEnv):
    """The UR5 cell (:class:`embeval.sim.SimEnv`); ``env`` is a verb. Distortion per camera frame
    (:class:`~embeval.sim.episode_env.DistortedCameras`)."""

    def __init__(self, spec: SimSpec):
        from embeval.sim import SimConfig, SimEnv

        self.verb = spec.env
        self.spec = spec
        self.env = SimEnv(SimConfig(render=spec.render, obs_width=spec.width, obs_height=spec.height))
        self.cameras = tuple(self.env.config.obs_cameras) if spec.render else ()
        self._distorters: dict[str, Any] = {}
        self.clean_images: dict[str, np.ndarray] = {}

    def reset(self, seed, distortion=None):
        self._start_distortion(distortion)
        obs = self.env.reset(seed=seed, task=self.verb)
        self.instruction = self.env.task.instruction
        return self._wrap(obs)

    def step(self, action):
        return self._stepped(self.env.step(action))

    @property
    def done(self):
        return self.env.done or (self.spec.max_steps is not None and self.env.n_steps >= self.spec.max_steps)

    def outcome(self, n_actions):
        from embeval.sim.execute import outcome

        return outcome(self.env, n_actions)

    def close(self):
        self.env.close()


def _verb(name: str) -> str:
    from embeval.sim.tasks import resolve_verb

    return resolve_verb(name)


BACKEND = SimBackend(
    "pybullet", "embeval's pybullet UR5 cell: the ten Embodied-IQA verbs, scripted expert, every perturbation axis",
    episodes=PybulletEpisodes, default_task="Pick", tasks="a task verb (`embeval sim tasks`)",
    cameras=("third_person", "wrist"), perturb_unsupported={}, render="embeval.sim.pybullet.render:render_cli",
    normalise_task=_verb)
