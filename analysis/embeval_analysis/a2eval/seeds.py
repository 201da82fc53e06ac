"""The A2Eval subset over curation seeds: ``embeval a2eval seeds --seeds 0 1 2``.

A config's top-level ``seed`` seeds the Data Agent (the Proposer's item samples, the k-means per dimension that
picks the subset) and the report (the 20 random subsets, the k-center starts, the bootstrap). The pool and the
subjects stay fixed. :func:`run_a2eval_seed_study` curates and reports once per seed and tabulates, per subject
set (the config's subjects; with ``models`` also the 9 shipped model subjects, as the demo ranks them), each
method's Spearman with the full pool's ranking on each seed, its mean and range, and whether "the balanced
subset beats random / k-center" (or falls below them) holds on every seed. Seed ``s`` gives the numbers of
``embeval a2eval curate`` + ``embeval a2eval report`` with ``seed: s`` in the config.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from embeval_analysis.seed_claims import MIN_SEEDS, Claim, check_seeds, claim_verdicts, format_claims, format_rows

Log = Callable[[str], None]

#: (row key, label): the methods compared, by Spearman with the full pool's ranking
METHODS = (("headline", "A2Eval headline (mean over dimensions)"),
           ("item_mean", "A2Eval item mean (option)"),
           ("weighted", "mass-weighted reconstruction"),
           ("random", "random subsets x{n_random} (mean)"),
           ("kcenter", "k-center x{n_kcenter} (mean)"),
           ("vs_balanced_full", "headline vs the full pool's dimension-balanced score"))
#: (a, b): both "a above b" and "a below b" are checked on every seed
PAIRS = (("headline", "random"), ("headline", "kcenter"), ("weighted", "random"))


def dimension_balanced_agreement(scores: np.ndarray, true_dims: Sequence[str], subset_scores: Sequence[float]) -> float:
    """Spearman of the subset's headline with the full pool's dimension-balanced score (the mean of its
    per-true-dimension means), as the demo prints it."""
    from embeval_analysis.a2eval.fidelity import pair_correlation

    dims = np.asarray(true_dims)
    full_bal = np.mean([scores[:, dims == d].mean(axis=1) for d in sorted(set(dims.tolist()))], axis=0)
    return float(pair_correlation(full_bal, subset_scores).spearman)


def report_row(rep: dict[str, Any], scores: np.ndarray, true_dims: Sequence[str] | None) -> dict[str, float]:
    """The Spearman of every method in one :func:`~embeval_analysis.a2eval.pipeline.fidelity_report`."""
    dm, im = ("a2eval_balanced", "a2eval_other") if rep["headline_method"] == "dimension_mean" else ("a2eval_other",
                                                                                                   "a2eval_balanced")
    row = {"headline": rep["a2eval_balanced"]["spearman"]["value"], "item_mean": rep[im]["spearman"]["value"],
           "dimension_mean": rep[dm]["spearman"]["value"], "weighted": rep["a2eval_weighted"]["spearman"]["value"],
           "random": rep["random"]["spearman_mean"]["value"], "kcenter": rep["kcenter"]["spearman_mean"]["value"]}
    if true_dims is not None:
        row["vs_balanced_full"] = dimension_balanced_agreement(scores, true_dims, rep["scores"]["subset_balanced"])
    return {k: float(v) for k, v in row.items()}


def study_table(per_seed: dict[str, dict[int, dict[str, float]]]) -> dict[str, Any]:
    """``{subject set: {seed: {method: Spearman}}}`` -> per subject set the per-method values by seed and the
    verdicts of every claim of :data:`PAIRS` (each direction)."""
    out: dict[str, Any] = {}
    for name, by_seed in per_seed.items():
        seeds = sorted(by_seed)
        values = {m: {s: by_seed[s][m] for s in seeds if m in by_seed[s]} for m, _ in METHODS}
        claims = []
        for a, b in PAIRS:
            claims += [Claim(f"{name}: {a} above {b}", a, b), Claim(f"{name}: {a} below {b}", a, b, higher=False)]
        out[name] = {"seeds": seeds, "values": values, "claims": claim_verdicts(values, claims, seeds)}
    return out


def format_study(table: dict[str, Any], labels: dict[str, str] | None = None) -> str:
    """Markdown: per subject set, Spearman with the full pool's ranking per method and seed, mean and range, and
    the claims checked seed by seed."""
    labels = labels or {}
    md = []
    for name, t in table.items():
        seeds = t["seeds"]
        rows = [((labels.get(m, m),), t["values"][m]) for m, _ in METHODS if t["values"].get(m)]
        md.append(f"**{name}** (Spearman with the full pool's ranking):\n")
        md.append(format_rows(rows, ["method"], seeds))
        md.append("")
        md.append(format_claims(t["claims"], seeds))
        held = [v["claim"].split(": ", 1)[1] for v in t["claims"] if v["holds"]]
        md.append(f"\nholds on every seed: {'; '.join(held) or 'none of these'}\n")
    return "\n".join(md).rstrip()


def run_a2eval_seed_study(cfg: dict[str, Any], seeds: Sequence[int], out: str | Path | None = None, models: bool = False,
                          log: Log | None = print, min_seeds: int = MIN_SEEDS) -> dict[str, Any]:
    """Curate (Data Agent seeded with each seed; ``out/seed<k>/`` gets curate's files) and report every subject set
    on each seed; writes ``out/seeds.json`` and ``out/seeds.md``. ``cfg``: a validated A2Eval config
    (:func:`~embeval_analysis.a2eval.pipeline.load_config`). Returns ``{"table", "labels", "records"}``."""
    import time

    from embeval_analysis.a2eval import pipeline as P
    from embeval_analysis.a2eval.data_agent import curate
    from embeval_analysis.a2eval.sampling import embed_items
    from embeval_analysis.a2eval.subjects import collect_results

    seeds = check_seeds(seeds, min_seeds=min_seeds)
    P.check_config(cfg)
    items = P.make_pool(cfg)
    sets = {"config subjects": P.make_subjects(cfg)}
    if models:
        from embeval_analysis.a2eval.models import load_models

        sets["model subjects"] = load_models()
    t0 = time.perf_counter()
    X = embed_items(items, P.embed_config(cfg))
    results = {n: collect_results(subs, items) for n, subs in sets.items()}
    if log:
        log(f"pool {len(items)} items; " + ", ".join(f"{n}: {len(s)}" for n, s in sets.items())
            + f"; embedded and answered in {time.perf_counter() - t0:.0f} s")
    true_dims = [it.dimension for it in items] if all(getattr(it, "dimension", None) for it in items) else None
    rc = P.report_config(cfg)
    per_seed: dict[str, dict[int, dict[str, float]]] = {n: {} for n in sets}
    records: dict[int, dict[str, Any]] = {}
    for s in seeds:
        t0 = time.perf_counter()
        scfg = {**cfg, "seed": s}
        dcfg = P.data_agent_config(scfg)
        dcfg.seed = s  # also when the config pins data_agent.seed
        folder = Path(out) / f"seed{s}" if out is not None else None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "memory.jsonl").unlink(missing_ok=True)
        cur = curate(items, dcfg, P.embed_config(cfg), out=folder, X=X)
        sel = cur.selection
        records[s] = {"n_subset": len(sel.indices), "dimensions": [d.name for d in cur.dimensions],
                      "k_rule": sel.k_rule, "reports": {}}
        if true_dims is not None:
            records[s]["label_accuracy"] = float(np.mean([a == b for a, b in zip(cur.assignment.labels, true_dims)]))
        for n, res in results.items():
            rep = P.fidelity_report(res.scores, res.subjects, sel, X, cur.assignment.labels, rc.n_random, rc.n_boot,
                                    rc.n_kcenter, s, headline=rc.headline)
            per_seed[n][s] = report_row(rep, res.scores, true_dims)
            records[s]["reports"][n] = rep
        if log:
            log(f"seed {s}: subset {len(sel.indices)} items ({time.perf_counter() - t0:.0f} s); "
                + "; ".join(f"{n}: headline {v[s]['headline']:.3f}, random {v[s]['random']:.3f}, k-center "
                            f"{v[s]['kcenter']:.3f}" for n, v in per_seed.items()))
    labels = {m: lab.format(n_random=rc.n_random, n_kcenter=rc.n_kcenter) for m, lab in METHODS}
    table = study_table(per_seed)
    if out is not None:
        P.save_json({"table": table, "labels": labels, "records": records}, Path(out) / "seeds.json")
        (Path(out) / "seeds.md").write_text(format_study(table, labels) + "\n")
    return {"table": table, "labels": labels, "records": records}

