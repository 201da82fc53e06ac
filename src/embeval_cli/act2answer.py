"""``embeval act2answer``: binary VQA items answered by tabletop actions (items, run, report, probe)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from embeval_cli._util import add_group, add_video_args, int_in, parse_aliases, positive_int, seed
from embeval.sim.vector import MAX_ENVS

_FMT = argparse.RawDescriptionHelpFormatter


def register(sub) -> None:
    g = add_group(sub, "act2answer", "Act2Answer: VQA items answered by moving a cube onto one of two image cards")

    items = add_group(g, "items", "make Act2Answer item files (convert VQA data or generate procedural items)")
    p = items.add_parser("convert", help="convert a multiple-choice VQA file into binary items", formatter_class=_FMT,
                         description="Convert JSONL/JSON/Parquet/TSV records in a known layout into binary items "
                                     "(items.jsonl + images). Optionally rewrite questions into instructions with an LLM.",
                         epilog="example:\n  embeval act2answer items convert --layout mmbench --input mmbench_dev.tsv --out items/mmbench\n"
                                "  embeval act2answer items convert --layout iconqa --input iconqa.jsonl --image-root iconqa/ "
                                "--out items/iconqa --rewrite-llm config/subjects/llm.yaml\n"
                                "  embeval act2answer items convert --layout act2answer --input carrot/more_state --out items/ref")
    p.add_argument("--layout", required=True, help="source layout: mllm-compbench, iconqa, mmbench, okvqa, vl-think, "
                   "act2answer (the reference harness's task set: --input its folder)")
    p.add_argument("--input", type=Path, required=True, help="the VQA records file (.jsonl, .json, .parquet, .tsv, .csv), or "
                   "the task set folder (pairs.json, model_db.json, shapes/) for --layout act2answer")
    p.add_argument("--out", type=Path, required=True, help="output folder (items.jsonl and images/)")
    p.add_argument("--image-root", type=Path, help="folder that relative image paths start from (default: the input's folder)")
    p.add_argument("--seed", type=seed, default=0, help="seed for distractors and correct sides (default 0)")
    p.add_argument("--limit", type=positive_int, help="convert only the first N records")
    p.add_argument("--rewrite-llm", type=Path, help="LLM subject YAML: rewrite questions into action instructions")
    p.add_argument("--cache", type=Path, help="LLM call cache (SQLite; default OUT/rewrite_cache.sqlite)")
    p.set_defaults(func=_convert)

    p = items.add_parser("generate", help="draw procedural items with ground truth", formatter_class=_FMT,
                         description="Draw procedural binary items (cards) per category; the full suite is 10 categories "
                                     "x 172 items = 1,720 items = 3,440 episodes.",
                         epilog="example:\n  embeval act2answer items generate --out suite/ --per-category 40\n"
                                "  embeval act2answer items generate --out suite/ --categories color emotion --per-category 10")
    p.add_argument("--out", type=Path, required=True, help="output folder (items.jsonl and images/)")
    p.add_argument("--categories", nargs="+", help="categories (default all: color shape counting symmetry attribute "
                                                    "state emotion time traffic spatial)")
    p.add_argument("--per-category", type=int, default=172, help="items per category (default 172, the full suite)")
    p.add_argument("--seed", type=seed, default=0, help="seed (default 0)")
    p.set_defaults(func=_generate)

    p = g.add_parser("run", help="run items in the simulated cell (both layouts) and/or ask VLMs as text",
                     formatter_class=_FMT,
                     description="Run every item in both layouts with a policy in the simulated cell; optionally ask VLM "
                                 "subjects the same items as text. Writes episodes_<subject>.jsonl and prints the table. "
                                 "For sharded/resumable runs use `embeval run config/act2answer/run_tiny_vla.yaml`.",
                     epilog="example:\n  embeval act2answer run --items suite/items.jsonl --policy tiny-vla --out results/\n"
                            "  embeval act2answer run --items suite/items.jsonl --policy my_vla.yaml --vlm my_vlm.yaml --out results/\n"
                            "  embeval act2answer run --items suite/items.jsonl --policy expert --backend maniskill --episode ep.yaml --out results/")
    p.add_argument("--items", type=Path, required=True, help="item file (items.jsonl)")
    p.add_argument("--policy", nargs="*", default=["tiny-vla"],
                   help="policies: shipped embedded names (embeval train population --list), checkpoint folders or subject "
                        "YAMLs (default tiny-vla; tiny-vla-untrained: random weights, a floor; expert: the backend's privileged "
                        "scripted answer, a control ceiling; none: no policy, only --vlm)")
    p.add_argument("--vlm", nargs="*", default=[], help="VLM subject YAMLs (or shipped tiny-vlm names) answering as text")
    p.add_argument("--episode", type=Path, help="episode spec YAML (default config/act2answer/episode.yaml: the reference protocol, cube grasped, 25 steps held, board rule, 80 steps, release_after_lift)")
    p.add_argument("--out", type=Path, default=Path("act2answer_results"), help="output folder (default act2answer_results/)")
    p.add_argument("--seed", type=seed, default=0, help="seed (default 0)")
    p.add_argument("--limit", type=positive_int, help="use only the first N items")
    p.add_argument("--delta", type=float, default=0.1, help="regime margin around chance 0.5 (default 0.1)")
    p.add_argument("--backend", default="pybullet",
                   help="simulator: pybullet (the UR5 cell, default), maniskill (ManiSkill3 with the Panda; "
                        "give a longer --episode max_steps, see docs/act2answer.md), or maniskill-bridge / "
                        "maniskill-bridge-spoon / maniskill-bridge-cube (SimplerEnv-style Bridge scenes with the WidowX; "
                        "need ManiSkill's asset download, docs/sim.md)")
    p.add_argument("--alias", action="append", default=[], metavar="KEY=CAMERA",
                   help="ManiSkill backends: also give camera CAMERA under image key KEY, e.g. third_person=base_camera "
                        "for a policy trained on the UR5 cell's third_person view on --backend maniskill; repeatable")
    p.add_argument("--num-envs", type=int_in(1, MAX_ENVS, "environments stepped together; 1 = one at a time"),
                   default=1, metavar="N",
                   help="environments stepped together, 1..64 (default 1: one environment, one policy call per step "
                        "and episode). N > 1: N environments in worker processes (min(N, CPUs) of them), ONE batched "
                        "policy call per step for all, an environment takes the next episode as soon as its own ends; "
                        "same seeds and records (see --exact); docs/scale.md")
    p.add_argument("--doctor", action="store_true",
                   help="first run `embeval subjects doctor` on every policy (not the expert); exit 1, no episode run, "
                        "if one fails (docs/subjects.md, Doctor)")
    p.add_argument("--exact", action="store_true",
                   help="with --num-envs > 1: ask the policy one episode at a time (its batch-1 path per environment), "
                        "so every record equals the --num-envs 1 run's bit for bit; without it a policy with its own "
                        "batched forward (the tiny VLAs) may differ in float rounding (~1e-8 per action component)")
    add_video_args(p, "OUT/videos/")
    p.set_defaults(func=_run)

    p = g.add_parser("scenes", help="write per-item scene YAMLs and conductor parameters for the ROS graph / real cell",
                     formatter_class=_FMT,
                     description="Write <item>@<layout>.yaml scene specs (two cards, cube, arm), episode.yaml and the "
                                 "conductor node's parameter lists (conductor.yaml) for sim-to-real runs.",
                     epilog="example:\n  embeval act2answer scenes --items suite/items.jsonl --out scenes/ --limit 10")
    p.add_argument("--items", type=Path, required=True, help="item file (items.jsonl)")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument("--episode", type=Path, help="episode spec YAML (default: built-in geometry)")
    p.add_argument("--limit", type=positive_int, help="use only the first N items")
    p.set_defaults(func=_scenes)

    p = g.add_parser("report", help="per-category table, intervals, regimes and swap statistics from result files",
                     formatter_class=_FMT, description="Aggregate episode/answer JSONL files (one subject each, or with a "
                                                       "'subject' field) or a runs Parquet export into the paper's table.",
                     epilog="example:\n  embeval act2answer report results/episodes_*.jsonl --csv table.csv")
    p.add_argument("results", nargs="+", type=Path, help="results JSONL files or a runs Parquet export")
    p.add_argument("--delta", type=float, default=0.1, help="regime margin around chance 0.5 (default 0.1)")
    p.add_argument("--confidence", type=float, default=0.95, help="Wilson interval confidence (default 0.95)")
    p.add_argument("--csv", type=Path, help="also write the long table as CSV")
    p.set_defaults(func=_report)

    p = g.add_parser("probe", help="layerwise linear probes of a torch policy and its Chance-Normalized Retention",
                     formatter_class=_FMT,
                     description="Capture each layer's hidden state at the first observation of every item x layout, train "
                                 "cross-validated linear probes (grouped by item) with shuffled-label and random-weight "
                                 "controls, plot accuracy by layer and print CNR.",
                     epilog="example:\n  embeval act2answer probe --items suite/items.jsonl --policy tiny-vla --out probe/")
    p.add_argument("--items", type=Path, required=True, help="item file (items.jsonl)")
    p.add_argument("--policy", default="tiny-vla", help="shipped embedded name or subject YAML with hidden-state capture")
    p.add_argument("--layers", default=r"(backbone|action_expert)\.\d+", help="regex of module names to probe")
    p.add_argument("--out", type=Path, default=Path("act2answer_probe"), help="output folder (PNG, JSON)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    p.add_argument("--limit", type=positive_int, help="use only the first N items")
    p.add_argument("--seed", type=seed, default=0, help="seed (default 0)")
    p.add_argument("--no-random-control", action="store_true", help="skip the random-weight control (tiny VLA and choice VLAs only)")
    p.set_defaults(func=_probe)


#: ``--policy none``: run no policy (only the --vlm subjects)
NO_POLICY = "none"


def _policy_refs(refs: list[str] | None, vlms: list[str] | None) -> list[str]:
    """The --policy values to run: ``none`` means no policy and stands alone; nothing at all to run is an error."""
    refs = list(refs or [])
    if NO_POLICY in refs and len(refs) > 1:
        from embeval.errors import ConfigError

        raise ConfigError(f"--policy none means no policy; it cannot be combined with {', '.join(r for r in refs if r != NO_POLICY)}")
    refs = [r for r in refs if r != NO_POLICY]
    if not refs and not vlms:
        from embeval.errors import ConfigError

        raise ConfigError("nothing to run: --policy none (or an empty --policy) and no --vlm; give a policy or a VLM subject")
    return refs


def _check_delta(delta: float) -> None:
    """--delta before any work: a finite margin in [0, 0.5) (the aggregate would refuse it only after the episodes)."""
    import math

    from embeval.errors import ConfigError

    if not (math.isfinite(delta) and 0.0 <= delta < 0.5):
        raise ConfigError(f"--delta: the regime margin around chance 0.5 must lie in [0, 0.5), got {delta}")


def _load_policy(ref: str):
    """A subject YAML, or an embedded tiny VLA by shipped name / checkpoint folder (never a silent untrained one)."""
    import torch

    torch.set_num_threads(1)  # batch-1 inference per step: more threads only contend (see docs/act2answer.md)
    if Path(ref).suffix in (".yaml", ".yml"):
        from embeval.subjects.registry import load_subject

        return load_subject(str(ref))
    from embeval.act2answer.subjects import embedded_policy

    return embedded_policy(ref, allow_untrained=False)


def _load_vlm(ref: str):
    if Path(ref).suffix in (".yaml", ".yml"):
        from embeval.subjects.registry import load_subject

        return load_subject(str(ref))
    from embeval.subjects.embedded.zoo import load_vlm

    return load_vlm(ref)


def _convert(args) -> int:
    from embeval.act2answer.convert import convert_file, rewrite_instructions
    from embeval.act2answer.items import write_items

    items = convert_file(args.input, args.layout, args.out, args.image_root, args.seed, args.limit)
    if args.rewrite_llm:
        from embeval.subjects.registry import load_subject

        items = rewrite_instructions(items, load_subject(str(args.rewrite_llm)), args.cache or args.out / "rewrite_cache.sqlite")
        write_items(items, args.out / "items.jsonl")
    cats = sorted({it.category for it in items})
    print(f"{len(items)} items ({len(cats)} categories: {', '.join(cats[:8])}{' ...' if len(cats) > 8 else ''}) -> {args.out / 'items.jsonl'}")
    return 0


def _generate(args) -> int:
    from embeval.act2answer.generator import generate_items

    items = generate_items(args.out, args.categories, args.per_category, args.seed)
    print(f"{len(items)} items ({2 * len(items)} episodes with both layouts) -> {args.out / 'items.jsonl'}")
    return 0


def _items(path, limit):
    from embeval.act2answer.items import read_items
    from embeval.errors import ConfigError

    items = read_items(path, check_images=True)
    if not items:
        raise ConfigError(f"item file {path} holds no items; make some with `embeval act2answer items generate --out DIR`")
    return items[:limit] if limit else items


def _run(args) -> int:
    import time

    from embeval.act2answer.aggregate import category_table, format_table
    from embeval.act2answer.baseline import answer_items
    from embeval.act2answer.episode import (
        EXPERT,
        BackendExpert,
        check_cameras,
        get_backend,
        run_items,
        write_results,
    )
    from embeval.act2answer.scene import EpisodeSpec

    refs = _policy_refs(args.policy, args.vlm)
    _check_delta(args.delta)
    backend = get_backend(args.backend)
    aliases = parse_aliases(args.alias)
    check_cameras(None, backend, aliases)  # the aliases themselves, before anything loads
    items = _items(args.items, args.limit)
    spec = EpisodeSpec.from_yaml(args.episode) if args.episode else EpisodeSpec()
    # every name checked before the first episode runs; `expert` is the backend's privileged answer
    policies = [BackendExpert(spec) if ref == EXPERT else _load_policy(ref) for ref in refs]
    for policy in policies:  # every policy's cameras on this backend, before the first episode
        check_cameras(policy, backend, aliases)
    if args.doctor:
        from embeval.subjects.doctor import gate

        if code := gate([p for p, ref in zip(policies, refs) if ref != EXPERT]):
            print("act2answer run: a policy failed the doctor (above); no episode was run. Fix its subject spec, or "
                  "run without --doctor to evaluate it as it is", file=sys.stderr)
            return code
    vlms = [_load_vlm(ref) for ref in args.vlm or []]
    from embeval.act2answer.items import LAYOUTS
    from embeval.progress import track
    from embeval.recording.video import recorder_from_args

    videos = recorder_from_args(args, args.out / "videos")  # one recorder: --record-video N counts the whole run
    results = {}
    for policy in policies:
        t0 = time.perf_counter()
        if args.num_envs > 1:  # N environments in worker processes, one batched policy call per step
            from embeval.act2answer.vector import run_items_vector

            episodes = run_items_vector(policy, items, spec, seed=args.seed, backend=backend, aliases=aliases,
                                        num_envs=args.num_envs, exact=args.exact, videos=videos)
        else:
            episodes = run_items(policy, items, spec, seed=args.seed, backend=backend, aliases=aliases, videos=videos)
        # progress with an ETA on stderr: every item in both layouts (run_items' default, LAYOUTS)
        recs = list(track(episodes, f"act2answer {policy.id}", "episodes", total=len(LAYOUTS) * len(items)))
        results[policy.id] = recs
        rate = len(recs) / max(time.perf_counter() - t0, 1e-9)
        envs = f", {args.num_envs} environments" if args.num_envs > 1 else ""
        print(f"{policy.id}: {len(recs)} episodes -> {write_results(recs, args.out / f'episodes_{policy.id}.jsonl')} "
              f"({rate:.2f} episodes/s{envs})")
    for vlm in vlms:
        recs = list(answer_items(vlm, items))
        results[f"{vlm.id} (text)"] = recs
        print(f"{vlm.id}: {len(recs)} text answers -> {write_results(recs, args.out / f'answers_{vlm.id}.jsonl')}")
    if videos is not None:
        print(f"videos ({videos.policy}): {len(list(videos.out_dir.glob('*.mp4')))} mp4 file(s) in {videos.out_dir}/")
    if results:
        table = category_table(results, delta=args.delta)
        table.to_csv(args.out / "category_table.csv", index=False)
        print(format_table(table))
    return 0


def _scenes(args) -> int:
    from embeval.act2answer.scene import EpisodeSpec, export_scenes

    items = _items(args.items, args.limit)
    spec = EpisodeSpec.from_yaml(args.episode) if args.episode else EpisodeSpec()
    out = export_scenes(items, args.out, spec)
    print(f"{2 * len(items)} scene specs, episode.yaml, conductor.yaml -> {out}")
    print("\n".join(next_commands(args.out)))
    return 0


#: the sim-to-real parameter file (the act2answer_sim2real launch's default) and its scene folder
SIM_TO_REAL_PARAMS, DEFAULT_SCENES = "config/embeval_act2answer.yaml", "runs/act2answer/scenes"


def next_commands(scenes: Path | str) -> list[str]:
    """The commands that run the units of the scene folder ``scenes`` through the ROS graph (simulated cell)
    and aggregate them; the folder is named only when it is not the parameter file's ``runs/act2answer/scenes``
    (relative to the working directory)."""
    import shlex

    params = Path(SIM_TO_REAL_PARAMS)
    if not params.exists():  # outside the repository root: the repository's copy when there is one
        repo = Path(__file__).resolve().parents[2] / SIM_TO_REAL_PARAMS
        params = repo if repo.exists() else params
    default = Path(scenes).resolve() == Path(DEFAULT_SCENES).resolve()
    folder = shlex.quote(str(scenes))
    graph = f"embeval graph --params {shlex.quote(str(params))}"
    launch = "ros2 launch embeval_ros act2answer_sim2real.launch.py backend:=sim"
    if not default:
        graph += f" --set embeval_conductor.act2answer_scenes={folder}"
        launch += f" scenes:={folder}"
    return ["next: run the units in the simulated cell through the ROS graph (docs/act2answer.md#sim-to-real):",
            f"  {graph}",
            f"  {launch}      # with ROS 2 installed: one process per node",
            "  embeval act2answer report runs/act2answer/episodes_ros.jsonl"]


def _report(args) -> int:
    from embeval.act2answer.aggregate import category_table, format_table, swap_stats
    from embeval.act2answer.episode import read_results

    results: dict[str, list] = {}
    for path in args.results:
        if path.suffix == ".parquet":
            import pandas as pd

            from embeval.act2answer.evaluator import frame_records

            for name, recs in frame_records(pd.read_parquet(path)).items():
                results.setdefault(name, []).extend(recs)
            continue
        for r in read_results(path):
            results.setdefault(r.get("subject") or path.stem, []).append(r)
    table = category_table(results, delta=args.delta, confidence=args.confidence)
    print(format_table(table))
    for subject, recs in results.items():
        ss = swap_stats(recs)
        print(f"{subject}: swap pairs {ss.n_pairs}, {ss.consistency_text()}, same side {ss.same_side:.3f}, "
              f"position bias {ss.position_bias:+.3f}, McNemar b={ss.original_only} c={ss.swapped_only} "
              f"exact p={ss.mcnemar_p_exact:.4g}")
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"table -> {args.csv}")
    return 0


def _probe(args) -> int:
    import json

    from embeval_analysis.probing import (
        collect_features,
        plot_layer_accuracy,
        probe_layers,
    )

    from embeval.act2answer.episode import obs_size_for
    from embeval.act2answer.subjects import random_weight_control

    items = _items(args.items, args.limit)
    policy = _load_policy(args.policy)
    size = obs_size_for(policy)
    feats = collect_features(policy, items, layers=args.layers, seed=args.seed, obs_size=size)
    ctrl = None
    twin = None if args.no_random_control else random_weight_control(policy, args.seed + 1)
    if twin is not None:
        ctrl = collect_features(twin, items, layers=args.layers, seed=args.seed, obs_size=size)
    rep = probe_layers(feats, ctrl, folds=args.folds, seed=args.seed)
    print(rep.table())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probe.json").write_text(json.dumps(rep.to_dict(), indent=1))
    print(f"plot -> {plot_layer_accuracy(rep, args.out / 'probing.png')}")
    return 0
