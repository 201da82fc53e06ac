"""A tiny two-image VLM that answers binary Act2Answer questions as text: "left" or "right".

Unlike the slot-decoding :class:`~embeval.subjects.embedded.vlm.TinyVLM` (one image, a template
answer whose first side word ``parse_choice`` reads, hence answers by position), this model sees
both candidate cards with their side and the question:

* **image encoder** ``encoder`` (:class:`~embeval.subjects.embedded.nets.VisionEncoder`, shared by
  both cards, FiLM-conditioned on the question),
* **text encoder**: the frozen MiniLM sentence embedding (384-d) and ``text_proj`` (a trained
  linear + GELU to 128-d),
* **fusion** ``backbone``: an MLP over ``[left card features, right card features, question]``
  (the side is the slot position) and ``head`` -> 2 logits (left, right).

The parts are separate modules so a VLA can reuse ``encoder``/``text_proj``/``backbone``
(:meth:`TinyChoiceNet.card_features`, :meth:`TinyChoiceNet.fuse`). Training
(:func:`train_choice_vlm`) draws items from the procedural generators on a seed stream disjoint
from the Act2Answer suite's (``"act2answer-vlm-train"`` vs ``"act2answer-item"``) and shows every
item in both layouts in the same batch (images exchanged, label flipped), so the side carries no
signal. Hidden states: ``encoder.blocks.<i>`` (two rows per input: left, right card) and
``backbone.<i>``.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embeval.errors import ConfigError, InvalidInputError
from embeval.subjects.embedded.checkpoint import load_checkpoint, save_checkpoint
from embeval.subjects.embedded.preprocess import resize_image
from embeval.subjects.embedded.text_encoder import (
    EMBED_DIM,
    TextEncoder,
    shared_text_encoder,
)
from embeval.subjects.hidden import HiddenStateMixin

#: checkpoint ``family`` of this model (``config.json``); the slot VLMs have none ("slots")
FAMILY = "choice"
ANSWERS = ("left", "right")
#: seed stream of the training items (the Act2Answer suite uses "act2answer-item": disjoint)
TRAIN_STREAM = "act2answer-vlm-train"


@dataclass
class ChoiceVLMConfig:
    """Architecture: cards resized to ``card_size`` (square, pixels); see the module docstring."""

    card_size: int = 48
    vision: dict = field(default_factory=lambda: {"width": 16, "depth": 3, "pool": "both", "film": True})
    text_dim: int = EMBED_DIM
    text_width: int = 128
    backbone_dims: list[int] = field(default_factory=lambda: [128])

    @classmethod
    def from_dict(cls, d: dict) -> ChoiceVLMConfig:
        from embeval.config import check_keys

        check_keys(d, [f for f in cls.__dataclass_fields__], "choice VLM config")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


def _torch_net():
    import torch
    from torch import nn

    from embeval.subjects.embedded.nets import VisionConfig, VisionEncoder, _mlp_layers

    class TinyChoiceNet(nn.Module):
        """(left card, right card, question embedding) -> (B, 2) logits [left, right]."""

        def __init__(self, cfg: ChoiceVLMConfig):
            super().__init__()
            self.cfg = cfg
            self.text_proj = nn.Sequential(nn.Linear(cfg.text_dim, cfg.text_width), nn.GELU())
            self.encoder = VisionEncoder(VisionConfig(**cfg.vision), cfg.text_width)
            self.backbone = _mlp_layers(2 * self.encoder.out_dim + cfg.text_width, cfg.backbone_dims)
            self.head = nn.Linear(cfg.backbone_dims[-1], len(ANSWERS))

        def card_features(self, left: torch.Tensor, right: torch.Tensor, t: torch.Tensor):
            """Both cards through the shared encoder in one batch; ``t`` = projected text."""
            b = left.shape[0]
            f = self.encoder(torch.cat([left, right]), torch.cat([t, t]))
            return f[:b], f[b:]

        def fuse(self, fl: torch.Tensor, fr: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            x = torch.cat([fl, fr, t], dim=-1)
            for layer in self.backbone:
                x = layer(x)
            return x

        def forward(self, left: torch.Tensor, right: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
            t = self.text_proj(text)
            fl, fr = self.card_features(left, right, t)
            return self.head(self.fuse(fl, fr, t))

    return TinyChoiceNet


def build_net(cfg: ChoiceVLMConfig):
    return _torch_net()(cfg)


def split_composite(image: np.ndarray, gap: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(left card, right card) of one side-by-side image: the baseline's composite (two equal cards
    around a ``gap``-pixel strip, :func:`embeval.act2answer.baseline.composite`), each ``(W - gap) // 2``
    columns wide; an image no wider than ``2 * gap`` is split in halves."""
    w = image.shape[1]
    if w < 2:
        raise InvalidInputError(f"a side-by-side image needs >= 2 columns, got shape {image.shape}")
    h = (w - gap) // 2 if w > 2 * gap else w // 2
    return image[:, :h], image[:, w - h:]


def cards_of(images: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The (left, right) cards of a baseline call: ``[composite, left, right]`` -> cards 1 and 2;
    ``[left, right]`` -> as given; ``[composite]`` -> its two halves."""
    n = len(images)
    if n >= 3:
        return images[1], images[2]
    if n == 2:
        return images[0], images[1]
    if n == 1:
        return split_composite(np.asarray(images[0]))
    raise InvalidInputError("the choice VLM needs the two candidate images (or one side-by-side image)")


class TinyChoiceVLM(HiddenStateMixin):
    """A trained two-card chooser as a :class:`~embeval.subjects.protocols.VLM` (answers "left"/"right")."""

    def __init__(self, net, id: str = "tiny-vlm-a2a", meta: dict | None = None, text_encoder: TextEncoder | None = None):
        import torch

        self.net = net.eval()
        self.cfg = net.cfg
        self.id = id
        self.meta = dict(meta or {})
        self._text = text_encoder or shared_text_encoder()
        self._torch = torch

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str:
        """"left" or "right" for ``prompt`` about the two cards of ``images`` (see :func:`cards_of`)."""
        left, right = cards_of(images)
        return ANSWERS[int(np.argmax(self.probabilities([left], [right], [prompt])[0]))]

    def probabilities(self, lefts: Sequence[np.ndarray], rights: Sequence[np.ndarray], prompts: Sequence[str]) -> np.ndarray:
        """(N, 2) softmax over (left, right) per card pair and prompt."""
        torch = self._torch
        with torch.no_grad():
            return torch.softmax(self._run(lefts, rights, prompts), dim=-1).numpy()

    def _tensor(self, ims):
        torch = self._torch
        x = np.stack([resize_image(np.asarray(im), self.cfg.card_size) for im in ims])
        return torch.from_numpy(x).permute(0, 3, 1, 2).float().div_(255.0)

    def _run(self, lefts, rights, prompts):
        if not (len(lefts) == len(rights) == len(prompts)):
            raise InvalidInputError(f"{self.id}: {len(lefts)} left cards, {len(rights)} right cards, {len(prompts)} prompts")
        t = self._torch.from_numpy(self._text.encode(prompts))
        return self.net(self._tensor(lefts), self._tensor(rights), t)

    def _hidden_module(self):
        return self.net

    def _hidden_forward(self, inputs):
        images, prompt = inputs
        left, right = cards_of(images)
        with self._torch.no_grad():
            return self._run([left], [right], [prompt])

    def save(self, path: str | Path) -> Path:
        extra = {"id": self.id, "family": FAMILY, "answers": list(ANSWERS), "meta": self.meta}
        return save_checkpoint(path, "vlm", self.cfg.to_dict(), self.net.state_dict(), extra)

    @classmethod
    def load(cls, path: str | Path, id: str | None = None, **kw: Any) -> TinyChoiceVLM:
        doc, state = load_checkpoint(path, "vlm")
        if doc.get("family") != FAMILY:
            raise ConfigError(f"checkpoint {path} is not a choice VLM (family {doc.get('family')!r})")
        net = build_net(ChoiceVLMConfig.from_dict(doc["config"]))
        net.load_state_dict(state)
        return cls(net, id=id or doc.get("id", Path(path).name), meta=doc.get("meta"), **kw)


# --------------------------------------------------------------------------- data
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
    i = 0
    for ci, cat in enumerate(cats):
        for k in range(per_category):
            draft, side = draw_item(cat, derive_seed(seed, stream, cat, k), CARD_PX)
            c, d = resize_image(draft.correct, card_size), resize_image(draft.distractor, card_size)
            left[i], right[i] = (c, d) if side == "left" else (d, c)
            if draft.question not in questions:
                questions.append(draft.question)
            qidx[i], label[i], cidx[i] = questions.index(draft.question), ANSWERS.index(side), ci
            i += 1
    return ChoiceArrays(left, right, qidx, questions, label, cidx, cats)


def prompt_variants(question: str) -> list[str]:
    """The texts a question is trained under: bare, and inside the baseline's prompt."""
    from embeval.act2answer.baseline import PROMPT

    return [question, PROMPT.format(question=question.strip())]


# --------------------------------------------------------------------------- training
def train_choice_vlm(data: ChoiceArrays, cfg: ChoiceVLMConfig, train_cfg, seed: int, id: str = "tiny-vlm-a2a",
                     log: Callable[[str], None] | None = None, text_encoder: TextEncoder | None = None):
    """Cross-entropy on (left, right) with every sampled item in both layouts; returns (TinyChoiceVLM, TrainResult).

    Deterministic for a seed (one torch thread, ``torch.use_deterministic_algorithms``)."""
    import torch
    import torch.nn.functional as F

    from embeval.subjects.embedded.training import _loop, random_shift, seed_everything

    if len(data) == 0:
        raise InvalidInputError("no items to train the choice VLM on")
    rng = seed_everything(seed, train_cfg.threads)
    was_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        enc = text_encoder or shared_text_encoder()
        texts = [p for q in data.questions for p in prompt_variants(q)]
        nv = len(texts) // len(data.questions)
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
            t = temb[qidx[ii] * nv + torch.from_numpy(rng.integers(0, nv, size=len(idx)))]
            # the same items in both layouts: cards exchanged, label flipped
            out = net(torch.cat([lf, rt]), torch.cat([rt, lf]), torch.cat([t, t]))
            return F.cross_entropy(out, torch.cat([label[ii], 1 - label[ii]]))

        t0 = time.perf_counter()
        res = _loop(list(net.parameters()), len(data), step_fn, train_cfg, rng, log)
    finally:
        torch.use_deterministic_algorithms(was_det)
    meta = {"seed": seed, "train": asdict(train_cfg), "items": len(data), "categories": data.categories,
            "final_loss": res.losses[-1], "items_per_second": 2 * train_cfg.batch_size * train_cfg.steps / (time.perf_counter() - t0)}
    return TinyChoiceVLM(net.eval(), id=id, meta=meta, text_encoder=enc), res


# --------------------------------------------------------------------------- recipe
@dataclass
class ChoiceVLMRecipe:
    """Everything ``embeval train vlm --recipe tiny-vlm-a2a`` needs to reproduce the model from a seed."""

    name: str = "tiny-vlm-a2a"
    seed: int = 0  # training items (stream TRAIN_STREAM), initialisation, batches
    per_category: int = 2000  # training items per category (the full suite has 172)
    categories: list[str] = field(default_factory=list)  # empty: all procedural categories
    arch: dict = field(default_factory=dict)  # ChoiceVLMConfig overrides
    train: dict = field(default_factory=lambda: {"steps": 3000, "batch_size": 32, "lr": 2e-3})
    eval_per_category: int = 172  # held-out suite: the full Act2Answer procedural suite (seed eval_seed)
    eval_seed: int = 0


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
    vlm, res = train_choice_vlm(data, cfg, tcfg, seed=recipe.seed, id=recipe.name, log=log)
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
