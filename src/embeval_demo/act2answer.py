"""Demo stage ``act2answer``: a procedural suite (6 categories x 40 items x both layouts).

Subjects: ``tiny-vla-a2a`` (the tiny VLA fine-tuned here on expert demonstrations of *training*
items drawn with another seed; shipped for the demo's own recipe, else trained and cached in the
output folder), the shipped ``tiny-vla`` (on a
subset; untrained weights when none are shipped), the privileged scripted expert as control
ceiling, and the shipped tiny VLMs answering as text. Prints the per-category table with Wilson
intervals and regimes, swap statistics, and the layerwise probing of ``tiny-vla-a2a`` with its
Chance-Normalized Retention (offline, CPU).

VLM -> VLA (what the fine-tune keeps; over training seeds the frozen recipe is ahead overall and on color and
time, and six categories differ by seed: ``embeval train seeds`` and docs/act2answer.md): the shipped
``tiny-vla-a2a-frozen`` and ``tiny-vla-a2a-full`` (``tiny-vlm-a2a-cell``'s backbone + an action expert with the
gated, committed control pathway, fine-tuned on answer demonstrations of color, shape, counting and traffic only;
frozen vs fully fine-tuned backbone) run
on a subset of all ten procedural categories (:data:`VLA_PER_CATEGORY` items each, both layouts, the
suite's seed: the never demonstrated categories are the point) in their own table, and are probed
on it with shuffled-label and random-weight controls; skipped when not shipped."""
from __future__ import annotations

import json
import os
import time

DEMO_CATEGORIES = ["color", "shape", "counting", "emotion", "traffic", "spatial"]
#: items per category (all ten categories) the choice VLAs run and are probed on (quick: 2)
VLA_PER_CATEGORY = 6


def _recipe(ctx, spec) -> dict:
    """Everything the demo's fine-tune of ``tiny-vla-a2a`` depends on (JSON): equal recipes, equal weights."""
    from dataclasses import asdict

    return {"id": "tiny-vla-a2a", "categories": DEMO_CATEGORIES, "n_train": 6 if ctx.quick else 20,
            "items_seed": ctx.seed + 1000, "steps": 150 if ctx.quick else 600, "seed": ctx.seed,
            "spec": json.loads(json.dumps(asdict(spec)))}


#: the demo's full-size fine-tune, shipped (``embeval demo`` on a fresh clone would spend ~6.5 min
#: training it): used when its ``recipe.json`` equals the demo's recipe; EMBEVAL_DEMO_RETRAIN=1 trains anyway
SHIPPED_FINETUNE = "demo/tiny-vla-a2a"


def finetune_folder(out, ctx, spec):
    """The ``tiny-vla-a2a`` checkpoint folder the act2answer stage runs (no training): its own fine-tune in
    ``out`` when there, else the shipped one when its recipe is the stage's; None when the stage would train."""
    from embeval.subjects.embedded.zoo import MODELS_DIR

    if (out / "tiny-vla-a2a" / "config.json").exists():
        return out / "tiny-vla-a2a"
    shipped = MODELS_DIR / SHIPPED_FINETUNE
    if os.environ.get("EMBEVAL_DEMO_RETRAIN") != "1" and (shipped / "recipe.json").exists() and \
            json.loads((shipped / "recipe.json").read_text()) == _recipe(ctx, spec):
        return shipped
    return None


def _finetuned(out, ctx, spec):
    from embeval.act2answer.finetune import finetune_tiny_vla
    from embeval.act2answer.generator import generate_items
    from embeval.errors import EmbevalError
    from embeval.subjects.embedded.zoo import MODELS_DIR, load_vla

    path = out / "tiny-vla-a2a"
    recipe = _recipe(ctx, spec)
    if (path / "config.json").exists():
        try:
            pol = load_vla(path)
            print(f"reusing the fine-tuned {pol.id} in {path}")
            return pol
        except (EmbevalError, RuntimeError, KeyError, ValueError, TypeError) as exc:  # older checkpoint format: train again
            print(f"cannot reuse {path} ({exc}); training again")
    shipped = MODELS_DIR / SHIPPED_FINETUNE
    if os.environ.get("EMBEVAL_DEMO_RETRAIN") != "1" and (shipped / "recipe.json").exists():
        if json.loads((shipped / "recipe.json").read_text()) == recipe:
            pol = load_vla(shipped)
            print(f"using the shipped fine-tune of {pol.id} (src/embeval/data/models/{SHIPPED_FINETUNE}, the demo's "
                  f"own recipe: {recipe['n_train']} training items per category, {recipe['steps']} steps, seed "
                  f"{recipe['seed']}); EMBEVAL_DEMO_RETRAIN=1 trains it again (3-5 min on 2 cores)")
            return pol
    n_train = recipe["n_train"]
    train = generate_items(out / "train_items", DEMO_CATEGORIES, n_train, seed=recipe["items_seed"])
    t0 = time.perf_counter()
    print(f"fine-tuning tiny-vla-a2a on expert demonstrations of {len(train)} training items ({recipe['steps']} steps; "
          f"3-5 min on 2 cores at full size)...", flush=True)
    pol, frames = finetune_tiny_vla(train, path, steps=recipe["steps"], seed=ctx.seed, spec=spec,
                                    log=lambda msg: print(f"  {msg}", flush=True))
    (path / "recipe.json").write_text(json.dumps(recipe, indent=1))
    print(f"fine-tuned tiny-vla-a2a on {frames} expert frames ({len(train)} training items x 2 layouts, disjoint "
          f"seed) in {time.perf_counter() - t0:.0f} s")
    return pol


def run(ctx) -> None:
    import torch

    from embeval.act2answer.aggregate import category_table, format_table, swap_stats
    from embeval.act2answer.baseline import answer_items
    from embeval.act2answer.episode import (
        obs_size_for,
        run_items,
        sim_config,
        write_results,
    )
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.items import LAYOUTS
    from embeval.act2answer.reference_policies import ExpertPolicy
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.act2answer.subjects import (
        a2a_vlms,
        embedded_policy,
        embedded_vlms,
        untrained_policy,
    )
    from embeval.progress import track
    from embeval.provenance import code_version
    from embeval.recording.video import EpisodeRecorder
    from embeval.sim import SimEnv

    # one intra-op thread: batch-1 inference gains nothing from more, and on a loaded 2-core machine
    # two spinning OpenMP threads made episodes 5-7x slower (measured)
    torch.set_num_threads(1)
    out = ctx.out_dir / "act2answer"
    per_cat = 6 if ctx.quick else 40
    items = generate_items(out / "suite", DEMO_CATEGORIES, per_cat, seed=ctx.seed)
    spec = EpisodeSpec()
    print(f"{len(items)} procedural items ({len(DEMO_CATEGORIES)} categories x {per_cat}), both layouts -> "
          f"{2 * len(items)} episodes; the reference protocol: the cube starts {spec.start} ({spec.hold_steps} steps held), "
          f"rule {spec.rule} (margin {spec.board_margin} m; disc eps {spec.eps} m alongside), termination "
          f"{spec.termination!r}, cap {spec.max_steps} steps")

    a2a = _finetuned(out, ctx, spec)
    torch.set_num_threads(1)  # training may have raised it
    shipped = embedded_policy("tiny-vla", seed=ctx.seed, allow_untrained=True)  # a fresh checkout: the floor
    results = {}
    subset = [it for c in DEMO_CATEGORIES for it in [i for i in items if i.category == c][: 2 if ctx.quick else 6]]
    for policy, its in ((a2a, items), (shipped, subset)):
        with SimEnv(sim_config(*obs_size_for(policy))) as env:
            t0 = time.perf_counter()
            videos = EpisodeRecorder("1", out / "videos") if policy is a2a else None  # its first episode's video
            eps = list(track(run_items(policy, its, spec, seed=ctx.seed, env=env, videos=videos), f"act2answer {policy.id}",
                             "episodes", total=len(LAYOUTS) * len(its)))
            dt = time.perf_counter() - t0
            if policy is a2a:  # control ceiling: the privileged scripted expert on the subset
                results["expert (privileged)"] = list(track(
                    run_items(ExpertPolicy(env, "answer", spec), subset[::3], spec, seed=ctx.seed, env=env),
                    "act2answer expert", "episodes", total=len(LAYOUTS) * len(subset[::3])))
        print(f"{policy.id}: {len(eps)} episodes in {dt:.0f} s ({len(eps) / dt:.2f} episodes/s)"
              + (f"; video of the first: {videos.written[0]}" if videos and videos.written else ""))
        results[policy.id] = eps
        write_results(eps, out / f"episodes_{policy.id}.jsonl")

    from embeval.act2answer.subjects import a2a_vlas

    vlas = a2a_vlas()  # the VLM -> VLA recipes (population "vla_a2a")
    n_vla = 2 if ctx.quick else VLA_PER_CATEGORY
    vla_items = generate_items(out / "vla_suite", None, n_vla, seed=ctx.seed)  # all ten categories
    vla_results = {}
    for vla in vlas:
        t0 = time.perf_counter()
        eps = list(track(run_items(vla, vla_items, spec, seed=ctx.seed), f"act2answer {vla.id}", "episodes",
                         total=len(LAYOUTS) * len(vla_items)))  # renders only its third-person camera, 320x240
        dt = time.perf_counter() - t0
        print(f"{vla.id}: {len(eps)} episodes (10 categories x {n_vla} items) in {dt:.0f} s ({len(eps) / dt:.2f} episodes/s)")
        vla_results[vla.id] = eps
        write_results(eps, out / f"episodes_{vla.id}.jsonl")

    vlms = embedded_vlms()
    if not vlms:
        print("no shipped tiny VLMs: the text baseline needs `embeval train population` (skipped)")
    for vlm in vlms[: 2 if ctx.quick else 4]:
        results[f"{vlm.id} (text)"] = list(answer_items(vlm, items))
    for vlm in a2a_vlms():  # positive control: trained on procedural items (a disjoint seed stream)
        results[f"{vlm.id} (text)"] = list(answer_items(vlm, items))

    table = category_table(results)
    print("\nAct2Answer soft success rate by category (swap-averaged; expert and tiny-vla on a subset):")
    print(format_table(table))
    table.to_csv(out / "category_table.csv", index=False)
    print("\nswap statistics:")
    for subject, recs in results.items():
        ss = swap_stats(recs)
        print(f"  {subject:<24} pairs {ss.n_pairs:4d}  consistency {ss.consistency:5.2f}  same side {ss.same_side:5.2f}  "
              f"position bias {ss.position_bias:+5.2f}  McNemar b={ss.original_only} c={ss.swapped_only} p={ss.mcnemar_p_exact:.3g}")
    _zone_plot(results, out / "act2answer_zones.png", code_version())
    if vla_results:
        shown = sorted(set(vlas[0].meta.get("recipe", {}).get("demo_categories", [])))
        vt = category_table(vla_results)
        print(f"\nVLM -> VLA: tiny-vlm-a2a-cell's backbone + an action expert, fine-tuned on answer demos of "
              f"{', '.join(shown)} only (+ Pick/Place); frozen vs full fine-tune of the backbone; all ten categories x "
              f"{n_vla} items, both layouts:")
        print(format_table(vt))
        vt.to_csv(out / "vla_category_table.csv", index=False)
        for subject, recs in vla_results.items():
            ss = swap_stats(recs)
            print(f"  {subject:<24} pairs {ss.n_pairs:4d}  consistency {ss.consistency:5.2f}  same side {ss.same_side:5.2f}  "
                  f"position bias {ss.position_bias:+5.2f}  McNemar b={ss.original_only} c={ss.swapped_only} p={ss.mcnemar_p_exact:.3g}")
        print("  knowledge apart from control (an episode that ends on neither card is a control failure):")
        for subject, recs in vla_results.items():
            off = sum(r.zone == "out_of_bounds" for r in recs)
            right = sum(r.zone == "correct" for r in recs)
            on = f"{100 * right / (len(recs) - off):.1f} %" if len(recs) > off else "-"
            print(f"  {subject:<24} ended off both cards {off}/{len(recs)}; correct among the rest {on}")
        by_cat = {f"{subject} | {c}": [r for r in recs if r.category == c]
                  for subject, recs in vla_results.items() for c in sorted({r.category for r in recs})}
        _zone_plot(by_cat, out / "act2answer_vla_zones.png", code_version(),
                   title="VLM -> VLA zones per category (out_of_bounds: a control failure)")
        print(f"figure: {out / 'act2answer_vla_zones.png'}")
        _print_seed_study([v.id for v in vlas], out)

    # layerwise probing of the fine-tuned tiny VLA (+ random-weight control)
    from embeval_analysis.probing import (
        collect_features,
        plot_layer_accuracy,
        probe_layers,
    )

    t0 = time.perf_counter()
    size = obs_size_for(a2a)
    feats = collect_features(a2a, items, spec, seed=ctx.seed, obs_size=size)
    ctrl = collect_features(untrained_policy("tiny-vla-random", seed=ctx.seed + 1), items, spec, seed=ctx.seed, obs_size=size)
    rep = probe_layers(feats, ctrl, folds=5, seed=ctx.seed)
    print(f"\nlayerwise probing of {a2a.id} ({len(feats)} samples, {time.perf_counter() - t0:.0f} s): "
          "predict the correct side from each layer's state at the first observation")
    print(rep.table())
    png = plot_layer_accuracy(rep, out / "act2answer_probing.png", stamp=code_version())
    print(f"\nfigures: {out / 'act2answer_zones.png'}, {png}\ntables:  {out / 'category_table.csv'}")
    ctx.shared["act2answer_cnr"] = rep.cnr
    if vlas:
        _probe_vlas(vlas, vla_items, spec, ctx, out)


def _print_seed_study(names: list[str], out) -> None:
    """The 3-seed study shipped with the two choice VLAs (their training reports, not rerun here: about 1.5-2 h on
    2 cores), as ``embeval train seeds`` prints it; written to ``out/vla_seeds.md``."""
    from embeval.act2answer.seeds import format_seed_table, seed_table, shipped_seed_reports

    reports = shipped_seed_reports(names)
    if len(reports) != 2:
        return
    a, b = sorted(reports)
    table = format_seed_table(seed_table(reports), a, b)
    seeds = sorted(set(reports[a]) & set(reports[b]))
    print(f"\nacross training seeds {', '.join(map(str, seeds))} (the shipped training reports of {a} and {b}: 20 items "
          f"per category, both layouts; `embeval train seeds --seeds {' '.join(map(str, seeds))}` reproduces them), "
          "success % (on a card):")
    print(table)
    (out / "vla_seeds.md").write_text(table + "\n")


def _probe_vlas(vlas, items, spec, ctx, out) -> None:
    """Layerwise probing of the VLM -> VLA recipes (backbone = the VLM's fusion layer, action expert),
    with shuffled-label and random-weight controls: the within-category probes (grouped CV over all
    items) and the transfer probes (fitted on the demonstrated categories, scored on the others)."""
    import json

    from embeval_analysis.probing import collect_features, probe_layers, probe_transfer

    from embeval.act2answer.episode import obs_size_for
    from embeval.act2answer.subjects import random_weight_control

    t0 = time.perf_counter()
    summary = {}
    for vla in vlas:
        size = obs_size_for(vla)
        feats = collect_features(vla, items, spec, seed=ctx.seed, obs_size=size)
        ctrl = collect_features(random_weight_control(vla, ctx.seed + 1), items, spec, seed=ctx.seed, obs_size=size)
        rep = probe_layers(feats, ctrl, folds=5, seed=ctx.seed)
        shown = list(vla.meta.get("recipe", {}).get("demo_categories", []))
        print(f"\nlayerwise probing of {vla.id} ({len(feats)} samples; backbone = the VLM's fusion layer):")
        print(rep.table())
        summary[vla.id] = {"within": rep.to_dict()}
        if shown and set(shown) & set(feats.categories) and set(feats.categories) - set(shown):
            tr = probe_transfer(feats, shown, ctrl, seed=ctx.seed)
            print(f"transfer probes of {vla.id}: fitted on the demonstrated categories ({', '.join(shown)}), "
                  "scored on the others:")
            print(tr.table())
            summary[vla.id]["transfer"] = tr.to_dict()
            ctx.shared[f"act2answer_transfer_cnr_{vla.id}"] = tr.cnr
        ctx.shared[f"act2answer_cnr_{vla.id}"] = rep.cnr
    (out / "vla_probing.json").write_text(json.dumps(summary, indent=1))
    print(f"(probing of {len(vlas)} VLAs in {time.perf_counter() - t0:.0f} s; {out / 'vla_probing.json'})")


def _zone_plot(results, path, stamp: str, title: str = "Act2Answer zones") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from embeval.act2answer.aggregate import rows

    subjects = list(results)
    zones = ["correct", "incorrect", "out_of_bounds"]
    frac = np.array([[np.mean([r.get("zone") == z for r in rows(results[s])]) for z in zones] for s in subjects])
    fig, ax = plt.subplots(figsize=(7, (0.6 if len(subjects) <= 10 else 0.32) * len(subjects) + 1.4))
    left = np.zeros(len(subjects))
    for j, (z, col) in enumerate(zip(zones, ["tab:green", "tab:red", "tab:grey"])):
        ax.barh(subjects, frac[:, j], left=left, color=col, label=z)
        left += frac[:, j]
    ax.invert_yaxis()  # the first subject on top, as listed
    ax.axvline(0.5, color="black", lw=0.8, ls="--")
    ax.set_xlabel("share of episodes / answers")
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7, ncol=3, loc="lower center", frameon=False)  # below it all
    ax.set_title(title, fontsize=9)
    fig.text(0.99, 0.01, stamp, ha="right", va="bottom", fontsize=6, color="grey")
    fig.tight_layout(rect=(0, 0.3 / fig.get_figheight(), 1, 1))  # 0.3 in at the bottom for the legend
    fig.savefig(path, dpi=110)
    plt.close(fig)
