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

Vectorised episodes (``backend: {num_envs: 4}``, :mod:`embeval.sim.vector`): each call of the backend hands the
runner a batch of ``max(batch_size, 4 x num_envs)`` units of one subject; their episodes (one clean reference per
episode seed in the batch, one distorted episode per distorted unit) run on ``num_envs`` environments in worker
processes kept for the subject's later batches, the policy asked ONCE per step for every environment waiting for an
action (continuous batching over all the batch's episodes). Same seeds, same episodes: for a deterministic policy
every unit's outputs equal the ``num_envs: 1`` run's; ``exact: true`` asks the policy through its batch-1 path per
environment (bit for bit also for policies with their own batched forward, whose float rounding depends on the batch
size). The watchdog covers a batch (``unit_timeout_s`` x its units; on a timeout the workers are stopped and the
units rerun one at a time); videos are written by the workers (references first, then the distorted episodes, so
each video is captioned with its unit's scores).
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

from embeval.errors import ConfigError, EmbevalError
from embeval.runs.registry import Evaluator, EvaluatorParams, ReportSection
from embeval.runs.units import one_reference_unit
from embeval.scoring.record import EpisodeRecord

#: spec.sim.max_steps: control steps of one episode (a ManiSkill task's own limit is 50..200)
MAX_EPISODE_STEPS = 100_000


@dataclass(frozen=True)
class SimIQAParams(EvaluatorParams):
    """``spec.params`` of ``sim-iqa``: ``keep_actions`` writes each distorted episode's actions into its outputs."""

    keep_actions: bool = False

    @classmethod
    def parse(cls, params: dict[str, Any]) -> SimIQAParams:
        from embeval.checks import flag

        if "keep_actions" in params:
            flag(params["keep_actions"], "spec.params.keep_actions")
        return cls(**params)


def episode_seed(item: str) -> int:
    """``item00003`` / ``3`` / ``seed3`` -> 3 (the env's reset seed)."""
    m = re.search(r"(\d+)$", item)
    if not m:
        raise ConfigError(f"sim-iqa item {item!r} must end in the episode seed (e.g. item00003 or 3)")
    return int(m.group(1))


class _Expert:
    """The backend's scripted expert as a policy (re-planned at every reset); ``episodes``: its EpisodeEnv."""

    id = "sim-expert"

    def __init__(self, episodes=None):
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


def _caption(out: dict[str, Any]) -> str:
    """A unit video's outcome line, from the unit's outputs."""
    return f"Decision {out['decision']:.2f}, Execution {out['execution']:.1f}"


def _outputs(spec, seed: int, ref, dis, keep: bool) -> dict[str, Any]:
    """A unit's outputs from its clean reference run and its distorted run (the same run for distortion none)."""
    from embeval.sim.backends import score_runs

    out = score_runs(ref, dis).to_dict()
    out.update({"episode_seed": seed, "task": spec.sim.get("env", ""),
                "reference_first_action": ref.first_action.vector.tolist(),
                "distorted_first_action": dis.first_action.vector.tolist()})
    if keep:
        out["distorted_actions"] = dis.actions
    return out


@dataclass(frozen=True)
class _Episode:
    """One episode of a vectorised batch: the env seed, the distortion (name, level, seed; None: the clean
    reference), ``video``: (unit video name, the unit's index on its runner) or None, ``reference``: the clean
    :class:`~embeval.scoring.record.EpisodeRecord` (no images) of the same seed when the video's caption needs the unit's scores (None: scored against itself)."""

    seed: int
    distortion: tuple[str, int, int] | None
    video: tuple[str, int] | None = None
    reference: EpisodeRecord | None = None


@dataclass(frozen=True)
class SimIQATask:
    """The :class:`~embeval.sim.vector.EpisodeTask` of sim-iqa units (pickled to the environment workers): the spec's
    ``sim`` mapping, whether runs keep their actions, ``expert``: the backend's scripted expert runs in the worker
    (subject adapter ``sim_expert``), ``videos``: (VideoPolicy, folder) of the unit videos (None: none)."""

    sim: dict
    keep_actions: bool = False
    expert: bool = False
    videos: tuple[Any, str] | None = None

    def make_env(self):
        import sys

        from embeval.sim.backends import make_episode_env

        env = make_episode_env(self.sim)
        if "torch" in sys.modules:  # ManiSkill's tensors: one thread per environment (the workers share the cores)
            sys.modules["torch"].set_num_threads(1)
        return env

    def local_policy(self, env):
        return _Expert(env) if self.expert else None

    def run(self, env, policy, unit: _Episode) -> EpisodeRecord:
        from embeval.recording.video import EpisodeRecorder, maybe_episode
        from embeval.sim.backends import run_episode, score_runs

        recorder = EpisodeRecorder(self.videos[0], self.videos[1]) if self.videos and unit.video else None
        name, index = unit.video or ("", None)
        with maybe_episode(recorder, name, index) as video:
            run = run_episode(env, policy, unit.seed, unit.distortion, keep_actions=self.keep_actions)
            if video is not None:
                video.finish(run.outcome.success, _caption(score_runs(unit.reference or run, run).to_dict()))
        return run.without_images()  # what crosses back to the driver

    def close(self, env) -> None:
        env.close()

    def describe(self, unit: _Episode) -> str:
        d = unit.distortion
        return f"episode seed {unit.seed} ({f'{d[0]} level {d[1]}' if d else 'clean reference'})"


class SimIQAEvaluator(Evaluator):
    subject_kinds = ("policy",)
    records_video = True  # spec.record_video: each unit's distorted episode (reference | distorted view)
    vectorises = True  # backend.num_envs > 1: batches of units run as vectorised episodes (run_batch)
    params_type = SimIQAParams

    def validate(self, spec) -> None:
        from embeval import distortion
        from embeval.sim.backends import SimSpec

        if not spec.sim:
            raise ConfigError("spec.sim: evaluator 'sim-iqa' needs a simulator, e.g. sim: {backend: maniskill, env: PickCube-v1}")
        SimSpec.from_dict(spec.sim, "spec.sim")
        steps = spec.sim.get("max_steps")
        if steps is not None:
            from embeval import checks

            checks.integer(steps, "spec.sim.max_steps", 1, MAX_EPISODE_STEPS, why="steps of one episode",
                           fix="or null for the task's own limit")
        for i, name in enumerate(spec.distortions):
            if name != "none":
                distortion.get(name)
                for level in spec.levels:
                    if not 1 <= level <= distortion.N_LEVELS:
                        raise ConfigError(f"spec.levels: distortion levels run 1..{distortion.N_LEVELS}, got {level}")
        for it in self.items(spec):
            episode_seed(it)
        b = spec.backend
        if b.exact and b.model_actor:
            raise ConfigError("spec.backend.exact: the model actor answers every environment itself (model_actor: true); "
                              "remove exact, or model_actor to ask a local policy one environment at a time")

    def validate_subject(self, spec, index, subject) -> None:
        if subject.adapter == "sim_expert":
            return
        super().validate_subject(spec, index, subject)

    def units(self, spec):
        return one_reference_unit(super().units(spec))

    def setup(self, spec, subject) -> dict[str, Any]:
        try:
            import torch

            torch.set_num_threads(1)
        except ImportError:  # pragma: no cover
            pass
        policy = _Expert() if subject.adapter == "sim_expert" else Evaluator.setup(self, spec, subject)
        # env: built on the first unit run here (a vectorised batch runs its episodes in the pool's workers)
        return {"env": None, "policy": policy, "refs": {}, "pool": None, "slots": None}

    def teardown(self, state) -> None:
        self.abandon(state)
        if state["env"] is not None:
            state["env"].close()
        super().teardown(state.get("policy"))

    def abandon(self, state) -> None:
        """Stop the environment workers (the watchdog gave up on a batch: its call then ends with an error)."""
        pool, state["pool"], state["abandoned"] = state.get("pool"), None, True
        if pool is not None:
            pool.close()

    @staticmethod
    def _env(spec, state):
        """The in-process environment (built once)."""
        from embeval.sim.backends import make_episode_env

        if state["env"] is None:
            state["env"] = make_episode_env(spec.sim)
            if isinstance(state["policy"], _Expert):
                state["policy"].episodes = state["env"]
        return state["env"]

    @staticmethod
    def _distortion(unit, unit_seed: int) -> tuple[str, int, int] | None:
        return None if unit.distortion == "none" else (unit.distortion, int(unit.level), int(unit_seed))

    def run_unit(self, spec, state, unit, unit_seed) -> dict[str, Any]:
        from embeval.runs.execute import unit_episode
        from embeval.sim.backends import run_episode

        seed = episode_seed(unit.item)
        env, policy = self._env(spec, state), state["policy"]
        keep = self.params(spec).keep_actions
        dist = self._distortion(unit, unit_seed)
        # record_video: the unit's own episode (the distorted one; the clean one for distortion none, when run here)
        with contextlib.ExitStack() as stack:
            video = stack.enter_context(unit_episode(unit)) if dist is None else None
            if seed not in state["refs"]:
                state["refs"] = {seed: run_episode(env, policy, seed, None, keep_actions=keep)}  # one episode kept per worker
            ref = state["refs"][seed]
            if dist is not None:
                video = stack.enter_context(unit_episode(unit))
            dis = run_episode(env, policy, seed, dist, keep_actions=keep) if dist is not None else ref
            out = _outputs(spec, seed, ref, dis, keep)
            if video is not None:
                video.finish(dis.outcome.success, _caption(out))
        return out

    def run_batch(self, spec, state, units, unit_seeds) -> list[dict[str, Any]]:
        """The batch's episodes on ``backend.num_envs`` environments (module docstring); one at a time with num_envs 1."""
        from embeval.runs.execute import unit_recorder, unit_video_name, vectorised

        if not vectorised(self, spec.backend):
            return super().run_batch(spec, state, units, unit_seeds)
        keep = self.params(spec).keep_actions
        seeds = [episode_seed(u.item) for u in units]
        dists = [self._distortion(u, s) for u, s in zip(units, unit_seeds)]
        recorder = unit_recorder()
        videos: list[tuple[str, int] | None] = [None] * len(units)
        if recorder is not None:  # each unit's place on this runner, as unit_episode would count it
            videos = [(unit_video_name(u), recorder.count + i) for i, u in enumerate(units)]
            recorder.count += len(units)
        clean_video = {s: v for s, d, v in zip(seeds, dists, videos) if d is None and v}  # a "none" unit's own episode
        ref_of = {s: r for s, r in state["refs"].items() if s in seeds and s not in clean_video}  # the previous batch's
        refs = [_Episode(s, None, clean_video.get(s)) for s in dict.fromkeys(seeds) if s not in ref_of]
        distorted = [(i, _Episode(s, d, videos[i])) for i, (s, d) in enumerate(zip(seeds, dists)) if d is not None]
        if recorder is None:  # one pass: references and distorted episodes side by side
            runs = self._episodes(spec, state, recorder, refs + [e for _, e in distorted])
            ref_of.update(zip((e.seed for e in refs), runs))
            dis_of = dict(zip((i for i, _ in distorted), runs[len(refs):]))
        else:  # references first: a distorted episode's worker captions its video with the unit's scores
            ref_of.update(zip((e.seed for e in refs), self._episodes(spec, state, recorder, refs)))
            dis_eps = [(i, _Episode(e.seed, e.distortion, e.video, ref_of[e.seed])) for i, e in distorted]
            dis_of = dict(zip((i for i, _ in dis_eps), self._episodes(spec, state, recorder, [e for _, e in dis_eps])))
        state["refs"] = {seeds[-1]: ref_of[seeds[-1]]}  # as after the sequential run of these units
        return [_outputs(spec, s, ref_of[s], dis_of.get(i, ref_of[s]), keep) for i, s in enumerate(seeds)]

    def _episodes(self, spec, state, recorder, episodes: list[_Episode]) -> list[EpisodeRecord]:
        """``episodes`` on the subject's environment workers (started on the first batch, kept for the next)."""
        from embeval.sim.vector import VectorPool
        from embeval.subjects.protocols import LoopSlots, batched

        if not episodes:
            return []
        b, policy = spec.backend, state["policy"]
        expert = isinstance(policy, _Expert)
        if state.get("abandoned"):  # the watchdog gave up on this call: start no workers for it
            raise EmbevalError("sim-iqa: this batch was abandoned by the watchdog (unit_timeout_s); its units run again")
        if state["pool"] is None:
            task = SimIQATask(dict(spec.sim), self.params(spec).keep_actions, expert,
                              (recorder.policy, str(recorder.out_dir)) if recorder is not None else None)
            state["pool"] = VectorPool(task, b.num_envs, option="spec.backend.num_envs")
        if state["slots"] is None and not expert:
            state["slots"] = LoopSlots(policy) if b.exact else batched(policy)
        out: list[EpisodeRecord] = [None] * len(episodes)  # type: ignore[list-item]
        for i, run in state["pool"].run(None if expert else state["slots"], episodes):
            out[i] = run
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
