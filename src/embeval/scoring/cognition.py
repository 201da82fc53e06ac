"""Cognition score: how much a VLM's answers change when the image is distorted.

For each task the answer on the distorted image (candidate) is compared with the answer on the
reference image (reference) by BLEU, ROUGE-L and CIDEr-D (see :mod:`embeval.scoring.text` for the
exact definitions), combined as the Embodied-IQA paper's "weighted average of 1:1:0.1":
``(1 * BLEU + 1 * ROUGE-L + 0.1 * CIDEr-D) / (1 + 1 + 0.1)`` (``combine="average"``, default; BLEU and
ROUGE-L lie in 0..1, CIDEr-D in 0..10, so a task scores 0..3/2.1 = 0..1.43), and an image's score is
the sum over its tasks (0..7.14 for the paper's 5 tasks). ``combine="sum"`` keeps the weighted sum
(0..3 per task, 0..15 per image; the earlier default): 2.1 times the average, so every rank
and correlation is the same. The whole corpus is scored in one call so that CIDEr-D's document
frequencies are meaningful (a single pair gives CIDEr-D 0).

BLEU is sentence BLEU-4 with add-one smoothing of the 2..4-gram precisions by default
(``bleu_variant="smooth"``, a choice: the paper names BLEU without n or smoothing; see docs/scoring.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence

from embeval.errors import ConfigError, InvalidInputError
from embeval.scoring import text


@dataclass(frozen=True)
class CognitionWeights:
    """Weights of the per-task combination (the paper's 1 : 1 : 0.1)."""

    bleu: float = 1.0
    rouge_l: float = 1.0
    cider_d: float = 0.1


@dataclass(frozen=True)
class CognitionConfig:
    bleu_n: int = 4
    bleu_variant: str = "smooth"  # "smooth" (add-one, orders >= 2) or "coco" (pycocoevalcap)
    rouge_beta: float = 1.2
    cider_sigma: float = 6.0
    weights: CognitionWeights = field(default_factory=CognitionWeights)
    combine: str = "average"  # "average" (paper: weighted average, sum / sum of weights) or "sum" (weighted sum)


#: how the three metrics of a task are combined (see the module docstring)
COMBINES = ("average", "sum")


@dataclass(frozen=True)
class PairScore:
    """One answer pair: the three metrics and their weighted combination (``combine``: average or sum)."""

    bleu: float
    rouge_l: float
    cider_d: float
    combined: float


@dataclass(frozen=True)
class CognitionScore:
    """One image: the sum over its tasks, the per-metric sums, and each task's parts."""

    total: float
    bleu: float
    rouge_l: float
    cider_d: float
    tasks: tuple[PairScore, ...]


def score_pairs(candidates: Sequence[str], references: Sequence, config: CognitionConfig = CognitionConfig(),
                idf_refs: Sequence | None = None, tokenizer: text.Tokenizer = text.tokenize) -> list[PairScore]:
    """Score a corpus of answer pairs in one call. ``references[i]`` is a string or a list of strings.
    ``idf_refs``: optional fixed corpus for CIDEr-D's document frequencies (default: this corpus)."""
    b = text.bleu(candidates, references, n=config.bleu_n, variant=config.bleu_variant, tokenizer=tokenizer)
    r = text.rouge_l(candidates, references, beta=config.rouge_beta, tokenizer=tokenizer)
    w = config.weights
    if config.combine not in COMBINES:
        raise ConfigError(f"unknown Cognition combine {config.combine!r}; choose one of {', '.join(COMBINES)}")
    norm = 1.0
    if config.combine == "average":
        norm = w.bleu + w.rouge_l + w.cider_d
        if not norm > 0:
            raise ConfigError(f"Cognition weights must sum to > 0 for a weighted average, got {w}")
    c = text.cider_d(candidates, references, sigma=config.cider_sigma, tokenizer=tokenizer, idf_refs=idf_refs)
    return [PairScore(bi, ri, ci, (w.bleu * bi + w.rouge_l * ri + w.cider_d * ci) / norm) for bi, ri, ci in zip(b, r, c)]


def cognition_scores(answers: Mapping[Hashable, tuple[Sequence[str], Sequence[str]]],
                     config: CognitionConfig = CognitionConfig(), idf_refs: Sequence | None = None,
                     tokenizer: text.Tokenizer = text.tokenize) -> dict[Hashable, CognitionScore]:
    """Cognition score per image. ``answers[key] = (reference_answers, distorted_answers)``, one answer
    per task in the same order (the key is yours, e.g. ``(subject, image, distortion, level)``).
    All pairs of all images form one corpus, scored in one call."""
    keys, cands, refs, spans = [], [], [], []
    for key, pair in answers.items():
        try:
            ref_ans, dist_ans = pair
        except (TypeError, ValueError):
            raise InvalidInputError(f"answers[{key!r}] must be (reference_answers, distorted_answers)") from None
        if isinstance(ref_ans, str) or isinstance(dist_ans, str):
            raise InvalidInputError(f"answers[{key!r}]: give one answer per task as a list, not a single string")
        if len(ref_ans) != len(dist_ans) or not ref_ans:
            raise InvalidInputError(f"answers[{key!r}]: {len(ref_ans)} reference vs {len(dist_ans)} distorted answers; "
                                    "need the same non-zero number of tasks")
        spans.append((len(cands), len(cands) + len(ref_ans)))
        keys.append(key)
        cands.extend(dist_ans)
        refs.extend(ref_ans)
    scored = score_pairs(cands, refs, config, idf_refs=idf_refs, tokenizer=tokenizer)
    out = {}
    for key, (a, b) in zip(keys, spans):
        ps = tuple(scored[a:b])
        out[key] = CognitionScore(sum(p.combined for p in ps), sum(p.bleu for p in ps), sum(p.rouge_l for p in ps),
                                  sum(p.cider_d for p in ps), ps)
    return out
