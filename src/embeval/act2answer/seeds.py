"""Claims that hold on every training seed: the VLM -> VLA recipes trained on several seeds and
evaluated on the same held-out Act2Answer suite, side by side (``embeval train seeds``).

One finding of the demo rested on one training seed: seed 0 has the frozen recipe keep knowledge
that the full fine-tune loses, and seed 1 reverses the order. :func:`seed_table` puts
each category's success rate per seed beside its mean and range, and separates knowledge from
control: ``on_card`` is the success rate among the episodes that ended on a card (an episode that
ends off both cards is a control failure, not a wrong answer). :func:`holds_on_every_seed` states
only what every seed supports.
"""
from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Callable, Sequence

from embeval.errors import ConfigError


def on_card_rate(rate: float, out_of_bounds: float) -> float | None:
    """Success among the episodes that ended on a card: ``rate / (1 - out_of_bounds)``, None when every
    episode ended off both cards (rates are shares of a category's episodes, both layouts)."""
    return None if out_of_bounds >= 1.0 else rate / (1.0 - out_of_bounds)


def train_or_reuse(recipe_name: str, seed: int, out: Path, eval_per_category: int | None = None,
                   log: Callable[[str], None] | None = print) -> dict:
    """The report of ``recipe_name`` trained with ``seed`` (``out/<recipe>/seed<k>/report.json``): reused when
    it exists with the same recipe, else the shipped checkpoint's when that is the same recipe, else trained
    (``train_choice_vla_recipe``; the demonstrations are recorded once in ``out/work`` and shared)."""
    from embeval.act2answer.choice_vla_training import train_choice_vla_recipe
    from embeval.subjects.embedded.population import a2a_vla_recipe
    from embeval.subjects.embedded.zoo import MODELS_DIR

    r = a2a_vla_recipe(recipe_name)
    r.seed = seed
    if eval_per_category is not None:
        r.eval_per_category = eval_per_category
    want = json.loads(json.dumps(asdict(r)))
    # a report written before a recipe field existed has that field at its default (which changes nothing)
    defaults = json.loads(json.dumps({f.name: getattr(type(r)(name=r.name), f.name) for f in fields(r)}))
    path = out / recipe_name / f"seed{seed}"
    for cand in (path / "report.json", MODELS_DIR / recipe_name / "report.json"):
        if cand.exists():
            try:
                rep = json.loads(cand.read_text())
                usable = (isinstance(rep, dict) and isinstance(rep.get("recipe"), dict)
                          and isinstance(rep.get("eval", {}).get("categories"), dict))
            except (OSError, ValueError, AttributeError):
                usable = False  # e.g. a run killed while it wrote the report: trained again
            if not usable:
                if log:
                    log(f"{recipe_name} seed {seed}: {cand} is not a complete report; training again")
                continue
            if {**defaults, "start": "table", **rep["recipe"]} == want:  # a report without ``start``: the table start
                if log:
                    log(f"{recipe_name} seed {seed}: reusing {cand}")
                return rep
    if log:
        log(f"{recipe_name} seed {seed}: training (1-2 min on 2 cores) and evaluating on {r.eval_per_category} items per "
            "category (5-13 min at 20) ...")
    return train_choice_vla_recipe(r, path, work=out / "work", log=log)


def seed_table(reports: dict[str, dict[int, dict]]) -> dict:
    """``{recipe: {seed: report}}`` -> per recipe and category: per-seed success rate and on-card rate,
    their mean, min and max over seeds, and the demonstrated categories."""
    table: dict = {}
    for name, by_seed in reports.items():
        seeds = sorted(by_seed)
        cats = sorted({c for rep in by_seed.values() for c in rep["eval"]["categories"]}, key=lambda c: (c == "all", c))
        rows = {}
        for c in cats:
            per = {}
            for s in seeds:
                d = by_seed[s]["eval"]["categories"].get(c)
                if d is not None:
                    per[s] = {"rate": d["rate"], "on_card": on_card_rate(d["rate"], d.get("out_of_bounds", 0.0)),
                              "out_of_bounds": d.get("out_of_bounds", 0.0), "regime": d.get("regime")}
            rates = [v["rate"] for v in per.values()]
            rows[c] = {"seeds": per, "mean": sum(rates) / len(rates), "min": min(rates), "max": max(rates)}
        demo = by_seed[seeds[0]]["recipe"].get("demo_categories", [])
        table[name] = {"seeds": seeds, "categories": rows, "demo_categories": demo}
    return table


def shipped_seed_reports(recipes: Sequence[str]) -> dict[str, dict[int, dict]]:
    """``{recipe: {seed: report}}`` of the study shipped with the checkpoints: seed 0 is the checkpoint's own
    ``report.json``, the others ``seed_reports/seed<k>.json`` (what ``embeval train seeds`` wrote for them; their
    recipe must be the checkpoint's but for the seed, else :class:`ConfigError`). Empty for a recipe without them."""
    from embeval.subjects.embedded.zoo import MODELS_DIR
    from embeval.subjects.model_files import read_json

    out: dict[str, dict[int, dict]] = {}
    for name in recipes:
        folder = MODELS_DIR / name
        if not (folder / "report.json").is_file() or not (folder / "seed_reports").is_dir():
            continue
        def report(f: Path) -> dict:
            rep = read_json(f)
            if not (isinstance(rep, dict) and isinstance(rep.get("recipe"), dict)
                    and isinstance(rep.get("eval", {}).get("categories"), dict)):
                raise ConfigError(f"{f} is not a complete training report (missing, over the size limit or not JSON): "
                                  f"restore it from git or train it again with `embeval train seeds --recipes {name}`")
            return rep

        base = report(folder / "report.json")
        by_seed = {int(base["recipe"]["seed"]): base}
        for f in sorted((folder / "seed_reports").glob("seed*.json")):
            rep = report(f)
            if {**rep["recipe"], "seed": 0} != {**base["recipe"], "seed": 0}:
                raise ConfigError(f"{f}: its recipe is not {name}'s shipped one (other than the seed); train it again "
                                  f"with `embeval train seeds --recipes {name}`")
            by_seed[int(rep["recipe"]["seed"])] = rep
        out[name] = by_seed
    return out


def order_on_every_seed(pairs: Sequence[tuple[float, float]], a: str, b: str) -> str:
    """``"a > b"``, ``"a < b"`` or ``"a = b"`` when that order holds in every (a's value, b's value) pair of
    ``pairs`` (one per seed), else ``"differs by seed"`` (also when there is no pair)."""
    signs = {(x > y) - (x < y) for x, y in pairs}
    return {1: f"{a} > {b}", -1: f"{a} < {b}", 0: f"{a} = {b}"}[signs.pop()] if len(signs) == 1 else "differs by seed"


def holds_on_every_seed(table: dict, a: str, b: str) -> dict[str, str]:
    """Per category: ``"a > b"``, ``"a < b"`` or ``"a = b"`` when it holds on every common seed (compared
    seed by seed: the same seed trains both recipes from the same data order), else ``"differs by seed"``."""
    common = sorted(set(table[a]["seeds"]) & set(table[b]["seeds"]))
    if not common:
        raise ConfigError(f"no seed common to {a} and {b}")
    out = {}
    for c in table[a]["categories"]:
        if c not in table[b]["categories"]:
            continue
        ra, rb = table[a]["categories"][c]["seeds"], table[b]["categories"][c]["seeds"]
        out[c] = order_on_every_seed([(ra[s]["rate"], rb[s]["rate"]) for s in common if s in ra and s in rb], a, b)
    return out


def format_seed_table(table: dict, a: str, b: str) -> str:
    """Markdown: per category, each seed's success rate (on-card rate in brackets) for ``a`` and ``b``, the
    range over seeds, and what holds on every seed."""
    seeds = sorted(set(table[a]["seeds"]) & set(table[b]["seeds"]))
    verdict = holds_on_every_seed(table, a, b)
    demo = set(table[a]["demo_categories"])
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}"  # noqa: E731
    head = ["category"] + [f"{n} s{s}" for n in (a, b) for s in seeds] + [f"{a} range", f"{b} range", "on every seed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c, row in table[a]["categories"].items():
        if c not in table[b]["categories"]:
            continue
        cells = [c + ("*" if c in demo else "")]
        for n in (a, b):
            for s in seeds:
                v = table[n]["categories"][c]["seeds"].get(s)
                cells.append("-" if v is None else f"{pct(v['rate'])} ({pct(v['on_card'])})")
        for n in (a, b):
            r = table[n]["categories"][c]
            cells.append(f"{pct(r['min'])}-{pct(r['max'])}")
        cells.append(verdict[c])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_seed_study(recipes: Sequence[str], seeds: Sequence[int], out: str | Path, eval_per_category: int | None = None,
                   log: Callable[[str], None] | None = print) -> dict:
    """Train (or reuse) every recipe x seed, write ``out/seeds.json`` and ``out/seeds.md``; returns the table."""
    if len(recipes) != 2:
        raise ConfigError(f"--recipes: give exactly two recipes to compare, got {len(recipes)}")
    if len(set(seeds)) < 3:
        raise ConfigError(f"--seeds: a claim across seeds needs at least 3 distinct seeds, got {sorted(set(seeds))}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    reports = {n: {s: train_or_reuse(n, s, out, eval_per_category, log) for s in sorted(set(seeds))} for n in recipes}
    table = seed_table(reports)
    (out / "seeds.json").write_text(json.dumps({"table": table, "holds": holds_on_every_seed(table, *recipes)}, indent=1))
    md = format_seed_table(table, *recipes)
    (out / "seeds.md").write_text(md + "\n")
    return table
