"""Demo stage ``iqa``: build a small Embodied-IQA database on the embedded defaults (simulated
references x all 30 distortion types, one sampled level each, x the shipped VLA and VLM
population), benchmark quality metrics against the Decision and Cognition scores, compare the
live quality gate with a PSNR gate at the same withheld rate on every split, and plot the analyses."""
from __future__ import annotations

import time
from pathlib import Path


def _subjects(log=print) -> list:
    from embeval.errors import MissingWeightsError
    from embeval_analysis.iqa.database import resolve_subjects

    try:
        specs = resolve_subjects("embedded")
        # five of each kind: the minimum, and a sixth adds ~1 min of scoring on 2 cores
        return [s for s in specs if s["kind"] == "policy"][:5] + [s for s in specs if s["kind"] == "vlm"][:5]
    except MissingWeightsError as exc:
        log(f"NOTE: {exc}\n      using image-statistics policies and scripted VLMs as stand-in subjects (plumbing only)")
        return ([{"id": f"stats-vla-{i}", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.02 * (i + 1)}}
                 for i in range(5)] + [{"id": f"scripted-vlm-{i}", "kind": "vlm", "adapter": "scripted"} for i in range(5)])


def run(ctx) -> None:
    from embeval import distortion
    from embeval.recording.video import EpisodeRecorder
    from embeval_analysis.iqa import analyses
    from embeval_analysis.iqa.bench import (BenchConfig, best_nr, print_breakdowns, print_table, report_gate, run_bench,
                                            save_gate, trained_vs_psnr)
    from embeval_analysis.iqa.database import BuildConfig, build_database
    from embeval_analysis.iqa.export import export_pyiqa
    from embeval_analysis.iqa.metrics import TrainConfig

    out = Path(ctx.out_dir) / "iqa"
    db = out / "db"
    t0 = time.perf_counter()
    subjects = _subjects()
    types = distortion.list_distortions()
    cfg = BuildConfig(source="sim", source_params={"n": 8 if ctx.quick else 30, "size": [128, 96]},
                      distortions=types[::3] if ctx.quick else "all", levels="sample", subjects=subjects, seed=ctx.seed,
                      execution_images=0 if ctx.quick else 3)  # closed loop: ~25 s per image on 2 cores
    videos = EpisodeRecorder("2", out / "videos")  # the first two closed-loop Execution runs, reference | distorted
    scores = build_database(cfg, db, videos=videos)
    if videos.written:
        print(f"Execution run videos: {', '.join(str(p) for p in videos.written)}")
    n_vla = int(scores["n_vla"].max()) if "n_vla" in scores else 0
    n_vlm = int(scores["n_vlm"].max()) if "n_vlm" in scores else 0
    print(f"database: {scores['ref_id'].nunique()} references ({scores['scene_id'].nunique()} scenes), "
          f"{scores['distortion'].nunique()} distortion types, {len(scores)} distorted images, {n_vla} VLA + {n_vlm} VLM subjects "
          f"({time.perf_counter() - t0:.0f} s)")
    if "decision_per_pair" in scores:  # the paper's normalisation is the database's Decision score
        d, pp = scores["decision"], scores["decision_per_pair"]
        print(f"Decision (Embodied-IQA's: position distance and rotation cosine min-max normalised over the "
              f"{len(scores)} images, summed over 5 tasks): mean {d.mean():.3f}, range [{d.min():.3f}, {d.max():.3f}]; "
              f"the per-pair form (normalisation='per_pair') gives mean {pp.mean():.3f}; SRCC between the two "
              f"{d.rank().corr(pp.rank()):.3f} (docs/scoring.md)")
        if "decision_angle" in scores:
            da = scores["decision_angle"]
            print(f"  option rotation='angle' (relative rotation angle instead of the cosine): mean {da.mean():.3f}, "
                  f"SRCC with the paper's {d.rank().corr(da.rank()):.3f}")
    if "cognition" in scores:
        c = scores["cognition"]
        print(f"Cognition (the paper's weighted average (BLEU + ROUGE-L + 0.1 CIDEr-D) / 2.1, summed over 5 tasks): "
              f"mean {c.mean():.3f}, range [{c.min():.3f}, {c.max():.3f}] (the weighted sum, combine='sum', is 2.1x)")
    files = export_pyiqa(scores, out / "pyiqa", seed=ctx.seed)
    print("pyiqa export: " + ", ".join(p.name for p in files.values()))

    bcfg = BenchConfig(n_splits=3 if ctx.quick else 10, cnniqa_splits=1 if ctx.quick else None, cnniqa_targets=["decision"],
                       seed=ctx.seed,
                       zero_shot=["psnr", "ssim", "gmsd", "piqe", "niqe", "brisque"],
                       train=TrainConfig(epochs=4 if ctx.quick else 8, input_size=[48, 64], n_kers=32, n_nodes=256))
    res = run_bench(db, bcfg)
    res.per_split.to_csv(out / "bench_per_split.csv", index=False)
    res.summary.to_csv(out / "bench_summary.csv", index=False)
    print(f"\nIQA benchmark ({bcfg.n_splits} splits 8:2, random over images as in the paper and, beside, disjoint by "
          f"scene; CNNIQA trained for Decision on {bcfg.cnniqa_splits or bcfg.n_splits} splits of each, {bcfg.train.epochs} "
          f"epochs at {bcfg.train.input_size[1]}x{bcfg.train.input_size[0]}):")
    print_table(res)
    print_breakdowns(res, "decision")
    for proto in res.protocols:
        print(f"\nTrained metrics vs PSNR on the Decision score (same held-out {proto} splits):")
        for r in trained_vs_psnr(res, "decision", proto):
            verdict = "better than PSNR" if r["better"] else "NOT better than PSNR"
            print(f"  {r['metric']:10s} SRCC {r['srcc']:.3f} vs PSNR {r['psnr_srcc']:.3f}: {verdict} "
                  f"(higher in {r['splits_better']}/{r['splits']} splits)")

    best = best_nr(res, "decision", "scene")  # the gate meets new scenes: chosen and tested on scene-disjoint splits
    if best is not None:
        print()
        report_gate(res, scores, out, metric=best, seed=ctx.seed)  # every scene split; gate_splits.csv, gate_per_split.csv
        p = save_gate(res, out / "predictor", rate=0.2, metric=best)
        ctx.shared["iqa_predictor"] = str(p)
        print(f"  gate predictor for the ROS node: {p} (embeval.iqa.QualityGate.load)")

    tabs = analyses.run_all(db, out)
    rel = ", ".join(f"{k}: {v:.3f}" for k, v in tabs["relations"].items())
    print(f"\nSRCC between stage scores: {rel or 'n/a'}")
    if not tabs["jnd"].empty:
        print("most sensitive types (share in the JND severe third): " + ", ".join(
            f"{k} {v:.2f}" for k, v in tabs["jnd"].iloc[:, 0].head(5).items()))
    print(f"plots: {', '.join(sorted(p.name for p in out.glob('*.png')))} in {out}")
    print(f"iqa stage total {time.perf_counter() - t0:.0f} s")
