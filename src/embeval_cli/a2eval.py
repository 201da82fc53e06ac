"""``embeval a2eval pool|curate|evaluate|report|seeds|ranks|headline``: agentic benchmark curation and evaluation (A2Eval)."""
from __future__ import annotations

import argparse
from pathlib import Path

from embeval_cli._util import add_group, seed

_CFG_HELP = "A2Eval config YAML (default: config/a2eval/default.yaml; config/a2eval/ci.yaml is small and rule-based)"


def register(sub) -> None:
    g = add_group(sub, "a2eval", "A2Eval: curate a compact balanced benchmark (Data Agent) and synthesise its "
                                 "evaluation code (Eval Agent)")
    ex = argparse.RawDescriptionHelpFormatter

    p = g.add_parser("pool", help="check pool files against the schema, or write the procedural pool",
                     formatter_class=ex, description="Check benchmark pools (JSONL, Parquet, lmms-eval task exports) "
                     "or generate the procedural embodied-reasoning pool.",
                     epilog="examples:\n  embeval a2eval pool --procedural 600 --out runs/a2eval/pool.jsonl\n"
                            "  embeval a2eval pool my_bench.jsonl other.parquet lmms_task_dir/")
    p.add_argument("files", nargs="*", type=Path, help="pool files or lmms-eval task folders to check")
    p.add_argument("--procedural", type=int, metavar="N", help="generate the procedural pool with N items")
    p.add_argument("--seed", type=int, default=0, help="seed of the procedural pool (default 0)")
    p.add_argument("--out", type=Path, help="write the (generated or checked) pool here as JSONL")
    p.set_defaults(func=_pool)

    c = g.add_parser("curate", help="run the Data Agent: induce dimensions, assign, sample the compact suite",
                     formatter_class=ex, description="Run the Data Agent on a pool and write dimensions.json, "
                     "memory.jsonl, assignments.jsonl, selection.json and subset.jsonl to --out.",
                     epilog="example:\n  embeval a2eval curate --config config/a2eval/ci.yaml --out runs/a2eval\n"
                            "  embeval a2eval curate my_bench.jsonl --k 10 --out runs/a2eval_mine")
    c.add_argument("files", nargs="*", type=Path, help="pool files (default: the config's pool)")
    c.add_argument("--config", type=Path, help=_CFG_HELP)
    c.add_argument("--k", type=int, help="clusters (kept examples) per dimension; overrides data_agent.k_per_dim "
                   "(default rule 'auto': min(500, max(4, round(500 x pool items / 24519))), the paper's 500 scaled)")
    c.add_argument("--out", type=Path, default=Path("runs/a2eval"), help="output folder (default runs/a2eval)")
    c.set_defaults(func=_curate)

    e = g.add_parser("evaluate", help="run the Eval Agent on a curated suite and export an lmms-eval task",
                     formatter_class=ex, description="Synthesise run_vlm_inference / eval_score in the sandbox, "
                     "evaluate the subjects on the curated suite, export <out>/lmms_task/.",
                     epilog="example:\n  embeval a2eval evaluate --config config/a2eval/ci.yaml --out runs/a2eval")
    e.add_argument("--config", type=Path, help=_CFG_HELP)
    e.add_argument("--out", type=Path, default=Path("runs/a2eval"), help="the curate output folder (default runs/a2eval)")
    e.set_defaults(func=_evaluate)

    r = g.add_parser("report", help="fidelity report: curated vs full rankings, random and k-center baselines, cost",
                     formatter_class=ex, description="Compare the curated suite's ranking of the subjects with the "
                     "full pool's (Spearman/Kendall/Pearson with bootstrap intervals, discordant pairs, score MAE), "
                     "against >= 20 random subsets of equal size and k-center; writes report.json.",
                     epilog="example:\n  embeval a2eval report --config config/a2eval/ci.yaml --out runs/a2eval")
    r.add_argument("--config", type=Path, help=_CFG_HELP)
    r.add_argument("--out", type=Path, default=Path("runs/a2eval"), help="the curate output folder (default runs/a2eval)")
    r.set_defaults(func=_report)

    sd = g.add_parser("seeds", help="curate and report on 3+ curation seeds: what holds on every seed",
                      formatter_class=ex, description="Run the Data Agent and the fidelity report once per seed (the "
                      "config's top-level seed: the Data Agent's samples and k-means, the random subsets, k-center and "
                      "the bootstrap; pool and subjects fixed) and print, per subject set, each method's Spearman with the "
                      "full pool's ranking on each seed, its mean and min..max, and whether 'headline above / below random "
                      "(k-center)' holds on every seed. Writes OUT/seeds.md, OUT/seeds.json and each seed's curate files "
                      "in OUT/seed<k>/. Seed k gives the numbers of curate + report with 'seed: k' in the config.",
                      epilog="examples:\n  embeval a2eval seeds --config config/a2eval/ci.yaml --seeds 0 1 2 --out runs/a2eval-seeds\n"
                             "  embeval a2eval seeds --seeds 0 1 2 --models --out runs/a2eval-seeds-demo   # the demo's setting")
    sd.add_argument("--config", type=Path, help=_CFG_HELP)
    sd.add_argument("--seeds", type=seed, nargs="+", default=[0, 1, 2], metavar="SEED",
                    help="curation seeds, at least 3 distinct (default 0 1 2)")
    sd.add_argument("--models", action="store_true", help="also rank the 9 shipped model subjects (as the demo does) beside "
                    "the config's subjects")
    sd.add_argument("--out", type=Path, required=True, help="folder for seeds.md, seeds.json and seed<k>/")
    sd.set_defaults(func=_seeds)

    k = g.add_parser("ranks", help="rank statistics of a score table (e.g. a paper's ranking table) with intervals",
                     formatter_class=ex, description="Spearman / Kendall tau-b / Pearson with model-bootstrap "
                     "intervals and discordant pairs between a reference score column and the others of a CSV "
                     "with a 'model' column.",
                     epilog="example:\n  embeval a2eval ranks table3.csv --reference original")
    k.add_argument("table", type=Path, help="CSV: model,<reference>,<other suites...>")
    k.add_argument("--reference", default="original", help="reference column (default: original)")
    k.add_argument("--columns", nargs="+", help="columns to compare (default: all others)")
    k.add_argument("--boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    k.set_defaults(func=_ranks)

    h = g.add_parser("headline", help="the A2Eval headline per model from per-item scores: the mean over dimensions",
                     formatter_class=ex, description="Per model: the mean item score of each capability dimension and "
                     "the headline, the mean over dimensions of those means (the A2Eval paper's Table 7 'Avg' and "
                     "Table 3 column), with the item mean beside it, in percent with two decimals. FILE is CSV (header "
                     "with model, dimension, score; other columns ignored) or JSON lines (one object per item with "
                     "those keys); score in [0, 1].",
                     epilog="examples:\n  embeval a2eval headline scores.csv\n"
                            "  embeval a2eval headline scores.jsonl --item-mean --json")
    h.add_argument("file", type=Path, help="per-item scores: CSV or JSON lines with model, dimension, score in [0, 1]")
    h.add_argument("--item-mean", action="store_true", help="headline = the mean over all items (option; the default "
                   "is the paper's mean over dimensions, which counts every dimension once)")
    h.add_argument("--json", action="store_true", help="machine-readable output (percent, full precision)")
    h.set_defaults(func=_headline)


_RERUN = "re-run `embeval a2eval curate --out {out}` (with the same pool/config)"


def _load(args, need_curation: bool = True, subjects: bool = False):
    """Config (validated whole, before any work), the subjects when asked (specs resolved before the pool is
    built), the curated selection read back from ``args.out`` and the pool: ``(cfg, items, sel, subjects)``."""
    from embeval.errors import read_json
    from embeval_analysis.a2eval import pipeline as P

    cfg = P.load_config(args.config)
    if getattr(args, "k", None) is not None:
        from embeval_analysis.a2eval.sampling import parse_k

        parse_k(args.k, "--k")
    subs = P.make_subjects(cfg) if subjects else None
    files = getattr(args, "files", None)
    sel = None
    if files:
        cfg["pool"] = {"files": [str(f) for f in files]}
    elif need_curation and (args.out / "pool.json").exists():
        f = args.out / "pool.json"
        cfg["pool"] = read_json(f, "run file", _RERUN.format(out=args.out), utf8_fix=_RERUN.format(out=args.out))
        try:
            P.section(cfg, "pool")
        except Exception as exc:  # noqa: BLE001 - ConfigError from the strict reader: name the file
            raise _run_file_error(f, args.out, str(exc)) from None
    if need_curation:
        sel = _read_selection(args.out)
    items = P.make_pool(cfg)
    if sel is not None:
        f = args.out / "selection.json"
        if sel["pool_ids"] != [it.id for it in items]:
            raise _run_file_error(f, args.out, "was curated from a different pool")
        if max(sel["indices"], default=-1) >= len(items):
            raise _run_file_error(f, args.out, f"indices point past the pool's {len(items)} items")
    return cfg, items, sel, subs


def _run_file_error(f, out, problem: str):
    from embeval.errors import ConfigError

    return ConfigError(f"run file {f}: {problem}; {_RERUN.format(out=out)}")


def _read_selection(out) -> dict:
    """``selection.json`` of a curate run, read bounded and checked for shape: one-line error naming the file."""
    import math

    from embeval.errors import MissingFileError, read_json

    f = out / "selection.json"
    if not f.is_file():
        raise MissingFileError(f"{f} not found: run `embeval a2eval curate --out {out}` first")
    sel = read_json(f, "run file", _RERUN.format(out=out), utf8_fix=_RERUN.format(out=out))

    def ints(key):
        v = sel.get(key)
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
            raise _run_file_error(f, out, f"{key!r} must be a list of integers >= 0")
        return v

    for key in ("pool_ids", "dimensions"):
        v = sel.get(key)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise _run_file_error(f, out, f"{key!r} must be a list of strings")
    idx = ints("indices")
    w = sel.get("weights")
    if not isinstance(w, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                                          and x >= 0 for x in w):
        raise _run_file_error(f, out, "'weights' must be a list of finite numbers >= 0")
    if not idx or len(w) != len(idx) or len(sel["dimensions"]) != len(idx):
        raise _run_file_error(f, out, f"'indices', 'weights' and 'dimensions' must be non-empty and equally long, got "
                                      f"{len(idx)}, {len(w)}, {len(sel['dimensions'])}")
    if "cluster_of" in sel:
        ints("cluster_of")
    if not isinstance(sel.get("k_per_dim", {}), dict) or not isinstance(sel.get("k_rule", ""), str):
        raise _run_file_error(f, out, "'k_per_dim' must be an object and 'k_rule' a string")
    return sel


def _pool(args) -> int:
    from collections import Counter

    from embeval.errors import ConfigError
    from embeval_analysis.a2eval.pool import load_pool, write_jsonl
    from embeval_analysis.a2eval.procedural import procedural_pool

    if args.procedural is not None:
        from embeval.config import in_range
        from embeval_analysis.a2eval.procedural import MAX_ITEMS

        in_range(args.procedural, "--procedural", 1, MAX_ITEMS, "items; see docs/a2eval.md")
        in_range(args.seed, "--seed", 0)
        items = procedural_pool(n_items=args.procedural, seed=args.seed)
    elif args.files:
        items = load_pool(args.files)
    else:
        raise ConfigError("give pool files to check, or --procedural N to generate the procedural pool")
    print(f"{len(items)} items OK (schema checked)")
    print(f"{'answer type':<14}{'items':>6}")
    for k, v in sorted(Counter(it.answer_type for it in items).items()):
        print(f"{k:<14}{v:>6}")
    dims = Counter(it.dimension or "-" for it in items)
    if len(dims) > 1:
        print(f"\n{'true dimension':<16}{'items':>6}")
        for k, v in sorted(dims.items()):
            print(f"{k:<16}{v:>6}")
    if args.out:
        write_jsonl(items, args.out)
        print(f"wrote {args.out}")
    return 0


def _curate(args) -> int:
    import json

    from embeval_analysis.a2eval import pipeline as P
    from embeval_analysis.a2eval.data_agent import curate
    from embeval_analysis.a2eval.pool import write_jsonl

    from embeval.errors import check_out_dir

    check_out_dir(args.out)
    cfg, items, _, _ = _load(args, need_curation=False)
    dcfg = P.data_agent_config(cfg)
    if args.k is not None:
        dcfg.k_per_dim = args.k
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory.jsonl").unlink(missing_ok=True)
    cur = curate(items, dcfg, P.embed_config(cfg), out=args.out)
    (args.out / "pool.json").write_text(json.dumps(cfg.get("pool") or {}))
    write_jsonl([items[i] for i in cur.selection.indices], args.out / "subset.jsonl")
    ind = cur.induction
    print(f"dimensions after {len(ind.rounds)} round(s) (stop: {ind.stop_reason}): {', '.join(d.name for d in cur.dimensions)}")
    a = cur.assignment
    print(f"assigner: {len(a.voters)} voters, Fleiss' kappa {a.kappa:.3f} ({len(a.kappa_voters)} voters x "
          f"{a.kappa_items} items; all voters on {a.kappa_all_items} items: {a.kappa_all_voters:.3f})")
    per = ", ".join(f"{k} votes: {v} items" for k, v in a.votes_per_item.items())
    stand = "".join(f"; {n.split(' (')[0]} past its cap: {c} votes by its stand-in" for n, c in a.stand_in_votes.items() if c)
    print(f"votes per item: {per}{stand}; ties {sum(a.tie)} (tie rule {a.tie_rule})")
    print(f"{'dimension':<14}{'pool':>6}{'kept':>6}")
    for d in [x.name for x in cur.dimensions] + ["other"]:
        n_pool = sum(l == d for l in cur.assignment.labels)
        n_kept = sum(x == d for x in cur.selection.dimensions)
        print(f"{d:<14}{n_pool:>6}{n_kept:>6}")
    n = len(cur.selection.indices)
    print(cur.selection.k_rule)
    print(f"subset {n} of {len(items)} items ({1 - n / len(items):.0%} smaller) -> {args.out}/subset.jsonl")
    return 0


def _evaluate(args) -> int:
    from embeval_analysis.a2eval import pipeline as P
    from embeval_analysis.a2eval.eval_agent import EvalAgent, evaluate
    from embeval_analysis.a2eval.lmms_export import export_lmms_task

    cfg, items, sel, subjects = _load(args, subjects=True)
    subset = [items[i] for i in sel["indices"]]
    ecfg = P.eval_agent_config(cfg)
    agent = EvalAgent(ecfg)
    synth = agent.synthesise(subset, subjects[len(subjects) // 2], seed=cfg.get("seed", 0))
    P.save_json(synth.to_dict(), args.out / "synthesis.json")
    for t, code in synth.inference_code.items():
        (args.out / f"run_vlm_inference_{t}.py").write_text(code)
    for t, code in synth.scorer_code.items():
        (args.out / f"eval_score_{t}.py").write_text(code)
    print(f"{'role':<10}{'task':<9}{'attempts':>9}  result")
    for role in ("evaluator", "scorer"):
        for t in sorted({a.task for a in synth.attempts}):
            att = [a for a in synth.attempts if a.role == role and a.task == t]
            ok = t in (synth.inference_code if role == "evaluator" else synth.scorer_code)
            extra = f" (probe fidelity {synth.probe_fidelity[t]:.1%})" if role == "scorer" and ok else ""
            print(f"{role:<10}{t:<9}{len(att):>9}  {'ok' + extra if ok else 'FAILED: ' + str(synth.failed.get(f'{role}:{t}'))[:80]}")
    print(synth.acceptance_summary())
    from embeval_analysis.a2eval.subjects import collect_results

    ev = evaluate(synth, subjects, subset, ecfg.limits())
    fid = P.agent_fidelity(ev, collect_results(subjects, subset), subset, sel["dimensions"])
    P.save_json({**ev.to_dict(), "fidelity": fid}, args.out / "evaluation.json")
    print(f"\nsynthesised scorer agrees with the reference scorers on {ev.scorer_fidelity:.1%} of "
          f"{ev.synth_scores.size} predictions ({ev.seconds:.1f} s in the sandbox)")
    print(P.format_agent_fidelity(fid))
    w = sel["weights"]
    import numpy as np

    from embeval_analysis.a2eval.headline import headline_scores

    method = P.report_config(cfg).headline
    other = "item_mean" if method == "dimension_mean" else "dimension_mean"
    width = max([14] + [len(s) + 2 for s in ev.subjects])
    print(f"\n{'subject':<{width}}{'headline':>9}{P.HEADLINE_LABEL[other]:>22}{'weighted':>10}   (headline: the "
          f"{P.HEADLINE_LABEL[method]} on the subset, report.headline: {method})")
    for k, s in enumerate(ev.subjects):
        row = np.nan_to_num(ev.synth_scores[k])
        print(f"{s:<{width}}{headline_scores(row, sel['dimensions'], method):>9.3f}"
              f"{headline_scores(row, sel['dimensions'], other):>22.3f}{np.dot(row, w) / np.sum(w):>10.3f}")
    if not synth.failed:
        path = export_lmms_task(args.out / "lmms_task", subset, synth.inference_code, synth.scorer_code, w)
        print(f"lmms-eval task -> {path}")
        return 0
    print(f"no lmms-eval export: synthesis failed for {sorted(synth.failed)} within the budget of "
          f"{ecfg.max_attempts} attempts; see {args.out}/synthesis.json, use a stronger model or raise max_attempts")
    return 1


def _report(args) -> int:
    import time

    from embeval_analysis.a2eval import pipeline as P
    from embeval_analysis.a2eval.sampling import Selection, embed_items
    from embeval_analysis.a2eval.subjects import clear_memo, collect_results

    cfg, items, sel, subjects = _load(args, subjects=True)
    labels = _read_labels(args.out / "assignments.jsonl", len(items), args.out)
    clear_memo()
    t0 = time.perf_counter()
    res = collect_results(subjects, items)
    t_full, t_sub, _ = P.measure_speedup(subjects, items, sel["indices"], time.perf_counter() - t0)
    X = embed_items(items, P.embed_config(cfg))
    selection = Selection(sel["indices"], sel["weights"], sel["dimensions"], sel.get("cluster_of", []),
                          sel.get("k_per_dim", {}), sel.get("k_rule", ""))
    rc = P.report_config(cfg)
    rep = P.fidelity_report(res.scores, res.subjects, selection, X, labels, rc.n_random,
                            rc.n_boot, rc.n_kcenter, cfg.get("seed", 0), t_full, t_sub, headline=rc.headline)
    P.save_json(rep, args.out / "report.json")
    print(P.format_report(rep))
    print(f"\nreport -> {args.out}/report.json")
    return 0


def _seeds(args) -> int:
    from embeval.errors import check_out_dir
    from embeval_analysis.a2eval import pipeline as P
    from embeval_analysis.a2eval.seeds import format_study, run_a2eval_seed_study
    from embeval_analysis.seed_claims import check_seeds

    check_seeds(args.seeds)
    check_out_dir(args.out)
    cfg = P.load_config(args.config)
    if args.models:
        import torch

        torch.set_num_threads(1)  # tiny models: one thread is fastest (see embeval_demo.a2eval)
    res = run_a2eval_seed_study(cfg, args.seeds, args.out, models=args.models)
    print(format_study(res["table"], res["labels"]))
    print(f"wrote {args.out / 'seeds.md'} and {args.out / 'seeds.json'}")
    return 0


def _read_labels(path, n_items: int, out) -> list[str]:
    """The assigner's label of every pool item from ``assignments.jsonl`` (bounded reader; one line naming the file)."""
    from embeval.errors import read_jsonl

    fix = _RERUN.format(out=out)
    recs = read_jsonl(path, "run file", fix, missing=f"{path} not found; {fix}", utf8_fix=fix)
    labels = []
    for n, rec in recs:
        if not isinstance(rec.get("label"), str):
            raise _run_file_error(path, out, f"line {n} has no string 'label'")
        labels.append(rec["label"])
    if len(labels) != n_items:
        raise _run_file_error(path, out, f"{len(labels)} labels for a pool of {n_items} items")
    return labels


def _ranks(args) -> int:
    from embeval_analysis.a2eval.fidelity import pairwise_table, ranking_table

    res = ranking_table(str(args.table), args.reference, args.columns, args.boot)
    print(f"{'column':<14}{'n':>3}  {'Spearman [95% CI]':<26}{'Kendall tau-b [95% CI]':<26}{'Pearson':>8}  discordant")
    for col, ra in res.items():
        pairs = ", ".join(f"{a}/{b}" for a, b in ra.discordant[:4]) + (" ..." if len(ra.discordant) > 4 else "")
        print(f"{col:<14}{ra.n_models:>3}  {str(ra.spearman):<26}{str(ra.kendall):<26}{ra.pearson.value:>8.3f}  "
              f"{len(ra.discordant)} {pairs}")
    cols = [args.reference] + list(res)
    print(f"\nevery pair, two decimals (a paper's ranking-table bottom rows; tau-a = (C - D) / pairs)")
    print(f"{'pair':<28}{'Spearman':>9}{'Kendall':>9}{'tau-a':>7}  C/D/tied")
    for pc in pairwise_table(str(args.table), cols):
        print(f"{pc.a + ' vs ' + pc.b:<28}{pc.spearman:>9.2f}{pc.kendall_b:>9.2f}{pc.kendall_a:>7.2f}  "
              f"{pc.concordant}/{pc.discordant}/{pc.ties}")
    return 0


def _headline(args) -> int:
    import json

    from embeval_analysis.a2eval.headline import format_headline_table, headline_table

    tab = headline_table(args.file, "item_mean" if args.item_mean else "dimension_mean")
    print(json.dumps(tab.to_dict(), indent=2) if args.json else format_headline_table(tab))
    return 0
