"""A tiny multi-format VLM that looks at one or two tabletop images and answers a question as text:
an option letter, a number, pixel coordinates ``x, y`` or a comma-separated list of words.

Built from the embedded building blocks:

* **image encoder** ``encoder`` (:class:`~embeval.subjects.embedded.nets.VisionEncoder`, FiLM-conditioned
  on the question): the first ``frames`` images (two consecutive camera frames; a single image is
  repeated) resized to ``image_size`` and stacked along the channels, so motion is visible to the
  first convolution;
* **text encoder**: the frozen MiniLM sentence embedding (384-d) and ``text_proj`` (linear + GELU);
* **fusion** ``backbone`` (MLP over ``[image features, question]``) and one categorical head per
  answer slot (:meth:`SceneQAConfig.heads`): ``format`` (which kind of answer the question asks
  for, read from the text), ``letter``, ``number``, ``x``/``y`` (a ``grid`` x ``grid`` lattice over
  the image, answered as the cell centre in the first image's pixels) and ``list0..`` (words, ended
  by ``"none"``).

The answer is decoded from the heads (:meth:`TinySceneQA.answer_batch`), so every answer, right or
wrong, is the network's own. Training: ``embeval train a2eval``
(:mod:`embeval_analysis.a2eval.models`, items from the A2Eval procedural generators). Hidden
states: ``encoder.blocks.<i>`` and ``backbone.<i>``.
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
from embeval.subjects.embedded.text_encoder import (
    EMBED_DIM,
)

#: checkpoint ``family`` of this model (``config.json``)
FAMILY = "scene-qa"
#: answer kinds of the ``format`` head, in head order
FORMATS = ("letter", "number", "point", "list")
END = "none"  # list terminator, and the answer of an empty list


@dataclass
class SceneQAConfig:
    """Architecture and answer vocabularies (see the module docstring). Sizes in pixels."""

    image_size: int = 48
    frames: int = 2
    vision: dict = field(default_factory=lambda: {"width": 8, "depth": 3, "pool": "both", "film": True})
    text_dim: int = EMBED_DIM
    text_width: int = 32
    backbone_dims: list[int] = field(default_factory=lambda: [96])
    letters: str = "ABCD"
    max_number: int = 9
    grid: int = 24  # point answers: cells per image side
    words: list[str] = field(default_factory=list)  # list answers: the vocabulary (END is added)
    list_len: int = 4

    @classmethod
    def from_dict(cls, d: dict) -> SceneQAConfig:
        from embeval.config import check_keys

        check_keys(d, [f for f in cls.__dataclass_fields__], "scene-QA VLM config")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)

    def heads(self) -> dict[str, list[str]]:
        """Head name -> vocabulary, in the network's order."""
        out = {"format": list(FORMATS), "letter": list(self.letters),
               "number": [str(i) for i in range(self.max_number + 1)],
               "x": [str(i) for i in range(self.grid)], "y": [str(i) for i in range(self.grid)]}
        out.update({f"list{k}": list(self.words) + [END] for k in range(self.list_len)})
        return out


def _torch_net():
    import torch
    from torch import nn

    from embeval.subjects.embedded.nets import VisionConfig, VisionEncoder, _mlp_layers

    class SceneQANet(nn.Module):
        """(B, 3 * frames, S, S) images in [0, 1] + (B, 384) question embedding -> logits per head."""

        def __init__(self, cfg: SceneQAConfig):
            super().__init__()
            self.cfg = cfg
            self.text_proj = nn.Sequential(nn.Linear(cfg.text_dim, cfg.text_width), nn.GELU())
            self.encoder = VisionEncoder(VisionConfig(**cfg.vision), cfg.text_width, in_ch=3 * cfg.frames)
            self.backbone = _mlp_layers(self.encoder.out_dim + cfg.text_width, cfg.backbone_dims)
            self.heads = nn.ModuleDict({k: nn.Linear(cfg.backbone_dims[-1], len(v)) for k, v in cfg.heads().items()})

        def forward(self, images: torch.Tensor, text: torch.Tensor) -> dict[str, torch.Tensor]:
            t = self.text_proj(text)
            x = torch.cat([self.encoder(images, t), t], dim=-1)
            for layer in self.backbone:
                x = layer(x)
            return {k: h(x) for k, h in self.heads.items()}

    return SceneQANet


def build_net(cfg: SceneQAConfig):
    return _torch_net()(cfg)


def stack_frames(images: Sequence[np.ndarray], frames: int, size: int) -> np.ndarray:
    """(size, size, 3 * frames) uint8: the first ``frames`` images resized, the last one repeated
    when fewer are given (training and inference share this)."""
    if not len(images):
        raise InvalidInputError("the scene-QA VLM needs at least one RGB image")
    ims = [resize_image(np.asarray(im), size) for im in list(images)[:frames]]
    ims += [ims[-1]] * (frames - len(ims))
    return np.concatenate(ims, axis=2)


def decode(cfg: SceneQAConfig, logits: dict[str, np.ndarray], i: int, width: float, height: float) -> str:
    """The answer text of row ``i``: the ``format`` head picks which heads speak."""
    heads = cfg.heads()
    pick = {k: heads[k][int(np.argmax(v[i]))] for k, v in logits.items()}
    fmt = pick["format"]
    if fmt == "letter":
        return pick["letter"]
    if fmt == "number":
        return pick["number"]
    if fmt == "point":
        x = (int(pick["x"]) + 0.5) / cfg.grid * width
        y = (int(pick["y"]) + 0.5) / cfg.grid * height
        return f"{x:.0f}, {y:.0f}"
    words = []
    for k in range(cfg.list_len):
        w = pick[f"list{k}"]
        if w == END:
            break
        words.append(w)
    return ", ".join(words) or END


class TinySceneQA(EmbeddedModel):
    """A trained :class:`SceneQANet` as a :class:`~embeval.subjects.protocols.VLM`."""

    default_id = "scene-qa"

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str:
        """Answer ``prompt`` about ``images`` (one image, or two consecutive frames); ``gen`` is unused."""
        return self.answer_batch([images], [prompt])[0]

    def generate_batch(self, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str], **gen: Any) -> list[str]:
        """:meth:`generate` for many items in one forward pass."""
        return self.answer_batch(image_lists, prompts)

    def answer_batch(self, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str]) -> list[str]:
        logits = {k: v.cpu().numpy() for k, v in self._run(image_lists, prompts).items()}
        out = []
        for i, ims in enumerate(image_lists):
            h, w = np.asarray(ims[0]).shape[:2]
            out.append(decode(self.cfg, logits, i, w, h))
        return out

    def _run(self, image_lists, prompts):
        torch = self._torch
        if len(image_lists) != len(prompts):
            raise InvalidInputError(f"{self.id}: {len(image_lists)} image lists for {len(prompts)} prompts")
        x = np.stack([stack_frames(ims, self.cfg.frames, self.cfg.image_size) for ims in image_lists])
        x, t = self._image_tensor(x), self._text_tensor(prompts)
        with torch.no_grad():
            return self.net(x, t)

    def _hidden_forward(self, inputs):
        images, prompt = inputs
        return self._run([images], [prompt])

    def save(self, path: str | Path) -> Path:
        extra = {"id": self.id, "family": FAMILY, "meta": self.meta}
        return save_checkpoint(path, "vlm", self.cfg.to_dict(), self.net.state_dict(), extra)

    @classmethod
    def load(cls, path: str | Path, id: str | None = None, **kw: Any) -> TinySceneQA:
        doc, net = load_model(path, "vlm", lambda c: build_net(SceneQAConfig.from_dict(c)), family=FAMILY)
        return cls(net, id=id or doc.get("id", Path(path).name), meta=doc.get("meta"), **kw)
