"""Demo stage "perturbations": the scene-perturbation contact sheet (every axis x levels), the per-axis
sensitivity of the embedded tiny VLA (success with Wilson intervals, paired change against the unperturbed
episode of the same seed) and the IQA-vs-scene table (do PSNR, SSIM and PIQE on the first frames follow Decision
and Execution under scene perturbations as under image distortions?). Offline, CPU, under a minute; at this size
a first look, not a claim."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

#: the image axes the stage scores (two that keep the camera, one that moves it) and the distortions beside them
AXES = ("light_intensity", "table_texture", "camera_pose")
DISTORTIONS = ("gaussian_blur", "jpeg")
LEVELS = (1, 5)


@dataclass(frozen=True)
class StageSize:
    """Episodes per table: ``seeds`` x (axes + distortions) x levels, 64x64 px cameras."""

    seeds: int
    width: int = 64
    height: int = 64


def size(quick: bool) -> StageSize:
    return StageSize(seeds=1 if quick else 2)


def run(ctx) -> dict:
    """Write ``perturb_grid.png`` and ``perturb/`` (sensitivity.csv/.md/.png, iqa_vs_scene.csv/.md) under
    ``ctx.out_dir``, print both tables; returns {"sensitivity": rows, "iqa": correlations}."""
    from embeval_cli.perturb import _grid
    from embeval.sim.perturb import Perturbation, Perturbations
    from embeval.sim.perturb.score import score_grid
    from embeval.sim.backends import SimSpec, make_episode_env
    from embeval.subjects.embedded import zoo
    from embeval_analysis import perturb as pa

    sz = size(ctx.quick)
    grid = ctx.out_dir / "perturb_grid.png"
    _grid(argparse.Namespace(task="Pick", seed=ctx.seed + 3, camera="third_person", axes=None, width=128, height=96,
                             out=grid))
    env = make_episode_env(SimSpec(backend="pybullet", env="Pick", width=sz.width, height=sz.height))
    try:
        rows = score_grid(env, zoo.load_vla("tiny-vla"), range(ctx.seed, ctx.seed + sz.seeds),
                          [Perturbations([Perturbation(a, lv)]) for a in AXES for lv in LEVELS],
                          [(d, lv) for d in DISTORTIONS for lv in LEVELS], keep_frames=True, camera="third_person")
    finally:
        env.close()
    sens = pa.sensitivity(rows)
    missing = pa.measure_iqa(rows)
    corrs = pa.iqa_correlations(rows, [m for m in pa.IQA_METRICS if m not in missing])
    outs = pa.write_outputs(ctx.out_dir / "perturb", sens, corrs,
                            title=f"tiny-vla, Pick, {sz.seeds} seed(s), {sz.width}x{sz.height} px")
    print(f"\ntiny-vla on Pick, {sz.seeds} seed(s) from {ctx.seed}, {sz.width}x{sz.height} px cameras, levels "
          f"{', '.join(map(str, LEVELS))}; each seed paired with its unperturbed episode (a first look, not a claim):")
    print(pa.sensitivity_markdown(sens))
    print("\nIQA vs scene: Spearman rho of each metric on (unperturbed, perturbed) third_person first frames with "
          "Decision and Execution (PIQE: lower is better; camera_pose/fov references are not pixel-aligned):")
    print(pa.iqa_markdown(corrs))
    for m, why in missing.items():
        print(f"(IQA metric {m} skipped: {why})")
    print("wrote " + ", ".join(str(p) for p in [grid, *outs.paths()]))
    ctx.shared["perturb_sensitivity"] = [r.to_dict() for r in sens]
    return {"sensitivity": sens, "iqa": corrs}
