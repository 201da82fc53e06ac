"""ManiSkill3 episodes (:class:`ManiSkillEpisodes`) and the backend record."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from embeval.scoring.execution import ExecutionOutcome
from embeval.sim.backend import SimBackend
from embeval.sim.episode_env import DistortedCameras, EpisodeEnv

if TYPE_CHECKING:
    from embeval.sim.backends import SimSpec


class ManiSkillEpisodes(DistortedCameras, EpisodeEnv):
    """A ManiSkill3 task (:class:`~embeval.sim.maniskill.env.ManiSkillEnv`); camera frames distorted and aliased at
    the episode seam every backend shares (:class:`~embeval.sim.episode_env.DistortedCameras`)."""

    def __init__(self, spec: SimSpec):
        from embeval.errors import ConfigError
        from embeval.sim.maniskill.env import ManiSkillConfig, ManiSkillEnv
        from embeval.sim.perturb.backends import parse_option

        self.spec = spec if spec.render else replace(spec, aliases={})  # no images: nothing to alias
        self.env = ManiSkillEnv(ManiSkillConfig(spec.env, render=spec.render, width=spec.width, height=spec.height,
                                                max_steps=spec.max_steps),
                                perturb=parse_option(spec.options.get("perturb"), "maniskill"))
        self.cameras = self.env.cameras
        for alias, cam in spec.aliases.items():  # before any episode, as ManiSkillEnv checks its own aliases
            if spec.render and cam not in self.cameras:
                self.env.close()
                raise ConfigError(f"alias {alias!r} names camera {cam!r}; {spec.env} has {', '.join(self.cameras)}")
        self._distorters: dict = {}
        self.clean_images: dict = {}

    def reset(self, seed, distortion=None):
        self._start_distortion(distortion)
        obs = self.env.reset(seed=seed)
        self.instruction = self.env.instruction
        return self._wrap(obs)

    def step(self, action):
        return self._stepped(self.env.step(action))

    @property
    def done(self):
        return self.env.done

    def outcome(self, n_actions):
        from embeval.sim.maniskill.runtime import _np

        e = self.env
        return ExecutionOutcome(final_tcp_pose=tuple(e.tcp_pose()), success=e.success(), stopped=False,
                                n_actions=n_actions, duration=e.control_steps * float(e.unwrapped.control_timestep),
                                final_joint_positions=tuple(_np(e.unwrapped.agent.robot.get_qpos())[:7].tolist()),
                                extra={"objects": e.object_poses(), "task": e.config.env_id, "seed": e.seed,
                                       "control_steps": e.control_steps, "evaluate": e.evaluate(),
                                       "perturbation": dict(e.perturbation)})

    def close(self):
        self.env.close()


def check_run(task: str, seeds: range, scripted: bool) -> None:
    """Every episode's seed in ManiSkill's 32-bit range and, without a policy, a scripted expert for ``task``."""
    from embeval.sim.maniskill.runtime import check_seed

    check_seed(seeds.start, len(seeds), "--seed")
    if scripted:
        from embeval.sim.maniskill.expert import check_expert

        check_expert(task)


BACKEND = SimBackend(
    "maniskill", "ManiSkill3 on the CPU (software Vulkan): its tabletop tasks and SimplerEnv's Bridge scenes",
    episodes=ManiSkillEpisodes, default_task="PickCube-v1", tasks="a ManiSkill env id (PickCube-v1, PushCube-v1, ...)",
    perturb_unsupported={}, render="embeval.sim.maniskill.render:render_cli", check_run=check_run)
