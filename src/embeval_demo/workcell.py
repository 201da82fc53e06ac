"""Demo stage "workcell": render reference scenes, execute their tasks with the scripted expert
(reference run) and with perturbed copies of its actions (stand-ins for actions predicted from
distorted images), and print the Execution scores."""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from embeval.provenance import derive_seed

#: name -> (translation noise std per action in metres, extra final delta) of the stand-in distortions
DISTORTIONS: dict[str, tuple[float, tuple[float, ...]]] = {
    "mild": (0.002, ()),
    "severe": (0.02, ()),
    "crash": (0.0, (0.0, 0.0, -0.40, 0.0, 0.0, 0.0)),  # drives the TCP below the table: safety stop
}


def _table(rows: list[dict], cols: list[str]) -> str:
    w = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    out = ["  ".join(c.ljust(w[c]) for c in cols), "  ".join("-" * w[c] for c in cols)]
    out += ["  ".join(str(r.get(c, "")).ljust(w[c]) for c in cols) for r in rows]
    return "\n".join(out)


def distort_actions(actions: list[np.ndarray], name: str, seed: int) -> list[np.ndarray]:
    """Perturb an action sequence: Gaussian translation noise and/or an appended extra delta."""
    sigma, extra = DISTORTIONS[name]
    rng = np.random.default_rng(seed)
    out = []
    for a in actions:
        b = np.array(a, dtype=float)
        b[:3] += rng.normal(0.0, sigma, 3)
        out.append(b)
    if extra:
        out.append(np.array([*extra, out[-1][6] if out else 1.0]))
    return out


def run(ctx) -> None:
    import matplotlib.pyplot as plt
    from PIL import Image

    from embeval.recording.video import EpisodeRecorder, video_last, video_step
    from embeval.scoring.execution import execution_score
    from embeval.sim.env import SimEnv
    from embeval.sim.execute import run_actions
    from embeval.sim.references import generate_references, reference_scene

    out = Path(ctx.out_dir) / "workcell"
    n_scenes = 2 if ctx.quick else 3
    t0 = time.perf_counter()
    recs = generate_references(n_scenes, out / "refs", seed=ctx.seed)
    print(f"rendered {len(recs)} reference images (640x480) of {n_scenes} scenes in {time.perf_counter() - t0:.1f} s -> {out / 'refs'}")
    rows = [{"scene": r.scene_id, "main object": f"{r.main_object_color} {r.main_object}", "background": r.background,
             **{f"L{t['difficulty']}": t["verb"] + ("" if t["implemented"] else "*") for t in r.tasks}}
            for r in recs if r.view == "first_person"]
    print(_table(rows, ["scene", "main object", "background", "L1", "L2", "L3", "L4", "L5"]))
    print("(* = verb defined without a success predicate: not executed)")

    # contact sheet of the reference images
    fig, axes = plt.subplots(n_scenes, 2, figsize=(8, 3 * n_scenes), squeeze=False)
    for i, r in enumerate([r for r in recs if r.view == "first_person"]):
        for j, view in enumerate(("first_person", "third_person")):
            axes[i][j].imshow(Image.open(out / "refs" / "images" / f"{r.scene_id}_{view}.png"))
            axes[i][j].set_title(f"{r.scene_id} {view}", fontsize=8)
            axes[i][j].axis("off")
    fig.tight_layout()
    fig.savefig(out / "references.png", dpi=80)
    plt.close(fig)

    # execute the implemented tasks: expert (reference) vs perturbed actions (distorted)
    score_rows, by_dist = [], {k: [] for k in DISTORTIONS}
    videos = EpisodeRecorder("1", out / "videos")  # the first expert episode, third-person view
    with SimEnv() as env:
        view = lambda: {"third_person": env.cell.render("third_person", 320, 240)}  # noqa: E731
        for k in range(n_scenes):
            s = derive_seed("reference", ctx.seed, k)
            scene, tasks = reference_scene(s)
            scene = replace(scene, name=f"sim{k:05d}")
            for task in tasks:
                if not task.implemented:
                    continue
                obs = env.reset(s, task, scene, render=False)
                expert, actions = env.expert(), []
                with videos.episode(f"expert_{scene.name}_{task.verb}") as video:
                    while not env.done:
                        a = expert.act(obs)
                        actions.append(a.vector.copy())
                        video_step(obs, a, render=view)
                        obs = env.step(a, render=False).observation
                    video_last(obs, render=view)
                    video.finish(env.success(), env.reason)
                ref = run_actions(env, scene, task, actions, seed=s)
                for dname in DISTORTIONS if not ctx.quick else ("mild", "crash"):
                    dis = run_actions(env, scene, task, distort_actions(actions, dname, derive_seed(s, task.verb, dname)), seed=s)
                    rec = execution_score(ref, dis)
                    by_dist[dname].append(rec.score)
                    score_rows.append({"scene": scene.name, "L": task.difficulty, "task": task.instruction[:38],
                                       "distortion": dname, "ref ok": ref.success, "dist ok": dis.success,
                                       "cm": f"{rec.distance_cm:.1f}", "score": f"{rec.score:.1f}", "reason": rec.reason,
                                       "stop": rec.detail[:40]})
    print("\nExecution scores (reference = scripted expert; distorted = its actions perturbed):")
    print(_table(score_rows, ["scene", "L", "task", "distortion", "ref ok", "dist ok", "cm", "score", "reason", "stop"]))
    means = {k: float(np.mean(v)) for k, v in by_dist.items() if v}
    print("mean Execution score by distortion: " + ", ".join(f"{k} {v:.1f}" for k, v in means.items()))
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(list(means), list(means.values()), color=["tab:green", "tab:orange", "tab:red"][: len(means)])
    ax.set_ylabel("mean Execution score")
    ax.set_ylim(0, 105)
    fig.tight_layout()
    fig.savefig(out / "execution_scores.png", dpi=80)
    plt.close(fig)
    print(f"plots: {out / 'references.png'}, {out / 'execution_scores.png'}")
    print(f"episode video (expert, first task): {', '.join(map(str, videos.written)) or 'none'}")
    ctx.shared["workcell"] = {"references_dir": str(out / "refs"), "execution_means": means}
