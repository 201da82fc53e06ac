"""The ``iqa`` evaluator of :mod:`embeval.runs`: one unit = one subject on one distorted image of an
Embodied-IQA database (all 5 tasks), with its answers / actions on the reference image.

Units come from the database manifest (``params.database``), not from the full cross product, so a
database with one sampled level per reference x type has one unit per subject and distorted image.
A reference and all its distorted copies form one shard group. Outputs (raw, JSON):

- policy: ``reference_actions`` / ``distorted_actions`` (5 x 7, embeval convention), ``decision``
  (sum over tasks, 0..5) and its ``position`` / ``rotation`` / ``state`` parts, ``task_scores``;
- vlm: ``reference_answers`` / ``distorted_answers`` (5 strings); the Cognition score is computed
  over the whole corpus afterwards (:func:`embeval_analysis.iqa.database.aggregate`).

The subject's outputs on a reference image are computed once per worker and cached.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embeval.checks import strings
from embeval.errors import ConfigError, MissingFileError
from embeval.image_io import strict_decoding
from embeval.runs.registry import Evaluator, EvaluatorParams, register_evaluator


@dataclass(frozen=True)
class IQAParams(EvaluatorParams):
    """``spec.params`` of ``iqa``: the database folder (``embeval iqa build``; required, relative to the spec) and
    the observation image keys a policy is shown each image under."""

    database: str = ""
    cameras: tuple[str, ...] = ("third_person", "wrist")

    @classmethod
    def parse(cls, params: dict[str, Any]) -> IQAParams:
        db = params.get("database")
        if not isinstance(db, str) or not db:
            raise ConfigError("spec.params.database: the database folder (written by `embeval iqa build`) is required")
        cams = strings(params.get("cameras", list(cls.cameras)), "spec.params.cameras",
                       fix="image keys such as [third_person, wrist]")
        return cls(database=db, cameras=cams)


def _read(path: Path) -> np.ndarray:
    from PIL import Image

    with strict_decoding(), Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


@register_evaluator("iqa")
class IQAEvaluator(Evaluator):
    subject_kinds = ("vlm", "policy")
    batches = True
    params_type = IQAParams

    # ------------------------------------------------------------------ planning
    def validate(self, spec) -> None:
        db = spec.resolve_path(self.params(spec).database)
        if not (db / "manifest.json").exists():
            raise MissingFileError(f"spec.params.database: {db}/manifest.json not found; run `embeval iqa build --out {db}`")
        for i, s in enumerate(spec.subjects):
            if s.kind not in self.subject_kinds:
                raise ConfigError(f"spec.subjects[{i}].kind: evaluator 'iqa' scores 'vlm' and 'policy' subjects, got {s.kind!r}")

    def _manifest(self, spec) -> dict[str, Any]:
        import json

        cached = getattr(self, "_man", None)
        if cached is None:
            db = spec.resolve_path(self.params(spec).database)
            cached = self._man = (db, json.loads((db / "manifest.json").read_text()))
        return cached[1]

    def group_key(self, unit) -> str:
        return unit.item

    def units(self, spec):
        from embeval.runs.units import Unit

        man = self._manifest(spec)
        refs = {r["ref_id"] for r in man["references"]}
        wanted = set(spec.items.ids) if spec.items.source == "list" else refs
        out = []
        for s in spec.subjects:
            for im in man["images"]:
                if im["ref_id"] in wanted and im["distortion"] in spec.distortions and im["level"] in spec.levels:
                    for seed in spec.seeds:
                        out.append(Unit(s.id, im["ref_id"], im["distortion"], int(im["level"]), seed, group=im["ref_id"]))
        return out

    # ------------------------------------------------------------------ execution
    def setup(self, spec, subject) -> dict[str, Any]:
        model = Evaluator.setup(self, spec, subject)
        return {"model": model, "kind": subject.kind, "ref_out": {}}

    def teardown(self, state) -> None:
        super().teardown(state.get("model"))

    def run_unit(self, spec, state, unit, unit_seed) -> dict[str, Any]:
        return self.run_batch(spec, state, [unit], [unit_seed])[0]

    def _ref(self, spec, ref_id: str) -> dict[str, Any]:
        man = self._manifest(spec)
        idx = getattr(self, "_ref_idx", None)
        if idx is None:
            idx = self._ref_idx = {r["ref_id"]: r for r in man["references"]}
        return idx[ref_id]

    def _images(self, spec, unit) -> tuple[np.ndarray, np.ndarray]:
        db = self._man[0]
        ref = self._ref(spec, unit.item)
        return _read(db / ref["path"]), _read(db / "distorted" / f"{unit.item}__{unit.distortion}__{unit.level}.png")

    def run_batch(self, spec, state, units, unit_seeds) -> list[dict[str, Any]]:
        self._manifest(spec)
        pairs = [self._images(spec, u) for u in units]
        refs = [self._ref(spec, u.item) for u in units]
        if state["kind"] == "policy":
            return self._policy(spec, state, units, refs, pairs)
        return self._vlm(state, units, refs, pairs)

    def _policy(self, spec, state, units, refs, pairs) -> list[dict[str, Any]]:
        from embeval.action import Action, Observation
        from embeval.scoring.decision import DecisionConfig, decision_corpus

        policy, cams = state["model"], self.params(spec).cameras

        def obs(img, ref, task):
            return Observation(images={c: img for c in cams}, instruction=task,
                               state={k: np.asarray(v, dtype=np.float64) for k, v in ref["state"].items()})

        batch = callable(getattr(policy, "act_batch", None))
        n_tasks = len(refs[0]["tasks"])
        dist_acts = np.zeros((len(units), n_tasks, 7))
        cache = state["ref_out"]
        for t in range(n_tasks):
            # reference actions: once per reference image and task
            todo = [i for i, r in enumerate(refs) if (r["ref_id"], t) not in cache]
            todo = list({refs[i]["ref_id"]: i for i in todo}.values())
            for group, dst in ((todo, "ref"), (list(range(len(units))), "dist")):
                if not group:
                    continue
                task_groups: dict[str, list[int]] = {}
                for i in group:
                    task_groups.setdefault(refs[i]["tasks"][t], []).append(i)
                for task, idx in task_groups.items():
                    observations = [obs(pairs[i][0 if dst == "ref" else 1], refs[i], task) for i in idx]
                    policy.reset(task)
                    if batch:
                        acts = np.asarray(policy.act_batch(observations), dtype=np.float64)
                    else:
                        acts = []
                        for o in observations:
                            policy.reset(task)  # same internal state for every image
                            acts.append(policy.act(o).vector)
                        acts = np.asarray(acts)
                    for i, a in zip(idx, acts):
                        if dst == "ref":
                            cache[(refs[i]["ref_id"], t)] = Action(a).vector
                        else:
                            dist_acts[i, t] = Action(a).vector
        out = []
        for i, r in enumerate(refs):
            ref_acts = np.stack([cache[(r["ref_id"], t)] for t in range(n_tasks)])
            # per pair here (a unit cannot see the corpus); aggregate() rescoring the corpus is the Decision
            s = decision_corpus([(ref_acts, dist_acts[i])], DecisionConfig(normalisation="per_pair"))[0]
            out.append({"kind": "policy", **s.outputs(), "task_scores": [x.score for x in s.tasks],
                        "reference_actions": ref_acts.tolist(), "distorted_actions": dist_acts[i].tolist()})
        return out

    def _vlm(self, state, units, refs, pairs) -> list[dict[str, Any]]:
        vlm, cache = state["model"], state["ref_out"]
        batch = callable(getattr(vlm, "answer_batch", None))

        def answer(images, prompts):
            if batch:
                return list(vlm.answer_batch(images, prompts))
            return [vlm.generate([im], p) for im, p in zip(images, prompts)]

        need = {r["ref_id"]: i for i, r in enumerate(refs) if r["ref_id"] not in cache}
        if need:
            ims, prompts, keys = [], [], []
            for rid, i in need.items():
                for t in refs[i]["tasks"]:
                    ims.append(pairs[i][0])
                    prompts.append(t)
                    keys.append(rid)
            ans = answer(ims, prompts)
            for rid in need:
                cache[rid] = [a for k, a in zip(keys, ans) if k == rid]
        ims = [pairs[i][1] for i, r in enumerate(refs) for _ in r["tasks"]]
        prompts = [t for r in refs for t in r["tasks"]]
        ans = answer(ims, prompts)
        out, k = [], 0
        for r in refs:
            n = len(r["tasks"])
            out.append({"kind": "vlm", "reference_answers": cache[r["ref_id"]], "distorted_answers": ans[k:k + n]})
            k += n
        return out
