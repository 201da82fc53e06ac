"""Training and evaluation of the two-card Act2Answer VLM (:class:`~embeval.subjects.embedded.choice.TinyChoiceVLM`).

The model lives with the embedded subjects; its data come from the Act2Answer item generator and its
report from the Act2Answer baseline and aggregation, so the recipe lives here, one layer above
``embeval.subjects`` (which never imports ``embeval.act2answer``). ``embeval train vlm --recipe
tiny-vlm-a2a`` and ``embeval train population`` call :func:`train_choice_recipe`.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from embeval.errors import ConfigError, InvalidInputError
from embeval.subjects.embedded.choice import (
    ANSWERS,
    TRAIN_STREAM,
    ChoiceVLMConfig,
    ChoiceVLMRecipe,
    TinyChoiceVLM,
    build_net,
)
from embeval.subjects.embedded.preprocess import resize_image
from embeval.subjects.embedded.text_encoder import TextEncoder, shared_text_encoder


@dataclass
class ChoiceArrays:
    """Training items in their original layout: ``left``/``right`` (N, S, S, 3) uint8 cards,
    ``question`` (N,) index into ``questions``, ``label`` (N,) 0 = left is correct, 1 = right,
    ``category`` (N,) index into ``categories``."""

    left: np.ndarray
    right: np.ndarray
    question: np.ndarray
    questions: list[str]
    label: np.ndarray
    category: np.ndarray
    categories: list[str]
    instruction: np.ndarray | None = None  # (N,) index into ``instructions`` (the item's action instruction)
    instructions: list[str] | None = None

    def __len__(self) -> int:
        return len(self.label)


def choice_arrays(per_category: int, seed: int, card_size: int, categories: Sequence[str] | None = None,
                  stream: str = TRAIN_STREAM) -> ChoiceArrays:
    """Draw ``per_category`` procedural items per category (seeds ``derive_seed(seed, stream, cat, k)``),
    cards resized to ``card_size`` as at inference."""
    from embeval.act2answer.generator import CARD_PX, CATEGORIES, draw_item
    from embeval.provenance import derive_seed

    cats = list(categories or CATEGORIES)
    bad = [c for c in cats if c not in CATEGORIES]
    if bad:
        raise ConfigError(f"unknown procedural categories {bad}; choose from {', '.join(CATEGORIES)}")
    if per_category < 1:
        raise ConfigError(f"per_category must be >= 1, got {per_category}")
    n = per_category * len(cats)
    left = np.empty((n, card_size, card_size, 3), np.uint8)
    right = np.empty_like(left)
    qidx, label, cidx, questions = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64), []
    iidx, instructions = np.empty(n, np.int64), []
    i = 0
    for ci, cat in enumerate(cats):
        for k in range(per_category):
            draft, side = draw_item(cat, derive_seed(seed, stream, cat, k), CARD_PX)
            c, d = resize_image(draft.correct, card_size), resize_image(draft.distractor, card_size)
            left[i], right[i] = (c, d) if side == "left" else (d, c)
            if draft.question not in questions:
                questions.append(draft.question)
            qidx[i], label[i], cidx[i] = questions.index(draft.question), ANSWERS.index(side), ci
            instr = draft.instruction.strip() or draft.question
            if instr not in instructions:
                instructions.append(instr)
            iidx[i] = instructions.index(instr)
            i += 1
    return ChoiceArrays(left, right, qidx, questions, label, cidx, cats, iidx, instructions)


def prompt_variants(question: str) -> list[str]:
    """The texts a question is trained under: bare, and inside the baseline's prompt."""
    from embeval.act2answer.baseline import PROMPT

    return [question, PROMPT.format(question=question.strip())]


def render_like(x, rng: np.random.Generator, min_px: int = 14, p: float = 0.75, gain: float = 0.15):
    """Render-like augmentation of a (B, 3, S, S) card batch in [0, 1]: with probability ``p`` the
    batch is resampled down to a random side in [``min_px``, S] (antialiased) and back up
    (bilinear), as a card seen at ~15-30 px by the cell's third-person camera and rectified; every
    card gets a brightness gain in [1 - ``gain``, 1 + ``gain``] (the renderer's lighting)."""
    import torch
    import torch.nn.functional as F

    b, _, h, w = x.shape
    if rng.random() < p:
        s = int(rng.integers(min_px, h + 1))
        x = F.interpolate(F.interpolate(x, size=(s, s), mode="bilinear", antialias=True, align_corners=False),
                          size=(h, w), mode="bilinear", align_corners=False)
    g = torch.from_numpy(rng.uniform(1 - gain, 1 + gain, size=(b, 1, 1, 1)).astype(np.float32))
    return (x * g).clamp_(0.0, 1.0)


def train_choice_vlm(data: ChoiceArrays, cfg: ChoiceVLMConfig, train_cfg, seed: int, id: str = "tiny-vlm-a2a",
                     log: Callable[[str], None] | None = None, text_encoder: TextEncoder | None = None,
                     instructions: bool = False, augment: dict | None = None):
    """Cross-entropy on (left, right) with every sampled item in both layouts; returns (TinyChoiceVLM, TrainResult).

    ``instructions``: each item's action instruction is one more prompt variant (drawn as often as each
    question form); ``augment``: keyword arguments of :func:`render_like` (None/{}: off).
    Deterministic for a seed (one torch thread, ``torch.use_deterministic_algorithms``)."""
    import torch
    import torch.nn.functional as F

    from embeval.subjects.embedded.training import _loop, deterministic, random_shift

    if len(data) == 0:
        raise InvalidInputError("no items to train the choice VLM on")
    with deterministic(seed, train_cfg.threads) as rng:
        enc = text_encoder or shared_text_encoder()
        texts = [p for q in data.questions for p in prompt_variants(q)]
        nv = len(texts) // len(data.questions)
        if instructions:
            if data.instructions is None:
                raise InvalidInputError("training on instructions needs ChoiceArrays with instructions")
            texts += list(data.instructions)
            iidx = torch.from_numpy(data.instruction)
        temb = torch.from_numpy(enc.encode(texts))
        net = build_net(cfg).train()
        left = torch.from_numpy(data.left).permute(0, 3, 1, 2).contiguous()
        right = torch.from_numpy(data.right).permute(0, 3, 1, 2).contiguous()
        qidx = torch.from_numpy(data.question)
        label = torch.from_numpy(data.label)

        def step_fn(idx):
            ii = torch.from_numpy(idx)
            lf = random_shift(left[ii].float().div_(255.0), train_cfg.shift_pixels, rng)
            rt = random_shift(right[ii].float().div_(255.0), train_cfg.shift_pixels, rng)
            if instructions:  # variant nv = the instruction
                k = torch.from_numpy(rng.integers(0, nv + 1, size=len(idx)))
                t = temb[torch.where(k < nv, qidx[ii] * nv + k.clamp(max=nv - 1), nv * len(data.questions) + iidx[ii])]
            else:
                t = temb[qidx[ii] * nv + torch.from_numpy(rng.integers(0, nv, size=len(idx)))]
            if augment:
                lf, rt = render_like(lf, rng, **augment), render_like(rt, rng, **augment)
            # the same items in both layouts: cards exchanged, label flipped
            out = net(torch.cat([lf, rt]), torch.cat([rt, lf]), torch.cat([t, t]))
            return F.cross_entropy(out, torch.cat([label[ii], 1 - label[ii]]))

        t0 = time.perf_counter()
        res = _loop(list(net.parameters()), len(data), step_fn, train_cfg, rng, log)
    meta = {"seed": seed, "train": asdict(train_cfg), "items": len(data), "categories": data.categories,
            "final_loss": res.losses[-1], "items_per_second": 2 * train_cfg.batch_size * train_cfg.steps / (time.perf_counter() - t0)}
    return TinyChoiceVLM(net.eval(), id=id, meta=meta, text_encoder=enc), res


def evaluate_choice_vlm(vlm, items) -> dict:
    """Answer ``items`` in both layouts through the Act2Answer VLM-baseline path
    (:func:`embeval.act2answer.baseline.answer_items`); per category and overall: rate, Wilson 95 %
    interval, swap consistency, position bias."""
    from embeval.act2answer.aggregate import category_rates, swap_stats
    from embeval.act2answer.baseline import answer_items

    recs = list(answer_items(vlm, items))
    out: dict = {"items": len(items), "answers": len(recs), "categories": {}}
    for cr in category_rates(recs):
        sub = recs if cr.category == "all" else [r for r in recs if r["category"] == cr.category]
        ss = swap_stats(sub)
        out["categories"][cr.category] = {"rate": cr.rate, "items": cr.n_items, "answers": cr.n_episodes, "wilson95": [cr.ci_low, cr.ci_high],
                                          "regime": cr.regime, "consistency": ss.consistency,
                                          "position_bias": ss.position_bias}
    return out


def train_choice_recipe(recipe: ChoiceVLMRecipe, out: str | Path, work: str | Path | None = None,
                        log: Callable[[str], None] | None = print) -> dict:
    """Draw training items, train, evaluate on the held-out procedural suite, save to ``out``; returns the report."""
    import json

    from embeval.act2answer.generator import generate_items
    from embeval.subjects.embedded.training import TrainConfig

    t0 = time.perf_counter()
    cfg = ChoiceVLMConfig.from_dict({**ChoiceVLMConfig().to_dict(), **recipe.arch})
    tcfg = TrainConfig(**{**asdict(TrainConfig()), **recipe.train})
    data = choice_arrays(recipe.per_category, recipe.seed, cfg.card_size, recipe.categories or None)
    t_data = time.perf_counter() - t0
    if log:
        log(f"{recipe.name}: {len(data)} training items ({len(data.categories)} categories, drawn in {t_data:.0f} s); "
            f"training {tcfg.steps} steps x {tcfg.batch_size} items x 2 layouts")
    vlm, res = train_choice_vlm(data, cfg, tcfg, seed=recipe.seed, id=recipe.name, log=log,
                                instructions=recipe.instructions, augment=recipe.augment or None)
    report: dict = {"recipe": asdict(recipe), "train": res.to_dict(), "data_seconds": t_data,
                    "items_per_second": vlm.meta["items_per_second"]}
    if recipe.eval_per_category > 0:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="a2a-suite-") as tmp:  # the suite's images, drawn from its seed
            suite = Path(work) / f"a2a-suite-{recipe.eval_seed}-{recipe.eval_per_category}" if work else Path(tmp)
            items = generate_items(suite, recipe.categories or None, recipe.eval_per_category, recipe.eval_seed)
            ev = evaluate_choice_vlm(vlm, items)
        ev["suite"] = {"seed": recipe.eval_seed, "per_category": recipe.eval_per_category}
        report["eval"] = ev
        vlm.meta["eval"] = ev
    vlm.meta["recipe"] = asdict(recipe)
    vlm.save(out)
    report["seconds"] = time.perf_counter() - t0
    (Path(out) / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return report


def format_report(ev: dict) -> str:
    """Text table of :func:`evaluate_choice_vlm`'s result."""
    lines = [f"{'category':10s} {'SR %':>6s} {'Wilson 95% CI':>15s} {'consistency':>11s} {'pos. bias':>9s}  regime"]
    cats = ev["categories"]
    for c in sorted(cats, key=lambda c: (c == "all", c)):
        d = cats[c]
        lo, hi = d["wilson95"]
        lines.append(f"{c:10s} {100 * d['rate']:6.1f} [{100 * lo:5.1f}, {100 * hi:5.1f}] {d['consistency']:11.3f} "
                     f"{d['position_bias']:+9.3f}  {d['regime']}")
    return "\n".join(lines)
