"""Real model subjects for A2Eval: tiny scene-QA VLMs (:mod:`embeval.subjects.embedded.scene_qa`)
that look at the procedural pool's images and answer its questions, trained on the CPU at different
capacities, budgets and dimension mixes so that their skills differ by dimension.

Training items come from the pool's own generators (:data:`.procedural.GENERATORS`) on the seed
stream :data:`TRAIN_STREAM` (``derive_seed(TRAIN_STREAM, data_seed, dimension, k)`` per item), disjoint
from the pool's (``"a2eval-procedural"``). Every member learns the answer *format* of every
dimension (the ``format`` head, from the question text); the answer heads are trained only on the
dimensions of its recipe (``dimensions``), so on the others it answers in the right form without the
skill. ``embeval train a2eval`` trains :data:`RECIPES` into ``src/embeval/data/models/a2eval/``
and evaluates each member per dimension on a held-out pool (``procedural_pool(eval_items,
seed=eval_seed)``) through the reference harness (:func:`.subjects.collect_results`).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from embeval.errors import ConfigError, InvalidInputError, MissingWeightsError
from embeval_analysis.a2eval.procedural import DIMENSIONS, GENERATORS, PALETTE

#: seed stream of the training items (the pool uses "a2eval-procedural": disjoint)
TRAIN_STREAM = "a2eval-model-train"
#: answer_type of a pool item -> the ``format`` head's class
FORMAT_OF = {"mc": "letter", "numeric": "number", "point": "point", "exact": "list"}
#: the prefix of every model member's name
PREFIX = "a2eval-"


def models_dir() -> Path:
    """The shipped folder of the A2Eval model subjects (one checkpoint folder per member + ``members.json``)."""
    from embeval.subjects.embedded.zoo import MODELS_DIR

    return MODELS_DIR / "a2eval"


@dataclass
class SceneQARecipe:
    """Everything ``embeval train a2eval`` needs to reproduce one member from its seeds."""

    name: str
    seed: int = 0  # initialisation and batches
    data_seed: int = 0  # training items (stream TRAIN_STREAM); shared by the members
    per_dimension: int = 1000  # training items per dimension
    dimensions: list[str] = field(default_factory=list)  # answer heads trained on these (empty: all)
    arch: dict = field(default_factory=dict)  # SceneQAConfig overrides
    train: dict = field(default_factory=lambda: _train(2000))

    def describe(self) -> str:
        dims = ", ".join(self.dimensions) if self.dimensions else "all dimensions"
        arch = "".join(f", {k}={v}" for k, v in self.arch.items())
        return f"{dims}; {self.train.get('steps')} steps x {self.train.get('batch_size')}{arch}"


_VISION = {"width": 8, "depth": 3, "pool": "both", "film": True}


def _train(steps: int) -> dict:
    return {"steps": steps, "batch_size": 64, "lr": 3e-3, "shift_pixels": 0}


_TOPDOWN = ["counting", "spatial", "affordance"]
_SIDE_VIEW = ["physics", "planning"]

#: the members: capacity (vision width, input size, frames), budget (steps) and dimension mix differ
RECIPES: list[SceneQARecipe] = [
    SceneQARecipe("a2eval-wide", seed=0, arch={"vision": {**_VISION, "width": 16}}, train=_train(3000)),
    SceneQARecipe("a2eval-base", seed=1),
    SceneQARecipe("a2eval-short", seed=2, train=_train(400)),
    SceneQARecipe("a2eval-narrow", seed=3, arch={"vision": {**_VISION, "width": 4}}),
    SceneQARecipe("a2eval-lowres", seed=4, arch={"image_size": 24}),
    SceneQARecipe("a2eval-topdown", seed=5, dimensions=_TOPDOWN),
    SceneQARecipe("a2eval-stacks", seed=6, dimensions=_SIDE_VIEW),
    SceneQARecipe("a2eval-oneframe", seed=7, arch={"frames": 1}),
    SceneQARecipe("a2eval-motion", seed=8, dimensions=["dynamics"], train=_train(1000)),
]


def recipe(name: str) -> SceneQARecipe:
    for r in RECIPES:
        if r.name == name:
            return replace(r)
    raise ConfigError(f"unknown A2Eval model {name!r}; choose from {', '.join(r.name for r in RECIPES)}")


# --------------------------------------------------------------------------- data


@dataclass
class SceneQAArrays:
    """Training items: ``images`` (N, S, S, 3 * frames) uint8, ``prompt`` (N, V) indices into ``prompts``
    (V phrasings per item), ``labels[head]`` (N,) or (N, list_len) class indices (-100: not supervised),
    ``dimension`` (N,) index into :data:`DIMENSIONS`."""

    images: np.ndarray
    prompt: np.ndarray
    prompts: list[str]
    labels: dict[str, np.ndarray]
    dimension: np.ndarray

    def __len__(self) -> int:
        return len(self.images)


def draw_record(dim: str, data_seed: int, k: int, stream: str = TRAIN_STREAM) -> dict:
    """Training item ``k`` of ``dim``: one base scene of the pool's generator on its own seed."""
    from embeval.provenance import derive_seed

    rng = np.random.default_rng(derive_seed(stream, data_seed, dim, k))
    for _ in range(100):
        recs = GENERATORS[dim](rng, 1)
        if recs:  # the physics generator rejects some scenes and is asked again
            return recs[0]
    raise InvalidInputError(f"the {dim} generator rejected 100 scenes in a row (seed {data_seed}, item {k})")


def prompt_variants(rec: dict) -> list[str]:
    """The phrasings an item is trained under: the reference harness's prompt and the bare question."""
    from embeval_analysis.a2eval.pool import PoolItem
    from embeval_analysis.a2eval.subjects import default_prompt

    item = PoolItem(id="train", question=rec["question"], answer=rec["answer"], answer_type=rec["answer_type"],
                    options=rec.get("options"))
    return [default_prompt(item), item.text()]


def _labels(rec: dict, cfg, heads: dict[str, list[str]]) -> dict[str, object]:
    fmt = FORMAT_OF[rec["answer_type"]]
    out: dict[str, object] = {"format": heads["format"].index(fmt)}
    ans = rec["answer"]
    if fmt == "letter":
        out["letter"] = heads["letter"].index(str(ans))
    elif fmt == "number":
        out["number"] = min(int(ans), cfg.max_number)
    elif fmt == "point":
        size = rec["images"][0].shape
        out["x"] = min(int(ans[0] / size[1] * cfg.grid), cfg.grid - 1)
        out["y"] = min(int(ans[1] / size[0] * cfg.grid), cfg.grid - 1)
    else:
        words = [w.strip() for w in str(ans).split(",") if w.strip() and w.strip() != "none"]
        if len(words) > cfg.list_len or any(w not in cfg.words for w in words):
            raise InvalidInputError(f"list answer {ans!r} does not fit the vocabulary / length {cfg.list_len}")
        out["list"] = [heads["list0"].index(w) for w in words] + [len(cfg.words)] * (cfg.list_len - len(words))
    return out


def scene_qa_arrays(cfg, per_dimension: int, data_seed: int, dimensions: Sequence[str] | None = None,
                    cache: dict | None = None) -> SceneQAArrays:
    """``per_dimension`` training items of every pool dimension (all of them: the format head learns every
    dimension); the answer heads are supervised only for ``dimensions`` (default: all). ``cache``
    (a dict) keeps drawn records across members: the records depend only on (dimension, data_seed, k)."""
    from embeval.subjects.embedded.scene_qa import stack_frames

    if per_dimension < 1:
        raise ConfigError(f"per_dimension must be >= 1, got {per_dimension}")
    dims = list(dimensions or DIMENSIONS)
    bad = [d for d in dims if d not in DIMENSIONS]
    if bad:
        raise ConfigError(f"unknown pool dimensions {bad}; choose from {', '.join(DIMENSIONS)}")
    heads = cfg.heads()
    n = per_dimension * len(DIMENSIONS)
    images = np.empty((n, cfg.image_size, cfg.image_size, 3 * cfg.frames), np.uint8)
    labels = {h: np.full(n, -100, np.int64) for h in heads if not h.startswith("list")}
    labels["list"] = np.full((n, cfg.list_len), -100, np.int64)
    prompt = np.empty((n, 2), np.int64)
    dim_idx = np.empty(n, np.int64)
    prompts: list[str] = []
    where: dict[str, int] = {}
    i = 0
    for di, dim in enumerate(DIMENSIONS):
        for k in range(per_dimension):
            key = (dim, data_seed, k)
            rec = cache.get(key) if cache is not None else None
            if rec is None:
                rec = draw_record(dim, data_seed, k)
                if cache is not None:
                    cache[key] = rec
            images[i] = stack_frames(rec["images"], cfg.frames, cfg.image_size)
            for v, p in enumerate(prompt_variants(rec)):
                if p not in where:
                    where[p] = len(prompts)
                    prompts.append(p)
                prompt[i, v] = where[p]
            lab = _labels(rec, cfg, heads)
            labels["format"][i] = lab.pop("format")
            if dim in dims:
                for h, val in lab.items():
                    labels[h][i] = val
            dim_idx[i] = di
            i += 1
    return SceneQAArrays(images, prompt, prompts, labels, dim_idx)


# --------------------------------------------------------------------------- training


def train_scene_qa(data: SceneQAArrays, cfg, train_cfg, seed: int, id: str,
                   log: Callable[[str], None] | None = None, text_encoder=None):
    """Cross-entropy on the ``format`` head of every item plus the answer heads where supervised;
    returns (TinySceneQA, TrainResult). Deterministic for a seed (one torch thread, deterministic
    algorithms)."""
    import torch
    import torch.nn.functional as F

    from embeval.subjects.embedded.scene_qa import TinySceneQA, build_net
    from embeval.subjects.embedded.text_encoder import shared_text_encoder
    from embeval.subjects.embedded.training import _loop, deterministic, random_shift

    if len(data) == 0:
        raise InvalidInputError("no items to train the scene-QA VLM on")
    with deterministic(seed, train_cfg.threads) as rng:
        enc = text_encoder or shared_text_encoder()
        temb = torch.from_numpy(enc.encode(data.prompts))
        net = build_net(cfg).train()
        images = torch.from_numpy(data.images).permute(0, 3, 1, 2).contiguous()
        prompt = torch.from_numpy(data.prompt)
        labels = {h: torch.from_numpy(v) for h, v in data.labels.items()}
        nv = data.prompt.shape[1]

        def head_loss(logits, lab):
            ok = lab >= 0
            return F.cross_entropy(logits[ok], lab[ok]) if bool(ok.any()) else logits.sum() * 0.0

        def step_fn(idx):
            ii = torch.from_numpy(idx)
            x = random_shift(images[ii].float().div_(255.0), train_cfg.shift_pixels, rng)
            t = temb[prompt[ii, torch.from_numpy(rng.integers(0, nv, size=len(idx)))]]
            out = net(x, t)
            loss = head_loss(out["format"], labels["format"][ii]) + head_loss(out["letter"], labels["letter"][ii]) \
                + head_loss(out["number"], labels["number"][ii]) \
                + 0.5 * (head_loss(out["x"], labels["x"][ii]) + head_loss(out["y"], labels["y"][ii]))
            lst = labels["list"][ii]
            loss = loss + sum(head_loss(out[f"list{k}"], lst[:, k]) for k in range(cfg.list_len)) / cfg.list_len
            return loss

        t0 = time.perf_counter()
        res = _loop(list(net.parameters()), len(data), step_fn, train_cfg, rng, log, desc=f"train {id}")
    # config.json carries only what the seed determines (timings go to report.json)
    meta = {"seed": seed, "train": asdict(train_cfg), "items": len(data), "final_loss": res.losses[-1]}
    res.items_per_second = train_cfg.batch_size * train_cfg.steps / max(time.perf_counter() - t0, 1e-9)
    return TinySceneQA(net.eval(), id=id, meta=meta, text_encoder=enc), res


def member_config(r: SceneQARecipe):
    from embeval.subjects.embedded.scene_qa import SceneQAConfig

    base = SceneQAConfig(words=list(PALETTE)).to_dict()
    return SceneQAConfig.from_dict({**base, **r.arch})


def train_member(r: SceneQARecipe, out: str | Path | None = None, log: Callable[[str], None] | None = print,
                 cache: dict | None = None, eval_items: Sequence | None = None, text_encoder=None) -> dict:
    """Train one member, evaluate it per dimension on ``eval_items`` (if given), save to ``out``;
    returns the report (also written as ``out/report.json``; ``report["model"]`` is the trained subject).
    ``text_encoder``: the question encoder (default: the shared MiniLM, which the shipped models use)."""
    from embeval.subjects.embedded.training import TrainConfig

    t0 = time.perf_counter()
    cfg = member_config(r)
    tcfg = TrainConfig(**{**asdict(TrainConfig()), **r.train})
    data = scene_qa_arrays(cfg, r.per_dimension, r.data_seed, r.dimensions or None, cache)
    t_data = time.perf_counter() - t0
    if log:
        log(f"{r.name}: {len(data)} training items ({len(data.prompts)} prompts, drawn in {t_data:.1f} s); "
            f"{r.describe()}")
    vlm, res = train_scene_qa(data, cfg, tcfg, seed=r.seed, id=r.name, log=log, text_encoder=text_encoder)
    report: dict = {"recipe": asdict(r), "describe": r.describe(), "train": res.to_dict(), "data_seconds": t_data,
                    "items_per_second": res.items_per_second}
    if eval_items is not None:
        report["eval"] = per_dimension_accuracy([vlm], eval_items)[r.name]
        vlm.meta["eval"] = report["eval"]
    vlm.meta["recipe"] = asdict(r)
    if out is not None:
        vlm.save(out)
        report["seconds"] = time.perf_counter() - t0
        (Path(out) / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=str))
    report["seconds"] = time.perf_counter() - t0
    report["model"] = vlm
    return report


def per_dimension_accuracy(subjects: Sequence, items: Sequence) -> dict[str, dict[str, float]]:
    """Mean reference-harness score per true dimension (and ``"all"``) of every subject on ``items``."""
    from embeval_analysis.a2eval.subjects import collect_results

    res = collect_results(subjects, items)
    dims = np.array([it.dimension for it in items])
    out = {}
    for s, name in enumerate(res.subjects):
        row = {d: float(res.scores[s, dims == d].mean()) for d in DIMENSIONS if (dims == d).any()}
        row["all"] = float(res.scores[s].mean())
        out[name] = row
    return out


def constant_baseline(items: Sequence) -> dict[str, float]:
    """Per dimension, the best score any single constant answer gets on ``items`` (the chance floor a
    model without the skill reaches by always giving the most common answer)."""
    from embeval_analysis.a2eval.scorers import reference_score

    out = {}
    for d in DIMENSIONS:
        sub = [it for it in items if it.dimension == d]
        if not sub:
            continue
        cands = {str(it.answer) if it.answer_type != "point" else f"{it.answer[0]:.0f}, {it.answer[1]:.0f}" for it in sub}
        cands |= set("ABCD") | {str(i) for i in range(10)} | {"none", "48, 48"}
        if sub[0].answer_type == "numeric":
            cands = {c for c in cands if c.replace(".", "").isdigit()} | {str(int(float(it.answer))) for it in sub}
        out[d] = max(float(np.mean([reference_score(it, c) for it in sub])) for c in cands)
    return out


def train_models(out: str | Path | None = None, only: Sequence[str] | None = None, eval_items_n: int = 600,
                 eval_seed: int = 1, log: Callable[[str], None] | None = print) -> dict:
    """Train :data:`RECIPES` (or ``only`` these) into ``out`` (default :func:`models_dir`), evaluate each on
    the held-out pool ``procedural_pool(eval_items_n, seed=eval_seed)`` and write ``members.json``."""
    from embeval_analysis.a2eval.procedural import procedural_pool

    out = Path(out) if out else models_dir()
    out.mkdir(parents=True, exist_ok=True)
    names = [r.name for r in RECIPES]
    bad = [n for n in (only or []) if n not in names]
    if bad:
        raise ConfigError(f"unknown A2Eval model(s) {bad}; choose from {', '.join(names)}")
    man_file = out / "members.json"
    manifest = json.loads(man_file.read_text()) if man_file.exists() else {"members": {}}
    items = procedural_pool(n_items=eval_items_n, seed=eval_seed) if eval_items_n > 0 else None
    if items is not None:
        manifest["eval"] = {"pool_items": eval_items_n, "pool_seed": eval_seed,
                            "constant_baseline": constant_baseline(items)}
    cache: dict = {}
    t0 = time.perf_counter()
    for r in RECIPES:
        if only and r.name not in only:
            continue
        rep = train_member(r, out / r.name, log=log, cache=cache, eval_items=items)
        manifest["members"][r.name] = {k: rep[k] for k in ("describe", "eval", "seconds") if k in rep}
        man_file.write_text(json.dumps(_ordered(manifest), indent=1, sort_keys=True))
    manifest["order"] = [n for n in names if n in manifest["members"]]
    manifest["seconds"] = time.perf_counter() - t0
    man_file.write_text(json.dumps(_ordered(manifest), indent=1, sort_keys=True))
    return manifest


def _ordered(manifest: dict) -> dict:
    manifest["order"] = [r.name for r in RECIPES if r.name in manifest["members"]]
    return manifest


def load_models(folder: str | Path | None = None, names: Sequence[str] | None = None) -> list:
    """The shipped A2Eval model subjects (:class:`~embeval.subjects.embedded.scene_qa.TinySceneQA`), in
    recipe order; :class:`MissingWeightsError` names the command that builds them."""
    from embeval.subjects.embedded.scene_qa import TinySceneQA

    folder = Path(folder) if folder else models_dir()
    wanted = list(names or [r.name for r in RECIPES])
    missing = [n for n in wanted if not (folder / n / "config.json").exists()]
    if missing:
        raise MissingWeightsError(f"A2Eval model(s) {missing} not found under {folder}; build them with "
                                  "`embeval train a2eval`")
    return [TinySceneQA.load(folder / n) for n in wanted]


def format_accuracy_table(acc: dict[str, dict[str, float]], baseline: dict[str, float] | None = None) -> str:
    """Text table: one row per subject, one column per dimension (mean score), plus ``all``."""
    cols = [d for d in DIMENSIONS] + ["all"]
    w = max(len(n) for n in list(acc) + ["constant answer"]) + 2
    lines = [f"{'subject':{w}s}" + "".join(f"{c[:10]:>11s}" for c in cols)]
    for name, row in acc.items():
        lines.append(f"{name:{w}s}" + "".join(f"{row.get(c, float('nan')):11.2f}" for c in cols))
    if baseline:
        lines.append(f"{'constant answer':{w}s}" + "".join(f"{baseline[c]:11.2f}" if c in baseline else f"{'':11s}"
                                                          for c in cols))
    return "\n".join(lines)
