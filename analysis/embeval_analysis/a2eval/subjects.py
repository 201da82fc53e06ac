"""The embedded subjects that answer pool items, and the per-example results matrix.

What these subjects are (honestly): no VLM weights ship offline, so the default population is
**rule-based image solvers** that implement the :class:`~embeval.subjects.protocols.VLM` protocol.
Each one reads the question (template regexes), segments the image by palette colour
(``scipy.ndimage.label``), and computes the answer from the pixels. A seeded *capability profile*
(one logit per dimension) then decides, item by item, whether the subject keeps its answer or
replaces it with a plausible wrong one: ``P(keep) = sigmoid(ability[dim] - slope * difficulty)``,
where ``difficulty`` in [0, 1] is measured from the image (crowding, object size, overhang
margin, stack depth, motion step). The decision is a deterministic hash of what the subject
perceives (question, its answer, difficulty to 0.1), so near-duplicate scenes get the same
response, as with real models. A text-only ``BlindVLM`` baseline answers from priors.
Any other VLM (an adapter from :mod:`embeval.subjects`) can be added to the population.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from embeval.config import in_range, non_empty_str, opts
from embeval.errors import ConfigError
from embeval_analysis.a2eval.procedural import DIMENSIONS, PALETTE

_COLS = "|".join(PALETTE)


def segment(img: np.ndarray, color: str) -> list[dict[str, float]]:
    """Connected regions of exactly the palette ``color``: centroid (x, y), box, area, fill ratio."""
    from scipy import ndimage

    mask = np.all(img == np.array(PALETTE[color], dtype=np.uint8), axis=2)
    lab, n = ndimage.label(mask)
    out = []
    for k, sl in enumerate(ndimage.find_objects(lab), 1):
        ys, xs = np.nonzero(lab[sl] == k)
        area = len(xs)
        if area < 4:
            continue
        h, w = sl[0].stop - sl[0].start, sl[1].stop - sl[1].start
        out.append({"x": float(xs.mean() + sl[1].start), "y": float(ys.mean() + sl[0].start), "area": area,
                    "fill": area / float(h * w), "x0": sl[1].start, "x1": sl[1].stop - 1, "y0": sl[0].start,
                    "y1": sl[0].stop - 1, "color": color})
    return out


def shape_of(region: dict[str, float]) -> str:
    f = region["fill"]
    return "cube" if f > 0.9 else ("ball" if f > 0.64 else "cone")


def all_regions(img: np.ndarray) -> list[dict[str, float]]:
    return [r for c in PALETTE for r in segment(img, c)]


def _find(img, color, shape=None):
    regs = [r for r in segment(img, color) if shape is None or shape_of(r) == shape]
    return regs[0] if regs else None


@dataclass
class Solution:
    dimension: str
    answer: str
    difficulty: float  # 0 easy .. 1 hard, measured from the image
    wrong: list[str] = field(default_factory=list)  # plausible wrong answers


_SOLVED: dict[tuple[str, str], Solution | None] = {}


def solve(images: Sequence[np.ndarray], prompt: str) -> Solution | None:
    """Answer a procedural-pool question from the pixels; None if the question is not recognised.
    Memoised by (image digest, prompt) since every subject of a population solves the same item."""
    key = (_img_digest(images), prompt)
    if key not in _SOLVED:
        if len(_SOLVED) > 20000:
            _SOLVED.clear()
        _SOLVED[key] = _solve(images, prompt)
    return _SOLVED[key]


def _solve(images: Sequence[np.ndarray], prompt: str) -> Solution | None:
    img = images[0] if images else None
    if img is None:
        return None
    m = re.search(rf"How many ({_COLS}) objects", prompt)
    if m:
        k = len(segment(img, m.group(1)))
        n = len(all_regions(img))
        return Solution("counting", str(k), min(1.0, n / 9.0), [str(k + 1), str(max(k - 1, 0)), str(k + 2)])
    m = re.search(rf"Is the ({_COLS}) (\w+) (left of|right of|farther from the robot than|closer to the robot than) "
                  rf"the ({_COLS}) (\w+)\?", prompt)
    if m:
        a, b = _find(img, m.group(1)), _find(img, m.group(4))
        if a is None or b is None:
            return Solution("spatial", "B", 1.0, ["A"])
        rel = m.group(3)
        truth = {"left of": a["x"] < b["x"], "right of": a["x"] > b["x"],
                 "farther from the robot than": a["y"] < b["y"], "closer to the robot than": a["y"] > b["y"]}[rel]
        gap = abs(a["x"] - b["x"]) if rel in ("left of", "right of") else abs(a["y"] - b["y"])
        n = len(all_regions(img))
        return Solution("spatial", "A" if truth else "B", min(1.0, 0.5 * n / 6.0 + 0.5 * max(0.0, 1 - gap / 40.0)),
                        ["B" if truth else "A"])
    m = re.search(rf"grasp the ({_COLS}) (\w+)", prompt)
    if m:
        t = _find(img, m.group(1))
        if t is None:
            return Solution("affordance", "48, 48", 1.0, ["0, 0"])
        others = [r for r in all_regions(img) if r is not t]
        wrong = [f"{o['x']:.0f}, {o['y']:.0f}" for o in others] + [f"{(t['x'] + 20) % 96:.0f}, {(t['y'] + 25) % 96:.0f}"]
        return Solution("affordance", f"{t['x']:.0f}, {t['y']:.0f}", min(1.0, 60.0 / t["area"]), wrong)
    if "Which stack will topple" in prompt:
        blocks = all_regions(img)
        margins = []
        verdict = []
        for side in (0, 1):
            st = sorted([b for b in blocks if (b["x"] < 48) == (side == 0)], key=lambda b: -b["y"])
            worst = -99.0
            for k in range(len(st) - 1):
                com = np.mean([b["x"] for b in st[k + 1:]])
                half = (st[k]["x1"] - st[k]["x0"] + 1) / 2.0
                worst = max(worst, abs(com - st[k]["x"]) - half)
            margins.append(worst)
            verdict.append(worst > 0)
        ans = "A" if margins[0] > margins[1] else "B"
        return Solution("physics", ans, float(np.clip(1 - max(margins) / 6.0, 0, 1)), ["B" if ans == "A" else "A"])
    m = re.search(rf"pick up the ({_COLS}) block", prompt)
    if m:
        blocks = sorted(all_regions(img), key=lambda b: b["y"])  # top first
        cols = [b["color"] for b in blocks]
        if m.group(1) not in cols:
            return Solution("planning", "none", 1.0, [])
        above = cols[: cols.index(m.group(1))]
        ans = ", ".join(above) if above else "none"
        wrong = [", ".join(reversed(above)) if len(above) > 1 else "none", ", ".join(above[:-1]) or "none",
                 ", ".join(cols[: cols.index(m.group(1)) + 1])]
        return Solution("planning", ans, min(1.0, len(above) / 4.0), [w for w in wrong if w != ans] or ["none"])
    m = re.search(rf"direction is the ({_COLS}) ball", prompt)
    if m and len(images) >= 2:
        a, b = _find(images[0], m.group(1)), _find(images[1], m.group(1))
        if a is None or b is None:
            return Solution("dynamics", "A", 1.0, ["B"])
        dx, dy = b["x"] - a["x"], b["y"] - a["y"]
        if abs(dx) >= abs(dy):
            ans = "A" if dx < 0 else "B"
        else:
            ans = "D" if dy > 0 else "C"
        step = max(abs(dx), abs(dy))
        return Solution("dynamics", ans, float(np.clip(1 - (step - 3) / 6.0, 0, 1)),
                        [L for L in "ABCD" if L != ans])
    return None


def _u01(*parts: Any) -> float:
    h = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0 ** 64


def _img_digest(images: Sequence[np.ndarray]) -> str:
    h = hashlib.sha1()
    for im in images:
        h.update(np.ascontiguousarray(im).tobytes())
    return h.hexdigest()[:16]


class SolverVLM:
    """A rule-based image solver with a capability profile (logits per dimension); see module docstring."""

    def __init__(self, id: str, ability: dict[str, float], seed: int = 0, slope: float = 3.0):
        self.id, self.ability, self.seed, self.slope = id, dict(ability), seed, slope

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str:
        sol = solve(images, prompt)
        if sol is None:
            return "I cannot answer this question."
        p_keep = 1.0 / (1.0 + np.exp(-(self.ability.get(sol.dimension, 0.0) - self.slope * sol.difficulty)))
        # the decision depends on what the subject perceives (question, answer, scene difficulty), not on
        # exact pixels: like a real model, it answers near-duplicates of a scene the same way
        key = (self.id, self.seed, prompt, sol.answer, round(sol.difficulty, 1))
        if _u01(*key, "keep") < p_keep or not sol.wrong:
            return sol.answer
        return sol.wrong[int(_u01(*key, "pick") * len(sol.wrong))]


class BlindVLM:
    """A text-only baseline that never looks at the image: first option, 2, the image centre, none."""

    id = "blind-prior"

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str:
        if re.search(r"\bA\. ", prompt):
            return "A"
        if "How many" in prompt:
            return "2"
        if "pixel coordinates" in prompt:
            return "48, 48"
        return "none"


#: the largest synthetic population (every subject answers every item: the cost is subjects x items)
MAX_POPULATION = 1000


@dataclass
class PopulationConfig:
    """``subjects.population`` of an A2Eval config: the arguments of :func:`embedded_population`.
    ``n`` in 0..:data:`MAX_POPULATION`; 0 = no synthetic population (rank only ``subjects.specs``)."""

    n: int = 10
    seed: int = 0
    spread: float = 1.0
    low: float = -0.5
    high: float = 2.5

    def check_config(self, where: str = "subjects.population") -> None:
        in_range(self.n, f"{where}.n", 0, MAX_POPULATION, "0 = no synthetic population, 1 = the blind baseline only")
        in_range(self.seed, f"{where}.seed", 0)
        in_range(self.spread, f"{where}.spread", 0.0)
        if not self.low < self.high:
            raise ConfigError(f"{where}: low must be below high, got low={self.low}, high={self.high}")


def _spec(value: Any, where: str) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    return non_empty_str(value, where) if isinstance(value, str) else _bad_spec(value, where)


def _bad_spec(value: Any, where: str) -> None:
    raise ConfigError(f"{where}: a subject spec is a YAML path or a mapping (kind: vlm, ...), got "
                      f"{type(value).__name__} {value!r}")


@dataclass
class SubjectsConfig:
    """``subjects`` of an A2Eval config: the synthetic population (None = none; absent = the default 10) and
    ``specs``, a list of subject YAML paths or inline spec mappings (see config/subjects/)."""

    population: PopulationConfig | None = field(default_factory=PopulationConfig)
    specs: list[Any] = field(default_factory=list, metadata=opts(item=_spec))


def embedded_population(n: int = 10, seed: int = 0, spread: float = 1.0, low: float = -0.5, high: float = 2.5) -> list[Any]:
    """``n - 1`` solver subjects with seeded capability profiles spaced from weak to strong, plus
    :class:`BlindVLM` (``n = 1``: the blind baseline only; ``n = 0``: no subjects). ``spread``: per-dimension
    standard deviation of the logits around each subject's overall level (how much the subjects' strengths
    differ by dimension)."""
    from embeval.provenance import derive_seed

    PopulationConfig(n, seed, spread, low, high).check_config("embedded_population")
    if n == 0:
        return []
    rng = np.random.default_rng(derive_seed("a2eval-population", seed))
    levels = np.linspace(low, high, n - 1)
    subs: list[Any] = []
    for i, lv in enumerate(levels):
        ab = {d: float(lv + rng.normal(0, spread)) for d in DIMENSIONS}
        subs.append(SolverVLM(f"solver-{i:02d}", ab, seed=seed))
    subs.append(BlindVLM())
    return subs


def clear_memo() -> None:
    """Forget the memoised solutions of the rule-based solvers (before a timing, so that both timed
    runs start cold)."""
    _SOLVED.clear()


def default_prompt(item) -> str:
    """The plain prompt used to collect per-example results (question, options, answer format)."""
    fmt = {"mc": "Answer with the option letter.", "numeric": "Answer with a number.",
           "point": "Answer with x, y.", "exact": "Answer briefly."}[item.answer_type]
    return f"{item.text()}\n{fmt}"


@dataclass
class Results:
    """Per-example results: ``scores[s, i]`` in [0, 1] of subject ``subjects[s]`` on item ``items[i]``."""

    subjects: list[str]
    item_ids: list[str]
    scores: np.ndarray
    predictions: list[list[str]] = field(default_factory=list)


def collect_results(subjects: Sequence[Any], items: Sequence[Any], scorer=None) -> Results:
    """Run every subject on every item with :func:`default_prompt`; score with the reference scorer."""
    from embeval_analysis.a2eval.scorers import reference_score

    scorer = scorer or reference_score
    imgs = [it.load_images() for it in items]
    scores = np.zeros((len(subjects), len(items)))
    preds: list[list[str]] = []
    for s, sub in enumerate(subjects):
        row = []
        for i, it in enumerate(items):
            p = str(sub.generate(imgs[i], default_prompt(it)))
            row.append(p)
            scores[s, i] = scorer(it, p)
        preds.append(row)
    return Results([getattr(s, "id", f"subject-{k}") for k, s in enumerate(subjects)], [it.id for it in items],
                   scores, preds)
