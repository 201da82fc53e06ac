"""embeval's benchmarks as vla-evaluation-harness ``StepBenchmark``s (import strings for a vla-eval config).

``embeval.vla_eval_benchmarks:Act2AnswerBenchmark`` runs Act2Answer items (params ``categories``, ``per_category``,
``seed``, ``max_steps``, ``width``, ``height``; each item in its ``original`` and ``swapped`` layout is one task)
with embeval's own episode (:func:`embeval.act2answer.episode.run_episode`): the harness does not step a copy of the
episode, it answers the observations embeval's episode asks for. The episode runs in a worker thread with a
*bridge* policy whose ``act`` hands the observation to the harness and waits for the model server's action, so
termination, scoring and every outcome field are embeval's (passed through as they come, ``success``: zone
``correct``). Observations: ``images`` (camera -> HWC uint8), ``task_description``, ``states`` (name -> array);
actions: embeval's 7 numbers (``[dx dy dz] m, [droll dpitch dyaw] rad, gripper 1 = open``).

``embeval.vla_eval_benchmarks:DistortedCameraBenchmark`` is Embodied-IQA's distorted-camera unit (params ``env``,
``distortion``, ``level``, ``seeds``, ``max_steps``, ``width``, ``height``; one task per seed): embeval's
:func:`embeval.sim.backends.score_episode` runs the clean reference episode, then the same seeded episode with the
cameras distorted, both answered by the model server within the one task (the server sees one instruction, so a
stateful server is not reset between them), and the result carries Decision and Execution (``success``: the
distorted episode's task success).

``embeval.vla_eval_benchmarks:SceneShiftBenchmark`` is the scene-perturbation unit (params ``env``, ``axis``,
``level``, ``seeds``, ``max_steps``, ``width``, ``height``; one task per seed; axes: ``embeval perturb list``):
:func:`embeval.sim.perturb.score.score_seed` runs the seed's unperturbed reference episode, then the same seed with
the world changed (camera pose, lights, textures, distractors, initial state, instruction, ...), both answered by the
model server within the one task; the result carries Decision, Execution and what the axis drew (``perturbation``;
``success``: the perturbed episode's task success).
"""
from __future__ import annotations

import queue
import tempfile
import threading
from typing import Any

import numpy as np

from embeval.action import Action

#: seconds the episode thread waits for the harness's next action
ACTION_TIMEOUT_S = 300.0


class _Stop(Exception):
    """The harness ended the episode before embeval's episode did."""


class _BridgePolicy:
    """A Policy whose ``act`` hands the observation out and returns the action handed back."""

    id = "vla-eval-model-server"

    def __init__(self):
        from embeval.action import ActionSpec

        self.action_spec = ActionSpec()
        self.out: queue.Queue = queue.Queue(maxsize=1)
        self.back: queue.Queue = queue.Queue(maxsize=1)

    def reset(self, instruction: str) -> None:
        pass

    def act(self, observation) -> Action:
        self.out.put(("obs", observation))
        action = self.back.get(timeout=ACTION_TIMEOUT_S)
        if action is None:
            raise _Stop()
        return action


class EpisodeBridge:
    """``run(policy)`` (an embeval episode function) in a thread, stepped from outside: :meth:`start` returns the
    first observation, :meth:`step` the next one, or ``("done", result)`` when the episode ended."""

    def __init__(self, run):
        self.policy = _BridgePolicy()
        self._run = run
        self.thread: threading.Thread | None = None

    def _main(self) -> None:
        try:
            self.policy.out.put(("done", self._run(self.policy)))
        except _Stop:
            pass
        except Exception as exc:  # the harness sees it on its next step
            self.policy.out.put(("error", exc))

    def _next(self):
        kind, value = self.policy.out.get(timeout=ACTION_TIMEOUT_S)
        if kind == "error":
            raise value
        return kind, value

    def start(self):
        self.thread = threading.Thread(target=self._main, daemon=True, name="embeval-episode")
        self.thread.start()
        return self._next()

    def step(self, action: Action):
        self.policy.back.put(action)
        return self._next()

    def stop(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            try:
                self.policy.back.put_nowait(None)
            except queue.Full:
                pass
            self.thread.join(10)


def _harness_obs(obs) -> dict[str, Any]:
    return {"images": dict(obs.images), "task_description": obs.instruction,
            "states": {k: np.asarray(v, dtype=np.float64) for k, v in obs.state.items()}}


def _embeval_action(action: Any) -> Action:
    arr = np.asarray(action.get("actions") if isinstance(action, dict) else action, dtype=np.float64)
    arr = arr[0] if arr.ndim == 2 else arr
    if arr.shape != (7,) or not np.all(np.isfinite(arr)):
        from embeval.errors import InvalidInputError

        raise InvalidInputError(f"the model server's action must be 7 finite numbers (embeval's), got shape {arr.shape}")
    return Action(arr)


def _benchmark_base():
    from vla_eval.benchmarks.base import StepBenchmark

    return StepBenchmark


class Act2AnswerBenchmark(_benchmark_base()):
    """Act2Answer items as vla-eval tasks (module docstring)."""

    def __init__(self, categories: list[str] | None = None, per_category: int = 1, seed: int = 0, max_steps: int = 60,
                 width: int = 128, height: int = 96):
        super().__init__()
        from embeval.act2answer.episode import sim_config
        from embeval.act2answer.generator import generate_items
        from embeval.act2answer.scene import EpisodeSpec
        from embeval.sim import SimEnv

        self._dir = tempfile.TemporaryDirectory(prefix="embeval-a2a-")
        self.items = generate_items(self._dir.name, list(categories or ["color"]), per_category=per_category, seed=seed)
        self.spec = EpisodeSpec(max_steps=max_steps)
        self.env = SimEnv(sim_config(width, height))
        self.bridge: EpisodeBridge | None = None
        self._last_obs = None

    def get_tasks(self) -> list[dict[str, Any]]:
        return [{"name": f"{it.id}:{layout}", "item": i, "layout": layout, "seed": i}
                for i, it in enumerate(self.items) for layout in ("original", "swapped")]

    def reset(self, task):
        from embeval.act2answer.episode import run_episode

        if self.bridge is not None:
            self.bridge.stop()
        item, layout, seed = self.items[int(task["item"])], task["layout"], int(task["seed"])
        self.bridge = EpisodeBridge(lambda pol: run_episode(self.env, pol, item, layout, self.spec, seed=seed))
        kind, value = self.bridge.start()
        self._last_obs = value
        return value

    def step(self, action):
        from vla_eval.benchmarks.base import StepResult

        kind, value = self.bridge.step(_embeval_action(action))
        if kind == "done":
            return StepResult(obs=self._last_obs, reward=0.0, done=True, info={"outcome": value.to_dict()})
        self._last_obs = value
        return StepResult(obs=value, reward=0.0, done=False, info={})

    def make_obs(self, raw_obs, task):
        return _harness_obs(raw_obs)

    def get_step_result(self, step_result) -> dict[str, Any]:
        outcome = {k: v for k, v in step_result.info.get("outcome", {}).items() if k != "actions"}
        return {"success": outcome.get("zone") == "correct", **outcome}

    def get_metadata(self) -> dict[str, Any]:
        return {"max_steps": self.spec.max_steps}

    def cleanup(self) -> None:
        if self.bridge is not None:
            self.bridge.stop()
        self.env.close()
        self._dir.cleanup()


class _PairedEpisodeBenchmark(_benchmark_base()):
    """A pybullet cell unit scored as a (reference, changed) pair of seeded episodes within one task; subclasses
    name the change (:meth:`_unit`, :meth:`_label`, :meth:`_change`)."""

    def __init__(self, cfg):
        super().__init__()
        from embeval.evaluate import cell_env

        self.cfg = cfg  # an embeval.evaluate.PairedConfig (checked there)
        self.seeds, self.max_steps = list(cfg.seeds), cfg.max_steps
        self.env = cell_env(cfg)
        self.bridge: EpisodeBridge | None = None
        self._last_obs = None

    def _label(self) -> str:
        raise NotImplementedError

    def _change(self) -> dict[str, Any]:
        raise NotImplementedError

    def _unit(self, policy, seed: int) -> dict[str, Any]:
        """Both episodes of ``seed`` answered by ``policy``; the scored result as plain data."""
        raise NotImplementedError

    def get_tasks(self) -> list[dict[str, Any]]:
        return [{"name": f"seed{s}:{self._label()}", "seed": s} for s in self.seeds]

    def reset(self, task):
        if self.bridge is not None:
            self.bridge.stop()
        seed = int(task["seed"])
        self.bridge = EpisodeBridge(lambda pol: self._unit(pol, seed))
        self._last_obs = self.bridge.start()[1]
        return self._last_obs

    def step(self, action):
        from vla_eval.benchmarks.base import StepResult

        kind, value = self.bridge.step(_embeval_action(action))
        if kind == "done":
            return StepResult(obs=self._last_obs, reward=0.0, done=True, info={"outcome": value})
        self._last_obs = value
        return StepResult(obs=value, reward=0.0, done=False, info={})

    make_obs = Act2AnswerBenchmark.make_obs

    def get_step_result(self, step_result) -> dict[str, Any]:
        score = step_result.info.get("outcome", {})
        return {**score, **self._change(), "success": bool(score.get("success", False))}

    def get_metric_keys(self) -> dict[str, str]:
        return {"success": "mean", "decision": "mean", "execution": "mean"}

    def get_metadata(self) -> dict[str, Any]:
        return {"max_steps": 2 * self.max_steps + 2}

    def cleanup(self) -> None:
        if self.bridge is not None:
            self.bridge.stop()
        self.env.close()


class DistortedCameraBenchmark(_PairedEpisodeBenchmark):
    """Embodied-IQA distorted-camera units as vla-eval tasks (module docstring)."""

    def __init__(self, env: str = "Pick", distortion: str = "white_noise", level: int = 3, seeds: list[int] | None = None,
                 max_steps: int = 20, width: int = 64, height: int = 48, distortion_seed: int = 0):
        from embeval.evaluate import DistortedCameraConfig

        cfg = DistortedCameraConfig(env=env, seeds=(1,) if seeds is None else seeds, max_steps=int(max_steps),
                                    width=int(width), height=int(height), distortion=str(distortion), level=int(level),
                                    distortion_seed=int(distortion_seed))
        self.distortion, self.level, self.distortion_seed = cfg.distortion, cfg.level, cfg.distortion_seed
        super().__init__(cfg)

    def _label(self) -> str:
        return f"{self.distortion}{self.level}"

    def _change(self) -> dict[str, Any]:
        return {"distortion": self.distortion, "level": self.level}

    def _unit(self, policy, seed: int) -> dict[str, Any]:
        from embeval.evaluate import distorted_camera_unit

        _, row = distorted_camera_unit(self.env, policy, self.cfg, seed)
        return {k: v for k, v in row.items() if k not in ("seed", "distortion", "level")}


class SceneShiftBenchmark(_PairedEpisodeBenchmark):
    """Scene-perturbation units as vla-eval tasks (module docstring)."""

    def __init__(self, env: str = "Pick", axis: str = "camera_pose", level: int = 3, seeds: list[int] | None = None,
                 max_steps: int = 20, width: int = 64, height: int = 48):
        from embeval.evaluate import SceneShiftConfig

        cfg = SceneShiftConfig(env=env, seeds=(1,) if seeds is None else seeds, max_steps=int(max_steps),
                               width=int(width), height=int(height), axis=str(axis), level=int(level))
        self.axis, self.level = cfg.axis, cfg.level
        super().__init__(cfg)

    def _label(self) -> str:
        return f"{self.axis}{self.level}"

    def _change(self) -> dict[str, Any]:
        return {"axis": self.axis, "level": self.level}

    def _unit(self, policy, seed: int) -> dict[str, Any]:
        from embeval.evaluate import scene_shift_unit

        _, row = scene_shift_unit(self.env, policy, self.cfg, seed)
        return {k: row[k] for k in ("decision", "execution", "reference_success", "success", "perturbation")}
