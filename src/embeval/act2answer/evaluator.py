"""``act2answer``: the runs-infrastructure evaluator (sharded, resumable, swap pairs together).

Spec example (``config/act2answer/run_tiny_vla.yaml``)::

    evaluator: act2answer
    plugins: [embeval.act2answer.evaluator]
    subjects: [{id: tiny-vla, kind: policy, adapter: embedded, path: tiny-vla}]
    items: {source: file, path: suite/items.jsonl}      # an Act2Answer item JSONL
    distortions: [none]                                 # or image distortions of the observations
    levels: [0]
    params: {episode: {eps: 0.08, max_steps: 80}, layouts: [original, swapped]}
    # params.backend: pybullet (default, the UR5 cell) or maniskill (ManiSkill3, the Panda)

Units are ``<item id>@<layout>``; their group key is the subject and the item id, so the two
layouts of an item always run in the same shard. A distortion other than ``none`` is applied to
every observation image (seeded per step) before the policy sees it. Each unit's outputs are an
:class:`~embeval.act2answer.episode.Act2AnswerRecord` as a dict (zone, choice, cube position,
termination rule and reason, the raw actions).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embeval.act2answer.scene import EpisodeSpec
from embeval.errors import ConfigError
from embeval.runs.registry import Evaluator, EvaluatorParams, ReportSection, register_evaluator

LAYOUTS = ("original", "swapped")


@dataclass(frozen=True)
class Act2AnswerParams(EvaluatorParams):
    """``spec.params`` of ``act2answer``: the episode spec (``episode``: EpisodeSpec fields), the layouts each item
    runs in, the observation size ((width, height) pixels; None: the policy's own), whether records keep the raw
    actions, and the backend (:data:`embeval.act2answer.episode.BACKENDS`)."""

    episode: EpisodeSpec = field(default_factory=EpisodeSpec)
    layouts: tuple[str, ...] = LAYOUTS
    obs_size: tuple[int, int] | None = None
    keep_actions: bool = True
    backend: str = "pybullet"

    @classmethod
    def parse(cls, params: dict[str, Any]) -> Act2AnswerParams:
        from embeval.act2answer.episode import BACKENDS
        from embeval.checks import flag, integer, string
        from embeval.image_io import MAX_IMAGE_SIDE

        try:
            params["episode"] = EpisodeSpec.from_dict(params.get("episode"))
        except ConfigError as exc:
            raise ConfigError(f"spec.params.episode: {exc}") from None
        BACKENDS.get(string(params.get("backend", "pybullet"), "spec.params.backend"), "spec.params.backend")
        lay = params.get("layouts", list(LAYOUTS))
        if not isinstance(lay, (list, tuple)) or not lay or any(x not in LAYOUTS for x in lay):
            raise ConfigError("spec.params.layouts: a non-empty list of 'original' / 'swapped'")
        params["layouts"] = tuple(lay)
        size = params.get("obs_size")
        if size is not None:
            if not isinstance(size, (list, tuple)) or len(size) != 2:
                raise ConfigError(f"spec.params.obs_size: [width, height] in pixels, or null for the policy's own, got {size!r}")
            params["obs_size"] = tuple(integer(v, f"spec.params.obs_size[{i}]", 8, MAX_IMAGE_SIDE, unit="pixels")
                                       for i, v in enumerate(size))
        if "keep_actions" in params:
            flag(params["keep_actions"], "spec.params.keep_actions")
        return cls(**params)


def split_unit_item(uid: str) -> tuple[str, str]:
    item, _, layout = uid.rpartition("@")
    if not item or layout not in ("original", "swapped"):
        raise ConfigError(f"act2answer unit item {uid!r} must be '<item id>@original' or '<item id>@swapped'")
    return item, layout


def frame_records(frame) -> dict[str, list[dict[str, Any]]]:
    """Act2Answer records per subject (``"<subject> [<distortion> <level>]"`` when distorted) from a
    runs results frame / Parquet export (columns ``out.item``, ``out.category``, ...)."""
    recs: dict[str, list[dict[str, Any]]] = {}
    for (subject, dist, level), g in frame.groupby(["subject", "distortion", "level"]):
        name = subject if dist == "none" else f"{subject} [{dist} {level}]"
        recs.setdefault(name, []).extend(
            {"item": r["out.item"], "category": r["out.category"], "layout": r["out.layout"], "success": r["out.success"],
             "choice": r.get("out.choice") if isinstance(r.get("out.choice"), str) else None} for _, r in g.iterrows())
    return recs


class _DistortedObservations:
    """Wraps a policy: distorts every observation image before ``act``, camera by camera, with
    :class:`embeval.distortion.EpisodeFrames` (the per-frame seeding the ROS distortion node uses too)."""

    def __init__(self, policy, distortion: str, level: int, seed: int):
        self.inner, self.distortion, self.level, self.seed = policy, distortion, level, seed
        self.id = policy.id
        self.action_spec = policy.action_spec
        self._cameras: dict = {}

    def reset(self, instruction: str) -> None:
        self._cameras = {}
        self.inner.reset(instruction)

    def act(self, observation):
        from embeval.action import Observation
        from embeval.distortion import EpisodeFrames

        imgs = {}
        for k, v in observation.images.items():
            frames = self._cameras.setdefault(k, EpisodeFrames(k, self.seed))
            imgs[k] = frames(v, self.distortion, self.level)
        return self.inner.act(Observation(imgs, observation.instruction, observation.state, observation.timestamp))


@register_evaluator("act2answer")
class Act2AnswerEvaluator(Evaluator):
    subject_kinds = ("policy",)
    params_type = Act2AnswerParams

    def validate(self, spec) -> None:
        if spec.items.source != "file":
            raise ConfigError("spec.items: act2answer needs {source: file, path: items.jsonl} (an Act2Answer item file)")
        for d in spec.distortions:
            if d != "none":
                from embeval.distortion import get

                get(d)

    def items(self, spec) -> list[str]:
        from embeval.runs.registry import list_items

        return [f"{i}@{layout}" for i in list_items(spec) for layout in self.params(spec).layouts]

    def group_key(self, unit) -> str:
        return f"{unit.subject}|{split_unit_item(unit.item)[0]}"

    def setup(self, spec, subject) -> dict[str, Any]:
        from embeval.act2answer.episode import get_backend, obs_size_for
        from embeval.act2answer.items import read_items

        try:
            import torch

            torch.set_num_threads(1)  # batch-1 inference per step; workers parallelise across units
        except ImportError:  # pragma: no cover - torch ships with embeval
            pass
        policy = Evaluator.setup(self, spec, subject)
        items = {it.id: it for it in read_items(spec.resolve_path(spec.items.path))}
        prm = self.params(spec)
        size = prm.obs_size or obs_size_for(getattr(policy, "inner", policy))
        backend = get_backend(prm.backend)
        return {"policy": policy, "items": items, "spec": prm.episode, "keep_actions": prm.keep_actions,
                "backend": backend, "env": backend.make_env(tuple(size))}

    def teardown(self, state) -> None:
        state["backend"].close(state["env"])
        super().teardown(state.get("policy"))

    def run_unit(self, spec, state, unit, unit_seed) -> dict[str, Any]:
        iid, layout = split_unit_item(unit.item)
        if iid not in state["items"]:
            raise ConfigError(f"item {iid!r} is not in {spec.items.path}")
        policy = state["policy"]
        if unit.distortion != "none":
            policy = _DistortedObservations(policy, unit.distortion, unit.level, unit_seed)
        r = state["backend"].run_episode(state["env"], policy, state["items"][iid], layout, state["spec"], unit_seed,
                        keep_actions=state["keep_actions"])
        out = r.to_dict()
        out["item"] = iid
        return out

    def report_sections(self, spec, frame, stamp):
        if frame.empty or "out.success" not in frame:
            return []
        from embeval.act2answer.aggregate import category_table

        table = category_table(frame_records(frame))
        return [ReportSection("Act2Answer soft success rate by category",
                              html=table.to_html(index=False, float_format="%.3f"),
                              caption=f"Swap-averaged soft success, Wilson 95% intervals, regimes vs 0.5 +- 0.1 ({stamp}).")]
