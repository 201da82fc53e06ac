"""Probing claims across training seeds: the within-category and transfer Chance-Normalized
Retention of each VLM -> VLA recipe and seed that ``embeval train seeds`` trained, on one held-out
suite, with the random-weight control, so that a claim about what a recipe keeps is read on every seed."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Sequence

from embeval.act2answer.seeds import order_on_every_seed


def probe_seed_models(models: dict[str, dict[int, str | Path]], items: Sequence, seed: int = 0,
                      log: Callable[[str], None] | None = print) -> dict:
    """``{recipe: {seed: checkpoint folder}}`` -> ``{recipe: {seed: {"within": {...}, "transfer": {...}}}}`` with
    each probe's CNR and best backbone / action-expert accuracy (first observation of every item x layout;
    transfer = fitted on the recipe's demonstrated categories, scored on the others)."""
    from embeval.act2answer.episode import obs_size_for
    from embeval.act2answer.subjects import random_weight_control
    from embeval.subjects.embedded.zoo import load_vla
    from embeval_analysis.probing import collect_features, probe_layers, probe_transfer

    out: dict = {}
    for name, by_seed in models.items():
        for s, path in sorted(by_seed.items()):
            t0 = time.perf_counter()
            vla = load_vla(Path(path))
            size = obs_size_for(vla)
            feats = collect_features(vla, items, seed=seed, obs_size=size)
            ctrl = collect_features(random_weight_control(vla, seed + 1), items, seed=seed, obs_size=size)
            within = probe_layers(feats, ctrl, folds=5, seed=seed)
            shown = list(vla.meta.get("recipe", {}).get("demo_categories", []))
            row = {"samples": len(feats), "within": _short(within)}
            if shown and set(shown) & set(feats.categories) and set(feats.categories) - set(shown):
                row["transfer"] = _short(probe_transfer(feats, shown, ctrl, seed=seed))
            out.setdefault(name, {})[s] = row
            if log:
                log(f"{name} seed {s}: within CNR {row['within']['cnr']:.3f}, transfer CNR "
                    f"{row.get('transfer', {}).get('cnr', float('nan')):.3f} ({time.perf_counter() - t0:.0f} s)")
    return out


def _short(rep) -> dict:
    return {"cnr": float(rep.cnr), "backbone_best": float(rep.backbone_best), "expert_best": float(rep.expert_best)}


def format_probe_table(res: dict, a: str, b: str) -> str:
    """Markdown: per seed, each recipe's within and transfer CNR (best backbone / action-expert accuracy),
    and which order of the two transfer CNRs holds on every seed, either way (or that none does)."""
    seeds = sorted(set(res[a]) & set(res[b]))
    lines = ["| seed | " + " | ".join(f"{n} {k} CNR (backbone / expert)" for n in (a, b) for k in ("within", "transfer")) + " |",
             "|" + "---|" * 5]
    for s in seeds:
        cells = []
        for n in (a, b):
            for k in ("within", "transfer"):
                r = res[n][s].get(k)
                cells.append("-" if r is None else f"{r['cnr']:.3f} ({r['backbone_best']:.3f} / {r['expert_best']:.3f})")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    tr = [(res[a][s].get("transfer", {}).get("cnr"), res[b][s].get("transfer", {}).get("cnr")) for s in seeds]
    order = order_on_every_seed(tr, a, b) if all(x is not None and y is not None for x, y in tr) else "differs by seed"
    verdict = (f"transfer CNR on every seed: {order}" if order != "differs by seed" else
               "transfer CNR: the order differs by seed (not a property of the recipes)")
    return "\n".join(lines) + "\n\n" + verdict


def write_probe_table(res: dict, a: str, b: str, out: str | Path) -> str:
    """Write ``out/probes.json`` and ``out/probes.md``; returns the markdown."""
    out = Path(out)
    (out / "probes.json").write_text(json.dumps(res, indent=1))
    md = format_probe_table(res, a, b)
    (out / "probes.md").write_text(md + "\n")
    return md
