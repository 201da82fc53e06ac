"""The Eval Agent: an Evaluator role writes ``run_vlm_inference(doc)``, a Scorer role writes
``eval_score(doc, prediction)``; both run in the sandbox, errors and scorer disagreements go back
to the role until the code works or the attempt budget is spent.

Contract shown to the roles (one task per answer type):
- ``doc``: ``{"id", "question", "options" (list or null), "answer_type", "image_ids"}`` plus, for the
  scorer only, the gold fields its answer type needs (:data:`GOLD_FIELDS`: ``"answer"``,
  ``"tolerance"`` for numbers, ``"mask"`` (box ``[x0, y0, x1, y1]`` in pixels) for points). The
  inference job never receives a gold field, and the sandbox's file system holds no task data;
- ``generate(prompt, image_ids) -> str`` is predefined inside the sandbox and asks the model under
  test (served by the parent through a pipe, never the network);
- only preloaded modules import (see :data:`.sandbox.ALLOWED_MODULES`).

Validation: the inference code must return a non-empty string for every probe document. The
scorer, by default as in the paper (A2Eval §3.3: a scorer is accepted when "execution succeeds and
produces valid metrics"), must run without error and return a finite number in [0, 1] for every
probe prediction (``acceptance: paper``). Its agreement with the reference scorer (:mod:`.scorers`)
on a probe set of gold-formatted, wrong and real model predictions is measured and recorded either
way; the stricter option ``acceptance: reference_agreement`` (ours) also requires that agreement to
reach ``fidelity_threshold`` and feeds the disagreements back to the Scorer role.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from embeval.config import from_mapping, in_range
from embeval.errors import ConfigError
from embeval_analysis.a2eval.llm import CODE_SCHEMA, ask_json, build_llm
from embeval_analysis.a2eval.sandbox import ALLOWED_MODULES, SandboxLimits, run_sandboxed, score_check, text_check
from embeval_analysis.a2eval.scorers import reference_score


#: scorer acceptance rules: the paper's (A2Eval §3.3) and our stricter option
ACCEPTANCE = {"paper": "execution succeeds and every probe score is a finite number in [0, 1]",
              "reference_agreement": "as paper, and the scores equal the reference scorer's on >= fidelity_threshold "
                                     "of the probe predictions"}


@dataclass
class EvalAgentConfig:
    """``eval_agent`` of an A2Eval config, read by :func:`embeval.config.from_mapping` (strict); bounds in
    :meth:`check_config` (seconds of CPU / wall time and MiB per sandbox run)."""

    evaluator: Any = "rules"
    scorer: Any = "rules"
    max_attempts: int = 4  # per role and task (the error-feedback budget)
    probe_docs: int = 6
    acceptance: str = "paper"  # "paper": runs and returns valid scores; "reference_agreement": also >= fidelity_threshold
    fidelity_threshold: float = 0.95  # used by acceptance: reference_agreement (and reported either way)
    cpu_seconds: int = 20
    wall_seconds: float = 60.0
    memory_mb: int = 1024
    cache: str | None = None

    def check_config(self, where: str = "eval_agent") -> None:
        in_range(self.max_attempts, f"{where}.max_attempts", 1, 50)
        in_range(self.probe_docs, f"{where}.probe_docs", 1, 1000)
        in_range(self.fidelity_threshold, f"{where}.fidelity_threshold", 0.0, 1.0)
        if self.acceptance not in ACCEPTANCE:
            raise ConfigError(f"{where}.acceptance: {str(self.acceptance)[:40]!r} is not one of {list(ACCEPTANCE)}: "
                              "'paper' accepts a scorer that runs and returns valid scores (the paper's rule), "
                              "'reference_agreement' also requires agreement with the reference scorer")
        in_range(self.cpu_seconds, f"{where}.cpu_seconds", 1, 3600)
        in_range(self.wall_seconds, f"{where}.wall_seconds", 1, 3600)
        in_range(self.memory_mb, f"{where}.memory_mb", 64, 1 << 16)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, where: str = "eval_agent") -> "EvalAgentConfig":
        """Strict reading (:func:`embeval.config.from_mapping`): unknown keys, wrong types and bounds refused."""
        return from_mapping(cls, d, where, strict=True)

    def limits(self) -> SandboxLimits:
        return SandboxLimits(cpu_seconds=self.cpu_seconds, wall_seconds=self.wall_seconds,
                             memory_bytes=self.memory_mb << 20)


def _box(mask: Any) -> list[float] | None:
    if mask is None:
        return None
    if isinstance(mask, (list, tuple)) and len(mask) == 4:
        return [float(v) for v in mask]
    if isinstance(mask, str):
        from embeval_analysis.a2eval.media import load_image

        mask = load_image(mask, "mask").max(axis=2) > 0
    ys, xs = np.nonzero(np.asarray(mask, bool))
    return [float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max())] if len(xs) else None


#: answer_type -> the gold fields its scorer needs (least knowledge: nothing else leaves the parent)
GOLD_FIELDS = {"mc": ("answer",), "numeric": ("answer", "tolerance"), "point": ("mask",), "exact": ("answer",)}


def item_doc(item: Any, with_answer: bool) -> dict[str, Any]:
    """The JSON document the synthesised code sees (see module docstring); ``with_answer`` adds the
    gold fields of the item's answer type (all three for an unknown type)."""
    from embeval_analysis.a2eval.pool import _jsonable

    doc = {"id": item.id, "question": item.question, "options": item.options, "answer_type": item.answer_type,
           "image_ids": list(range(len(item.images)))}
    if with_answer:
        gold = {"answer": lambda: _jsonable(item.answer), "tolerance": lambda: item.tolerance,
                "mask": lambda: _box(item.mask)}
        doc.update({k: gold[k]() for k in GOLD_FIELDS.get(item.answer_type, tuple(gold))})
    return doc


@dataclass
class Attempt:
    role: str
    task: str
    attempt: int
    error: str | None
    fidelity: float | None = None


@dataclass
class SynthesisResult:
    """Working code per task (answer type), or the last error when the budget ran out."""

    inference_code: dict[str, str] = field(default_factory=dict)
    scorer_code: dict[str, str] = field(default_factory=dict)
    attempts: list[Attempt] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    probe_fidelity: dict[str, float] = field(default_factory=dict)
    acceptance: str = "paper"  # the rule the scorers were accepted by (EvalAgentConfig.acceptance)
    fidelity_threshold: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def acceptance_summary(self) -> str:
        """One line: the rule used, and how many accepted scorers the other rule would also accept
        (their probe agreement is recorded either way), so a reader sees both protocols."""
        n = len(self.scorer_code)
        agree = sum(self.probe_fidelity.get(t, 0.0) >= self.fidelity_threshold for t in self.scorer_code)
        low = {t: round(f, 3) for t, f in sorted(self.probe_fidelity.items()) if f < self.fidelity_threshold}
        if self.acceptance == "paper":
            return (f"scorer acceptance: paper (runs, valid scores in [0, 1]): {n} accepted; {agree}/{n} also agree with "
                    f"the reference on >= {self.fidelity_threshold:.0%} of probe predictions (option "
                    f"reference_agreement){'; below: ' + str(low) if low else ''}")
        return (f"scorer acceptance: reference_agreement (>= {self.fidelity_threshold:.0%} agreement with the reference, "
                f"ours): {n} accepted (the paper's rule accepts every scorer that runs and returns valid scores)")


def run_inference(code: str, subject: Any, items: Sequence[Any], limits: SandboxLimits,
                  images: dict[str, list[np.ndarray]] | None = None):
    """Run ``run_vlm_inference`` for every item in one sandbox; model calls come back through the
    pipe RPC and are served by ``subject.generate`` with the current item's images.
    Returns the :class:`~.sandbox.SandboxResult` (``outputs`` = predictions)."""
    images = images or {it.id: it.load_images() for it in items}
    current = {"k": 0}

    def begin(index: int):
        if not isinstance(index, int) or not 0 <= index < len(items):
            raise ValueError(f"begin: index must be 0..{len(items) - 1}")
        current["k"] = index
        return True

    def generate(prompt: str, image_ids: Sequence[int]):
        imgs = images[items[current["k"]].id]
        if not isinstance(image_ids, list) or len(image_ids) > len(imgs):
            raise ValueError(f"image_ids must be a list of at most {len(imgs)} index(es) into doc['image_ids']")
        try:
            chosen = [imgs[int(i)] for i in image_ids] if image_ids else imgs
        except (IndexError, ValueError, TypeError):
            raise ValueError(f"image_ids {image_ids} out of range: the doc has {len(imgs)} image(s)") from None
        return str(subject.generate(chosen, str(prompt)))

    return run_sandboxed(code, "run_vlm_inference", [[item_doc(it, False)] for it in items], limits,
                         rpc={"generate": generate, "begin": begin}, announce=True, check=text_check)


def run_scorer(code: str, pairs: Sequence[tuple[Any, str]], limits: SandboxLimits):
    """Run ``eval_score`` on ``(item, prediction)`` pairs in one sandbox; every score must be a finite
    number in [0, 1] (anything else is that pair's error, its output None)."""
    return run_sandboxed(code, "eval_score", [[item_doc(it, True), str(p)] for it, p in pairs], limits,
                         check=score_check(0.0, 1.0))


def probe_predictions(item: Any, rng: np.random.Generator) -> list[str]:
    """Gold-formatted and wrong predictions for checking a scorer against the reference."""
    a = item.answer
    t = item.answer_type
    if t == "mc":
        from embeval_analysis.a2eval.scorers import mc_index

        g = mc_index(str(a), item.options)
        L = "ABCDEFGHIJ"
        w = (g + 1) % len(item.options)
        return [L[g], f"({L[g]})", f"The answer is {L[g]}.", item.options[g], L[w], item.options[w], "I am not sure"]
    if t == "numeric":
        v = float(a)
        s = str(int(v)) if v.is_integer() else str(v)
        return [s, f"There are {s}.", f"{v + 1:g}", f"{max(v - 1, 0):g}", "none"]
    if t == "point":
        x0, y0, x1, y1 = _box(item.mask)
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        return [f"{cx:.0f}, {cy:.0f}", f"({cx:.1f}, {cy:.1f})", f"{x1 + 5:.0f}, {cy:.0f}", f"{cx:.0f}, {y0 - 6:.0f}", "here"]
    return [str(a), str(a).upper(), str(a) + ".", "none" if str(a) != "none" else "red", str(a)[::-1]]


class EvalAgent:
    def __init__(self, cfg: EvalAgentConfig | None = None, evaluator=None, scorer=None):
        self.cfg = cfg or EvalAgentConfig()
        self.evaluator = evaluator or build_llm(self.cfg.evaluator, self.cfg.cache, "evaluator")
        self.scorer = scorer or build_llm(self.cfg.scorer, self.cfg.cache, "scorer")

    def _ask_code(self, llm, role: str, prompt: str) -> str:
        return ask_json(llm, role, prompt, CODE_SCHEMA, max_retries=1)["code"]

    def synthesise(self, items: Sequence[Any], subject: Any, seed: int = 0) -> SynthesisResult:
        """Synthesise and validate inference + scorer code per answer type present in ``items``,
        probing with ``subject`` (any VLM)."""
        res = SynthesisResult(acceptance=self.cfg.acceptance, fidelity_threshold=self.cfg.fidelity_threshold)
        limits = self.cfg.limits()
        rng = np.random.default_rng(seed)
        by_type: dict[str, list[Any]] = {}
        for it in items:
            by_type.setdefault(it.answer_type, []).append(it)
        for task, group in sorted(by_type.items()):
            probe = [group[i] for i in rng.choice(len(group), min(self.cfg.probe_docs, len(group)), replace=False)]
            self._synth_inference(task, probe, subject, limits, res)
            if task in res.inference_code:
                self._synth_scorer(task, probe, subject, limits, res, rng)
        return res

    def _contract(self, task: str, docs: list[dict[str, Any]], role: str) -> str:
        allowed = ", ".join(ALLOWED_MODULES)
        if role == "evaluator":
            spec = ("Write a Python function run_vlm_inference(doc) -> str that builds a prompt from the doc and "
                    "returns the model's answer. Call generate(prompt, image_ids) (predefined) to query the model; "
                    "pass doc['image_ids'].")
        else:
            spec = ("Write a Python function eval_score(doc, prediction) -> float in [0, 1] that scores the model's "
                    "prediction (a string) against doc['answer'] (mask: box [x0, y0, x1, y1] for point answers; "
                    "tolerance: absolute tolerance for numbers, null = exact).")
        return (f"{spec}\nanswer_type: {task}\nOnly these modules can be imported: {allowed}. No files, no network.\n"
                f"Example docs:\n" + "\n".join(json.dumps(d) for d in docs[:3]))

    def _synth_inference(self, task, probe, subject, limits, res: SynthesisResult) -> None:
        base = self._contract(task, [item_doc(it, False) for it in probe], "evaluator")
        prompt, images = base, {it.id: it.load_images() for it in probe}
        for k in range(self.cfg.max_attempts):
            try:
                code = self._ask_code(self.evaluator, "evaluator", prompt)
            except Exception as exc:  # invalid JSON twice: counts as a failed attempt
                err = str(exc)
            else:
                sb = run_inference(code, subject, probe, limits, images)
                err = sb.first_error()
                if err is None:
                    bad = [o for o in sb.valid_outputs() if not isinstance(o, str) or not o.strip()]
                    if bad:
                        err = f"run_vlm_inference must return a non-empty string, got {bad[0]!r}"
            res.attempts.append(Attempt("evaluator", task, k, err))
            if err is None:
                res.inference_code[task] = code
                return
            prompt = f"{base}\n\nYour previous code failed in the sandbox:\n{err}\nFix it and answer with JSON {{\"code\": ...}}."
        res.failed[f"evaluator:{task}"] = err or "no attempt"

    def _synth_scorer(self, task, probe, subject, limits, res: SynthesisResult, rng) -> None:
        preds = run_inference(res.inference_code[task], subject, probe, limits)
        pairs = [(it, p) for it in probe for p in probe_predictions(it, rng)]
        pairs += [(it, o) for it, o in zip(probe, preds.valid_outputs()) if isinstance(o, str)]
        ref = np.array([reference_score(it, p) for it, p in pairs])
        base = self._contract(task, [item_doc(it, True) for it in probe], "scorer")
        prompt = base
        for k in range(self.cfg.max_attempts):
            fid = None
            try:
                code = self._ask_code(self.scorer, "scorer", prompt)
            except Exception as exc:
                err = str(exc)
            else:
                sb = run_scorer(code, pairs, limits)
                err = sb.first_error()
                if err is None:
                    got = np.array([float(o) if isinstance(o, (int, float)) else np.nan for o in sb.valid_outputs()])
                    fid = float(np.mean(np.isclose(got, ref)))
                    if self.cfg.acceptance == "reference_agreement" and fid < self.cfg.fidelity_threshold:
                        mism = [f"doc {pairs[i][0].id} prediction {pairs[i][1]!r}: yours {got[i]}, expected {ref[i]}"
                                for i in np.nonzero(~np.isclose(got, ref))[0][:5]]
                        err = f"the scorer disagrees with the reference on {1 - fid:.0%} of probe predictions:\n" + "\n".join(mism)
            res.attempts.append(Attempt("scorer", task, k, err, fid))
            if err is None:
                res.scorer_code[task] = code
                res.probe_fidelity[task] = fid
                return
            prompt = f"{base}\n\nYour previous code was rejected:\n{err}\nFix it and answer with JSON {{\"code\": ...}}."
        res.failed[f"scorer:{task}"] = err or "no attempt"


@dataclass
class EvaluationResult:
    """Scores of every subject on the curated items with the synthesised code, and scorer fidelity."""

    subjects: list[str]
    item_ids: list[str]
    synth_scores: np.ndarray  # subjects x items (NaN where the code failed)
    ref_scores: np.ndarray  # the same predictions scored by the reference scorers
    predictions: list[list[str | None]]
    scorer_fidelity: float  # share of (subject, item) where synthesised == reference score
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["synth_scores"] = self.synth_scores.tolist()
        d["ref_scores"] = self.ref_scores.tolist()
        return d


def evaluate(synth: SynthesisResult, subjects: Sequence[Any], items: Sequence[Any],
             limits: SandboxLimits | None = None) -> EvaluationResult:
    """Run the synthesised inference and scorer code for every subject on ``items`` (in the sandbox)."""
    limits = limits or EvalAgentConfig().limits()
    t0 = time.perf_counter()
    images = {it.id: it.load_images() for it in items}
    S = np.full((len(subjects), len(items)), np.nan)
    R = np.full((len(subjects), len(items)), np.nan)
    preds: list[list[str | None]] = []
    for s, sub in enumerate(subjects):
        row: list[str | None] = [None] * len(items)
        for task in synth.inference_code:
            idx = [i for i, it in enumerate(items) if it.answer_type == task]
            if not idx:
                continue
            out = run_inference(synth.inference_code[task], sub, [items[i] for i in idx], limits, images)
            for i, o in zip(idx, out.valid_outputs()):  # validated only: None where the job failed
                row[i] = o if isinstance(o, str) else None
            if task in synth.scorer_code:
                pairs = [(items[i], row[i]) for i in idx if row[i] is not None]
                sc = run_scorer(synth.scorer_code[task], pairs, limits)
                kept = [i for i in idx if row[i] is not None]
                for i, v in zip(kept, sc.valid_outputs()):
                    S[s, i] = float(v) if isinstance(v, (int, float)) else np.nan
        for i, it in enumerate(items):
            R[s, i] = reference_score(it, row[i]) if row[i] is not None else np.nan
        preds.append(row)
    both = np.isfinite(S) & np.isfinite(R)
    fid = float(np.mean(np.isclose(S[both], R[both]))) if both.any() else float("nan")
    return EvaluationResult([getattr(s, "id", str(k)) for k, s in enumerate(subjects)], [it.id for it in items], S, R,
                            preds, fid, time.perf_counter() - t0)
