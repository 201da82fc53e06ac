"""Demo stage "distortion": a contact sheet of all 30 types x 5 levels on a scikit-image photograph
and a synthetic tabletop scene, and a table of PSNR per type and level."""
from __future__ import annotations


import numpy as np

from embeval.distortion.grid import save_contact_sheet
from embeval.distortion.registry import DISTORTIONS, N_LEVELS, list_distortions
from embeval.distortion.samples import photo, synthetic_tabletop


def run(ctx) -> None:
    w, h = (320, 240) if ctx.quick else (640, 480)
    images = {"astronaut": photo("astronaut", (w, h)), "tabletop": synthetic_tabletop(w, h, seed=ctx.seed)}
    per_image = []
    for label, img in images.items():
        stats: dict = {}
        path = save_contact_sheet(ctx.out_dir / f"distortion_grid_{label}.png", img, seed=ctx.seed,
                                  thumb_width=120 if ctx.quick else 160, stats=stats)
        per_image.append(stats)
        print(f"contact sheet (30 types x 5 levels, {label} {w}x{h}): {path}")
    table = {n: np.mean([s[n]["psnr"] for s in per_image], axis=0).tolist() for n in list_distortions()}
    ms = {n: float(np.mean([s[n]["ms"] for s in per_image])) for n in list_distortions()}
    print(f"\nMean PSNR (dB) against the reference over {', '.join(images)} at {w}x{h}, seed {ctx.seed}:")
    print(f"{'type':<24}{'category':<13}" + "".join(f"{'L' + str(lv):>8}" for lv in range(1, N_LEVELS + 1))
          + f"{'ms/img':>9}  monotonic")
    all_mono = True
    for name, vals in table.items():
        mono = bool(np.all(np.diff(vals) < 0))
        all_mono &= mono
        print(f"{name:<24}{DISTORTIONS[name].category:<13}" + "".join(f"{v:8.2f}" for v in vals)
              + f"{ms[name]:9.1f}  {'yes' if mono else 'NO'}")
    print(f"\nseverity rises with the level for {'all' if all_mono else 'NOT all'} {len(table)} types "
          "(PSNR falls from level 1 to 5); times include contention with other processes")
    ctx.shared["distortion_psnr"] = table
