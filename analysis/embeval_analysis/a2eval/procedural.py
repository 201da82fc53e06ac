"""The procedural embodied-reasoning pool: rendered tabletop scenes with exact ground truth.

Six capability dimensions (the ground truth the Data Agent should rediscover):
counting, spatial relations, affordance (point to a grasp region), physics (which stack topples),
planning (which blocks to remove, top to bottom), dynamics (motion direction from two frames).

Scenes are rendered by a small flat-shaded raster renderer (``renderer="raster"``): top-down views
of the table (x right, y down = towards the robot) and side views of block stacks, objects in
saturated palette colours with a 2-pixel gap between objects, so the image content is exactly
the scene the ground truth was computed from (tests re-derive every answer from the pixels).

The pool is deliberately unbalanced and redundant like real benchmarks: dimension shares follow
``DEFAULT_SHARES`` and every base scene yields 1-4 near-duplicate variants (small jitter, the
same question), which is what diversity-aware sampling should compress.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from embeval.config import check_keys, in_range, mapping, number, opts
from embeval.errors import ConfigError
from embeval_analysis.a2eval.pool import PoolItem

SIZE = 96  # image side, pixels
TABLE = (200, 180, 150)
SKY = (235, 235, 240)
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30), "green": (30, 170, 60), "blue": (40, 70, 220),
    "yellow": (235, 200, 20), "purple": (140, 50, 170), "orange": (240, 120, 20),
}
SHAPES = ("cube", "ball", "cone")  # drawn as square, disc, triangle (top-down)
DIMENSIONS = ("counting", "spatial", "affordance", "physics", "planning", "dynamics")
DEFAULT_SHARES = {"counting": 0.34, "spatial": 0.24, "affordance": 0.15, "physics": 0.10, "planning": 0.09,
                  "dynamics": 0.08}


@dataclass
class Obj:
    color: str
    shape: str
    x: float  # centre, pixels
    y: float
    r: float  # half size, pixels


#: the largest procedural pool: one item holds ~30 KiB (a 96x96 RGB image, two for dynamics) and takes ~1.5 ms
#: to generate; the embedding (MiniLM + pixel features) and the assigner cost tens of ms per item on a CPU, so
#: 100,000 items are ~3 GiB of images and hours of curation, beyond any use of the procedural pool.
MAX_ITEMS = 100_000


@dataclass
class ProceduralConfig:
    """``pool.procedural`` of an A2Eval config: ``n_items`` in 1..:data:`MAX_ITEMS`, ``shares`` a
    ``{dimension: weight >= 0}`` mapping over :data:`DIMENSIONS` with a positive sum."""

    n_items: int = 600
    seed: int = 0
    shares: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SHARES))
    max_variants: int = 4  # near-duplicates per base scene (1..max_variants)
    renderer: str = field(default="raster", metadata=opts(choices=("raster",), noun="renderer"))

    def check_config(self, where: str = "pool.procedural") -> None:
        """Bounds (raise :class:`~embeval.errors.ConfigError` naming ``where.field``)."""
        in_range(self.n_items, f"{where}.n_items", 1, MAX_ITEMS, "items in the procedural pool; see docs/a2eval.md")
        in_range(self.seed, f"{where}.seed", 0)
        in_range(self.max_variants, f"{where}.max_variants", 1, 100)
        shares = mapping(self.shares, f"{where}.shares")
        check_keys(shares, DIMENSIONS, f"{where}.shares", noun="dimension")
        for d, v in shares.items():
            number(v, f"{where}.shares.{d}", 0)
        if not sum(shares.values()) > 0:
            raise ConfigError(f"{where}.shares: at least one dimension needs a share > 0, got {dict(shares)}")


# --------------------------------------------------------------------------- rendering


def _blank(color=TABLE) -> np.ndarray:
    img = np.empty((SIZE, SIZE, 3), dtype=np.uint8)
    img[:] = color
    return img


def draw(img: np.ndarray, o: Obj) -> None:
    """Draw one object, flat colour, onto ``img`` in place (top-down)."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    dx, dy = xx - o.x, yy - o.y
    if o.shape == "cube":
        m = (np.abs(dx) <= o.r) & (np.abs(dy) <= o.r)
    elif o.shape == "ball":
        m = dx * dx + dy * dy <= o.r * o.r
    else:  # cone: isosceles triangle pointing up
        m = (dy >= -o.r) & (dy <= o.r) & (np.abs(dx) <= (dy + o.r) / 2.0)
    img[m] = PALETTE[o.color]


def render_topdown(objs: list[Obj]) -> np.ndarray:
    img = _blank()
    for o in objs:
        draw(img, o)
    return img


def render_stacks(stacks: list[list[tuple[str, float]]], block_w: int = 14, block_h: int = 9) -> np.ndarray:
    """Side view: each stack is a list of ``(colour, x offset of the block centre)`` bottom to top."""
    img = _blank(SKY)
    ground = SIZE - 10
    img[ground:] = TABLE
    for s, stack in enumerate(stacks):
        base_x = SIZE / 2 if len(stacks) == 1 else (24 + 48 * s)
        for k, (color, off) in enumerate(stack):
            x0 = int(round(base_x + off - block_w / 2))
            y1 = ground - k * (block_h + 1)  # 1-px gap between blocks so they segment apart
            img[y1 - block_h:y1, max(x0, 0):min(x0 + block_w, SIZE)] = PALETTE[color]
    return img


def _place(rng: np.random.Generator, n: int, r_range=(4, 7), margin=3, tries=400) -> list[tuple[float, float, float]]:
    out: list[tuple[float, float, float]] = []
    for _ in range(tries):
        if len(out) == n:
            break
        r = float(rng.integers(r_range[0], r_range[1] + 1))
        x, y = rng.uniform(r + 2, SIZE - r - 3, size=2).round()
        if all(max(abs(x - ox), abs(y - oy)) > r + orr + margin for ox, oy, orr in out):
            out.append((float(x), float(y), r))
    return out


def _objects(rng, n, colors=None, shapes=None) -> list[Obj]:
    pos = _place(rng, n)
    cols = list(PALETTE)
    return [Obj(color=(colors[i] if colors else str(rng.choice(cols))),
                shape=(shapes[i] if shapes else str(rng.choice(SHAPES))), x=x, y=y, r=r)
            for i, (x, y, r) in enumerate(pos)]


def _jitter(objs: list[Obj], rng, amount=2.0) -> list[Obj]:
    """A near-duplicate: every object moved by up to ``amount`` pixels if it stays clear of the others."""
    out = []
    for o in objs:
        for _ in range(10):
            nx, ny = o.x + rng.integers(-amount, amount + 1), o.y + rng.integers(-amount, amount + 1)
            if o.r + 1 <= nx <= SIZE - o.r - 2 and o.r + 1 <= ny <= SIZE - o.r - 2 and all(
                    max(abs(nx - p.x), abs(ny - p.y)) > o.r + p.r + 2 for p in out):
                out.append(Obj(o.color, o.shape, float(nx), float(ny), o.r))
                break
        else:
            out.append(o)
    # keep gaps with objects not yet moved
    return out if _clear(out) else objs


def _clear(objs: list[Obj]) -> bool:
    return all(max(abs(a.x - b.x), abs(a.y - b.y)) > a.r + b.r + 2 for i, a in enumerate(objs) for b in objs[i + 1:])


# --------------------------------------------------------------------------- generators (one base scene -> variants)

Gen = Callable[[np.random.Generator, int], list[dict[str, Any]]]


def gen_counting(rng, nvar):
    n = int(rng.integers(2, 10))
    target = str(rng.choice(list(PALETTE)))
    k = int(rng.integers(0, min(n, 5) + 1))
    others = [c for c in PALETTE if c != target]
    colors = [target] * k + [str(rng.choice(others)) for _ in range(n - k)]
    objs = _objects(rng, n, colors=colors)
    out = []
    for v in range(nvar):
        sc = objs if v == 0 else _jitter(objs, rng)
        truth = sum(o.color == target for o in sc)
        out.append(dict(question=f"How many {target} objects are on the table? Answer with a number.",
                        answer=truth, answer_type="numeric", images=[render_topdown(sc)],
                        meta={"n_objects": len(sc), "target": target}))
    return out


_REL = {"left of": lambda a, b: a.x < b.x, "right of": lambda a, b: a.x > b.x,
        "farther from the robot than": lambda a, b: a.y < b.y, "closer to the robot than": lambda a, b: a.y > b.y}


def gen_spatial(rng, nvar):
    n = int(rng.integers(2, 7))
    cols = list(rng.choice(list(PALETTE), size=n, replace=False))
    objs = _objects(rng, n, colors=[str(c) for c in cols])
    a, b = objs[0], objs[1]
    rel = str(rng.choice(list(_REL)))
    axis = "x" if rel in ("left of", "right of") else "y"
    if abs(getattr(a, axis) - getattr(b, axis)) < 6:  # make the relation unambiguous
        setattr(a, axis, float(np.clip(getattr(b, axis) + (12 if rng.random() < 0.5 else -12), 8, SIZE - 9)))
        if not _clear(objs):
            objs = [a, b]
            if not _clear(objs):
                a.y = b.y = SIZE / 2
                a.x, b.x = 25.0, 70.0
    out = []
    for v in range(nvar):
        sc = objs if v == 0 else _jitter(objs, rng, 1.0)
        truth = _REL[rel](sc[0], sc[1])
        out.append(dict(question=f"Is the {sc[0].color} {sc[0].shape} {rel} the {sc[1].color} {sc[1].shape}?",
                        options=["A. yes", "B. no"], answer="A" if truth else "B", answer_type="mc",
                        images=[render_topdown(sc)], meta={"n_objects": len(sc), "relation": rel}))
    return out


def gen_affordance(rng, nvar):
    n = int(rng.integers(1, 6))
    cols = [str(c) for c in rng.choice(list(PALETTE), size=n, replace=False)]
    objs = _objects(rng, n, colors=cols)
    out = []
    for v in range(nvar):
        sc = objs if v == 0 else _jitter(objs, rng)
        t = sc[0]
        box = [t.x - t.r, t.y - t.r, t.x + t.r, t.y + t.r]
        out.append(dict(question=f"Point to where the gripper should grasp the {t.color} {t.shape}. "
                                 "Answer with pixel coordinates x, y.",
                        answer=[t.x, t.y], answer_type="point", mask=[float(v_) for v_ in box],
                        images=[render_topdown(sc)], meta={"n_objects": len(sc), "size": t.r}))
    return out


def _stack_stable(stack: list[tuple[str, float]], half_w: float = 7.0) -> bool:
    """Rigid equal blocks: stable iff for every level the centre of mass of the blocks above lies over its support."""
    for k in range(len(stack) - 1):
        above = [off for _, off in stack[k + 1:]]
        if abs(np.mean(above) - stack[k][1]) > half_w:
            return False
    return True


def gen_physics(rng, nvar):
    cols = [str(c) for c in rng.permutation(list(PALETTE))]
    unstable_side = int(rng.integers(0, 2))
    margin = float(rng.uniform(1.0, 6.0))  # how far past the edge (difficulty: small = hard)
    stacks = []
    for s in range(2):
        c = cols[3 * s: 3 * s + 3]
        if s == unstable_side:  # the top block overhangs the middle one by more than half a block
            o1 = float(rng.uniform(-2, 2))
            offs = [0.0, o1, o1 + (7.0 + margin) * (1 if rng.random() < 0.5 else -1)]
        else:
            o1 = float(rng.uniform(-3, 3))
            offs = [0.0, o1, o1 + float(rng.uniform(-3, 3))]
        stacks.append(list(zip(c, [round(o) for o in offs])))
    out = []
    for v in range(nvar):
        truth = [not _stack_stable(st) for st in stacks]
        if sum(truth) != 1:
            return []  # rejected base scene: the generator asks again
        out.append(dict(question="Two block stacks stand on the table. Which stack will topple?",
                        options=["A. the left stack", "B. the right stack"], answer="AB"[truth.index(True)],
                        answer_type="mc", images=[render_stacks(stacks)], meta={"margin": margin}))
    return out


def gen_planning(rng, nvar):
    k = int(rng.integers(2, 6))
    cols = [str(c) for c in rng.permutation(list(PALETTE))[:k]]
    stack = [(c, 0.0) for c in cols]
    t = int(rng.integers(0, k))
    above = list(reversed(cols[t + 1:]))  # top to bottom
    ans = ", ".join(above) if above else "none"
    return [dict(question=f"To pick up the {cols[t]} block, which blocks must be removed first? List their colours "
                          "from top to bottom, comma-separated, or answer none.",
                 answer=ans, answer_type="exact", images=[render_stacks([stack])], meta={"height": k, "depth": len(above)})
            for _ in range(nvar)]


_DIRS = {"left": (-1, 0), "right": (1, 0), "away from the robot": (0, -1), "toward the robot": (0, 1)}


def gen_dynamics(rng, nvar):
    n = int(rng.integers(1, 4))
    cols = [str(c) for c in rng.choice(list(PALETTE), size=n, replace=False)]
    objs = _objects(rng, n, colors=cols, shapes=["ball"] * n)
    d = str(rng.choice(list(_DIRS)))
    out = []
    for v in range(nvar):
        step = float(rng.integers(3, 9))
        b = objs[0]
        ux, uy = _DIRS[d]
        nx, ny = np.clip(b.x + ux * step, b.r + 1, SIZE - b.r - 2), np.clip(b.y + uy * step, b.r + 1, SIZE - b.r - 2)
        if abs(nx - b.x) + abs(ny - b.y) < 2:  # clamped at the border: move it back from the edge first
            b = Obj(b.color, b.shape, SIZE / 2, SIZE / 2, b.r)
            nx, ny = b.x + ux * step, b.y + uy * step
        f1 = [b] + objs[1:]
        f2 = [Obj(b.color, b.shape, float(nx), float(ny), b.r)] + objs[1:]
        if not (_clear(f1) and _clear(f2)):
            f1, f2 = [b], [f2[0]]
        opts = [f"{L}. {t}" for L, t in zip("ABCD", _DIRS)]
        out.append(dict(question=f"The two images are consecutive camera frames. In which direction is the "
                                 f"{b.color} ball moving?", options=opts, answer="ABCD"[list(_DIRS).index(d)],
                        answer_type="mc", images=[render_topdown(f1), render_topdown(f2)],
                        meta={"n_objects": len(f1), "step": step}))
    return out


GENERATORS: dict[str, Gen] = {"counting": gen_counting, "spatial": gen_spatial, "affordance": gen_affordance,
                              "physics": gen_physics, "planning": gen_planning, "dynamics": gen_dynamics}


def procedural_pool(cfg: ProceduralConfig | None = None, **kw) -> list[PoolItem]:
    """Generate the pool (deterministic in ``cfg.seed``); items carry their true ``dimension``."""
    cfg = cfg or ProceduralConfig(**kw)
    if cfg.renderer != "raster":
        raise ConfigError(f"renderer {cfg.renderer!r} is not available; use 'raster'")
    cfg.check_config("procedural_pool")
    from embeval.provenance import derive_seed

    total = sum(cfg.shares.values())
    raw = {d: cfg.n_items * s / total for d, s in cfg.shares.items()}
    counts = {d: int(np.floor(v)) for d, v in raw.items()}
    for d in sorted(raw, key=lambda d: counts[d] - raw[d])[: cfg.n_items - sum(counts.values())]:
        counts[d] += 1  # largest remainders: the pool has exactly n_items items
    items: list[PoolItem] = []
    for dim, n in counts.items():
        rng = np.random.default_rng(derive_seed("a2eval-procedural", cfg.seed, dim))
        made, base = 0, 0
        while made < n:
            nvar = int(min(rng.integers(1, cfg.max_variants + 1), n - made))
            for v, rec in enumerate(GENERATORS[dim](rng, nvar)):
                items.append(PoolItem(id=f"{dim[:4]}-{base:04d}-{v}", source="procedural", dimension=dim,
                                      meta={**rec.pop("meta"), "base": f"{dim}-{base}"}, **rec))
                made += 1
            base += 1
    order = np.random.default_rng(derive_seed("a2eval-procedural-order", cfg.seed)).permutation(len(items))
    return [items[i] for i in order]
