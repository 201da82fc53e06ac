"""``embeval sim``: the simulated UR5 workcell and ManiSkill3 (render, reference images, scripted expert,
episodes with Decision / Execution scores)."""
from __future__ import annotations

import argparse
from pathlib import Path

from embeval_cli._util import (
    RegistryChoices,
    add_group,
    add_video_args,
    finite,
    image_side,
    parse_aliases,
    positive_int,
    seed,
)
from embeval_cli.perturb import add_perturb_arg

_VERBS = "`embeval sim tasks` lists them"  # the registry is read on use, not when the parser is built
#: the simulator backends (embeval.sim.backend: one folder each), read when a value is checked or help printed
SIM_BACKEND_CHOICES = RegistryChoices("embeval.sim.backend:SIM_BACKENDS")


def register(sub) -> None:
    g = add_group(sub, "sim", "simulated UR5 workcell: scenes, reference images, scripted expert, Execution scores")
    fmt = argparse.RawDescriptionHelpFormatter

    p = g.add_parser("render", help="render a task scene from a camera to PNG", formatter_class=fmt,
                     description="Render the seeded scene of a task (or a scene YAML) to a PNG.",
                     epilog="examples:\n  embeval sim render --task Place --seed 3 --camera third_person --out place3.png\n"
                            "  embeval sim render --backend maniskill --task PickCube-v1 --out x.png   # ManiSkill3, CPU\n"
                            "  embeval sim render --backend maniskill --task PutCarrotOnPlateInScene-v1 --out b.png   "
                            "# SimplerEnv Bridge scene (needs ManiSkill's asset download)\n"
                            "  embeval sim render --backend libero --task libero_spatial:0 --out l.png   "
                            "# LIBERO (scripts/install_libero.sh)")
    p.add_argument("--backend", choices=SIM_BACKEND_CHOICES, default="pybullet",
                   help="simulator: the UR5 cell (pybullet, default), ManiSkill3 (CPU, software Vulkan) or LIBERO / "
                        "LIBERO-PRO (its own interpreter .venv-libero)")
    p.add_argument("--task", help=f"task: a verb of the UR5 cell ({_VERBS}; default Pick) or a ManiSkill env id "
                                  "(default PickCube-v1; a Bridge id such as PutCarrotOnPlateInScene-v1 renders the "
                                  "WidowX scene from 3rd_view_camera) or LIBERO SUITE:TASK_ID (default libero_spatial:0)")
    p.add_argument("--seed", type=seed, default=0, help="scene seed (default 0; LIBERO: its initial state index)")
    p.add_argument("--scene", type=Path, help="scene spec YAML instead of a generated scene (pybullet)")
    p.add_argument("--camera", help="camera name: third_person or wrist (pybullet, default third_person); ManiSkill: "
                                    "an env camera (default its first, e.g. base_camera); LIBERO: agentview (default) or wrist")
    p.add_argument("--width", type=image_side, default=640, help="image width in pixels, 1..4096 (default 640)")
    p.add_argument("--height", type=image_side, default=480, help="image height in pixels, 1..4096 (default 480)")
    p.add_argument("--out", type=Path, default=Path("scene.png"),
                   help="output image: .png (default scene.png), .jpg, .jpeg, .bmp, .tif, .tiff or .webp")
    add_perturb_arg(p)
    p.set_defaults(func=_render)

    p = g.add_parser("tasks", help="list the tabletop tasks (verb, difficulty, success, expert)", formatter_class=fmt,
                     description="The registered tabletop tasks of the UR5 cell, easiest first: built-ins (one file each "
                                 "in embeval/sim/tasks/), then registered ones and plugins (docs/contributing.md).",
                     epilog="example:\n  embeval sim tasks --markdown")
    p.add_argument("--markdown", action="store_true", help="print the docs/sim.md task table")
    p.set_defaults(func=_tasks)

    p = g.add_parser("scene", help="write the seeded scene + task spec of a verb as YAML", formatter_class=fmt,
                     description="Write a generated scene spec (plain data, also usable for the real cell) as YAML.",
                     epilog="example:\n  embeval sim scene --task Push --seed 1 --out push1.yaml")
    p.add_argument("--task", default="Pick", help=f"task verb ({_VERBS}); default Pick")
    p.add_argument("--seed", type=seed, default=0, help="scene seed (default 0)")
    p.add_argument("--out", type=Path, help="output YAML (default: print)")
    p.set_defaults(func=_scene)

    p = g.add_parser("references", help="generate Embodied-IQA reference images (N scenes x 5 tasks, 2 views)",
                     formatter_class=fmt,
                     description="Render N reference scenes, each with 5 tasks of rising difficulty, from the wrist "
                                 "(first-person) and third-person cameras; writes PNGs, scene YAMLs and manifest.json/.csv. "
                                 "Existing images are kept (resume).",
                     epilog="example:\n  embeval sim references --n 10 --out refs/")
    p.add_argument("--n", type=positive_int, default=10, help="number of scenes (default 10)")
    p.add_argument("--out", type=Path, default=Path("refs"), help="output folder (default refs/)")
    p.add_argument("--seed", type=seed, default=0, help="master seed (default 0)")
    p.add_argument("--start", type=int, default=0, help="index of the first scene (shards: --start 100 --n 100)")
    p.add_argument("--views", nargs="+", default=["first_person", "third_person"], help="views (default both)")
    p.add_argument("--width", type=image_side, default=640, help="image width (default 640, D455-like)")
    p.add_argument("--height", type=image_side, default=480, help="image height (default 480)")
    p.set_defaults(func=_references)

    p = g.add_parser("expert", help="run the scripted expert and report its success rate", formatter_class=fmt,
                     description="Run seeded episodes of the scripted expert per task; prints success rate, steps and "
                                 "time per episode. Seeds are 0..episodes-1 (+ --seed).",
                     epilog="example:\n  embeval sim expert --task Pick --episodes 20\n  embeval sim expert --task all --episodes 100 --json expert.json")
    p.add_argument("--task", default="all", help="task verb or 'all' implemented verbs (default all)")
    p.add_argument("--episodes", type=positive_int, default=20, help="episodes per task (default 20)")
    p.add_argument("--seed", type=seed, default=0, help="first seed (default 0)")
    p.add_argument("--render", action="store_true", help="render observations each step (slower, as a policy would)")
    p.add_argument("--mode", choices=["physics", "kinematic"], default="physics", help="simulation mode (default physics)")
    p.add_argument("--json", type=Path, help="write per-task results as JSON")
    add_video_args(p, "videos/")
    add_perturb_arg(p)
    p.set_defaults(func=_expert)

    p = g.add_parser("episodes", help="run policy episodes (default the scripted expert), optionally under a distortion",
                     formatter_class=fmt,
                     description="Closed-loop episodes of a policy in the UR5 cell or ManiSkill3. With --distortion, every "
                                 "camera frame is distorted (seeded per frame) and each episode is scored against the clean "
                                 "one: Decision (first frame, 0..1) and Execution (0..100).",
                     epilog="examples:\n  embeval sim episodes --backend maniskill --task PickCube-v1 --episodes 5\n"
                            "  embeval sim episodes --backend maniskill --task PushCube-v1 --subject tiny_vla.yaml "
                            "--distortion white_noise --level 3 --sheet sheet.png\n"
                            "  embeval sim episodes --backend libero --task libero_10_swap:0 --episodes 2 --distortion jpeg")
    p.add_argument("--backend", choices=SIM_BACKEND_CHOICES, default="maniskill",
                   help="simulator (default maniskill)")
    p.add_argument("--task", help="ManiSkill env id (default PickCube-v1), a UR5 cell verb (default Pick) or LIBERO "
                                  "SUITE:TASK_ID (default libero_spatial:0; seeds are its initial states 0..49)")
    p.add_argument("--subject", help="policy subject YAML (embeval.subjects); default the backend's scripted expert")
    p.add_argument("--episodes", type=positive_int, default=5, help="episodes, seeds --seed .. (default 5)")
    p.add_argument("--seed", type=seed, default=0, help="first episode seed (default 0; ManiSkill: seeds up to 2**32-1)")
    p.add_argument("--distortion", help="distortion applied to every camera frame (`embeval distort list`)")
    p.add_argument("--level", type=int, default=3, help="distortion level 1..5 (default 3)")
    p.add_argument("--width", type=image_side, default=64, help="camera width in pixels (default 64)")
    p.add_argument("--height", type=image_side, default=64, help="camera height in pixels (default 64)")
    p.add_argument("--alias", action="append", default=[], metavar="KEY=CAMERA",
                   help="also give camera CAMERA under image key KEY (e.g. third_person=base_camera); repeatable")
    p.add_argument("--state-only", action="store_true", help="no cameras (fast; only for policies that read no image)")
    p.add_argument("--max-steps", type=positive_int, help="policy steps per episode (default the task's own limit)")
    p.add_argument("--sheet", type=Path, help="write a contact sheet PNG of the first frames (clean | distorted)")
    p.add_argument("--json", type=Path, help="write per-episode results as JSON")
    add_video_args(p, "videos/")
    add_perturb_arg(p)
    p.set_defaults(func=_episodes)

    p = g.add_parser("execute", help="Execution score of a reference vs a distorted action", formatter_class=fmt,
                     description="Execute a reference and a distorted 7-DoF delta action (frame base: dx dy dz droll "
                                 "dpitch dyaw gripper, gripper 1 = open) from a task's start state and print the "
                                 "Execution record as JSON (score 100 success, 100 - cm distance on failure, 0 on a stop).",
                     epilog="example:\n  embeval sim execute --task Pick --seed 3 --reference 0.05 0 -0.1 0 0 0 1 "
                            "--distorted 0.02 0.03 -0.1 0 0 0 1")
    p.add_argument("--task", default="Pick", help=f"task verb ({_VERBS}); default Pick")
    p.add_argument("--seed", type=seed, default=0, help="scene seed (default 0)")
    p.add_argument("--reference", type=float, nargs=7, required=True, metavar="V", help="reference action (7 numbers)")
    p.add_argument("--distorted", type=float, nargs=7, required=True, metavar="V", help="distorted action (7 numbers)")
    p.set_defaults(func=_execute)


def _verb(name: str) -> str:
    from embeval.sim.tasks import resolve_verb

    return resolve_verb(name)


def _tasks(args) -> int:
    from embeval.sim.tasks import markdown_table, tasks

    if args.markdown:
        print(markdown_table())
        return 0
    print(f"{'verb':<8} {'difficulty':>10}  {'success':<8} {'expert':<7} success predicate")
    for t in tasks():
        print(f"{t.verb:<8} {t.difficulty:>10}  {'yes' if t.implemented else 'no':<8} {'yes' if t.plan else 'no':<7} "
              f"{t.summary}")
    return 0


def _render(args) -> int:
    from embeval_cli.perturb import perturb_for
    from embeval.image_io import check_image_path
    from embeval.sim.backend import get_sim_backend

    check_image_path(args.out, "--out")  # before the (slow) render
    perturb = perturb_for(args)
    return get_sim_backend(args.backend).render_cli(args, perturb)


def _episodes(args) -> int:
    import json

    import numpy as np

    from embeval_cli.perturb import attach, episode_record, perturb_for
    from embeval.errors import ConfigError
    from embeval.recording.video import maybe_episode, recorder_from_args
    from embeval.sim.backend import get_sim_backend
    from embeval.sim.backends import SimSpec, make_episode_env, run_episode, score_episode

    backend = get_sim_backend(args.backend)
    task = backend.task(args.task)
    aliases = parse_aliases(args.alias)
    if args.distortion:
        from embeval import distortion as dist_mod

        dist_mod.get(args.distortion)
        if not 1 <= args.level <= dist_mod.N_LEVELS:
            raise ConfigError(f"--level must lie in 1..{dist_mod.N_LEVELS}, got {args.level}")
        if args.state_only:
            raise ConfigError("--distortion needs cameras; drop --state-only")
    # every episode's seed and (no --subject) a scripted expert, before the env is built and the table header printed
    backend.check(task, range(args.seed, args.seed + args.episodes), scripted=not args.subject)
    if args.sheet:
        from embeval.image_io import check_image_path

        check_image_path(args.sheet, "--sheet")  # before the episodes, not after
    if args.json:
        from embeval.errors import check_out_file

        check_out_file(args.json, "--json")
    videos = recorder_from_args(args, "videos")
    if videos is not None and args.state_only:
        raise ConfigError("--record-video records the camera images; drop --state-only")
    spec = SimSpec(backend=args.backend, env=task, width=args.width, height=args.height, aliases=aliases,
                   render=not args.state_only, max_steps=args.max_steps)
    perturb = perturb_for(args)
    env = make_episode_env(spec)
    try:
        attach(env, perturb)
        if args.subject:
            from embeval.subjects.registry import load_subject

            policy = load_subject(args.subject)
        elif hasattr(env, "default_policy"):  # a backend without a scripted expert (LIBERO): its stated default
            policy = env.default_policy()
            print(f"no --subject: {args.backend} has no scripted expert; policy '{policy.id}': {policy.summary}")
        else:
            from embeval.runs.evaluators.sim_iqa import _Expert

            policy = _Expert(env)
        rows, sheet = [], []
        print(f"{'seed':>4} {'success':>7} {'steps':>5}" + ("  decision execution   cm  dist.ok" if args.distortion else "  ended"))
        for s in range(args.seed, args.seed + args.episodes):
            if args.distortion:
                ref = run_episode(env, policy, s) if videos is not None else None  # the video: the distorted run
                with maybe_episode(videos, f"{task}_seed{s:04d}_{args.distortion}{args.level}") as video:
                    sc, ref, dis = score_episode(env, policy, s, (args.distortion, args.level, s), reference=ref)
                    if video is not None:
                        video.finish(dis.outcome.success, f"Execution {sc.execution.score:.1f}")
                row = {"seed": s, "success": ref.outcome.success, "steps": ref.outcome.n_actions, **sc.to_dict()}
                print(f"{s:>4} {str(ref.outcome.success):>7} {ref.outcome.n_actions:>5}  {sc.decision:8.3f} "
                      f"{sc.execution.score:9.1f} {sc.execution.distance_cm:5.1f}  {sc.execution.distorted.success}")
                first = (ref.first_clean_images, dis.first_observation.images)
                note = f"D {sc.decision:.2f}  E {sc.execution.score:.0f}"
            else:
                with maybe_episode(videos, f"{task}_seed{s:04d}") as video:
                    ref = run_episode(env, policy, s)
                    if video is not None:
                        video.finish(ref.outcome.success)
                row = {"seed": s, "success": ref.outcome.success, "steps": ref.outcome.n_actions,
                       "ended": end_reason(env, ref.outcome), "final_tcp_pose": list(ref.outcome.final_tcp_pose)}
                print(f"{s:>4} {str(ref.outcome.success):>7} {ref.outcome.n_actions:>5}  {row['ended']}")
                first = (ref.first_clean_images, {})
                note = "success" if ref.outcome.success else "failure"
            rows.append({**row, **episode_record(env, perturb)})
            cam = next(iter(first[0]), None)
            if cam is not None:  # one sheet row per episode: its first frame, clean | distorted
                sheet.append(([first[0][cam]] + ([first[1][cam]] if cam in first[1] else []), s, note))
        ok = sum(r["success"] for r in rows)
        print(f"{task} ({args.backend}): {ok}/{len(rows)} episodes succeeded"
              + (f"; mean Decision {np.mean([r['decision'] for r in rows]):.3f}, mean Execution "
                 f"{np.mean([r['execution'] for r in rows]):.1f}" if args.distortion else ""))
    finally:
        env.close()
    if args.sheet and sheet:
        _save_sheet(args, task, cam, sheet)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
        print(f"wrote {args.json}")
    _print_videos(videos)
    return 0


def end_reason(env, outcome) -> str:
    """Why an episode ended, in words: the backend env's own reason ("success", "max_steps", a safety stop such as
    "contact: wrist_3_link with table"), else what the outcome shows (a stop's reason, "success" or "done")."""
    reason = getattr(getattr(env, "env", None), "reason", "") or ("success" if outcome.success else "done")
    if outcome.stopped:
        return f"safety stop: {outcome.stop_reason or reason}"
    return "max_steps (the task's step budget ran out)" if reason == "max_steps" else reason


def _save_sheet(args, task: str, cam: str, rows: list) -> None:
    """``--sheet``: a labelled grid, one row per episode (its seed, the distortion and level), columns the first
    frame clean and distorted (notes: D Decision 0..1, E Execution 0..100; or the episode's outcome)."""
    from embeval.contact_sheet import save_labelled_grid

    dist = f"{args.distortion}, level {args.level}" if args.distortion else "no distortion"
    cols = ["clean, step 0", "distorted, step 0"] if args.distortion else ["clean, step 0"]
    who = "expert" if not args.subject else f"subject {args.subject}"
    title = (f"{task} ({args.backend}), {who}: {cam} {args.width}x{args.height} px"
             + ("\nD: Decision 0..1, E: Execution 0..100" if args.distortion else ""))
    save_labelled_grid(args.sheet, [cells for cells, _, _ in rows], [f"episode seed {s}\n{dist}" for _, s, _ in rows], cols,
                       title=title, notes={(r, len(cells) - 1): note for r, (cells, _, note) in enumerate(rows)})
    print(f"wrote {args.sheet} (one row per episode: first frame {' | '.join(c.split(',')[0] for c in cols)}, labelled)")


def _print_videos(videos) -> None:
    if videos is not None:
        print(f"videos: {len(videos.written)} episode(s) kept ({videos.policy}) in {videos.out_dir}/")


def _scene(args) -> int:
    import yaml

    from embeval.sim.tasks import make_task

    scene, task = make_task(_verb(args.task), args.seed)
    text = yaml.safe_dump({"scene": scene.to_dict(), "task": task.to_dict()}, sort_keys=False)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}: {task.instruction!r} ({len(scene.objects)} objects)")
    else:
        print(text)
    return 0


def _references(args) -> int:
    from collections import Counter

    from embeval.sim.references import generate_references

    recs = generate_references(args.n, args.out, seed=args.seed, views=args.views, width=args.width, height=args.height,
                               start=args.start, progress=True)
    print(f"wrote {len(recs)} images of {args.n} scenes to {args.out}/ (manifest.json, manifest.csv)")
    print("main objects:", dict(Counter(r.main_object for r in recs if r.view == args.views[0])))
    print("backgrounds: ", dict(Counter(r.background for r in recs if r.view == args.views[0])))
    return 0


def _expert(args) -> int:
    import json

    from embeval.recording.video import recorder_from_args
    from embeval_cli.perturb import perturb_for
    from embeval.sim.bench_util import expert_success
    from embeval.sim.expert import PLANNERS
    from embeval.sim.workcell import SimConfig

    verbs = list(PLANNERS) if args.task == "all" else [_verb(args.task)]
    videos = recorder_from_args(args, "videos")
    rows = []
    print(f"{'task':<7} {'success':>9} {'rate':>6} {'steps/ep':>9} {'s/ep':>7}  failures (seed: reason)")
    for v in verbs:
        r = expert_success(v, args.episodes, seed0=args.seed, config=SimConfig(render=args.render, mode=args.mode),
                           videos=videos, perturb=perturb_for(args))
        rows.append(r)
        fails = ", ".join(f"{s}: {why}" for s, why in r["failures"][:4])
        print(f"{v:<7} {r['successes']:>4}/{r['episodes']:<4} {r['rate']:>6.1%} {r['steps_per_episode']:>9.1f} "
              f"{r['seconds_per_episode']:>7.3f}  {fails}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
        print(f"wrote {args.json}")
    _print_videos(videos)
    return 0


def _execute(args) -> int:
    import json

    from embeval.sim.env import SimEnv
    from embeval.sim.execute import execute_pair
    from embeval.sim.tasks import make_task

    finite(args.reference, "--reference")
    finite(args.distorted, "--distorted")
    scene, task = make_task(_verb(args.task), args.seed)
    with SimEnv() as env:
        rec = execute_pair(env, scene, task, [args.reference], [args.distorted], seed=args.seed)
    d = rec.to_dict()
    for k in ("reference", "distorted"):
        d[k].pop("extra", None)
    print(json.dumps(d, indent=1))
    print(f"Execution score {rec.score:.1f} ({rec.reason}; distance {rec.distance_cm:.2f} cm)"
          + (f"; {rec.detail}" if rec.detail else ""))
    return 0
