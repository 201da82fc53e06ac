"""Procedural Act2Answer items with ground truth: card images drawn from a seed.

Each category draws two candidate cards (the correct one and a distractor) and states the
question and the action instruction; the generator places the correct card on a seeded side.
Cards are square RGB images (default 96 px) drawn with Pillow: flat table-card graphics, the
same images the simulated cell textures onto its cards and a printer puts on the real table.

Categories (:data:`CATEGORIES`): color, shape, counting, symmetry, attribute (size), state (full
or empty glass), emotion (face), time (clock), traffic (light), spatial (above/below).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embeval.act2answer.items import BinaryItem, write_items
from embeval.errors import ConfigError
from embeval.provenance import derive_seed

CARD_PX = 96

#: Colour names -> RGB 0..255 (distinct under the sim's lighting).
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (215, 30, 25), "green": (40, 175, 50), "blue": (30, 75, 215), "yellow": (240, 215, 25),
    "orange": (240, 125, 15), "purple": (140, 50, 190), "black": (20, 20, 20),
}
SHAPES = ("circle", "square", "triangle", "star", "diamond")
HOURS = (3, 6, 9, 12)


@dataclass
class Draft:
    """One drawn item before placement: the correct and the distractor card."""

    question: str
    instruction: str
    correct: np.ndarray
    distractor: np.ndarray
    options: tuple[str, str]  # (correct, distractor) answer words
    meta: dict


def _canvas(rng, px: int):
    from PIL import Image, ImageDraw

    bg = tuple(int(v) for v in rng.integers(225, 256, 3))
    im = Image.new("RGB", (px, px), bg)
    return im, ImageDraw.Draw(im)


def _shape(draw, kind: str, cx: float, cy: float, r: float, fill, outline=None, width: int = 1) -> None:
    if kind == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill, outline=outline, width=width)
    elif kind == "square":
        draw.rectangle([cx - r * 0.85, cy - r * 0.85, cx + r * 0.85, cy + r * 0.85], fill=fill, outline=outline, width=width)
    elif kind == "triangle":
        draw.polygon([(cx, cy - r), (cx - r, cy + r * 0.8), (cx + r, cy + r * 0.8)], fill=fill, outline=outline)
    elif kind == "diamond":
        draw.polygon([(cx, cy - r), (cx + r * 0.75, cy), (cx, cy + r), (cx - r * 0.75, cy)], fill=fill, outline=outline)
    elif kind == "star":
        pts = []
        for k in range(10):
            a = -math.pi / 2 + k * math.pi / 5
            rr = r if k % 2 == 0 else r * 0.45
            pts.append((cx + rr * math.cos(a), cy + rr * math.sin(a)))
        draw.polygon(pts, fill=fill, outline=outline)
    else:  # pragma: no cover - internal
        raise ConfigError(f"unknown shape {kind!r}")


def _arr(im) -> np.ndarray:
    return np.asarray(im, dtype=np.uint8).copy()


def _pick(rng, seq, n=1):
    idx = rng.choice(len(seq), size=n, replace=False)
    return [seq[i] for i in idx]


# --------------------------------------------------------------------------- categories
def cat_color(rng, px) -> Draft:
    a, b = _pick(rng, list(PALETTE), 2)
    kind = str(rng.choice(SHAPES))
    cards = []
    for c in (a, b):
        im, d = _canvas(rng, px)
        _shape(d, kind, px / 2 + rng.uniform(-4, 4), px / 2 + rng.uniform(-4, 4), px * 0.32, PALETTE[c])
        cards.append(_arr(im))
    return Draft(f"Which picture shows a {a} {kind}?", f"put the cube on the {a} {kind}", cards[0], cards[1], (a, b),
                 {"answer": a, "distractor": b, "shape": kind})


def cat_shape(rng, px) -> Draft:
    a, b = _pick(rng, list(SHAPES), 2)
    col = PALETTE[str(rng.choice(list(PALETTE)))]
    cards = []
    for k in (a, b):
        im, d = _canvas(rng, px)
        _shape(d, k, px / 2, px / 2, px * 0.32, col)
        cards.append(_arr(im))
    return Draft(f"Which picture shows a {a}?", f"put the cube on the {a}", cards[0], cards[1], (a, b), {"answer": a, "distractor": b})


def _dots(rng, px, n, col) -> np.ndarray:
    im, d = _canvas(rng, px)
    r = px * 0.07
    placed: list[tuple[float, float]] = []
    while len(placed) < n:
        x, y = rng.uniform(r + 4, px - r - 4, 2)
        if all((x - u) ** 2 + (y - v) ** 2 > (2.6 * r) ** 2 for u, v in placed):
            placed.append((x, y))
    for x, y in placed:
        _shape(d, "circle", x, y, r, col)
    return _arr(im)


def cat_counting(rng, px) -> Draft:
    a, b = _pick(rng, [1, 2, 3, 4, 5], 2)
    col = PALETTE[str(rng.choice(list(PALETTE)))]
    words = {1: "one dot", 2: "two dots", 3: "three dots", 4: "four dots", 5: "five dots"}
    return Draft(f"Which picture has exactly {words[a]}?", f"put the cube on the picture with {words[a]}",
                 _dots(rng, px, a, col), _dots(rng, px, b, col), (str(a), str(b)), {"answer": int(a), "distractor": int(b)})


def cat_symmetry(rng, px) -> Draft:
    col = PALETTE[str(rng.choice(list(PALETTE)))]
    n = int(rng.integers(5, 8))
    # symmetric: mirror-symmetric about the vertical axis; asymmetric: random radii
    radii = rng.uniform(0.18, 0.42, n) * px
    sym = np.concatenate([radii, radii[-2:0:-1]]) if n > 2 else radii
    asym = rng.uniform(0.12, 0.44, len(sym)) * px
    asym[0] = 0.44 * px
    asym[len(sym) // 3] = 0.14 * px
    cards = []
    for rr in (sym, asym):
        im, d = _canvas(rng, px)
        m = len(rr)
        pts = [(px / 2 + r * math.sin(2 * math.pi * k / m), px / 2 - r * math.cos(2 * math.pi * k / m)) for k, r in enumerate(rr)]
        d.polygon(pts, fill=col)
        cards.append(_arr(im))
    return Draft("Which shape is mirror symmetric?", "put the cube on the symmetric shape", cards[0], cards[1],
                 ("symmetric", "asymmetric"), {"answer": "symmetric"})


def cat_attribute(rng, px) -> Draft:
    big = bool(rng.integers(0, 2))
    kind = str(rng.choice(SHAPES))
    col = PALETTE[str(rng.choice(list(PALETTE)))]
    cards = {}
    for size, r in (("large", px * 0.40), ("small", px * 0.16)):
        im, d = _canvas(rng, px)
        _shape(d, kind, px / 2, px / 2, r, col)
        cards[size] = _arr(im)
    a, b = ("large", "small") if big else ("small", "large")
    word = "bigger" if big else "smaller"
    return Draft(f"Which {kind} is {word}?", f"put the cube on the {word} {kind}", cards[a], cards[b], (a, b), {"answer": a})


def _glass(rng, px, level: float) -> np.ndarray:
    im, d = _canvas(rng, px)
    x0, x1, y0, y1 = px * 0.3, px * 0.7, px * 0.15, px * 0.88
    if level > 0:
        d.rectangle([x0, y1 - (y1 - y0) * level, x1, y1], fill=(60, 120, 230))
    d.rectangle([x0, y0, x1, y1], outline=(40, 40, 40), width=3)
    return _arr(im)


def cat_state(rng, px) -> Draft:
    full = bool(rng.integers(0, 2))
    f, e = _glass(rng, px, rng.uniform(0.75, 0.95)), _glass(rng, px, 0.0)
    a = "full" if full else "empty"
    return Draft(f"Which glass is {a}?", f"put the cube on the {a} glass", f if full else e, e if full else f,
                 (a, "empty" if full else "full"), {"answer": a})


def _face(rng, px, happy: bool) -> np.ndarray:
    im, d = _canvas(rng, px)
    c, r = px / 2, px * 0.42
    d.ellipse([c - r, c - r, c + r, c + r], fill=(245, 205, 60), outline=(40, 40, 40), width=2)
    for sx in (-1, 1):
        d.ellipse([c + sx * r * 0.38 - 4, c - r * 0.3 - 5, c + sx * r * 0.38 + 4, c - r * 0.3 + 5], fill=(30, 30, 30))
    box = [c - r * 0.5, c - r * 0.05, c + r * 0.5, c + r * 0.65] if happy else [c - r * 0.5, c + r * 0.3, c + r * 0.5, c + r * 1.0]
    d.arc(box, 20 if happy else 200, 160 if happy else 340, fill=(30, 30, 30), width=4)
    return _arr(im)


def cat_emotion(rng, px) -> Draft:
    happy = bool(rng.integers(0, 2))
    a, b = ("happy", "sad") if happy else ("sad", "happy")
    return Draft(f"Which face looks {a}?", f"put the cube on the {a} face", _face(rng, px, happy), _face(rng, px, not happy),
                 (a, b), {"answer": a})


def _clock(rng, px, hour: int) -> np.ndarray:
    im, d = _canvas(rng, px)
    c, r = px / 2, px * 0.42
    d.ellipse([c - r, c - r, c + r, c + r], fill=(250, 250, 250), outline=(30, 30, 30), width=3)
    for k in range(12):
        a = 2 * math.pi * k / 12
        d.line([c + 0.85 * r * math.sin(a), c - 0.85 * r * math.cos(a), c + r * math.sin(a), c - r * math.cos(a)], fill=(30, 30, 30), width=2)
    a = 2 * math.pi * (hour % 12) / 12
    d.line([c, c, c + 0.5 * r * math.sin(a), c - 0.5 * r * math.cos(a)], fill=(20, 20, 20), width=5)  # hour hand
    d.line([c, c, c, c - 0.8 * r], fill=(20, 20, 20), width=3)  # minute hand at 12
    return _arr(im)


def cat_time(rng, px) -> Draft:
    a, b = _pick(rng, list(HOURS), 2)
    return Draft(f"Which clock shows {a} o'clock?", f"put the cube on the clock showing {a} o'clock",
                 _clock(rng, px, a), _clock(rng, px, b), (f"{a}:00", f"{b}:00"), {"answer": int(a), "distractor": int(b)})


def _light(rng, px, lit: str) -> np.ndarray:
    im, d = _canvas(rng, px)
    d.rectangle([px * 0.34, px * 0.08, px * 0.66, px * 0.92], fill=(45, 45, 45))
    for k, name in enumerate(("red", "yellow", "green")):
        col = {"red": (235, 30, 30), "yellow": (245, 200, 30), "green": (30, 210, 60)}[name] if name == lit else (90, 90, 90)
        cy = px * (0.23 + 0.27 * k)
        d.ellipse([px / 2 - px * 0.11, cy - px * 0.11, px / 2 + px * 0.11, cy + px * 0.11], fill=col)
    return _arr(im)


def cat_traffic(rng, px) -> Draft:
    stop = bool(rng.integers(0, 2))
    a, b = ("red", "green") if stop else ("green", "red")
    meaning = "stop" if stop else "go"
    return Draft(f"Which traffic light means {meaning}?", f"put the cube on the traffic light that means {meaning}",
                 _light(rng, px, a), _light(rng, px, b), (meaning, "go" if stop else "stop"), {"answer": a})


def _spatial(rng, px, above: bool, col) -> np.ndarray:
    im, d = _canvas(rng, px)
    y = px / 2 + rng.uniform(-6, 6)
    d.rectangle([px * 0.12, y - 3, px * 0.88, y + 3], fill=(40, 40, 40))
    x = rng.uniform(px * 0.3, px * 0.7)
    cy = y - px * 0.25 if above else y + px * 0.25
    _shape(d, "circle", x, cy, px * 0.12, col)
    return _arr(im)


def cat_spatial(rng, px) -> Draft:
    above = bool(rng.integers(0, 2))
    col = PALETTE[str(rng.choice(list(PALETTE)))]
    a, b = ("above", "below") if above else ("below", "above")
    return Draft(f"In which picture is the ball {a} the bar?", f"put the cube on the picture where the ball is {a} the bar",
                 _spatial(rng, px, above, col), _spatial(rng, px, not above, col), (a, b), {"answer": a})


#: category -> drawing function (rng, px) -> Draft. Add one by adding a line.
CATEGORIES: dict[str, Callable[..., Draft]] = {
    "color": cat_color, "shape": cat_shape, "counting": cat_counting, "symmetry": cat_symmetry,
    "attribute": cat_attribute, "state": cat_state, "emotion": cat_emotion, "time": cat_time,
    "traffic": cat_traffic, "spatial": cat_spatial,
}

#: The full procedural suite: 10 categories x 172 items = 1,720 items = 3,440 episodes.
FULL_SUITE_PER_CATEGORY = 172


def draw_item(category: str, seed: int, px: int = CARD_PX) -> tuple[Draft, str]:
    """The drawn cards of one item and its correct side (original layout), from ``seed``."""
    if category not in CATEGORIES:
        raise ConfigError(f"unknown procedural category {category!r}; choose from {', '.join(CATEGORIES)}")
    rng = np.random.default_rng(seed)
    draft = CATEGORIES[category](rng, px)
    side = "left" if rng.integers(0, 2) == 0 else "right"
    return draft, side


def generate_items(out_dir: str | Path, categories: list[str] | None = None, per_category: int = 40, seed: int = 0,
                   px: int = CARD_PX, stream: str = "act2answer-item") -> list[BinaryItem]:
    """Draw ``per_category`` items per category into ``out_dir/images/`` and write ``out_dir/items.jsonl``.

    Deterministic: item ``<category>-<k>`` depends only on (seed, stream, category, k). ``stream``:
    the seed stream (the evaluation suite's by default; training data name their own, so their items
    are disjoint from the suite's). Existing images are overwritten with identical content.
    """
    from PIL import Image

    cats = list(categories or CATEGORIES)
    repeated = sorted({c for c in cats if cats.count(c) > 1})
    if repeated:
        raise ConfigError(f"categories {', '.join(repeated)} named more than once; name each category once "
                          f"(--per-category sets how many items each gets)")
    if per_category < 1:
        raise ConfigError(f"per_category must be >= 1, got {per_category}")
    out = Path(out_dir)
    img_dir = out / "images"
    img_dir.mkdir(parents=True, exist_ok=True)
    items = []
    for cat in cats:
        for k in range(per_category):
            iid = f"{cat}-{k:04d}"
            draft, side = draw_item(cat, derive_seed(seed, stream, cat, k), px)
            pc, pd = img_dir / f"{iid}_correct.png", img_dir / f"{iid}_distractor.png"
            Image.fromarray(draft.correct).save(pc)
            Image.fromarray(draft.distractor).save(pd)
            left, right = (pc, pd) if side == "left" else (pd, pc)
            opts = draft.options if side == "left" else (draft.options[1], draft.options[0])
            items.append(BinaryItem(iid, draft.question, str(left), str(right), side, cat, "procedural",
                                    instruction=draft.instruction, options=opts, meta={**draft.meta, "seed": seed}))
    write_items(items, out / "items.jsonl")
    return items
