"""The tiny VLM as a :class:`~embeval.subjects.protocols.VLM`: image + task prompt -> a short
answer (about 10 words) saying how to do the task.

It is a trained slot decoder: a text-conditioned CNN predicts one categorical value per answer
slot (e.g. the object, where it lies, the motion, the goal) and the answer is the stored template
filled with the predicted values. Answers therefore change with the image, and its errors are the
classifier's genuine mistakes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embeval.errors import InvalidInputError
from embeval.subjects.embedded.base import EmbeddedModel
from embeval.subjects.embedded.checkpoint import load_model, save_checkpoint
from embeval.subjects.embedded.preprocess import resize_image
from embeval.subjects.embedded.text_encoder import TextEncoder


class TinyVLM(EmbeddedModel):
    """A trained :class:`~embeval.subjects.embedded.nets.TinyVLMNet` plus its answer template.

    Hidden states (:meth:`hidden_states`, input: ``(image, prompt)``): ``encoder.blocks.<i>`` and
    ``backbone.<i>``, each (1, D).
    """

    default_id = "tiny-vlm"

    def __init__(self, net, template: str, id: str | None = None, meta: dict | None = None,
                 text_encoder: TextEncoder | None = None, device: str = "cpu"):
        super().__init__(net, id, meta, text_encoder, device)
        self.template = template

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str:
        """Answer ``prompt`` about ``images[0]`` (further images are ignored); ``gen`` is accepted and unused."""
        return self.answer_batch([images[0] if len(images) else None], [prompt])[0]

    def generate_batch(self, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str], **gen: Any) -> list[str]:
        """:meth:`generate` for many items in one forward pass (the first image of each list)."""
        return self.answer_batch([ims[0] if len(ims) else None for ims in image_lists], prompts)

    def predict_slots(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[dict[str, str]]:
        """The predicted slot values per (image, prompt) pair."""
        logits = self._logits(images, prompts)
        return [{s: self.cfg.slots[s][int(np.argmax(v[i]))] for s, v in logits.items()} for i in range(len(prompts))]

    def answer_batch(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[str]:
        return [self.template.format(**slots) for slots in self.predict_slots(images, prompts)]

    def _hidden_forward(self, inputs):
        image, prompt = inputs
        return self._run([image], [prompt])

    def _logits(self, images, prompts) -> dict[str, np.ndarray]:
        return {k: v.cpu().numpy() for k, v in self._run(images, prompts).items()}

    def _run(self, images, prompts):
        torch = self._torch
        if len(images) != len(prompts):
            raise InvalidInputError(f"{self.id}: {len(images)} images for {len(prompts)} prompts")
        if any(im is None for im in images):
            raise InvalidInputError(f"{self.id} needs one RGB image per prompt")
        x = np.stack([resize_image(im, self.cfg.image_size) for im in images])
        x, t = self._image_tensor(x), self._text_tensor(prompts)
        with torch.no_grad():
            return self.net(x, t)

    def save(self, path: str | Path) -> Path:
        extra = {"id": self.id, "template": self.template, "meta": self.meta}
        return save_checkpoint(path, "vlm", self.cfg.to_dict(), self.net.state_dict(), extra)

    @classmethod
    def load(cls, path: str | Path, id: str | None = None, **kw: Any) -> "TinyVLM":
        from embeval.subjects.embedded.nets import TinyVLMNet, VLMConfig

        doc, net = load_model(path, "vlm", lambda c: TinyVLMNet(VLMConfig.from_dict(c)))
        return cls(net, doc["template"], id=id or doc.get("id", Path(path).name), meta=doc.get("meta"), **kw)
