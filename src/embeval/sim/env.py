"""A gym-like episode API over the workcell: ``reset(seed, task)``, ``step(action)``, observations, success.

Actions are 7-DoF deltas ``[dx, dy, dz, droll, dpitch, dyaw, gripper]`` in frame ``base``
(:mod:`embeval.subjects.protocols`); one step moves the TCP in a straight line by the delta (at
``SimConfig.tcp_speed``, lasting at least ``1 / control_hz`` seconds), then actuates the gripper
(``gripper < 0.5`` closes, 1 = open). Observations carry ``third_person`` and ``wrist`` RGB images
and the state ``joint_positions`` (6,), ``tcp_pose`` (7,) ``[x,y,z,qx,qy,qz,qw]``, ``gripper`` (1,).

Example::

    from embeval.sim import SimEnv
    env = SimEnv()
    obs = env.reset(seed=0, task="Pick")
    expert = env.expert()
    while not env.done:
        result = env.step(expert.act(obs))
        obs = result.observation
    print(result.success)
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from embeval.action import Action, ActionSpec, Observation, pose6_to_pose7
from embeval.errors import ConfigError
from embeval.robot.safety import SafetyLimits
from embeval.sim.scene import SceneSpec
from embeval.sim.arm_backend import execute_action
from embeval.sim.episode_env import StepResult
from embeval.sim.tasks import TaskSpec, make_task
from embeval.sim.workcell import SimConfig, Workcell


def as_action(action: Action | Sequence[float]) -> Action:
    return action if isinstance(action, Action) else Action(np.asarray(action, dtype=np.float64))


class ClosingEnv:
    """``with SomeEnv(...) as env:`` closes the env on leaving (every embeval env defines ``close``)."""

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SimEnv(ClosingEnv):
    """One episode at a time on a :class:`Workcell`. Deterministic: same seed and actions -> same result."""

    def __init__(self, config: SimConfig | None = None, limits: SafetyLimits | None = None, action_frame: str = "base",
                 perturb=None):
        if action_frame not in ("base", "tool0"):
            raise ConfigError(f"action_frame must be 'base' or 'tool0', got {action_frame!r}")
        #: what step() expects: 7-DoF deltas in ``action_frame`` (the scripted expert emits frame base)
        self.action_spec = ActionSpec(frame=action_frame)
        self.config = config or SimConfig()
        self.cell = Workcell(self.config, limits)
        self.scene: SceneSpec | None = None
        self.task: TaskSpec | None = None
        self.seed = 0
        self.n_steps = 0
        self.done = False
        self.reason = ""
        #: scene-level perturbations applied at every reset (:class:`embeval.sim.perturb.Perturbations`; None: none)
        self.perturb = perturb
        #: what each perturbation axis drew for the current episode (``{axis: {"level", params...}}``)
        self.perturbation: dict[str, Any] = {}

    def close(self) -> None:
        self.cell.close()

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int = 0, task: str | TaskSpec = "Pick", scene: SceneSpec | None = None,
              render: bool | None = None) -> Observation:
        """Start an episode. ``task`` a verb (scene generated from ``seed``) or a :class:`TaskSpec` with ``scene``."""
        if isinstance(task, str):
            if scene is not None:
                raise ConfigError("pass either a verb (the scene is generated from the seed) or a TaskSpec with a scene")
            scene, task = make_task(task, seed)
        elif scene is None:
            raise ConfigError("a TaskSpec needs its scene: reset(seed, task=TaskSpec(...), scene=SceneSpec(...))")
        prep = self.perturb.prepare(scene, task, seed) if self.perturb else None
        if prep is not None:  # seeded from the episode seed; refused in one line when the task becomes unsolvable
            scene, task = prep.scene, prep.task
        self.scene, self.task, self.seed = scene, task, int(seed)
        self.cell.load(scene)
        if prep is not None:
            prep.after_load(self.cell)
        self.perturbation = prep.record() if prep is not None else {}
        self.n_steps, self.done, self.reason = 0, False, ""
        return self.observe(render)

    def step(self, action: Action | Sequence[float], render: bool | None = None) -> StepResult:
        """Execute one 7-DoF delta action (frame base); see the module docstring.

        Steps after ``done`` still execute (an Execution run plays its whole action sequence),
        except after a safety stop, when the arm no longer moves.
        """
        if self.task is None:
            raise ConfigError("call reset(seed, task) before step()")
        a = as_action(action)
        cell = self.cell
        if cell.safety.status.stopped:  # after a stop nothing moves; after success/max_steps the caller decides
            return self._result(render)
        execute_action(cell, a, self.action_spec.frame)  # the sim arm backend of the ROS graph steps the same way
        self.n_steps += 1
        return self._result(render)

    def _result(self, render: bool | None) -> StepResult:
        cell = self.cell
        success = self.success()
        if not self.done:
            if cell.safety.status.stopped:
                self.done, self.reason = True, cell.safety.status.reason
            elif success:
                self.done, self.reason = True, "success"
            elif self.n_steps >= self.task.max_steps:
                self.done, self.reason = True, "max_steps"
        info = {"steps": self.n_steps, "sim_time": cell.time, "safety": cell.safety.status.to_dict()}
        return StepResult(self.observe(render), success and not cell.safety.status.stopped, self.done,
                          cell.safety.status.stopped, self.reason, info)

    def success(self) -> bool:
        """The task's success predicate on the current world state (False after a safety stop)."""
        if self.task is None or not self.task.implemented:
            return False
        return (not self.cell.safety.status.stopped) and self.task.success(self.cell.world_state(), self.scene)

    def observe(self, render: bool | None = None) -> Observation:
        cell = self.cell
        render = self.config.render if render is None else render
        images = {}
        if render:
            for name in self.config.obs_cameras:
                images[name] = cell.render(name, self.config.obs_width, self.config.obs_height)
        state = {
            "joint_positions": cell.q.copy(),
            "tcp_pose": pose6_to_pose7(cell.tcp_pose()),
            "gripper": np.array([cell.gripper]),
        }
        return Observation(images=images, instruction=self.task.instruction if self.task else "", state=state, timestamp=cell.time)

    def expert(self, **kw: Any):
        """A scripted expert for the current task (privileged state); see :mod:`embeval.sim.expert`."""
        from embeval.sim.expert import ScriptedExpert

        return ScriptedExpert(self, **kw)

    def final_tcp_pose(self) -> np.ndarray:
        return self.cell.tcp_pose()
