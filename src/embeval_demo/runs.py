"""Demo stage ``runs``: a sharded, interrupted and resumed quality sweep, its status, Parquet export
and HTML report (local backend, offline, CPU)."""
from __future__ import annotations


def run(ctx) -> None:
    import pandas as pd

    from embeval.runs.export import export_parquet
    from embeval.runs.report import build_report
    from embeval.runs.runner import resume, run as run_spec, status
    from embeval.runs.spec import parse_spec

    out = ctx.out_dir / "runs"
    spec = parse_spec({
        "name": "demo-quality",
        "evaluator": "distortion-quality",
        "subjects": [{"id": "fr-metrics", "kind": "metric", "params": {"metrics": ["psnr", "ssim"]}}],
        "items": {"source": "synthetic", "count": 2 if ctx.quick else 6, "params": {"size": [96, 72]}},
        "distortions": ["none", "gaussian_blur", "motion_blur", "white_noise", "jpeg", "darken", "pixelate"],
        "levels": [1, 3, 5],
        "seeds": [ctx.seed],
        "backend": {"progress": False, "unit_timeout_s": 60},
    })
    run_dir = out / f"quality-{spec.hash[:8]}"
    print(f"run spec hash {spec.hash}; run folder {run_dir}")
    first = run_spec(spec, run_dir, shard_index=0, num_shards=2)
    print(f"shard 0/2: {first.done} units in {first.elapsed_s:.1f} s; then the process 'stops' and we resume the rest")
    st = status(run_dir, num_shards=2)
    print(pd.DataFrame(st["shards"])[["shard", "done", "failed", "total", "rate_per_s"]].to_string(index=False))
    rest = resume(run_dir)
    print(f"resume: skipped {rest.skipped} done units, ran {rest.done}, failed {rest.failed} ({rest.rate_per_s:.0f} units/s)")
    pq = export_parquet(run_dir, out / "quality.parquet")
    df = pd.read_parquet(pq)
    table = df[df["distortion"] != "none"].pivot_table(index="distortion", columns="level", values=["out.psnr", "out.ssim"], aggfunc="mean")
    print("\nmean PSNR (dB) and SSIM of distorted vs reference, by level:")
    print(table.round(3).to_string())
    report = build_report(run_dir, out / "report.html")
    _save_figure(df, spec.hash, out / "runs_psnr_by_level.png")
    print(f"\nParquet: {pq}\nreport:  {report}\nfigure:  {out / 'runs_psnr_by_level.png'}")
    ctx.shared["runs_quality_dir"] = run_dir


def _save_figure(df, spec_hash: str, path) -> None:
    import matplotlib.pyplot as plt

    from embeval.provenance import code_version
    from embeval.runs.evaluators._images import level_figures

    d = df[df["distortion"] != "none"].groupby(["distortion", "level"])["out.psnr"].mean().reset_index()
    (fig,) = level_figures(d, ["out.psnr"], {"out.psnr": "PSNR (dB)"}, f"run spec {spec_hash} | {code_version()}",
                           "of distorted vs reference, mean over items")
    fig.savefig(path, dpi=110)
    plt.close(fig)
