"""The IQA metric benchmark over training seeds: ``embeval iqa bench --seeds 0 1 2``.

A seed of :func:`embeval_analysis.iqa.bench.run_bench` (``BenchConfig.seed``) draws the 8:2 splits and trains
the learned metrics on them (CNNIQA's initialisation and batches, the fusions' SVRs). :func:`run_iqa_seed_study`
runs the same benchmark once per seed on the same database and tabulates, per metric, target and split
protocol, the median SRCC over splits on each seed, its mean and range, and whether "metric X beats PSNR"
holds on every seed; and, per withheld rate, the NR quality gate's lead over a PSNR gate (scene-disjoint
splits, :func:`~embeval_analysis.iqa.bench.gate_over_splits`) on each seed. Every per-seed number equals
``embeval iqa bench --seed S`` with the same options.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from embeval_analysis.seed_claims import (MIN_SEEDS, Claim, check_seeds, claim_verdicts, format_claims, format_rows,
                                          row_stats, verdict_text)

Log = Callable[[str], None]
#: the metric every claim is measured against
BASELINE = "psnr"
#: withheld shares of the gate comparison (the bench's)
GATE_RATES = (0.1, 0.2, 1 / 3)


def _key(metric: str, target: str, protocol: str) -> str:
    return f"{metric}|{target}|{protocol}"


def seed_record(res, scores, seed: int, gate_metric: str | None = None, gate_target: str = "decision",
                rates: Sequence[float] = GATE_RATES, n_boot: int = 1000) -> dict[str, Any]:
    """What one seed's :class:`~embeval_analysis.iqa.bench.BenchResult` says: median SRCC over splits (breakdown
    ``all``) per metric, target and protocol, the number of splits higher than PSNR's, and the gate comparison
    (``gate_metric``, default the bench's choice :func:`~embeval_analysis.iqa.bench.best_nr` on the scene splits;
    bootstrap seeded with ``seed`` as ``embeval iqa bench --seed`` does)."""
    from embeval_analysis.iqa.bench import best_nr, gate_over_splits

    s = res.summary[res.summary["breakdown"] == "all"]
    rows = {}
    for _, r in s.iterrows():
        proto = r["protocol"]
        rows[_key(r.metric, r.target, proto)] = {"metric": r.metric, "mode": r["mode"], "kind": r.kind, "target": r.target,
                                                 "protocol": proto, "srcc": float(r.srcc), "srcc_mean": float(r.srcc_mean),
                                                 "n_splits": int(r.n_splits)}
    ps = res.per_split[res.per_split["breakdown"] == "all"]
    for k, row in rows.items():
        sel = ps[(ps["target"] == row["target"]) & (ps["protocol"] == row["protocol"])]
        base = sel[sel["metric"] == BASELINE].set_index("split")["srcc"]
        mine = sel[sel["metric"] == row["metric"]].set_index("split")["srcc"]
        common = mine.index.intersection(base.index)
        row["splits_above_psnr"] = int((mine[common] > base[common]).sum())
        row["splits_common"] = len(common)
    gate = None
    view = res.view("scene")
    metric = gate_metric or best_nr(view, gate_target)
    if metric is not None and (metric, gate_target) in view.preds and BASELINE in res.metric_values:
        summ, _ = gate_over_splits(res, scores, metric, gate_target, tuple(rates), n_boot=n_boot, seed=seed,
                                   protocol="scene")
        gate = {"metric": metric, "target": gate_target, "protocol": view.protocol,
                "rates": [{k: v if k in ("metric", "target") else float(v) for k, v in r.items()}
                          for r in summ.to_dict("records")]}
    return {"seed": seed, "rows": rows, "gate": gate, "unavailable": dict(res.unavailable), "seconds": res.seconds}


def study_table(records: dict[int, dict]) -> dict[str, Any]:
    """Per-seed records -> rows (per metric x target x protocol: per-seed median SRCC, mean, min, max), the
    claims "X beats PSNR" with their verdicts, and the gate rows and claims."""
    seeds = sorted(records)
    keys: dict[str, dict] = {}
    for s in seeds:
        for k, r in records[s]["rows"].items():
            keys.setdefault(k, {f: r[f] for f in ("metric", "mode", "kind", "target", "protocol")})
    values = {k: {s: records[s]["rows"][k]["srcc"] for s in seeds if k in records[s]["rows"]} for k in keys}
    rows = []
    for k, meta in keys.items():
        rows.append({"key": k, **meta, **row_stats(values[k]),
                     "splits_above_psnr": {s: records[s]["rows"][k]["splits_above_psnr"] for s in seeds
                                           if k in records[s]["rows"]},
                     "splits": {s: records[s]["rows"][k]["splits_common"] for s in seeds if k in records[s]["rows"]}})
    claims = [Claim(f"{r['metric']} beats PSNR on {r['target']} SRCC ({r['protocol']} splits)", r["key"],
                    _key(BASELINE, r["target"], r["protocol"]))
              for r in rows if r["metric"] != BASELINE and _key(BASELINE, r["target"], r["protocol"]) in keys]
    verdicts = claim_verdicts(values, claims, seeds)
    by_key = {c.a: v for c, v in zip(claims, verdicts)}
    for r in rows:
        r["beats_psnr"] = by_key.get(r["key"])
    # the gate: gate - PSNR per rate (median over splits) and its scene-bootstrap lower bound, each against 0
    gvals: dict[str, dict[int, float]] = {"zero": {s: 0.0 for s in seeds}}
    gate_rows, gclaims = [], []
    rates = sorted({round(r["rate"], 6) for s in seeds if records[s]["gate"] for r in records[s]["gate"]["rates"]})
    for rate in rates:
        per = {s: next((x for x in records[s]["gate"]["rates"] if round(x["rate"], 6) == rate), None)
               for s in seeds if records[s]["gate"]}
        for what in ("diff", "diff_lo", "gate", "psnr"):
            gvals[f"{what}@{rate}"] = {s: x[what] for s, x in per.items() if x is not None}
        gate_rows.append({"rate": rate, **{w: row_stats(gvals[f"{w}@{rate}"]) for w in ("diff", "diff_lo", "gate", "psnr")},
                          "metric": {s: records[s]["gate"]["metric"] for s in per}})
        gclaims += [Claim(f"NR gate withholds more low-Decision frames than the PSNR gate at {rate:.0%} (median over splits)",
                          f"diff@{rate}", "zero"),
                    Claim(f"... with the scene-bootstrap 95 % interval above 0 at {rate:.0%}", f"diff_lo@{rate}", "zero")]
    gverdicts = claim_verdicts(gvals, gclaims, seeds)
    for i, g in enumerate(gate_rows):
        g["above_psnr"], g["interval_above_0"] = gverdicts[2 * i], gverdicts[2 * i + 1]
    return {"seeds": seeds, "rows": rows, "claims": verdicts, "gate": gate_rows, "gate_claims": gverdicts}


def format_study(table: dict[str, Any]) -> str:
    """Markdown: the SRCC table (per target and protocol, rows by mean SRCC), then the gate table."""
    seeds = table["seeds"]
    order = {"random": 0, "scene": 1}
    rows = sorted(table["rows"], key=lambda r: (r["target"], order.get(r["protocol"], 9), -(r["mean"] if r["mean"] == r["mean"] else -9)))

    def extra(i):
        r = rows[i]
        v = r["beats_psnr"]
        above = "/".join(f"{r['splits_above_psnr'][s]}" for s in seeds if s in r["splits_above_psnr"])
        n = max(r["splits"].values(), default=0)
        return ["-" if v is None else verdict_text(v), "-" if v is None else f"{above} of {n}"]

    md = [format_rows([((r["metric"], r["mode"], r["kind"], r["target"], r["protocol"]),
                        {s: r["seeds"].get(s) for s in seeds}) for r in rows],
                      ["metric", "mode", "kind", "target", "splits"], seeds,
                      ["beats PSNR on every seed (median SRCC)", "splits above PSNR per seed"], extra)]
    md.append("\nEach cell: the median over the seed's 8:2 splits of the held-out SRCC (breakdown all); a seed draws "
              "the splits and trains the learned metrics.")
    if table["gate"]:
        g0 = table["gate"][0]
        metrics = sorted(set(g0["metric"].values()))
        md.append(f"\nQuality gate ({', '.join(metrics)}, chosen per seed on the scene-disjoint splits) minus the PSNR gate: "
                  "share of withheld frames whose Decision lies in the lowest third, median over splits; bracket: "
                  "the scene-bootstrap 95 % lower bound.\n")
        head = ["withheld"] + [f"seed {s}" for s in seeds] + ["mean", "min..max", "above PSNR on every seed",
                                                              "interval above 0 on every seed"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for g in table["gate"]:
            d, lo = g["diff"], g["diff_lo"]
            cells = [f"{g['rate']:.0%}"] + [f"{d['seeds'][s]:+.2f} ({lo['seeds'][s]:+.2f})" if s in d["seeds"] else "-"
                                            for s in seeds]
            cells += [f"{d['mean']:+.2f}", f"{d['min']:+.2f}..{d['max']:+.2f}", verdict_text(g["above_psnr"]),
                      verdict_text(g["interval_above_0"])]
            lines.append("| " + " | ".join(cells) + " |")
        md.append("\n".join(lines))
    held = [v for v in table["claims"] + table["gate_claims"] if v["holds"]]
    md.append(f"\nClaims holding on every seed ({len(held)} of {len(table['claims']) + len(table['gate_claims'])}):")
    md.append(format_claims(table["claims"] + table["gate_claims"], seeds))
    return "\n".join(md)


def run_iqa_seed_study(db: str | Path, cfg, seeds: Sequence[int], out: str | Path | None = None,
                       gate_metric: str | None = None, n_boot: int = 1000, log: Log | None = print,
                       min_seeds: int = MIN_SEEDS) -> dict[str, Any]:
    """:func:`~embeval_analysis.iqa.bench.run_bench` with ``cfg`` once per seed (``cfg.seed`` replaced), then
    :func:`study_table`; writes ``out/seeds.json`` and ``out/seeds.md`` (and each seed's
    ``bench_summary_seed<k>.csv``) when ``out`` is given. Returns the table."""
    from embeval_analysis.iqa.bench import run_bench
    from embeval_analysis.iqa.database import read_table

    seeds = check_seeds(seeds, min_seeds=min_seeds)
    cfg.check()
    scores = read_table(Path(db))
    records = {}
    for s in seeds:
        if log:
            log(f"seed {s}:")
        res = run_bench(db, dataclasses.replace(cfg, seed=s), log=log)
        records[s] = seed_record(res, scores, s, gate_metric, n_boot=n_boot)
        if out is not None:
            Path(out).mkdir(parents=True, exist_ok=True)
            res.summary.to_csv(Path(out) / f"bench_summary_seed{s}.csv", index=False)
        if log:
            log(f"  seed {s} done in {res.seconds:.0f} s")
    table = study_table(records)
    if out is not None:
        (Path(out) / "seeds.json").write_text(json.dumps({"table": table, "records": records}, indent=1, default=str))
        (Path(out) / "seeds.md").write_text(format_study(table) + "\n")
    return table
