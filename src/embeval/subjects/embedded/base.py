"""What every embedded text-conditioned model subject shares: a trained torch network (``net``, its
``cfg``), an ``id``, free-form ``meta`` (provenance, evaluation) and the frozen MiniLM question
encoder (:func:`~embeval.subjects.embedded.text_encoder.shared_text_encoder`); hidden states for
probing come from ``net`` (:class:`~embeval.subjects.hidden.HiddenStateMixin`)."""
from __future__ import annotations

from embeval.subjects.embedded.text_encoder import TextEncoder, shared_text_encoder
from embeval.subjects.hidden import HiddenStateMixin


class EmbeddedModel(HiddenStateMixin):
    """Base of the tiny VLM, the two-card choice VLM and the scene-QA VLM (``default_id`` names a fresh one)."""

    default_id = "embedded-model"

    def __init__(self, net, id: str | None = None, meta: dict | None = None, text_encoder: TextEncoder | None = None):
        import torch

        self.net = net.eval()
        self.cfg = net.cfg
        self.id = id or self.default_id
        self.meta = dict(meta or {})
        self._text = text_encoder or shared_text_encoder()
        self._torch = torch

    def _hidden_module(self):
        return self.net
