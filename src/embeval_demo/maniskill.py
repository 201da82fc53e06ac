"""Demo stage "maniskill": ManiSkill3 on the CPU. The scripted expert solves PickCube through embeval's
action conversion; the embedded tiny VLA runs closed-loop episodes with every camera frame distorted,
scored against its clean episodes (Decision on the first frame, Execution from the env's success and
the final TCP distance); one contact sheet of first frames (clean | distorted) is written."""
from __future__ import annotations

from pathlib import Path


def run(ctx) -> None:
    from embeval.sim.maniskill.runtime import VulkanUnavailableError, check_vulkan

    try:
        check_vulkan()
    except VulkanUnavailableError as exc:
        print(f"skipped: {exc}")
        return
    from embeval.recording.video import EpisodeRecorder, maybe_episode
    from embeval.sim.backends import SimSpec, make_episode_env, run_episode, score_episode
    from embeval.sim.bench_util import maniskill_expert_success as expert_success

    out = Path(ctx.out_dir) / "maniskill"
    out.mkdir(parents=True, exist_ok=True)
    n = 1 if ctx.quick else 2
    r = expert_success("PickCube-v1", 2 * n, seed0=ctx.seed)
    print(f"scripted expert, PickCube-v1 (state only, pd_ee_delta_pose): {r['successes']}/{r['episodes']} "
          f"episodes, {r['control_steps_per_episode']:.1f} control steps each")

    from embeval.errors import MissingWeightsError
    from embeval.subjects import load_subject

    try:
        vla = load_subject({"id": "tiny-vla", "kind": "policy", "adapter": "embedded", "path": "tiny-vla"})
    except MissingWeightsError as exc:
        print(f"tiny VLA episodes skipped: {exc}")
        return
    spec = SimSpec("maniskill", "PickCube-v1", width=64, height=64, max_steps=15 if ctx.quick else 25,
                   aliases={"third_person": "base_camera", "wrist": "base_camera"})
    dists = [("white_noise", 4)] if ctx.quick else [("white_noise", 4), ("gaussian_blur", 4), ("jpeg", 5)]
    env = make_episode_env(spec)
    rows, sheet = [], []
    # videos of the first seed: its clean episode (ManiSkill) and its first distorted one (the IQA Decision /
    # Execution unit: reference | distorted side by side); the same episodes score_episode would run
    videos = EpisodeRecorder("2", out / "videos")
    try:
        for s in range(ctx.seed, ctx.seed + n):
            ref = None
            for name, level in dists:
                if ref is None:
                    with maybe_episode(videos if s == ctx.seed else None, f"tiny-vla_PickCube_seed{s}_clean") as video:
                        ref = run_episode(env, vla, s, None)
                        if video is not None:
                            video.finish(ref.outcome.success)
                first = s == ctx.seed and name == dists[0][0]
                with maybe_episode(videos if first else None, f"tiny-vla_PickCube_seed{s}_{name}{level}") as video:
                    sc, ref, dis = score_episode(env, vla, s, (name, level, s), reference=ref)
                    if video is not None:
                        video.finish(dis.outcome.success, f"Execution {sc.execution.score:.1f}")
                rows.append((s, name, level, sc))
                sheet.append([ref.first_clean_images["base_camera"], dis.first_observation.images["base_camera"]])
    finally:
        env.close()
    print("\ntiny VLA in PickCube-v1 (64x64 base_camera, every frame distorted), vs its clean episode:")
    print(f"{'seed':>4}  {'distortion':<14} {'L':>1}  {'decision':>8}  {'execution':>9}  {'cm':>5}  success")
    for s, name, level, sc in rows:
        e = sc.execution
        print(f"{s:>4}  {name:<14} {level:>1}  {sc.decision:8.3f}  {e.score:9.1f}  {e.distance_cm:5.2f}  "
              f"{e.reference.success}/{e.distorted.success}")
    from embeval.contact_sheet import save_labelled_grid

    path = save_labelled_grid(
        out / "contact_sheet.png", sheet, [f"episode seed {s}\n{name}, level {level}" for s, name, level, _ in rows],
        ["clean, step 0", "distorted, step 0"],
        title=f"{spec.env}, tiny VLA: base_camera {spec.width}x{spec.height} px\nD: Decision 0..1, E: Execution 0..100",
        notes={(r, 1): f"D {sc.decision:.2f}  E {sc.execution.score:.0f}" for r, (*_, sc) in enumerate(rows)})
    print(f"contact sheet (first frame clean | distorted, one row per episode and distortion; D: Decision 0..1, "
          f"E: Execution 0..100): {path}")
    print(f"episode videos (seed {ctx.seed}, clean and {dists[0][0]}): {', '.join(str(p) for p in videos.written)}")
