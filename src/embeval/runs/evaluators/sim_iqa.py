"""``sim-iqa``: Embodied-IQA Decision and Execution of policies in closed-loop simulated episodes.

Spec (``config/runs/maniskill-iqa.yaml``)::

    evaluator: sim-iqa
    sim: {backend: maniskill, env: PickCube-v1, width: 64, height: 64, aliases: {third_person: base_camera}}
    subjects: [{id: tiny-vla, kind: policy, adapter: embedded, path: tiny-vla}]
    items: {source: synthetic, count: 4}      # episodes: item i is the env's seed i
    distortions: [none, white_noise, gaussian_blur]
    levels: [1, 3]

Each unit (subject x episode x distortion x level x seed) runs the policy's episode with the distortion
applied to every camera frame (seeded per frame with the unit seed) and scores it against the clean
episode of the same seed (run once per subject and episode, kept in the worker): Decision on the first
frame (0..1) and Execution (0..100), see :mod:`embeval.sim.backends`. The subject adapter
``sim_expert`` is the backend's privileged scripted expert (ManiSkill; it ignores the images, so it is
the reference point: Decision 1, Execution 100). Units of one subject and episode share a shard.
``record_video: failures`` (or all, N) in the spec writes each unit's distorted episode as
``RUN/videos/<subject>_<item>_<distortion><level>_seed<seed>.mp4``, the clean view beside the distorted one
(kept under ``failures`` when the distorted episode did not succeed).
"""
from __future__ import annotations

import contextlib
import re
from typing import Any

from embeval.errors import ConfigError
from embeval.runs.registry import Evaluator, ReportSection
from embeval.runs.units import one_reference_unit

_PARAMS = ("keep_actions",)
#: spec.sim.max_steps: control steps of one episode (a ManiSkill task's own limit is 50..200)
MAX_EPISODE_STEPS = 100_000


def episode_seed(item: str) -> int:
    """``item00003`` / ``3`` / ``seed3`` -> 3 (the env's reset seed)."""
    m = re.search(r"(\d+)$", item)
    if not m:
        raise ConfigError(f"sim-iqa item {item!r} must end in the episode seed (e.g. item00003 or 3)")
    return int(m.group(1))


class _Expert:
    """The backend's scripted expert as a policy (re-planned at every reset)."""

    id = "sim-expert"

    def __init__(self, episodes):
        from embeval.action import ActionSpec

        self.episodes, self.inner = episodes, None
        self.action_spec = ActionSpec(frame="base")

    def reset(self, instruction: str) -> None:
        env = getattr(self.episodes, "env", None)
        if not hasattr(env, "expert"):
            raise ConfigError("subject adapter 'sim_expert' needs a backend with a scripted expert (maniskill, pybullet)")
        self.inner = env.expert()

    def act(self, obs):
        return self.inner.act(obs)


class SimIQAEvaluator(Evaluator):
    subject_kinds = ("policy",)
    records_video = True  # spec.record_video: each unit's distorted episode (reference | distorted view)

    def validate(self, spec) -> None:
        from embeval import distortion
        from embeval.sim.backends import SimSpec

        if not spec.sim:
            raise ConfigError("spec.sim: evaluator 'sim-iqa' needs a simulator, e.g. sim: {backend: maniskill, env: PickCube-v1}")
        SimSpec.from_dict(spec.sim, "spec.sim")
        steps = spec.sim.get("max_steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_EPISODE_STEPS):
            raise ConfigError(f"spec.sim.max_steps: must be an integer in 1..{MAX_EPISODE_STEPS} (steps of one episode), "
                              f"or null for the task's own limit; got {steps!r}")
        for k in spec.params:
            if k not in _PARAMS:
                raise ConfigError(f"spec.params.{k}: unknown parameter of evaluator 'sim-iqa'; allowed: {', '.join(_PARAMS)}")
        for i, name in enumerate(spec.distortions):
            if name != "none":
                distortion.get(name)
                for level in spec.levels:
                    if not 1 <= level <= distortion.N_LEVELS:
                        raise ConfigError(f"spec.levels: distortion levels run 1..{distortion.N_LEVELS}, got {level}")
        for it in self.items(spec):
            episode_seed(it)

    def validate_subject(self, spec, index, subject) -> None:
        if subject.adapter == "sim_expert":
            return
        super().validate_subject(spec, index, subject)

    def units(self, spec):
        return one_reference_unit(super().units(spec))

    def setup(self, spec, subject) -> dict[str, Any]:
        from embeval.sim.backends import make_episode_env

        try:
            import torch

            torch.set_num_threads(1)
        except ImportError:  # pragma: no cover
            pass
        env = make_episode_env(spec.sim)
        policy = _Expert(env) if subject.adapter == "sim_expert" else Evaluator.setup(self, spec, subject)
        return {"env": env, "policy": policy, "refs": {}}

    def teardown(self, state) -> None:
        state["env"].close()
        super().teardown(state.get("policy"))

    def run_unit(self, spec, state, unit, unit_seed) -> dict[str, Any]:
        from embeval.runs.execute import unit_episode
        from embeval.sim.backends import run_episode, score_episode

        seed = episode_seed(unit.item)
        env, policy = state["env"], state["policy"]
        keep = bool(spec.params.get("keep_actions", False))
        dist = None if unit.distortion == "none" else (unit.distortion, int(unit.level), int(unit_seed))
        # record_video: the unit's own episode (the distorted one; the clean one for distortion none, when run here)
        with contextlib.ExitStack() as stack:
            video = stack.enter_context(unit_episode(unit)) if dist is None else None
            if seed not in state["refs"]:
                state["refs"] = {seed: run_episode(env, policy, seed, None, keep_actions=keep)}  # one episode kept per worker
            if dist is not None:
                video = stack.enter_context(unit_episode(unit))
            score, ref, dis = score_episode(env, policy, seed, dist, reference=state["refs"][seed])
            if video is not None:
                video.finish(dis.outcome.success, f"Decision {score.decision:.2f}, Execution {score.execution.score:.1f}")
        out = score.to_dict()
        out.update({"episode_seed": seed, "task": spec.sim.get("env", ""),
                    "reference_first_action": ref.first_action.vector.tolist(),
                    "distorted_first_action": dis.first_action.vector.tolist()})
        if keep:
            out["distorted_actions"] = dis.actions
        return out

    def report_sections(self, spec, frame, stamp):
        if frame.empty or "out.execution" not in frame:
            return []
        cols = ["decision", "execution", "distance_cm", "distorted_success"]
        t = frame.groupby(["subject", "distortion", "level"])[[f"out.{c}" for c in cols]].mean().reset_index()
        t.columns = ["subject", "distortion", "level"] + cols
        return [ReportSection(f"Decision and Execution in {spec.sim.get('backend')} {spec.sim.get('env')}",
                              html=t.to_html(index=False, float_format="%.3f"),
                              caption="Decision 0..1 (first frame), Execution 0..100 (closed-loop episode vs the clean one); "
                                      "mean over episodes and seeds.")]
