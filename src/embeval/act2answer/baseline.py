"""The VLM baseline: the same binary items answered as text.

The VLM gets ``[composite, left card, right card]`` (the composite shows both cards side by side,
left card on the left, for models that read only one image) and a prompt asking for "left" or
"right". The answer is parsed (:func:`parse_choice`) into a side; the record has the same keys
as an episode (``item``, ``category``, ``layout``, ``success``, ``choice``, ...) so every
function of :mod:`embeval.act2answer.aggregate` applies. Both layouts are asked by default.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from embeval.act2answer.items import BinaryItem, load_image
from embeval.resize import resize

PROMPT = ("{question}\nTwo pictures lie on the table: one on the left and one on the right. "
          "Which picture answers the question? Reply with one word: left or right.")

_WORDS = {"left": "left", "right": "right", "first": "left", "second": "right", "a": "left", "b": "right",
          "1": "left", "2": "right"}
_RX = re.compile(r"\b(left|right|first|second)\b|^\s*\(?([ab12])\)?[\s.:)]*", re.IGNORECASE)


def parse_choice(text: str) -> str | None:
    """"left"/"right" from a free-text answer: the first of left/right/first/second, or a leading
    option letter/number (A/B, 1/2); None when the answer names none (counted out of bounds)."""
    m = _RX.search(text or "")
    if not m:
        return None
    word = (m.group(1) or m.group(2) or "").lower()
    return _WORDS.get(word)


def composite(left: np.ndarray, right: np.ndarray, gap: int = 8) -> np.ndarray:
    """Both cards side by side on a white strip (same height), RGB uint8."""
    h = max(left.shape[0], right.shape[0])

    def fit(im):
        if im.shape[0] == h:
            return im
        return resize(im, h, round(im.shape[1] * h / im.shape[0]), "pil_bicubic")

    lf, rt = fit(left), fit(right)
    out = np.full((h, lf.shape[1] + gap + rt.shape[1], 3), 255, np.uint8)
    out[:, : lf.shape[1]] = lf
    out[:, lf.shape[1] + gap:] = rt
    return out


def answer_item(vlm, item: BinaryItem, layout: str = "original", prompt: str = PROMPT) -> dict[str, Any]:
    """Ask ``vlm`` (a :class:`~embeval.subjects.protocols.VLM`) one item in ``layout``; a record."""
    lp, rp = item.images_in(layout)
    left, right = load_image(lp), load_image(rp)
    text = vlm.generate([composite(left, right), left, right], prompt.format(question=item.question.strip()))
    choice = parse_choice(text)
    correct = item.correct_side_in(layout)
    zone = "out_of_bounds" if choice is None else "correct" if choice == correct else "incorrect"
    return {"item": item.id, "category": item.category, "layout": layout, "correct_side": correct, "choice": choice,
            "zone": zone, "success": 1.0 if zone == "correct" else 0.0, "subject": str(getattr(vlm, "id", "")),
            "answer": text, "modality": "text"}


def answer_items(vlm, items: Iterable[BinaryItem], layouts: tuple[str, ...] = ("original", "swapped"),
                 prompt: str = PROMPT) -> Iterator[dict[str, Any]]:
    for item in items:
        for layout in layouts:
            yield answer_item(vlm, item, layout, prompt)
