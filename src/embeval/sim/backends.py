"""Closed-loop episodes on any simulator backend, and their Embodied-IQA scoring.

A :class:`SimSpec` (the ``sim:`` mapping of a run spec) names a backend (:mod:`embeval.sim.backend`: one folder
each) and a task::

    sim: {backend: maniskill, env: PickCube-v1, width: 64, height: 64, aliases: {third_person: base_camera}}
    sim: {backend: pybullet, env: Pick}            # the UR5 cell's verbs (embeval.sim.tasks)

:func:`make_episode_env` builds an :class:`EpisodeEnv`: ``reset(seed, distortion)`` -> Observation,
``step(action)`` -> StepResult, ``done``, ``outcome()`` -> ExecutionOutcome. A distortion
``(name, level, seed)`` is applied to every camera image the policy sees, frame ``i`` of camera ``c``
seeded with :func:`embeval.distortion.frame_seed` ``(seed, c, i, name, level)`` (the same rule as the
ROS distortion node and recorded streams).

Scoring one (episode seed, distortion) with a policy (:func:`score_episode`):

- Decision: the policy's first action on the clean first observation vs on the distorted one
  (:func:`embeval.scoring.decision.decision_score`, one task, 0..1), in the per-pair form: one episode
  cannot see the corpus that the paper's min-max normalisation needs (a single pair would always score 1);
  rescore the stored actions over the whole corpus with ``normalisation="corpus"``;
- Execution: the closed-loop episode on clean images (reference) vs on distorted images, both from
  the same seeded start: 100 if the distorted run succeeds (the env's own success), 0 after a
  protective stop, else ``100 - d`` with ``d`` the distance (cm) between the final TCP positions
  (:func:`embeval.scoring.execution.execution_score`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embeval.action import Action
from embeval.config import check_keys
from embeval.errors import ConfigError
from embeval.image_io import MAX_IMAGE_SIDE
from embeval.scoring.decision import OUTPUTS as DECISION_OUTPUTS, DecisionConfig, decision_corpus
from embeval.scoring.execution import ExecutionOutcome, ExecutionRecord, execution_score
from embeval.scoring.record import EpisodeRecord
from embeval.sim.backend import SIM_BACKENDS, get_sim_backend
from embeval.sim.episode_env import EpisodeEnv
from embeval.sim.rollout import rollout


@dataclass(frozen=True)
class SimSpec:
    backend: str = "maniskill"  # a name in embeval.sim.backend.SIM_BACKENDS
    env: str = "PickCube-v1"  # ManiSkill env id, a pybullet verb (Pick, Push, ...) or LIBERO SUITE:TASK_ID
    width: int = 64  # camera image size, pixels
    height: int = 64
    aliases: dict[str, str] = field(default_factory=dict)  # extra image key -> camera name
    max_steps: int | None = None  # None: the task's own limit
    render: bool = True
    options: dict[str, Any] = field(default_factory=dict)  # backend-specific (libero: {render_mode: fast})

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, where: str = "sim") -> SimSpec:
        d = dict(d or {})
        check_keys(d, cls.__dataclass_fields__, where)
        if d.get("backend", "maniskill") not in SIM_BACKENDS:
            raise ConfigError(f"{where}.backend: {d.get('backend')!r} is not a simulator backend; choose from "
                              f"{', '.join(SIM_BACKENDS.names())}")
        for k in ("width", "height"):
            v = d.get(k, 64)
            if isinstance(v, bool) or not isinstance(v, int) or not 16 <= v <= MAX_IMAGE_SIDE:
                raise ConfigError(f"{where}.{k}: an integer number of pixels in 16..{MAX_IMAGE_SIDE}, got {v!r}")
        if not isinstance(d.get("aliases", {}), dict):
            raise ConfigError(f"{where}.aliases: a mapping of image key -> camera name")
        return cls(**d)


def make_episode_env(spec: SimSpec | dict) -> EpisodeEnv:
    """The episode env of ``spec``'s backend (:data:`embeval.sim.backend.SIM_BACKENDS`)."""
    spec = spec if isinstance(spec, SimSpec) else SimSpec.from_dict(spec)
    return get_sim_backend(spec.backend).make(spec)


def run_episode(env: EpisodeEnv, policy, seed: int, distortion: tuple[str, int, int] | None = None,
                keep_actions: bool = False) -> EpisodeRecord:
    """One closed-loop episode of ``policy`` (``reset(instruction)``, ``act(obs)``) until the env is done: its
    record, with the first observation, its clean images and the first action in memory. Under an open episode
    video (:mod:`embeval.recording.video`) every step is recorded: the policy's view, beside its clean reference
    under a distortion."""
    obs = env.reset(seed, distortion)
    first, clean = obs, dict(getattr(env, "clean_images", {}) or {})
    policy.reset(env.instruction)
    # clean: the undistorted images of the current observation (None: no distortion, the same images)
    r = rollout(env, policy, obs, keep_actions=keep_actions,
                clean=(lambda: getattr(env, "clean_images", None)) if distortion else None)
    name, level = (distortion[0], int(distortion[1])) if distortion else ("none", 0)
    return EpisodeRecord.from_outcome(env.outcome(r.steps), distortion=name, level=level, instruction=env.instruction,
                                      subject=str(getattr(policy, "id", "")), seed=int(seed), actions=r.actions,
                                      first_observation=first, first_clean_images=clean,
                                      first_action=r.first_action or Action.hold())


def execute_actions(env: EpisodeEnv, seed: int, actions) -> ExecutionOutcome:
    """Reset to the seeded start and execute ``actions`` (7-DoF, frame base) open-loop; the outcome after the last."""
    acts = [a if isinstance(a, Action) else Action(np.asarray(a, dtype=np.float64)) for a in actions]
    env.reset(seed, None)
    for a in acts:
        env.step(a)
    return env.outcome(len(acts))


@dataclass
class EpisodeScore:
    decision: float  # 0..1 (one task)
    position: float
    rotation: float
    state: float
    execution: ExecutionRecord

    def to_dict(self) -> dict[str, Any]:
        e = self.execution
        return {**{k: getattr(self, k) for k in DECISION_OUTPUTS}, "execution": e.score, "reason": e.reason, "distance_cm": e.distance_cm,
                "reference_success": e.reference.success, "distorted_success": e.distorted.success,
                "reference_tcp": list(e.reference.final_tcp_pose), "distorted_tcp": list(e.distorted.final_tcp_pose),
                "reference_steps": e.reference.n_actions, "distorted_steps": e.distorted.n_actions}


def score_episode(env: EpisodeEnv, policy, seed: int, distortion: tuple[str, int, int] | None,
                  reference: EpisodeRecord | None = None) -> tuple[EpisodeScore, EpisodeRecord, EpisodeRecord]:
    """Decision and Execution of one seeded episode under ``distortion`` (see module docstring).
    Pass ``reference`` to reuse the clean run across distortions."""
    ref = reference or run_episode(env, policy, seed, None)
    dis = run_episode(env, policy, seed, distortion) if distortion else ref
    return score_runs(ref, dis), ref, dis


def score_runs(ref: EpisodeRecord, dis: EpisodeRecord) -> EpisodeScore:
    """Decision and Execution of the distorted run ``dis`` against its clean reference ``ref`` (records with their
    ``first_action``, e.g. what an environment worker sent back)."""
    # Decision on the first frame: each episode's first action, taken right after policy.reset on the
    # clean resp. distorted first frame (the same policy state for both)
    d = decision_corpus([([ref.first_action], [dis.first_action])], DecisionConfig(normalisation="per_pair"))[0]
    return EpisodeScore(**d.outputs(), execution=execution_score(ref.outcome, dis.outcome))
