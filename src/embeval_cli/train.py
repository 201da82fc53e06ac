"""``embeval train``: build the embedded models offline on the CPU (demos, tiny VLA, tiny VLM, population)."""
from __future__ import annotations

from pathlib import Path

from embeval_cli._util import add_group, float_in, positive_int, seed
from embeval.errors import ConfigError


def register(sub) -> None:
    g = add_group(sub, "train", "train the embedded models in simulation (offline, CPU, seeded)")

    p = g.add_parser("demos", help="record scripted-expert demonstrations as a LeRobot dataset",
                     description="Record scripted-expert Pick/Place demonstrations in the LeRobot v3.0 format.",
                     epilog="example: embeval train demos --episodes 20 --out runs/demos")
    p.add_argument("--episodes", type=positive_int, default=80,
                   help="expert episodes to run (default 80; failed ones are skipped)")
    p.add_argument("--out", type=Path, required=True, help="dataset folder to create")
    p.add_argument("--seed", type=seed, default=0, help="master seed of the scenes and the action noise (default 0)")
    p.add_argument("--verbs", nargs="+", default=["Pick", "Place"], help="task verbs, alternating (default Pick Place)")
    p.add_argument("--noise", type=float_in(0.0, 1.0), default=0.3,  # 1.0: embeval.datasets.demos.MAX_NOISE
                   help="relative std of the executed action noise, 0..1 x the expert's step (default 0.3; 0 = none)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset in --out")
    p.set_defaults(func=_demos)

    p = g.add_parser("vla", help="record demos, train the tiny VLA, evaluate it closed loop, save it",
                     description="Train the tiny VLA (CNN + MiniLM + action expert) by behaviour cloning, then "
                                 "evaluate it on seeded Pick/Place episodes it never saw.",
                     epilog="example: embeval train vla --out runs/tiny-vla --seed 0   (extra datasets are recorded "
                            "next to --out, or next to --demos when given)")
    p.add_argument("--out", type=Path, required=True, help="checkpoint folder to write (config.json, model.safetensors, report.json)")
    p.add_argument("--seed", type=seed, default=None, help="seed of initialisation and batches (default: the recipe's, 0 for tiny-vla)")
    p.add_argument("--demo-seed", type=int, default=None, help="seed of the recorded demonstrations (default: the recipe's, 0)")
    p.add_argument("--demos", type=Path, help="use this LeRobot dataset instead of recording one")
    p.add_argument("--episodes", type=int, default=None, help="demonstration episodes to record (default: the recipe's, 400)")
    p.add_argument("--start-episodes", type=int, default=None,
                   help="extra scenes contributing only their first expert frame (default: the recipe's, 2000)")
    p.add_argument("--approach-episodes", type=int, default=None,
                   help="extra scenes contributing their first 6 expert frames (default: the recipe's, 600)")
    p.add_argument("--carry-episodes", type=int, default=None,
                   help="extra Place scenes contributing their carry/lower/release frames (default: the recipe's, 600)")
    p.add_argument("--workers", type=int, default=None,
                   help="processes recording the datasets side by side (default: the recipe's, 2)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's)")
    p.add_argument("--eval-episodes", type=int, default=None, help="closed-loop evaluation episodes (default: the recipe's; 0 = skip)")
    p.add_argument("--recipe", default="tiny-vla", help="population recipe to follow (default tiny-vla; see `embeval train population --list`; "
                                                        "tiny-vla-a2a-frozen / tiny-vla-a2a-full: tiny-vlm-a2a-cell's backbone + an action expert)")
    p.add_argument("--eval-per-category", type=int, default=None,
                   help="tiny-vla-a2a-* recipes: held-out Act2Answer items per category run in the cell (default: the recipe's; 0 = skip)")
    p.set_defaults(func=_vla)

    p = g.add_parser("vlm", help="render scenes, train the tiny VLM (image + task -> ~10-word answer), save it",
                     description="Train the tiny VLM: a text-conditioned CNN predicting answer slots on simulated reference scenes.",
                     epilog="examples: embeval train vlm --out runs/tiny-vlm --seed 0\n"
                            "  embeval train vlm --recipe tiny-vlm-a2a --out runs/tiny-vlm-a2a --seed 0   "
                            "(two cards + question -> left/right, trained on procedural Act2Answer items)")
    p.add_argument("--out", type=Path, required=True, help="checkpoint folder to write")
    p.add_argument("--seed", type=seed, default=None, help="seed of the scenes, initialisation and batches (default: the recipe's, 0 for tiny-vlm)")
    p.add_argument("--scenes", type=int, default=None, help="training scenes (default: the recipe's)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's)")
    p.add_argument("--per-category", type=int, default=None,
                   help="tiny-vlm-a2a recipes: training items per procedural category (default: the recipe's)")
    p.add_argument("--recipe", default="tiny-vlm", help="population recipe to follow (default tiny-vlm; tiny-vlm-a2a: "
                                                        "the Act2Answer answerer)")
    p.set_defaults(func=_vlm)

    p = g.add_parser("seeds", help="train two VLM -> VLA recipes on 3+ seeds and tabulate what holds on every seed",
                     description="Train (or reuse) each recipe with each seed, evaluate it on the same held-out "
                                 "Act2Answer suite in the cell, and print per category each seed's success rate (in "
                                 "brackets: among episodes that ended on a card, i.e. knowledge apart from control), "
                                 "the range over seeds and which order holds on every seed. Writes OUT/seeds.json and "
                                 "OUT/seeds.md. A seed whose checkpoint is shipped with the same recipe is reused. "
                                 "Cost per new seed on 2 cores: ~7 min of demonstrations, then 1-2 min training and "
                                 "5-13 min evaluation per recipe.",
                     epilog="example: embeval train seeds --seeds 0 1 2 --out runs/a2a-seeds")
    p.add_argument("--recipes", nargs=2, default=["tiny-vla-a2a-frozen", "tiny-vla-a2a-full"], metavar="RECIPE",
                   help="the two recipes to compare (default: tiny-vla-a2a-frozen tiny-vla-a2a-full)")
    p.add_argument("--seeds", nargs="+", type=seed, default=[0, 1, 2], help="training seeds, at least 3 (default 0 1 2)")
    p.add_argument("--eval-per-category", type=positive_int, default=None,
                   help="held-out items per category (default: the recipe's, 20; another value retrains seed 0 too)")
    p.add_argument("--out", type=Path, required=True, help="folder for the checkpoints, the shared demonstrations and the table")
    p.add_argument("--probe", action="store_true",
                   help="also probe every recipe x seed on the held-out suite (within-category and transfer CNR, random-weight "
                        "control; about 1-2 min per model) and write OUT/probes.md")
    p.set_defaults(func=_seeds)

    p = g.add_parser("population", help="train every VLA and VLM of the shipped population",
                     description="Train the population (>= 5 VLAs, >= 5 VLMs of different architectures, widths, seeds "
                                 "and data subsets), report their pairwise agreement, and write population.json.",
                     epilog="example: embeval train population --out runs/models   (or --list to see the recipes)")
    p.add_argument("--out", type=Path, default=None, help="folder for the checkpoints (default: the shipped models folder)")
    p.add_argument("--list", action="store_true", help="only list the recipes")
    p.add_argument("--only", nargs="+", metavar="NAME", help="train only these members")
    p.add_argument("--kind", choices=["vla", "vlm", "a2eval"], help="train only this kind (a2eval: the A2Eval model "
                   "subjects, into <out>/a2eval, as `embeval train a2eval` does)")
    p.set_defaults(func=_population)

    p = g.add_parser("a2eval", help="train the A2Eval model subjects (tiny scene-QA VLMs on the procedural pool's generators)",
                     description="Train the A2Eval demo's model subjects: tiny VLMs that look at the procedural pool's images "
                                 "and answer its questions (letters, numbers, points, lists), at different widths, input "
                                 "sizes, training budgets and dimension mixes; evaluate each per dimension on a held-out "
                                 "pool and write members.json.",
                     epilog="example: embeval train a2eval   (rebuilds src/embeval/data/models/a2eval/; --list shows the recipes)")
    p.add_argument("--out", type=Path, default=None, help="folder for the checkpoints (default: the shipped a2eval models folder)")
    p.add_argument("--list", action="store_true", help="only list the recipes")
    p.add_argument("--only", nargs="+", metavar="NAME", help="train only these members")
    p.add_argument("--eval-items", type=int, default=600, help="held-out pool size for the per-dimension table (default 600; 0 = skip)")
    p.add_argument("--eval-seed", type=seed, default=1, help="seed of the held-out pool (default 1; the demo's pool uses 0)")
    p.set_defaults(func=_a2eval)


def _demos(args) -> int:
    from embeval.datasets.demos import DemoConfig, record_demos
    from embeval.datasets.lerobot_format import DatasetExistsError

    cfg = DemoConfig(episodes=args.episodes, seed=args.seed, verbs=tuple(args.verbs), noise=args.noise)
    try:
        rep = record_demos(args.out, cfg, overwrite=args.overwrite, log=print)
    except DatasetExistsError as exc:  # the API's hint names overwrite=True; here the flag is the fix
        raise DatasetExistsError(exc.root, "choose another --out or pass --overwrite") from None
    print(f"wrote {rep.episodes} episodes ({rep.frames} frames; {rep.failures} expert failures skipped) to {rep.root} "
          f"in {rep.seconds:.0f} s")
    print(f"train a LeRobot policy on it: OMP_NUM_THREADS=1 lerobot-train --dataset.repo_id=local/{Path(rep.root).name} "
          f"--dataset.root={Path(rep.root).resolve()} --policy.type=act --policy.pretrained_backbone_weights=null ... "
          "(docs/subjects.md, 'Training a LeRobot policy on embeval's demonstrations'); its spec: state_key: [tcp_pose, gripper]")
    return 0


def _vla(args) -> int:
    from embeval.subjects.embedded.population import a2a_vla_names, vla_recipe
    from embeval.subjects.embedded.recipes import train_vla_recipe

    if args.recipe in a2a_vla_names():
        return _a2a_vla(args)
    if args.eval_per_category is not None:
        raise ConfigError(f"--eval-per-category applies to the tiny-vla-a2a-* recipes, not {args.recipe!r}; use --eval-episodes")
    r = vla_recipe(args.recipe)
    for arg, attr in (("seed", "seed"), ("demo_seed", "demo_seed"), ("episodes", "demo_episodes"),
                      ("start_episodes", "start_episodes"), ("approach_episodes", "approach_episodes"),
                      ("carry_episodes", "carry_episodes"), ("eval_episodes", "eval_episodes"), ("workers", "record_workers")):
        if getattr(args, arg) is not None:
            setattr(r, attr, getattr(args, arg))
    if args.steps is not None:
        r.train = {**r.train, "steps": args.steps}
    rep = train_vla_recipe(r, args.out, demos=args.demos, log=print)
    _print_vla(rep)
    print(f"saved to {args.out} in {rep['seconds']:.0f} s")
    return 0


def _a2a_vla(args) -> int:
    from embeval.act2answer.choice_vla_training import format_cell_report, train_choice_vla_recipe
    from embeval.subjects.embedded.population import a2a_vla_recipe

    r = a2a_vla_recipe(args.recipe)
    wrong = [f"--{a.replace('_', '-')}" for a in ("demo_seed", "demos", "episodes", "start_episodes", "approach_episodes",
                                                   "carry_episodes", "eval_episodes", "workers") if getattr(args, a) is not None]
    if wrong:
        raise ConfigError(f"{', '.join(wrong)} do(es) not apply to the {args.recipe!r} recipe; it takes --seed, --steps "
                          "and --eval-per-category")
    if args.seed is not None:
        r.seed = args.seed
    if args.steps is not None:
        r.train = {**r.train, "steps": args.steps}
    if args.eval_per_category is not None:
        r.eval_per_category = args.eval_per_category
    rep = train_choice_vla_recipe(r, args.out, work=Path(args.out).parent / (Path(args.out).name + "_work"), log=print)
    if "eval" in rep:
        print(f"held-out Act2Answer suite in the pybullet cell (seed {r.eval_seed}, {r.eval_per_category} items per "
              f"category, both layouts; * = demonstrated categories):")
        print(format_cell_report(rep["eval"], r.demo_categories))
    print(f"saved to {args.out} in {rep['seconds']:.0f} s ({rep['frames_per_second']:.0f} training frames/s)")
    return 0


def _seeds(args) -> int:
    from embeval.act2answer.seeds import holds_on_every_seed, run_seed_study
    from embeval.subjects.embedded.population import a2a_vla_names

    names = set(a2a_vla_names())
    bad = [r for r in args.recipes if r not in names]
    if bad:
        raise ConfigError(f"--recipes: {bad[0]!r} is not a VLM -> VLA recipe; choose from {sorted(names)}")
    table = run_seed_study(args.recipes, args.seeds, args.out, args.eval_per_category)
    print((args.out / "seeds.md").read_text())
    holds = holds_on_every_seed(table, *args.recipes)
    steady = {c: v for c, v in holds.items() if v != "differs by seed"}
    print(f"holds on every seed ({len(steady)} of {len(holds)} rows): "
          + ("; ".join(f"{c}: {v}" for c, v in steady.items()) or "nothing"))
    print(f"wrote {args.out / 'seeds.json'} and {args.out / 'seeds.md'}")
    if args.probe:
        from embeval_analysis.probing.seed_probes import probe_seed_models, write_probe_table

        from embeval.act2answer.generator import generate_items
        from embeval.subjects.embedded.population import a2a_vla_recipe
        from embeval.subjects.embedded.zoo import MODELS_DIR

        r = a2a_vla_recipe(args.recipes[0])
        per_cat = args.eval_per_category or r.eval_per_category
        items = generate_items(args.out / "work" / f"a2a-suite-{r.eval_seed}-{per_cat}", None, per_cat, r.eval_seed)
        models = {n: {s: (args.out / n / f"seed{s}" if (args.out / n / f"seed{s}" / "config.json").exists() else MODELS_DIR / n)
                      for s in sorted(set(args.seeds))} for n in args.recipes}
        res = probe_seed_models(models, items, seed=r.eval_seed)
        print(write_probe_table(res, *args.recipes, args.out))
        print(f"wrote {args.out / 'probes.json'} and {args.out / 'probes.md'}")
    return 0


def _print_vla(rep: dict) -> None:
    ev = rep.get("eval")
    if ev:
        lo, hi = ev["wilson95"]
        print(f"success {ev['successes']}/{ev['episodes']} = {ev['rate']:.0%} (Wilson 95% [{lo:.2f}, {hi:.2f}]); "
              + ", ".join(f"{v} {d['successes']}/{d['episodes']}" for v, d in ev["by_verb"].items()))


def _vlm(args) -> int:
    from embeval.subjects.embedded.choice import ChoiceVLMRecipe
    from embeval.subjects.embedded.population import vlm_recipe
    from embeval.subjects.embedded.recipes import train_vlm_recipe

    r = vlm_recipe(args.recipe)
    a2a = isinstance(r, ChoiceVLMRecipe)
    # the data-size option of the other family is refused (option name = recipe field)
    size, wrong = ("per_category", "scenes") if a2a else ("scenes", "per_category")
    if getattr(args, wrong) is not None:
        raise ConfigError(f"--{wrong.replace('_', '-')} does not apply to the {args.recipe!r} recipe; "
                          f"use --{size.replace('_', '-')}")
    for opt in ("seed", size):
        if getattr(args, opt) is not None:
            setattr(r, opt, getattr(args, opt))
    if args.steps is not None:
        r.train = {**r.train, "steps": args.steps}
    if a2a:
        return _a2a_vlm(r, args)
    rep = train_vlm_recipe(r, args.out, log=print)
    ev = rep["eval"]
    print("held-out slot accuracy: " + ", ".join(f"{k} {v:.2f}" for k, v in ev["slot_accuracy"].items())
          + f"; exact answers {ev['exact_answer_accuracy']:.2f}")
    print(f"saved to {args.out} in {rep['seconds']:.0f} s")
    return 0


def _a2a_vlm(r, args) -> int:
    from embeval.act2answer.choice_training import format_report, train_choice_recipe

    rep = train_choice_recipe(r, args.out, log=print)
    if "eval" in rep:
        print(f"held-out Act2Answer suite (seed {r.eval_seed}, {r.eval_per_category} items per category, both layouts):")
        print(format_report(rep["eval"]))
    print(f"saved to {args.out} in {rep['seconds']:.0f} s ({rep['items_per_second']:.0f} training items/s)")
    return 0


def _a2eval(args) -> int:
    from embeval_analysis.a2eval import models as M

    if args.list:
        for r in M.RECIPES:
            print(f"{r.name:18s} seed {r.seed}  {r.describe()}")
        return 0
    if args.eval_items < 0:
        raise ConfigError(f"--eval-items must be >= 0, got {args.eval_items}")
    man = M.train_models(args.out, only=args.only, eval_items_n=args.eval_items, eval_seed=args.eval_seed, log=print)
    if "eval" in man:
        print(f"\nheld-out pool ({man['eval']['pool_items']} items, seed {man['eval']['pool_seed']}): mean score per dimension")
        acc = {n: man["members"][n]["eval"] for n in man["order"] if "eval" in man["members"][n]}
        print(M.format_accuracy_table(acc, man["eval"]["constant_baseline"]))
    print(f"saved {len(man['order'])} members to {args.out or M.models_dir()} in {man['seconds']:.0f} s")
    return 0


def _population(args) -> int:
    from embeval.subjects.embedded import population as pop
    from embeval_analysis.a2eval import models as M

    groups = {"vla": pop.VLA_RECIPES + pop.A2A_VLA_RECIPES, "vlm": pop.VLM_RECIPES + pop.A2A_RECIPES, "a2eval": M.RECIPES}
    if args.list:
        for kind, recipes in groups.items():
            for r in recipes:
                print(f"{kind:6s}  {r.name:24s} seed {r.seed}  {pop.describe(r) if kind != 'a2eval' else r.describe()}")
        return 0
    names = {kind: [r.name for r in recipes] for kind, recipes in groups.items()}
    known = [n for ns in names.values() for n in ns]
    bad = [n for n in args.only or [] if n not in known]
    if bad:
        raise ConfigError(f"unknown population member(s) {bad}; `embeval train population --list` shows the {len(known)} names")

    def wanted(kind: str) -> bool:
        return args.kind in (None, kind) and (not args.only or any(n in names[kind] for n in args.only))

    if wanted("vla") or wanted("vlm"):
        from embeval.act2answer.choice_training import train_choice_recipe
        from embeval.act2answer.choice_vla_training import train_choice_vla_recipe

        rep = pop.train_population(args.out, only=args.only, kind=args.kind, log=print, train_choice_recipe=train_choice_recipe,
                                   train_choice_vla_recipe=train_choice_vla_recipe)
        pop.print_population_report(rep)
    if wanted("a2eval"):
        only = [n for n in args.only or [] if n in names["a2eval"]] or None
        man = M.train_models(Path(args.out) / "a2eval" if args.out else None, only=only, log=print)
        print(f"A2Eval model subjects: {len(man['order'])} members in {args.out / 'a2eval' if args.out else M.models_dir()}")
    return 0
