"""Demo stage "subjects": the shipped embedded population, the tiny VLA closed loop in simulation,
and how its actions (and the tiny VLM's answers) change under image distortions."""
from __future__ import annotations

import json

import numpy as np

#: distortion types shown by the demo (one or two per category)
DEMO_DISTORTIONS = ("gaussian_blur", "motion_blur", "darken", "overexposure", "color_shift", "white_noise",
                    "impulse_noise", "jpeg", "pixelate", "jitter", "contrast_change")


def _table(rows: list[dict], cols: list[str]) -> None:
    def fmt(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    w = {c: max(len(c), *(len(fmt(r.get(c, ""))) for r in rows)) for c in cols}
    print("  ".join(c.ljust(w[c]) for c in cols))
    print("  ".join("-" * w[c] for c in cols))
    for r in rows:
        print("  ".join(fmt(r.get(c, "")).ljust(w[c]) for c in cols))


def run(ctx) -> None:
    from embeval.subjects.embedded import zoo
    from embeval.subjects.embedded.evaluate import action_sensitivity, evaluate_policy, probe_observations

    # 1. the population
    names = {k: zoo.population_names(k) for k in ("vla", "vlm")}
    info = json.loads(zoo.POPULATION_FILE.read_text()) if zoo.POPULATION_FILE.exists() else {}
    rows = []
    for kind in ("vla", "vlm"):
        for n in names[kind]:
            m = info.get("members", {}).get(n, {})
            ev = m.get("eval") or {}
            res = (f"{ev['successes']}/{ev['episodes']} episodes" if kind == "vla" and ev else
                   f"{ev['exact_answer_accuracy']:.2f} exact answers" if ev else "")
            rows.append({"member": n, "kind": kind, "variant": m.get("describe", ""), "training eval": res})
    for n in zoo.a2a_names():  # the Act2Answer answerers (positive controls)
        ev = (info.get("members", {}).get(n, {}).get("eval") or {}).get("categories", {}).get("all")
        res = f"Act2Answer {ev['rate']:.1%} held-out, position bias {ev['position_bias']:+.2f}" if ev else ""
        rows.append({"member": n, "kind": "vlm", "variant": "two cards -> left/right", "training eval": res})
    print(f"Shipped embedded population: {len(names['vla'])} VLAs, {len(names['vlm'])} VLMs (src/embeval/data/models)")
    _table(rows, ["member", "kind", "variant", "training eval"])
    ctx.shared["embedded_population"] = names

    # 2. tiny VLA closed loop
    vla = zoo.load_vla("tiny-vla")
    n_ep = 2 if ctx.quick else 6
    rep = evaluate_policy(vla, episodes=n_ep, seed=ctx.seed + 1000)
    s = rep.summary()
    lo, hi = s["wilson95"]
    print(f"\ntiny-vla closed loop on {n_ep} seeded Pick/Place episodes (unseen scenes): "
          f"{s['successes']}/{s['episodes']} = {s['rate']:.0%} (Wilson 95% [{lo:.2f}, {hi:.2f}]) in {rep.seconds:.0f} s")
    _table([{"verb": e.item, "scene seed": e.seed, "success": e.success, "steps": e.steps, "end": e.end_reason[:40]}
            for e in rep.episodes], ["verb", "scene seed", "success", "steps", "end"])

    # 3. action change under distortions
    try:
        import embeval.distortion  # noqa: F401
    except ImportError:  # pragma: no cover
        print("(embeval.distortion not available: skipping the distortion sensitivity)")
        return
    obs = probe_observations(4 if ctx.quick else 12, seed=ctx.seed)
    dists = DEMO_DISTORTIONS[:4] if ctx.quick else DEMO_DISTORTIONS
    sens = action_sensitivity(vla, obs, dists, levels=(1, 3, 5), seed=ctx.seed)
    print(f"\ntiny-vla action change under distortion ({len(obs)} observations; both cameras distorted):")
    _table(sens, ["distortion", "category", "level", "translation_change_mm", "rotation_change_rad", "gripper_flip_rate"])
    _plot(sens, ctx.out_dir / "subjects_action_sensitivity.png")

    # 4. tiny VLM answers, reference vs distorted
    vlm = zoo.load_vlm("tiny-vlm")
    from embeval.distortion import distort
    from embeval.sim.tasks import make_reference_scene
    from embeval.sim.workcell import SimConfig, Workcell

    scene, tasks = make_reference_scene(ctx.seed + 7)
    with Workcell(SimConfig(mode="kinematic", settle_time=0.0, render=False)) as cell:
        cell.load(scene)
        img = cell.render("third_person", 128, 96)
    print("\ntiny-vlm answers on a reference scene (clean | jpeg level 5 | gaussian_blur level 5):")
    for t in tasks:
        a = [vlm.generate([im], t.instruction) for im in
             (img, distort(img, "jpeg", 5, seed=ctx.seed), distort(img, "gaussian_blur", 5, seed=ctx.seed))]
        print(f"- {t.instruction}\n    {a[0]}\n    {a[1]}{'' if a[1] != a[0] else '  (same)'}\n    {a[2]}{'' if a[2] != a[0] else '  (same)'}")


def _plot(rows: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["distortion"] for r in rows))
    levels = sorted({r["level"] for r in rows})
    fig, ax = plt.subplots(figsize=(max(6, len(names) * 0.8), 3.5))
    w = 0.8 / len(levels)
    for i, lv in enumerate(levels):
        vals = [next(r["translation_change_mm"] for r in rows if r["distortion"] == n and r["level"] == lv) for n in names]
        ax.bar(np.arange(len(names)) + i * w, vals, w, label=f"level {lv}")
    ax.set_xticks(np.arange(len(names)) + 0.4 - w / 2)
    ax.set_xticklabels(names, rotation=40, ha="right")
    ax.set_ylabel("mean |Δ translation| (mm)")
    ax.set_title("tiny-vla: action change under distortion")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
