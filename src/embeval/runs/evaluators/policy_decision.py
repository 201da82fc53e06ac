"""``policy-decision``: the Embodied-IQA decision score of policies under image distortion.

For every policy subject x item (a reference image, see :mod:`._images`) x distortion x level x
seed, the policy is reset with each task instruction and acts once on the reference image and
once on the distorted image (camera ``params.camera``); the two 7-DoF actions per task are
compared by :mod:`embeval.scoring.decision` (position, rotation, state parts, each 0..1 per task,
summed over the tasks). Outputs keep both actions of every task (the raw outputs), the position and
rotation distances per task, the distorted image's fingerprint and the per-pair form of the score
(``decision`` etc., ``decision_form: per_pair``: one unit cannot see the corpus). The report scores
Decision with ``params.normalisation`` (default ``corpus``, the paper's: distances min-max
normalised over every unit of the run, :func:`corpus_decision`).

Parameters (``spec.params``): ``tasks`` (instructions; default five manipulation tasks of rising
difficulty), ``camera`` (observation image key, default ``third_person``; a list such as
``[third_person, wrist]`` puts the one image under each key, for policies that read several cameras,
e.g. the embedded tiny VLA), ``state`` (proprioception given with every image, e.g.
``{tcp_pose: [0.4, 0, 0.3, 1, 0, 0, 0], gripper: [1]}``; default none), ``normalisation``
(``corpus`` or ``per_pair``), ``rotation`` (corpus: ``cosine``, the paper's "cosine similarity of directional
vectors", Embodied-IQA §3.4, default; or ``angle``, the relative-rotation angle: the report shows the other one
beside it), ``position_scale_m`` (per_pair), ``rotation_direction`` and ``arm``
(two-arm actions; default the arm with the larger motion) (see
:class:`embeval.scoring.decision.DecisionConfig`).

``record_video`` in the spec writes each unit as ``RUN/videos/<subject>_<item>_<distortion><level>_seed<seed>.mp4``
(:func:`_record_unit`: one still per task, reference beside distorted, both actions).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embeval.errors import ConfigError
from embeval.runs.evaluators._images import (
    DistortedImageEvaluator,
    fingerprint,
    level_figures,
)
from embeval.runs.registry import Evaluator, EvaluatorParams, ReportSection
from embeval.scoring.decision import DEFAULT_TASKS

@dataclass(frozen=True)
class PolicyDecisionParams(EvaluatorParams):
    """``spec.params`` of ``policy-decision`` (module docstring), checked when made: :meth:`from_params`."""

    tasks: tuple[str, ...] = DEFAULT_TASKS
    camera: str | tuple[str, ...] = "third_person"
    state: dict[str, tuple[float, ...]] = field(default_factory=dict)
    normalisation: str = "corpus"
    rotation: str = "cosine"
    position_scale_m: float | None = None
    rotation_direction: str = "rotvec"
    arm: int | None = None

    @classmethod
    def parse(cls, params: dict[str, Any]) -> PolicyDecisionParams:
        """The parameters of a spec's ``params`` mapping; one-line ConfigErrors naming the parameter."""
        cam = params.get("camera", "third_person")
        if not (isinstance(cam, str) and cam) and not (isinstance(cam, list) and cam and all(isinstance(c, str) and c for c in cam)):
            raise ConfigError(f"spec.params.camera: an image key such as 'third_person' or a list such as "
                              f"[third_person, wrist], got {cam!r}")
        st = params.get("state") or {}
        if not isinstance(st, dict) or not all(isinstance(v, list) and v and all(isinstance(x, (int, float)) and not
                                                                                      isinstance(x, bool) for x in v)
                                               for v in st.values()):
            raise ConfigError(f"spec.params.state: a mapping of state names to lists of numbers, e.g. "
                              f"{{tcp_pose: [0.4, 0, 0.3, 1, 0, 0, 0], gripper: [1]}}, got {st!r}")
        tasks = params.get("tasks", list(DEFAULT_TASKS))
        if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t.strip() for t in tasks):
            raise ConfigError("spec.params.tasks: must be a non-empty list of instructions (strings)")
        if params.get("rotation_direction", "rotvec") not in ("rotvec", "rpy"):
            raise ConfigError("spec.params.rotation_direction: must be 'rotvec' or 'rpy'")
        from embeval.scoring.decision import ROTATIONS

        if params.get("rotation", "cosine") not in ROTATIONS:
            raise ConfigError(f"spec.params.rotation: must be one of {', '.join(ROTATIONS)} (cosine: the paper's), "
                              f"got {params.get('rotation')!r}")
        if params.get("normalisation", "corpus") not in ("corpus", "per_pair"):
            raise ConfigError("spec.params.normalisation: must be 'corpus' (the paper's) or 'per_pair'")
        arm = params.get("arm")
        if arm is not None and (isinstance(arm, bool) or not isinstance(arm, int) or arm < 0):
            raise ConfigError(f"spec.params.arm: the 0-based arm of two-arm actions, or null for the larger motion, got {arm!r}")
        scale = params.get("position_scale_m")
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0):
            raise ConfigError(f"spec.params.position_scale_m: must be a positive number of metres or null, got {scale!r}")
        return cls(tasks=tuple(tasks), camera=cam if isinstance(cam, str) else tuple(cam),
                   state={k: tuple(v) for k, v in st.items()},
                   normalisation=params.get("normalisation", "corpus"), rotation=params.get("rotation", "cosine"),
                   position_scale_m=scale, rotation_direction=params.get("rotation_direction", "rotvec"), arm=arm)

    @property
    def cameras(self) -> list[str]:
        """The observation image keys the one image goes under."""
        return [self.camera] if isinstance(self.camera, str) else list(self.camera)

    def state_arrays(self) -> dict:
        """``state`` as float arrays (the same proprioception for reference and distorted image)."""
        import numpy as np

        return {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in self.state.items()}

    def decision_config(self, normalisation: str | None = None, rotation: str | None = None):
        from embeval.scoring.decision import DecisionConfig

        return DecisionConfig(normalisation=normalisation or self.normalisation, rotation=rotation or self.rotation,
                              position_scale_m=self.position_scale_m, rotation_direction=self.rotation_direction,
                              arm=self.arm)


def corpus_decision(frame, params: dict | None = None, rotation: str | None = None):
    """Decision of every unit of a results frame (``out.*`` columns and the ``outputs`` JSON), scored
    together with ``params.normalisation`` (default ``corpus``: one distance range over all units).
    Returns a frame with ``decision, position, rotation, state`` indexed like ``frame``."""
    import json

    import numpy as np
    import pandas as pd

    from embeval.scoring.decision import decision_corpus

    outs = [json.loads(o) for o in frame["outputs"]]
    pairs = [(np.asarray(o["reference_actions"]), np.asarray(o["distorted_actions"])) for o in outs]
    scores = decision_corpus(pairs, PolicyDecisionParams.from_params(params, "policy-decision").decision_config(rotation=rotation))
    return pd.DataFrame([s.outputs() for s in scores], index=frame.index)


def _params(spec) -> PolicyDecisionParams:
    return PolicyDecisionParams.from_params(spec.params, "policy-decision")


def _images(cameras: list[str], img) -> dict:
    return {c: img for c in cameras}


#: record_video: seconds each task's still is shown in a unit's video
TASK_STILL_S = 1.0
#: record_video failures: a task "fails" when the distortion moved its gripper command by more than this (0..1)
GRIPPER_FLIP = 0.5


def _record_unit(spec, unit, ref, dist, acts_ref, acts_dist, out: dict[str, Any]) -> None:
    """``record_video``: the unit as a video (a no-op unless the run records): per task one still of
    ``TASK_STILL_S`` seconds, the reference image beside the distorted one the policy saw, the instruction and
    both 7-DoF actions; the last frames carry the Decision. A unit counts as a failure (``record_video:
    failures`` keeps it) when the distortion moved a task's gripper command by more than ``GRIPPER_FLIP``."""
    import numpy as np

    from embeval.recording.video import FPS, compose_frame
    from embeval.runs.execute import unit_episode

    with unit_episode(unit) as ep:
        if ep is None:
            return
        tasks = _params(spec).tasks
        flipped = [i + 1 for i, (a, b) in enumerate(zip(acts_ref, acts_dist))
                   if np.abs(np.asarray(a.vector)[6::7] - np.asarray(b.vector)[6::7]).max(initial=0.0) > GRIPPER_FLIP]
        if ep.writer is not None:
            cam = _params(spec).cameras[0]
            views = ([(cam, ref)] if unit.distortion == "none" else
                     [(f"{cam} reference", ref), (f"{cam} {unit.distortion} {unit.level} (policy input)", dist)])
            for i, (task, a, b) in enumerate(zip(tasks, acts_ref, acts_dist)):
                frame = compose_frame(views, [f"task {i + 1}/{len(tasks)}: {task}", "reference " + _fmt_action(a),
                                              "distorted " + _fmt_action(b)])
                for _ in range(max(1, round(TASK_STILL_S * FPS))):
                    ep.writer.add(frame)
        ep.finish(not flipped, f"Decision {out['decision']:.2f} of {len(tasks)}"
                  + (f"; gripper flipped in task {', '.join(map(str, flipped))}" if flipped else ""))


def _fmt_action(a) -> str:
    """``xyz +0.010 +0.000 -0.020 rpy +0.000 +0.000 +0.100 g 1.00`` (first arm; metres, radians, gripper 0..1)."""
    v = [float(x) for x in a.vector[:7]]
    return ("xyz " + " ".join(f"{x:+.3f}" for x in v[:3]) + " rpy " + " ".join(f"{x:+.3f}" for x in v[3:6])
            + (f" g {v[6]:.2f}" if len(v) > 6 else ""))


class PolicyDecisionEvaluator(DistortedImageEvaluator):
    subject_kinds = ("policy",)
    records_video = True  # spec.record_video: each unit's reference | distorted still per task, with both actions
    batches = True  # policies with act_batch(observations) -> (N, 7) get backend.batch_size units per call

    params_type = PolicyDecisionParams

    def setup(self, spec, subject) -> dict[str, Any]:
        return {"policy": Evaluator.setup(self, spec, subject)}

    def teardown(self, state) -> None:
        super().teardown(state.get("policy"))

    def run_unit(self, spec, state, unit, unit_seed) -> dict[str, Any]:
        from embeval.action import Observation

        prm = _params(spec)
        policy, cameras, proprio = state["policy"], prm.cameras, prm.state_arrays()
        ref, dist = self.pair(spec, state, unit, unit_seed)
        acts_ref, acts_dist = [], []
        for task in prm.tasks:
            for img, acts in ((ref, acts_ref), (dist, acts_dist)):
                policy.reset(task)  # same state for reference and distorted
                acts.append(policy.act(Observation(images=_images(cameras, img), instruction=task, state=proprio)))
        out = self._outputs(spec, acts_ref, acts_dist, dist)
        _record_unit(spec, unit, ref, dist, acts_ref, acts_dist, out)
        return out

    def run_batch(self, spec, state, units, unit_seeds) -> list[dict[str, Any]]:
        """One ``act_batch`` call per task for all reference and distorted images of the batch,
        where the policy has it (e.g. the embedded tiny VLA); otherwise one unit at a time."""
        policy = state["policy"]
        if not callable(getattr(policy, "act_batch", None)):
            return super().run_batch(spec, state, units, unit_seeds)
        from embeval.action import Action, Observation

        prm = _params(spec)
        cameras, proprio = prm.cameras, prm.state_arrays()
        pairs = [self.pair(spec, state, u, s) for u, s in zip(units, unit_seeds)]
        acts: list[tuple[list, list]] = [([], []) for _ in units]
        for task in prm.tasks:
            policy.reset(task)
            obs = [Observation(images=_images(cameras, img), instruction=task, state=proprio) for pair in pairs for img in pair]
            out = policy.act_batch(obs)
            for i in range(len(units)):
                acts[i][0].append(Action(out[2 * i]))
                acts[i][1].append(Action(out[2 * i + 1]))
        outs = [self._outputs(spec, a, b, pair[1]) for (a, b), pair in zip(acts, pairs)]
        for u, (a, b), pair, out in zip(units, acts, pairs, outs):
            _record_unit(spec, u, pair[0], pair[1], a, b, out)
        return outs

    def _outputs(self, spec, acts_ref, acts_dist, dist) -> dict[str, Any]:
        from embeval.scoring.decision import decision_corpus, decision_distances

        prm = _params(spec)
        tasks = prm.tasks
        cfg = prm.decision_config("per_pair")
        s = decision_corpus([(acts_ref, acts_dist)], cfg)[0]
        dt, dr = decision_distances(acts_ref, acts_dist, cfg)
        return {
            **s.outputs(), "n_tasks": len(tasks),
            "decision_form": "per_pair", "task_scores": [t.score for t in s.tasks],
            "position_distance_m": dt.tolist(), "rotation_distance_rad": dr.tolist(),
            "reference_actions": [a.vector.tolist() for a in acts_ref],
            "distorted_actions": [a.vector.tolist() for a in acts_dist],
            "distorted_sha256": fingerprint(dist),
        }

    def report_sections(self, spec, frame, stamp):
        if frame.empty or "out.decision" not in frame:
            return []
        ok = frame[frame["outputs"].notna()]
        from embeval.scoring.decision import OUTPUTS

        parts = list(OUTPUTS)
        scored = ok[["subject", "distortion", "level"]].join(corpus_decision(ok, spec.params))
        prm = _params(spec)
        rotation = prm.rotation
        other = "angle" if rotation == "cosine" else "cosine"
        corpus = prm.normalisation == "corpus"
        if corpus:  # the other rotation definition beside the chosen one (the paper's cosine, or our angle)
            scored[f"decision ({other})"] = corpus_decision(ok, spec.params, rotation=other)["decision"]
            parts = parts + [f"decision ({other})"]
        d = scored[scored["distortion"] != "none"]
        if d.empty:
            return []
        table = d.groupby(["subject", "distortion", "level"])[parts].mean().reset_index()
        overall = table.groupby(["distortion", "level"])[["decision"]].mean().reset_index()
        figs = level_figures(overall, ["decision"], {"decision": "decision score (sum over tasks)"}, stamp,
                             "mean over items and policies")
        return [ReportSection("Decision score by policy, distortion and level",
                              html=table.to_html(index=False, float_format="%.4f"), figures=figs,
                              caption=f"Each part is 0..1 per task, summed over the tasks (Embodied-IQA decision score); "
                                      f"normalisation: {prm.normalisation} (corpus: position and "
                                      f"rotation distances min-max normalised over all {len(ok)} units of the run); "
                                      + (f"rotation part: {rotation} ({'the paper' if rotation == 'cosine' else 'option'}), "
                                         f"decision ({other}): the same with the {other} rotation part."
                                         if corpus else "rotation part: per-pair angle."))]
