"""Binary-choice Act2Answer items and their JSONL files.

An item is one question with two candidate images. In its *original* layout the image
``left_image`` lies on the left card (robot frame +y) and ``right_image`` on the right card;
``correct_side`` says which of them answers the question. Every item is also run in the
*swapped* layout (images exchanged, so the correct side flips).

Image paths in a JSONL file are stored relative to the file's folder when they lie under it.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from embeval.config import check_keys
from embeval.errors import ConfigError, InvalidInputError, MissingFileError, read_jsonl
from embeval.image_io import check_image_file

SIDES = ("left", "right")
LAYOUTS = ("original", "swapped")


def other_side(side: str) -> str:
    if side not in SIDES:
        raise InvalidInputError(f"side must be 'left' or 'right', got {side!r}")
    return "right" if side == "left" else "left"


@dataclass
class BinaryItem:
    """One binary-choice question (see the module docstring for the layout convention)."""

    id: str
    question: str  # the VQA question ("Which face is happy?")
    left_image: str  # image file (PNG/JPG) on the left card in the original layout
    right_image: str
    correct_side: str  # "left" | "right" in the original layout
    category: str  # knowledge category ("color", "emotion", ...)
    source: str = ""  # where it came from ("procedural", "mllm-compbench", ...)
    instruction: str = ""  # action instruction; empty: built from the question (see instruction_for)
    context_image: str | None = None  # optional question image shown on a third card (MMBench, OK-VQA)
    options: tuple[str, str] = ("", "")  # text of the (left, right) options where the source has text
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.id, str) or not self.id:
            raise ConfigError(f"item id must be a non-empty string, got {self.id!r}")
        for k in ("question", "left_image", "right_image", "correct_side", "category", "source", "instruction"):
            v = getattr(self, k)
            if not isinstance(v, str):
                raise ConfigError(f"item {self.id!r}: {k} must be a string, got {type(v).__name__} {str(v)[:40]!r}")
        if self.context_image is not None and not isinstance(self.context_image, str):
            raise ConfigError(f"item {self.id!r}: context_image must be a string (an image path) or null, "
                              f"got {type(self.context_image).__name__}")
        if isinstance(self.options, (str, bytes)) or not isinstance(self.options, (list, tuple)) or \
                not all(isinstance(o, (str, int, float)) for o in self.options):
            raise ConfigError(f"item {self.id!r}: options must be a list of 2 strings (left, right), got {self.options!r}"[:200])
        if not isinstance(self.meta, dict):
            raise ConfigError(f"item {self.id!r}: meta must be a JSON object, got {type(self.meta).__name__}")
        if self.correct_side not in SIDES:
            raise ConfigError(f"item {self.id!r}: correct_side must be 'left' or 'right', got {self.correct_side!r}")
        if not self.question.strip():
            raise ConfigError(f"item {self.id!r}: question must not be empty")
        self.options = tuple(str(o) for o in self.options)  # type: ignore[assignment]
        if len(self.options) != 2:
            raise ConfigError(f"item {self.id!r}: options must have 2 entries (left, right), got {self.options}")

    # -- layouts ------------------------------------------------------------------------------
    def correct_side_in(self, layout: str) -> str:
        """The correct side in ``layout`` ("original" or "swapped")."""
        if layout not in LAYOUTS:
            raise ConfigError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        return self.correct_side if layout == "original" else other_side(self.correct_side)

    def images_in(self, layout: str) -> tuple[str, str]:
        """(left image, right image) in ``layout``."""
        self.correct_side_in(layout)
        return (self.left_image, self.right_image) if layout == "original" else (self.right_image, self.left_image)

    def swapped(self) -> BinaryItem:
        """The item with its layout exchanged (same question, same correct image)."""
        return replace(self, left_image=self.right_image, right_image=self.left_image,
                       correct_side=other_side(self.correct_side), options=(self.options[1], self.options[0]))

    # -- serialisation ------------------------------------------------------------------------
    def to_dict(self, base: Path | None = None) -> dict[str, Any]:
        d = asdict(self)
        d["options"] = list(self.options)
        if base is not None:
            for k in ("left_image", "right_image", "context_image"):
                if d[k]:
                    d[k] = _relative(d[k], base)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], base: Path | None = None, where: str = "item") -> BinaryItem:
        if not isinstance(d, Mapping):
            raise ConfigError(f"{where} must be a JSON object, got {type(d).__name__}")
        check_keys(d, (f.name for f in fields(cls)), where)
        missing = [k for k in ("id", "question", "left_image", "right_image", "correct_side", "category") if k not in d]
        if missing:
            raise ConfigError(f"{where}: missing field(s) {missing}")
        d = dict(d)
        if base is not None:
            for k in ("left_image", "right_image", "context_image"):
                if d.get(k) and isinstance(d[k], str) and not Path(d[k]).is_absolute():
                    d[k] = str(base / d[k])
        if isinstance(d["id"], int) and not isinstance(d["id"], bool):
            d["id"] = str(d["id"])  # numeric ids of converted data sets
        try:
            return cls(**d)
        except ConfigError as exc:  # a field of the wrong type or value: name the file and line
            raise ConfigError(f"{where}: {exc}") from None


def _relative(path: str, base: Path) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(p)


def write_items(items: Iterable[BinaryItem], path: str | Path) -> Path:
    """Write items as JSONL (one object a line); image paths relative to the file's folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    items = list(items)
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise ConfigError(f"item ids must be unique; repeated: {dup}")
    with path.open("w") as f:
        for it in items:
            f.write(json.dumps(it.to_dict(path.parent), sort_keys=True) + "\n")
    return path


def read_items(path: str | Path, check_images: bool = False) -> list[BinaryItem]:
    """Read a JSONL item file; relative image paths resolve against its folder.

    ``check_images``: raise :class:`MissingFileError` when an image file does not exist.
    """
    path = Path(path)
    out = []
    for n, d in read_jsonl(path, "item file", missing=f"item file {path} not found; make one with "
                                                      f"`embeval act2answer items generate --out {path}`"):
        it = BinaryItem.from_dict(d, path.parent, where=f"{path} line {n}")
        if check_images:
            for p in (it.left_image, it.right_image, it.context_image):
                if p and not Path(p).is_file():
                    raise MissingFileError(f"{path} line {n}: image {p} not found; copy the images next to the item file")
                if p:
                    check_image_file(p, f"{path} line {n} (item {it.id!r}): image")
        out.append(it)
    ids = [it.id for it in out]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{path}: item ids must be unique")
    return out


def load_image(path: str) -> Any:
    """An item image as RGB uint8 (H, W, 3), decoded by :func:`embeval.image_io.read_image` (the same pixels the
    simulators' cards show, see :func:`card_textures`)."""
    from embeval.image_io import read_image

    return read_image(path, "card image")


def card_textures(item: BinaryItem, layout: str) -> dict[str, str]:
    """Card name (``card_left``, ``card_right``, ``card_context``) -> an image file the simulators texture as the
    item's image in ``layout`` (:func:`embeval.sim.textures.loadable`: WebP, 16-bit, grey ... become an 8-bit RGB
    PNG). One-line error naming the item and the file when an image is unreadable or too large."""
    from embeval.sim.textures import loadable

    left, right = item.images_in(layout)
    names = {"card_left": left, "card_right": right}
    if item.context_image:
        names["card_context"] = item.context_image
    return {k: loadable(v, f"item {item.id!r}: card image") for k, v in names.items()}
