"""``embeval perturb``: scene-level perturbations of the UR5 cell (camera pose, field of view, light, textures,
distractors, initial joints, instruction wording): list the axes, draw an axis x level contact sheet.
Also the ``--perturb AXIS:LEVEL`` option of ``embeval sim render / episodes / expert``."""
from __future__ import annotations

import argparse
from pathlib import Path

from embeval_cli._util import add_group, image_side, parse_aliases, positive_int, seed

PERTURB_HELP = ("scene-level perturbation AXIS:LEVEL (level 1..5), applied at reset from the episode seed; repeatable or "
                "comma-separated, e.g. --perturb camera_pose:3 --perturb distractors:2 (`embeval perturb list`)")


def add_perturb_arg(parser) -> None:
    """Add ``--perturb AXIS:LEVEL`` (repeatable) to a sub-command's parser."""
    parser.add_argument("--perturb", action="append", default=[], metavar="AXIS:LEVEL", help=PERTURB_HELP)


def from_args(args):
    """The :class:`~embeval.sim.perturb.Perturbations` of ``--perturb`` (None when not given); one-line errors."""
    words = getattr(args, "perturb", None)
    if not words:
        return None
    from embeval.sim.perturb import Perturbations

    return Perturbations.parse(words)


def perturb_for(args):
    """``--perturb`` of a ``sim`` sub-command, checked before anything runs: None when not given; an axis the
    backend does not implement (:func:`embeval.sim.perturb.backends.supported`) refused in one line."""
    perturb = from_args(args)
    if perturb:
        from embeval.sim.perturb.backends import check

        check(perturb, getattr(args, "backend", "pybullet"))
    return perturb


def attach(env, perturb) -> None:
    """Apply ``perturb`` at every reset of an episode env (its simulator env's ``perturb``)."""
    if perturb:
        env.env.perturb = perturb


def episode_record(env, perturb) -> dict:
    """``{"perturbation": what each axis drew}`` for an episode's JSON row (empty without ``--perturb``)."""
    return {"perturbation": dict(env.env.perturbation)} if perturb else {}


def register(sub) -> None:
    g = add_group(sub, "perturb", "scene-level perturbations of the UR5 cell (camera, light, textures, distractors, "
                                  "initial state, instruction)")
    fmt = argparse.RawDescriptionHelpFormatter
    p = g.add_parser("list", help="list the perturbation axes, their units and five levels", formatter_class=fmt,
                     description="Every perturbation axis: what it changes (image, state, instruction), its unit and "
                                 "the range of each of its five levels.",
                     epilog="examples:\n  embeval perturb list\n  embeval perturb list --json\n  embeval perturb list --markdown")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the axes as JSON")
    out.add_argument("--markdown", action="store_true", help="print the docs/sim.md axes table")
    p.set_defaults(func=_list)

    p = g.add_parser("grid", help="contact sheet: rendered scenes, one row per axis, columns clean and levels 1..5",
                     formatter_class=fmt,
                     description="Render one seeded task scene under every axis at every level (columns: unperturbed, "
                                 "levels 1..5; the note on each cell: what the seed drew) into one labelled PNG.",
                     epilog="example:\n  embeval perturb grid --task Pick --seed 3 --out perturb_grid.png")
    p.add_argument("--task", default="Pick", help="task verb (`embeval sim tasks`); default Pick")
    p.add_argument("--seed", type=seed, default=3, help="episode seed (default 3)")
    p.add_argument("--camera", default="third_person", help="camera: third_person (default) or wrist")
    p.add_argument("--axes", nargs="+", help="axes to show (default all)")
    p.add_argument("--width", type=image_side, default=192, help="cell width in pixels (default 192)")
    p.add_argument("--height", type=image_side, default=144, help="cell height in pixels (default 144)")
    p.add_argument("--out", type=Path, required=True, help="output PNG")
    p.set_defaults(func=_grid)

    p = g.add_parser("score", help="per-axis sensitivity: Decision and Execution of a policy under each axis and level",
                     formatter_class=fmt,
                     description="Closed-loop episodes of a policy in the UR5 cell, each seed run unperturbed (the "
                                 "reference) and under every AXIS:LEVEL; scored as `sim episodes --distortion` scores a "
                                 "distortion: Decision (first action, per pair, 0..1) and Execution (0..100, final TCP "
                                 "vs the reference's). Prints one row per axis, one column per level. With --out the "
                                 "study is resumable: each finished (subject, seed) goes to DIR/rows.jsonl at once and "
                                 "a rerun with the same settings skips what is there.",
                     epilog="examples:\n  embeval perturb score --task Pick --episodes 3 --levels 1 5\n"
                            "  embeval perturb score --task Pick --subject config/subjects/tiny_vla.yaml --episodes 2 "
                            "--json sens.json\n"
                            "  embeval perturb score --subjects tiny-vla tiny-vla-wrist --seeds 0-99 --levels 1 3 5 "
                            "--out runs/perturb-study\n"
                            "  embeval perturb score --backend libero --task libero_goal:0-9 --subject my_vla.yaml "
                            "--seeds 0-49 --out runs/libero-pro")
    p.add_argument("--backend", choices=("pybullet", "libero"), default="pybullet",
                   help="pybullet (the UR5 cell, default) or libero: LIBERO's axes beside LIBERO-PRO's fixed variant "
                        "suites (--variants), each paired with the base task of the same id and initial state")
    p.add_argument("--task", help="task verb (default Pick); --backend libero: SUITE:IDS, e.g. libero_goal:0 or "
                                  "libero_goal:0-9")
    p.add_argument("--variants", nargs="+", metavar="VARIANT",
                   help="--backend libero: LIBERO-PRO variants scored beside the axes (default all paired ones: "
                        "swap object lan env task temp)")
    p.add_argument("--max-steps", type=positive_int, help="--backend libero: policy steps per episode (default the "
                                                          "suite's limit)")
    p.add_argument("--alias", action="append", default=[], metavar="KEY=CAMERA",
                   help="--backend libero: also give camera CAMERA under image key KEY (third_person=agentview for "
                        "a policy trained on embeval's camera names); repeatable")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--subject", help="policy subject YAML (default the scripted expert)")
    who.add_argument("--subjects", nargs="+", metavar="NAME_OR_YAML",
                     help="several policies, each a shipped VLA name (tiny-vla, tiny-vla-wide, ...), a subject YAML or "
                          "'expert' (the scripted expert); one table with a subject column")
    p.add_argument("--episodes", type=positive_int, default=3, help="seeds --seed .. per axis and level (default 3)")
    p.add_argument("--seed", type=seed, default=0, help="first seed (default 0)")
    p.add_argument("--seeds", metavar="SPEC", help="the episode seeds instead of --seed/--episodes: 0-99, 0,3,7 or "
                                                   "0-9,20-29")
    p.add_argument("--axes", nargs="+", help="axes (default all)")
    p.add_argument("--levels", nargs="+", type=int, default=[1, 3, 5], help="levels (default 1 3 5)")
    p.add_argument("--width", type=image_side, default=64, help="camera width in pixels (default 64)")
    p.add_argument("--height", type=image_side, default=64, help="camera height in pixels (default 64)")
    p.add_argument("--json", type=Path, help="write one record per (axis, level, seed) as JSON")
    p.add_argument("--out", type=Path, help="folder for the sensitivity table (sensitivity.csv/.md: success with Wilson "
                                           "95%% intervals, paired change vs the unperturbed seed), its plot "
                                           "(sensitivity.png), findings.md (what survives Holm's correction) and the "
                                           "resumable rows (rows.jsonl, study.json)")
    p.add_argument("--distortions", nargs="+", default=[], metavar="NAME",
                   help="image distortions (`embeval distort list`) scored at the same levels and seeds, beside the axes")
    p.add_argument("--iqa", action="store_true",
                   help="IQA vs scene: PSNR, SSIM and PIQE on (unperturbed, perturbed) first frames of the image axes "
                        "and of --distortions (default gaussian_blur jpeg white_noise darken), Spearman rho with "
                        "Decision and Execution per group; needs --out (not resumable: frames stay in memory)")
    p.add_argument("--camera", default="third_person", help="camera whose first frame --iqa measures (default third_person)")
    p.set_defaults(func=_score)


def _list(args) -> int:
    import json

    from embeval.sim.perturb import LEVELS, axes, markdown_table, table

    if args.json:
        print(json.dumps(table(), indent=1))
        return 0
    if args.markdown:
        print(markdown_table())
        return 0
    for a in axes():
        print(f"{a.name} ({a.changes}): {a.description}")
        print(f"  unit: {a.unit}; grows with the level: {a.direction}")
        for lv in LEVELS:
            print(f"  level {lv}: {a.level_text(lv)}")
    return 0


def _grid(args) -> int:
    from embeval.contact_sheet import save_labelled_grid
    from embeval.image_io import check_image_path
    from embeval.sim.perturb import LEVELS, Perturbation, Perturbations, get_axis, load
    from embeval.sim.perturb.axis import AXES
    from embeval.sim.tasks import make_task, resolve_verb
    from embeval.sim.workcell import SimConfig, Workcell

    check_image_path(args.out, "--out")
    names = args.axes or AXES.names()
    axes_ = [get_axis(n) for n in names]
    scene, task = make_task(resolve_verb(args.task), args.seed)
    rows, notes = [], {}
    with Workcell(SimConfig(mode="kinematic")) as cell:
        load(cell, scene, task, args.seed, None)
        clean = cell.render(args.camera, args.width, args.height)
        for r, axis in enumerate(axes_):
            row = [clean]
            notes[(r, 0)] = task.instruction if axis.changes == "instruction" else "unperturbed"
            for lv in LEVELS:
                prep = load(cell, scene, task, args.seed, Perturbations([Perturbation(axis.name, lv)]))
                row.append(cell.render(args.camera, args.width, args.height))
                notes[(r, lv)] = _wrap(axis.summary(prep.applied[0][2]), args.width)
            rows.append(row)
    save_labelled_grid(args.out, rows, [f"{a.name}\n{a.unit}" for a in axes_], ["unperturbed"] + [f"level {lv}" for lv in LEVELS],
                       title=f"{task.verb} seed {args.seed}, {args.camera} {args.width}x{args.height} px: scene-level "
                             "perturbations (notes: what the seed drew)", notes=notes)
    print(f"wrote {args.out} ({len(rows)} axes x unperturbed + levels 1..5)")
    return 0


#: --iqa without --distortions: one blur, one compression, one noise, one exposure distortion
IQA_DISTORTIONS = ("gaussian_blur", "jpeg", "white_noise", "darken")


#: --subjects word for the backend's scripted expert
EXPERT = "expert"


def _check_subject(name: str) -> str:
    """``name`` when it is 'expert', a subject YAML that exists or a known embedded VLA; a one-line error else."""
    from embeval.errors import ConfigError
    from embeval.subjects.embedded import zoo

    if name == EXPERT or Path(name).suffix in (".yaml", ".yml") and Path(name).is_file():
        return name
    if Path(name).suffix in (".yaml", ".yml"):
        raise ConfigError(f"--subjects {name}: no such subject YAML")
    zoo.resolve_model(name, "vla")  # unknown: "did you mean", the shipped names
    return name


def load_policy(name: str, env):
    """The policy of a --subject/--subjects word (see :func:`_check_subject`) on episode env ``env``."""
    if name == EXPERT:
        from embeval.runs.evaluators.sim_iqa import _Expert

        return _Expert(env)
    if Path(name).suffix in (".yaml", ".yml"):
        from embeval.subjects.registry import load_subject

        return load_subject(name)
    from embeval.subjects.embedded import zoo

    return zoo.load_vla(name)


def _report_skipped(skipped: list[dict], out) -> Path | None:
    """Print the cells a scene could not take (one line per axis and level) and, with ``out``, write them to
    ``OUT/not_applicable.json``; nothing when there are none."""
    if not skipped:
        return None
    import json

    from embeval.sim.perturb.score import skipped_lines

    print("not scored where the scene cannot take the axis (the rest of the study is scored):")
    print("\n".join(f"- {line}" for line in skipped_lines(skipped)))
    if out is None:
        return None
    Path(out).mkdir(parents=True, exist_ok=True)
    path = Path(out) / "not_applicable.json"
    path.write_text(json.dumps(skipped, indent=1))
    print(f"wrote {path}")
    return path


def _print_levels(rows, names, levels, header: str) -> None:
    import numpy as np

    print(header)
    print(f"{'axis':<20}" + "".join(f"{'level ' + str(lv):>22}" for lv in levels))
    for a in names:
        line = f"{a:<20}"
        for lv in levels:
            rs = [r for r in rows if r["axis"] == a and r["level"] == lv]
            if not rs:  # every episode of this cell was one the scene could not take (listed below the table)
                line += f"{'not scored':>22}"
                continue
            line += f"{np.mean([r['decision'] for r in rs]):>8.2f} {np.mean([r['execution'] for r in rs]):>6.1f} " \
                    f"{np.mean([r['success'] for r in rs]):>6.0%}"
        print(line)


def _score(args) -> int:
    import json

    from embeval.errors import ConfigError
    from embeval.sim.perturb import LEVELS, Perturbation, Perturbations, get_axis
    from embeval.sim.perturb.axis import AXES
    from embeval.sim.perturb.score import StudyConfig, parse_seeds, run_study, score_grid
    from embeval.sim.backends import SimSpec, make_episode_env
    from embeval.sim.tasks import resolve_verb

    if args.backend == "libero":
        return _score_libero(args)
    if args.variants or args.max_steps or args.alias:
        raise ConfigError("--variants, --max-steps and --alias belong to --backend libero")
    verb = resolve_verb(args.task or "Pick")
    names = args.axes or AXES.names()
    if args.iqa:
        if args.out is None:
            raise ConfigError("--iqa writes its table into --out DIR; add --out")
        names = [n for n in names if get_axis(n).changes == "image"]  # IQA needs an image change
        if not names:
            raise ConfigError("--iqa needs an image axis (light_*, *_texture, camera_pose, fov) in --axes")
    for lv in args.levels:
        if lv not in LEVELS:
            raise ConfigError(f"--levels: levels are 1..5, got {lv}")
    cells = [Perturbations([Perturbation(a, lv)]) for a in names for lv in args.levels]  # refused before any episode
    dists = list(args.distortions or (IQA_DISTORTIONS if args.iqa else ()))
    if dists:
        from embeval import distortion as dist_mod

        for d in dists:
            dist_mod.get(d)
    seeds = parse_seeds(args.seeds) if args.seeds else tuple(range(args.seed, args.seed + args.episodes))
    subjects = [_check_subject(s) for s in (args.subjects or [args.subject or EXPERT])]
    if args.json:
        from embeval.errors import check_out_file

        check_out_file(args.json, "--json")
    if args.out is not None:
        from embeval.errors import check_out_dir

        check_out_dir(args.out, "--out")
    size = f"{args.width}x{args.height} px"
    skipped: list[dict] = []  # cells a scene cannot take (distractors without room, ...): listed, not fatal
    if args.out is not None and not args.iqa:  # resumable
        study = StudyConfig(tuple(subjects), seeds, verb, tuple(names), tuple(args.levels), tuple(dists), args.width,
                            args.height)
        rows = run_study(study, args.out, load_policy, log=print, skipped=skipped)
    else:
        env = make_episode_env(SimSpec(backend="pybullet", env=verb, width=args.width, height=args.height))
        rows = []
        try:
            for subject in subjects:
                left: list[dict] = []
                rows += [{"subject": subject, **r} for r in score_grid(
                    env, load_policy(subject, env), seeds, cells, [(d, lv) for d in dists for lv in args.levels],
                    keep_frames=args.iqa, camera=args.camera if args.iqa else None, skipped=left)]
                skipped += [{"subject": subject, **s} for s in left]
        finally:
            env.close()
    span = f"{len(seeds)} seed(s) from {seeds[0]}" if seeds == tuple(range(seeds[0], seeds[0] + len(seeds))) \
        else f"{len(seeds)} seed(s)"
    for subject in subjects:
        who = "scripted expert" if subject == EXPERT else subject
        _print_levels([r for r in rows if r["subject"] == subject], names + dists, args.levels,
                      f"{verb}, {who}, {span}: mean Decision / mean Execution / success rate")
    _report_skipped(skipped, args.out)
    if args.out is not None:
        from embeval_analysis import perturb as pa

        many = len(subjects) > 1
        sens = pa.sensitivity([r if many else {k: v for k, v in r.items() if k != "subject"} for r in rows])
        corrs = None
        if args.iqa:
            missing = pa.measure_iqa(rows)
            for m, why in missing.items():
                print(f"IQA metric {m} skipped: {why}")
            corrs = pa.iqa_correlations(rows, [m for m in pa.IQA_METRICS if m not in missing])
        who = ", ".join("scripted expert" if s == EXPERT else s for s in subjects)
        outs = pa.write_outputs(args.out, sens, corrs, title=f"{verb}, {who}, {span}, {size}")
        found = pa.findings(sens)
        (args.out / "findings.md").write_text("\n".join(f"- {f}" for f in found) + "\n" if found else
                                              "- nothing is significant after Holm's correction at alpha 0.05\n")
        print("\n" + pa.sensitivity_markdown(sens))
        print(f"\nsupported by the intervals (Holm-corrected over {2 * len(sens)} tests, alpha 0.05):")
        print("\n".join(f"- {f}" for f in found) or "- nothing")
        if corrs is not None:
            print("\nIQA vs scene (Spearman rho over episodes; camera_pose/fov references are not pixel-aligned):")
            print(pa.iqa_markdown(corrs))
        print("wrote " + ", ".join(str(p) for p in [*outs.paths(), args.out / "findings.md"]))
    if args.json:
        keep = [{k: v for k, v in r.items() if k not in ("frame", "reference_frame")} for r in rows]
        args.json.write_text(json.dumps(keep, indent=1))
        print(f"wrote {args.json}")
    return 0


def _score_libero(args) -> int:
    """``perturb score --backend libero``: the LIBERO-PRO family beside LIBERO's axes (:mod:`embeval.sim.libero.pro`)."""
    import json

    from embeval.errors import ConfigError
    from embeval.sim.libero import check_installed, parse_task
    from embeval.sim.libero.pro import PAIRED_VARIANTS, FamilyStudy, score_family
    from embeval.sim.perturb.backends import supported
    from embeval.sim.perturb.score import parse_seeds

    if args.iqa or args.distortions:
        raise ConfigError("--iqa and --distortions are pybullet-only here; score LIBERO distortions with "
                          "`embeval sim episodes --backend libero --distortion NAME`")
    suite, sep, ids = (args.task or "").partition(":")
    if not sep:
        parse_task(args.task or "")  # the one-line SUITE:TASK_ID error
    task_ids = parse_seeds(ids, "--task SUITE:IDS")
    seeds = parse_seeds(args.seeds) if args.seeds else tuple(range(args.seed, args.seed + args.episodes))
    study = FamilyStudy(suite, task_ids, seeds, tuple(args.variants or PAIRED_VARIANTS),
                        tuple(args.axes if args.axes is not None else supported("libero")), tuple(args.levels),
                        args.width, args.height, args.max_steps, aliases=parse_aliases(args.alias))
    subjects = args.subjects or [args.subject or "hold"]
    for s in subjects:
        if s == EXPERT:
            raise ConfigError("--subjects expert: LIBERO has no scripted expert; give a policy (the default holds still)")
        if s != "hold":
            _check_subject(s)
    if args.out is not None:
        from embeval.errors import check_out_dir

        check_out_dir(args.out, "--out")
    if args.json:
        from embeval.errors import check_out_file

        check_out_file(args.json, "--json")
    check_installed()

    def load(name):
        if name == "hold":
            from embeval.sim.libero.episodes import HoldPolicy

            return HoldPolicy()
        return load_policy(name, None)

    from embeval.progress import Progress

    policies = {s: load(s) for s in subjects}
    skipped: list[dict] = []  # axes a task's scene cannot take (a table texture on a floor-only scene, ...)
    with Progress(study.episodes * len(policies), "LIBERO-PRO family", "episodes") as bar:
        rows = score_family(study, policies, progress=lambda _m: bar.update(1), skipped=skipped)
    from embeval_analysis import perturb as pa

    sens = pa.sensitivity(rows)
    print(f"{args.task}, {', '.join(subjects)}, {len(seeds)} initial state(s); LIBERO-PRO variants paired with the "
          f"base task of the same id and initial state:")
    print(pa.sensitivity_markdown(sens))
    _report_skipped(skipped, args.out)
    if args.out is not None:
        outs = pa.write_outputs(args.out, sens, title=f"{args.task}, {', '.join(subjects)}, {len(seeds)} seed(s)")
        print("wrote " + ", ".join(str(p) for p in outs.paths()))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
        print(f"wrote {args.json}")
    return 0


def _wrap(text: str, width_px: int, char_px: int = 6) -> str:
    """``text`` broken into lines of at most ``width_px / char_px`` characters (cell notes)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, max(8, width_px // char_px - 1))) or text
