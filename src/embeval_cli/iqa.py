"""``embeval iqa``: build an Embodied-IQA database, export it for pyiqa, benchmark quality metrics,
plot the analyses, and calibrate / try the live quality gate."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from embeval_cli._util import add_group, add_video_args, int_in, seed
from embeval.sim.vector import MAX_ENVS


def register(sub) -> None:
    g = add_group(sub, "iqa", "Embodied-IQA: image quality as robots see it (database, benchmark, quality gate)")
    raw = argparse.RawDescriptionHelpFormatter

    p = g.add_parser("build", help="build the database: references x distortions x subjects -> scores",
                     formatter_class=raw, description="Build (or resume) an Embodied-IQA database: reference images from a "
                     "source, distorted copies, every subject's answers/actions (through embeval.runs), per-subject and mean "
                     "Cognition/Decision scores.",
                     epilog="examples:\n  embeval iqa build --out runs/iqa/db                       # config/iqa/default.yaml\n"
                            "  embeval iqa build --out db --source folder --path imgs --tasks imgs/tasks.yaml\n"
                            "  embeval iqa build --out db --source rosbag --path run.mcap --tasks tasks.yaml --n 50 --levels all\n"
                            "  embeval iqa build --out db --source realsense --path cell.db3 --tasks tasks.yaml --n 20\n"
                            "  embeval iqa build --out db --n 2 --execution-images 2 --record-video all   # db/videos/*.mp4\n"
                            "  embeval iqa build --out db --source libero --path libero_spatial:0,libero_goal:3 --n 4 "
                            "--execution-images 2 --execution-max-steps 20")
    p.add_argument("--out", type=Path, required=True, help="database folder (created; an existing one is resumed)")
    p.add_argument("--config", type=Path, default=None, help="YAML with a 'build:' section (default: config/iqa/default.yaml values)")
    p.add_argument("--source", choices=["sim", "folder", "lerobot", "rosbag", "realsense", "maniskill", "libero"],
                   help="image source (overrides the config)")
    p.add_argument("--path", help="folder / LeRobot dataset / rosbag2 bag folder or .mcap file / RealSense recording "
                   "(.db3, .bag) of the source; libero: a "
                   "suite (libero_spatial) or tasks SUITE:TASK_ID,SUITE:TASK_ID")
    p.add_argument("--tasks", help="folder / rosbag / realsense source: task file (YAML: {'*': [5 instructions], 'img.png': [...]}); "
                   "a bag's recorded instruction comes first")
    p.add_argument("--topic", help="rosbag source: image topic")
    p.add_argument("--n", type=int, help="number of reference images")
    p.add_argument("--size", type=int, nargs=2, metavar=("W", "H"), help="resize references to W x H pixels")
    p.add_argument("--levels", help="'sample' (one level per reference x type), 'all', or comma-separated levels")
    p.add_argument("--distortions", help="comma-separated distortion types (default: all 30)")
    p.add_argument("--subjects", nargs="+", help="subject spec YAMLs (default: the embedded VLA/VLM population)")
    p.add_argument("--execution-images", type=int, help="also score Execution in simulation for this many distorted "
                   "images of simulated references (closed loop: up to 60 steps per run, two runs per VLA, 25-150 ms per "
                   "tiny-VLA step on 2 cores)")
    p.add_argument("--execution-protocol", choices=["closed_loop", "all_tasks_one_action"],
                   help="closed_loop (default, the paper's): the reference's easiest task run closed loop on the camera "
                   "stream, distorted for the distorted image; all_tasks_one_action: every task's stored action, open loop")
    p.add_argument("--execution-max-steps", type=int, help="closed_loop: step limit per run (default: the task's own budget)")
    p.add_argument("--num-envs", type=int_in(1, MAX_ENVS, "environments stepped together; 1 = one at a time"),
                   default=1, metavar="N",
                   help="closed_loop: run each VLA's Execution runs on N environments in worker processes (1..64, "
                        "default 1), ONE batched policy call per step; the same runs and scores (see --exact); "
                        "docs/scale.md")
    p.add_argument("--exact", action="store_true",
                   help="with --num-envs > 1: ask the policy one run at a time (its batch-1 path per environment), so "
                        "every run equals the --num-envs 1 run's bit for bit")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="progress with an ETA on stderr while distorting, scoring and executing: a bar on a terminal, "
                        "a line every 10 s otherwise (default: on; --no-progress: none)")
    add_video_args(p, "OUT/videos/")  # the closed-loop Execution runs (distorted, beside the clean view)
    p.set_defaults(func=_build)

    p = g.add_parser("export", help="export in pyiqa's format (meta CSVs, 8:2 splits x10: random and scene-disjoint)",
                     formatter_class=raw, description="Write meta_nr_<target>.csv, meta_fr_<target>.csv and a split file for "
                     "pyiqa's GeneralNRDataset / GeneralFRDataset (dataroot = the database folder).",
                     epilog="example:\n  embeval iqa export --db runs/iqa/db --out runs/iqa/pyiqa")
    p.add_argument("--db", type=Path, required=True, help="database folder")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument("--splits", type=int, default=10, help="number of repeated splits (default 10)")
    p.add_argument("--test-size", type=float, default=0.2, help="share of images (scene splits: of scenes) in the test set "
                   "(default 0.2)")
    p.add_argument("--seed", type=seed, default=0, help="split seed (default 0)")
    p.add_argument("--split-by", choices=["random", "scene"], default="random",
                   help="the protocol of splits_8x2_N.pkl... named 'splits': random (default, the paper's: image pairs at "
                   "random) or scene (disjoint by scene); both files are written")
    p.set_defaults(func=_export)

    p = g.add_parser("bench", help="benchmark zero-shot and trained IQA metrics against the robot scores",
                     formatter_class=raw, description="Zero-shot metrics (pyiqa) and trained metrics (CNNIQA from scratch, "
                     "FR fusion) on random 8:2 splits (the paper's) and, beside, scene-disjoint splits; SRCC/KRCC/PLCC "
                     "(raw, 4PL), median and mean over splits, breakdowns.",
                     epilog="examples:\n  embeval iqa bench --db runs/iqa/db --out runs/iqa/bench\n"
                            "  embeval iqa bench --db db --out b --splits 10 --cnniqa-splits 3 --epochs 12 --save-predictor b/predictor\n"
                            "  embeval iqa bench --db db --out b --init-weights ~/w/CNNIQA_koniq10k-e6f14c91.pth\n"
                            "  embeval iqa bench --db db --out b/seeds --seeds 0 1 2 --cnniqa-splits 2   # what holds on every seed")
    p.add_argument("--db", type=Path, required=True, help="database folder")
    p.add_argument("--out", type=Path, required=True, help="folder for bench_summary.csv / bench_per_split.csv")
    p.add_argument("--splits", type=int, default=10, help="repeated 8:2 splits (default 10)")
    p.add_argument("--test-size", type=float, default=0.2, help="share of images (scene splits: of scenes) in each test "
                   "set (default 0.2)")
    p.add_argument("--split-by", choices=["random", "scene"], default="random",
                   help="first split protocol: random (default, the paper's: image pairs at random 8:2) or scene "
                   "(disjoint by scene); the other runs beside it unless --one-protocol")
    p.add_argument("--one-protocol", action="store_true", help="run only the --split-by protocol (half the time)")
    p.add_argument("--jnd-scope", choices=["all", "split"], default="all",
                   help="JND thirds cut over all images (default, the paper's) or within each test split")
    p.add_argument("--cnniqa-splits", type=int, default=None, help="train CNNIQA on the first K splits only (CPU time)")
    p.add_argument("--epochs", type=int, default=12, help="CNNIQA training epochs (default 12)")
    p.add_argument("--input-size", type=int, nargs=2, default=[64, 48], metavar=("W", "H"), help="CNNIQA input size")
    p.add_argument("--zero-shot", help="comma-separated pyiqa metrics (default psnr,ssim,gmsd,piqe,niqe,brisque; nlpd, vif, fsim cost ~1 s per image)")
    p.add_argument("--trained", default="cnniqa,brisque-svr,nr-fusion,fr-fusion",
                   help="trained metrics (default cnniqa,brisque-svr,nr-fusion,fr-fusion)")
    p.add_argument("--init-weights", help="a pyiqa CNNIQA weight file to start training from (user-given)")
    p.add_argument("--save-predictor", type=Path, help="save split 1's best trained NR Decision predictor (for the quality gate)")
    p.add_argument("--seed", type=seed, default=None, help="seed of splits and training (default 0)")
    p.add_argument("--seeds", type=seed, nargs="+", metavar="SEED",
                   help="seed study instead of one run: the benchmark once per seed (at least 3; each draws the splits "
                        "and trains the learned metrics), then per metric the median SRCC on each seed, mean, min..max and "
                        "whether 'beats PSNR' (and the NR gate's lead over the PSNR gate) holds on every seed; writes "
                        "OUT/seeds.md, OUT/seeds.json (example: --seeds 0 1 2)")
    f = p.add_argument_group("fine-tuning pyiqa's learned metrics (paper settings by default: Adam, lr 1e-5, 50 epochs, batch 8)")
    f.add_argument("--finetune", nargs="+", metavar="METRIC",
                   help="pyiqa metrics to fine-tune on each split through pyiqa's training code: dbcnn hyperiqa topiq_nr "
                        "topiq_fr clipiqa liqe ahiq ckdn dists lpips qalign (pretrained files must be in pyiqa's cache)")
    f.add_argument("--finetune-epochs", type=int, default=50, help="epochs (default 50)")
    f.add_argument("--finetune-batch", type=int, default=8, help="batch size (default 8)")
    f.add_argument("--finetune-lr", type=float, default=1e-5, help="Adam learning rate (default 1e-5)")
    f.add_argument("--finetune-steps", type=int, help="CPU override: at most this many steps per split")
    f.add_argument("--finetune-splits", type=int, help="CPU override: fine-tune on the first K splits only")
    f.add_argument("--finetune-size", type=int, nargs=2, metavar=("H", "W"), help="resize (default: the database's resolution)")
    f.add_argument("--finetune-device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="auto: CUDA when torch sees one (default), else the CPU")
    f.add_argument("--finetune-option", action="append", default=[], metavar="KEY=VALUE",
                   help="network option for every metric whose architecture has it (e.g. semantic_model_name=resnet18)")
    f.add_argument("--finetune-random-init", action="store_true",
                   help="random weights instead of the pretrained files (smoke runs and tests; not a paper number)")
    p.set_defaults(func=_bench)

    p = g.add_parser("analyse", help="plots: score by type and level, JND sensitivity, subject SRCC matrix, stage scores",
                     formatter_class=raw, description="Write the analysis PNGs of a database and print their numbers.",
                     epilog="example:\n  embeval iqa analyse --db runs/iqa/db --out runs/iqa/plots")
    p.add_argument("--db", type=Path, required=True, help="database folder")
    p.add_argument("--out", type=Path, required=True, help="folder for the PNGs")
    p.set_defaults(func=_analyse)

    p = g.add_parser("gate", help="run the quality gate on images (or calibrate its threshold)",
                     formatter_class=raw, description="Score images with a saved NR predictor and say which frames the gate "
                     "withholds; --rate calibrates the threshold on these images and stores it in PREDICTOR/gate.json.",
                     epilog="examples:\n  embeval iqa gate --predictor runs/demo/iqa/predictor runs/iqa/db/distorted/*.png\n"
                            "  embeval iqa gate --predictor P --rate 0.2 calib/*.png     # store the threshold")
    p.add_argument("--predictor", type=Path, required=True, help="folder with predictor.json + model.safetensors")
    p.add_argument("images", nargs="+", type=Path, help="image files (PNG/JPEG)")
    p.add_argument("--threshold", type=float, help="withhold frames predicted below this (default: PREDICTOR/gate.json)")
    p.add_argument("--rate", type=float, help="calibrate: the threshold that withholds this share of the given images")
    p.set_defaults(func=_gate)


def _build(args) -> int:
    from embeval_analysis.iqa.database import BuildConfig, build_database

    cfg = BuildConfig.from_yaml(args.config) if args.config else BuildConfig()
    if args.source:
        cfg.source = args.source
        cfg.source_params = {}
    sp = dict(cfg.source_params)
    for key, val in (("path", args.path), ("tasks_file", args.tasks), ("topic", args.topic), ("n", args.n),
                     ("size", list(args.size) if args.size else None)):
        if val is not None:
            sp[key] = val
    cfg.source_params = sp
    if args.levels:
        try:
            cfg.levels = args.levels if args.levels in ("sample", "all") else [int(v) for v in args.levels.split(",")]
        except ValueError:
            from embeval.errors import ConfigError

            raise ConfigError(f"--levels: 'sample', 'all' or comma-separated levels such as 1,3,5, got {args.levels!r}") from None
    if args.distortions:
        cfg.distortions = args.distortions.split(",")
    if args.subjects:
        cfg.subjects = [str(Path(s).resolve()) for s in args.subjects]
    if args.execution_images is not None:
        cfg.execution_images = args.execution_images
    if args.execution_protocol is not None:
        cfg.execution_protocol = args.execution_protocol
    if args.execution_max_steps is not None:
        cfg.execution_max_steps = args.execution_max_steps
    videos = _execution_videos(args, cfg)
    if args.num_envs > 1 and (cfg.execution_images <= 0 or cfg.execution_protocol != "closed_loop"):
        from embeval.errors import ConfigError

        raise ConfigError(f"--num-envs {args.num_envs} vectorises the closed-loop Execution runs, and this build runs "
                          "none: add --execution-images N (with --execution-protocol closed_loop, the default) or drop "
                          "--num-envs")
    scores = build_database(cfg, args.out, progress=args.progress, videos=videos, num_envs=args.num_envs, exact=args.exact)
    if videos is not None:
        print(f"videos: {len(videos.written)} closed-loop Execution run(s) kept ({videos.policy}) in {videos.out_dir}/")
    cols = [c for c in ("decision", "cognition", "execution") if c in scores]
    print(scores.groupby("category")[cols].mean().to_string(float_format=lambda v: f"{v:.3f}"))
    return 0


def _execution_videos(args, cfg):
    """The recorder of ``--record-video`` (None: off); a one-line ConfigError when the build runs no closed-loop
    episode to record."""
    from embeval.errors import ConfigError
    from embeval.recording.video import recorder_from_args

    if not args.record_video.enabled:
        return None
    if cfg.execution_images <= 0 or cfg.execution_protocol != "closed_loop":
        raise ConfigError("--record-video records the closed-loop Execution runs, and this build runs none: add "
                          "--execution-images N (with --execution-protocol closed_loop, the default)")
    return recorder_from_args(args, args.out / "videos")


def _export(args) -> int:
    from embeval_analysis.iqa.database import read_table
    from embeval_analysis.iqa.export import export_pyiqa

    for name, p in export_pyiqa(read_table(args.db), args.out, n_splits=args.splits, test_size=args.test_size, seed=args.seed,
                                split_by=args.split_by).items():
        print(f"{name}: {p}")
    return 0


def _bench(args) -> int:
    from embeval.errors import ConfigError, check_out_dir
    from embeval_analysis.iqa.bench import (BenchConfig, print_breakdowns, print_table, report_gate, run_bench, save_gate,
                                            trained_vs_psnr)
    from embeval_analysis.iqa.database import read_table
    from embeval_analysis.iqa.metrics import TrainConfig

    if args.seeds is not None:
        both = [o for o, v in (("--seed", args.seed), ("--finetune", args.finetune), ("--save-predictor", args.save_predictor))
                if v is not None]
        if both:
            raise ConfigError(f"--seeds runs the seed study; {both[0]} applies to one run: drop it, or drop --seeds")
        from embeval_analysis.seed_claims import check_seeds

        check_seeds(args.seeds)
    args.seed = 0 if args.seed is None else args.seed
    cfg = BenchConfig(n_splits=args.splits, test_size=args.test_size, cnniqa_splits=args.cnniqa_splits, seed=args.seed,
                      split_by=args.split_by, compare_splits=not args.one_protocol, jnd_scope=args.jnd_scope,
                      trained=[t for t in args.trained.split(",") if t],
                      train=TrainConfig(epochs=args.epochs, input_size=[args.input_size[1], args.input_size[0]],
                                        init_weights=args.init_weights))
    if args.zero_shot:
        cfg.zero_shot = args.zero_shot.split(",")
    check_out_dir(args.out)  # a bad output folder or fine-tuning setup fails before the benchmark runs
    if args.save_predictor:
        check_out_dir(args.save_predictor, "--save-predictor")
    if args.seeds is not None:
        return _bench_seeds(args, cfg)
    if args.finetune:
        import yaml

        from embeval.errors import ConfigError, yaml_problem
        from embeval.safe_yaml import loads
        from embeval_analysis.iqa.finetune import FinetuneConfig, check_config

        net_opts = {}
        for kv in args.finetune_option:
            if "=" not in kv:
                raise ConfigError(f"--finetune-option {kv!r}: write KEY=VALUE, e.g. semantic_model_name=resnet18")
            k, v = kv.split("=", 1)
            try:
                net_opts[k.strip()] = loads(v)  # bounded aliases, nesting and integers
            except yaml.YAMLError as exc:
                raise ConfigError(f"--finetune-option {kv!r}: the value is not valid YAML ({yaml_problem(exc)}); "
                                  "quote strings with special characters") from None
        fcfg = FinetuneConfig(epochs=args.finetune_epochs, batch_size=args.finetune_batch, lr=args.finetune_lr,
                              max_steps=args.finetune_steps, splits=args.finetune_splits,
                              size=list(args.finetune_size) if args.finetune_size else None,
                              random_init=args.finetune_random_init, network=net_opts, device=args.finetune_device,
                              seed=args.seed)
        check_config(args.finetune, fcfg, weights=True)
    res = run_bench(args.db, cfg)
    args.out.mkdir(parents=True, exist_ok=True)
    res.summary.to_csv(args.out / "bench_summary.csv", index=False)
    res.per_split.to_csv(args.out / "bench_per_split.csv", index=False)
    print_table(res)
    print_breakdowns(res, "decision")
    for proto in res.protocols:
        for r in trained_vs_psnr(res, "decision", proto):
            print(f"{r['metric']} ({proto} splits): SRCC {r['srcc']:.3f} vs PSNR {r['psnr_srcc']:.3f} "
                  f"({r['splits_better']}/{r['splits']} splits higher)")
    print()
    report_gate(res, read_table(args.db), args.out, seed=args.seed)
    if args.save_predictor:
        p = save_gate(res, args.save_predictor)
        print(f"predictor: {p}" if p else "no trained NR Decision predictor (add cnniqa / nr-fusion to --trained)")
    if args.finetune:
        from embeval_analysis.iqa.finetune import finetune, print_finetune

        print(f"\nfine-tuning {', '.join(args.finetune)} ({'random init' if fcfg.random_init else 'pretrained'}, "
              f"{fcfg.optimizer} lr {fcfg.lr:g}, {fcfg.epochs} epochs, batch {fcfg.batch_size}):")
        print_finetune(finetune(args.db, args.finetune, args.out, fcfg, n_splits=args.splits, test_size=args.test_size,
                                split_by=args.split_by))
    print(f"tables in {args.out}/ ({res.seconds:.0f} s)")
    return 0


def _bench_seeds(args, cfg) -> int:
    from embeval_analysis.iqa.seeds import format_study, run_iqa_seed_study

    cfg.check()  # a bad metric name fails before the first seed's benchmark
    table = run_iqa_seed_study(args.db, cfg, args.seeds, args.out)
    print(format_study(table))
    print(f"wrote {args.out / 'seeds.md'} and {args.out / 'seeds.json'}")
    return 0


def _analyse(args) -> int:
    from embeval_analysis.iqa.analyses import run_all

    tabs = run_all(args.db, args.out)
    print("SRCC between stage scores: " + ", ".join(f"{k} {v:.3f}" for k, v in tabs["relations"].items()))
    if not tabs["jnd"].empty:
        print("share of images in the JND severe third, by type and subject kind:")
        print(tabs["jnd"].to_string(float_format=lambda v: f"{v:.2f}"))
    print(f"plots in {args.out}/")
    return 0


def _gate(args) -> int:
    import json

    import numpy as np

    from embeval_cli._util import finite
    from embeval.distortion.batch import read_rgb
    from embeval.errors import InvalidInputError
    from embeval.iqa.gate import QualityGate, threshold_for_rate
    from embeval.iqa.predictor import load_predictor

    finite(args.threshold, "--threshold")
    if args.rate is not None and not 0.0 <= args.rate < 1.0:
        raise InvalidInputError(f"--rate: the share of images to withhold must lie in [0, 1), got {args.rate}")
    pred = load_predictor(args.predictor)
    files, imgs, unreadable = [], [], []
    for f in args.images:  # a corrupt, empty or missing image is reported; the others are still scored
        try:
            if not f.is_file():
                raise InvalidInputError(f"cannot read image {f}: {'a folder' if f.is_dir() else 'no such file'}; "
                                        "give image files")
            imgs.append(read_rgb(f))
            files.append(f)
        except InvalidInputError as exc:
            unreadable.append(str(exc))
    if imgs:
        scores = np.asarray(pred.predict(imgs), dtype=np.float64)
        thr = args.threshold
        if args.rate is not None:
            thr = threshold_for_rate(scores, args.rate)
            (args.predictor / "gate.json").write_text(json.dumps({"threshold": thr, "rate": args.rate, "target": pred_target(pred)}))
            print(f"threshold {_fmt(thr)} withholds {args.rate:.0%} of these images; stored in {args.predictor / 'gate.json'}")
        gate = QualityGate(pred, thr) if thr is not None else QualityGate.load(args.predictor)
        for f, s in zip(files, scores):
            print(f"{'PASS' if s >= gate.threshold else 'WITHHOLD':8s} {s:8.4f}  {f}")
        print(f"withheld {int((scores < gate.threshold).sum())}/{len(scores)} at threshold {_fmt(gate.threshold)} "
              f"(predicted {pred_target(pred)} score)")
    if unreadable:
        for msg in unreadable:
            print(f"embeval: skipped: {msg}", file=sys.stderr)
        bad = [str(f) for f in args.images if f not in files]
        names = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        calibrated = "; the threshold was calibrated on the readable ones" if args.rate is not None and imgs else ""
        print(f"embeval: error: {len(bad)} of {len(args.images)} image(s) could not be read and got no score ({names})"
              f"{calibrated}; replace them and run again", file=sys.stderr)
        return 1 if imgs else 2
    return 0


def _fmt(x: float) -> str:
    """A threshold for people: 4 decimals, or 4 significant digits when huge (a typo such as 1e308)."""
    return f"{x:.4f}" if abs(x) < 1e6 else f"{x:.4g}"


def pred_target(pred) -> str:
    return getattr(pred, "target", None) or pred.cfg.target
