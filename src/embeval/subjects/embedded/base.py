"""What every embedded text-conditioned model subject shares: a trained torch network (``net``, its
``cfg``), an ``id``, free-form ``meta`` (provenance, evaluation) and the frozen MiniLM question
encoder (:func:`~embeval.subjects.embedded.text_encoder.shared_text_encoder`); hidden states for
probing come from ``net`` (:class:`~embeval.subjects.hidden.HiddenStateMixin`). ``device``: where ``net`` runs
(:func:`~embeval.subjects.embedded.device.resolve_device`; the question encoder stays on the CPU). Every one
answers a batch of items in one forward pass with ``generate_batch`` (:class:`~embeval.subjects.protocols.BatchedVLM`)."""
from __future__ import annotations

from embeval.subjects.embedded.device import resolve_device
from embeval.subjects.embedded.text_encoder import TextEncoder, shared_text_encoder
from embeval.subjects.hidden import HiddenStateMixin


class EmbeddedModel(HiddenStateMixin):
    """Base of the tiny VLM, the two-card choice VLM and the scene-QA VLM (``default_id`` names a fresh one)."""

    default_id = "embedded-model"

    def __init__(self, net, id: str | None = None, meta: dict | None = None, text_encoder: TextEncoder | None = None,
                 device: str = "cpu"):
        import torch

        self.device = resolve_device(device)
        self.net = net.eval().to(self.device)
        self.cfg = net.cfg
        self.id = id or self.default_id
        self.meta = dict(meta or {})
        self._text = text_encoder or shared_text_encoder()
        self._torch = torch

    def _text_tensor(self, prompts):
        """(N, 384) prompt embeddings on the model's device."""
        return self._torch.from_numpy(self._text.encode(prompts)).to(self.device)

    def _image_tensor(self, x):
        """uint8 (N, H, W, C) images -> float (N, C, H, W) in [0, 1] on the model's device."""
        return self._torch.from_numpy(x).to(self.device).permute(0, 3, 1, 2).float().div_(255.0)

    def _hidden_module(self):
        return self.net
