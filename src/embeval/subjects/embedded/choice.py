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
(:func:`embeval.act2answer.choice_training.train_choice_vlm`) draws items from the procedural generators on a seed stream disjoint
from the Act2Answer suite's (``"act2answer-vlm-train"`` vs ``"act2answer-item"``) and shows every
item in both layouts in the same batch (images exchanged, label flipped), so the side carries no
signal. Hidden states: ``encoder.blocks.<i>`` (two rows per input: left, right card) and
``backbone.<i>``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embeval.errors import InvalidInputError
from embeval.subjects.embedded.base import EmbeddedModel
from embeval.subjects.embedded.checkpoint import load_model, save_checkpoint
from embeval.subjects.embedded.preprocess import resize_image
from embeval.subjects.embedded.text_encoder import EMBED_DIM

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


class TinyChoiceVLM(EmbeddedModel):
    """A trained two-card chooser as a :class:`~embeval.subjects.protocols.VLM` (answers "left"/"right")."""

    default_id = "tiny-vlm-a2a"

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str:
        """"left" or "right" for ``prompt`` about the two cards of ``images`` (see :func:`cards_of`)."""
        left, right = cards_of(images)
        return ANSWERS[int(np.argmax(self.probabilities([left], [right], [prompt])[0]))]

    def generate_batch(self, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str], **gen: Any) -> list[str]:
        """:meth:`generate` for many items in one forward pass."""
        if len(image_lists) != len(prompts):
            raise InvalidInputError(f"{self.id}: {len(image_lists)} image lists for {len(prompts)} prompts")
        if not image_lists:
            return []
        cards = [cards_of(ims) for ims in image_lists]
        p = self.probabilities([c[0] for c in cards], [c[1] for c in cards], prompts)
        return [ANSWERS[int(i)] for i in np.argmax(p, axis=1)]

    def probabilities(self, lefts: Sequence[np.ndarray], rights: Sequence[np.ndarray], prompts: Sequence[str]) -> np.ndarray:
        """(N, 2) softmax over (left, right) per card pair and prompt."""
        torch = self._torch
        with torch.no_grad():
            return torch.softmax(self._run(lefts, rights, prompts), dim=-1).cpu().numpy()

    def _tensor(self, ims):
        return self._image_tensor(np.stack([resize_image(np.asarray(im), self.cfg.card_size) for im in ims]))

    def _run(self, lefts, rights, prompts):
        if not (len(lefts) == len(rights) == len(prompts)):
            raise InvalidInputError(f"{self.id}: {len(lefts)} left cards, {len(rights)} right cards, {len(prompts)} prompts")
        return self.net(self._tensor(lefts), self._tensor(rights), self._text_tensor(prompts))

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
        doc, net = load_model(path, "vlm", lambda c: build_net(ChoiceVLMConfig.from_dict(c)), family=FAMILY)
        return cls(net, id=id or doc.get("id", Path(path).name), meta=doc.get("meta"), **kw)


# --------------------------------------------------------------------------- data
# --------------------------------------------------------------------------- training
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
    #: also train on each item's action instruction ("put the cube on the sad face") as a prompt: the
    #: text a VLA built on this model receives in the cell (default off: the questions only)
    instructions: bool = False
    #: render-like augmentation of the cards (see ``choice_training.render_like``): {} = off, else
    #: {"min_px": smallest side the card is resampled to, "p": share of batches, "gain": brightness +-}
    augment: dict = field(default_factory=dict)

