"""``embeval run | status | resume | export | report``: run specs at scale (see docs/runs.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from embeval_cli._util import float_in, positive_int

_RAW = argparse.RawDescriptionHelpFormatter


def _shard_args(p) -> None:
    p.add_argument("--shard-index", type=int, default=0, metavar="I", help="which shard to run, 0..N-1 (default: 0)")
    p.add_argument("--num-shards", type=int, default=1, metavar="N",
                   help="split the units into N deterministic shards; groups (e.g. reference/distorted pairs) never split (default: 1)")
    p.add_argument("--backend", choices=["local", "ray"], help="override the spec's backend (local: in-process; ray: a Ray cluster)")
    p.add_argument("--unit-timeout", type=float, metavar="S",
                   help="override backend.unit_timeout_s: a unit running longer is recorded as failed (0: no watchdog)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--rerun-changed", action="store_true",
                   help="a subject's weights changed since its stored results: run those units again with the new weights "
                        "(without it the run is refused)")


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="run a run spec (YAML): every unit recorded in a SQLite store as it finishes",
        description="Run the units of a run spec and record each in <out>/results.sqlite as it finishes.\n"
                    "Running again into the same folder continues: done units are skipped, failed ones retried.",
        epilog="examples:\n  embeval run config/runs/quality-smoke.yaml --out runs/quality\n"
               "  embeval run config/runs/quality-smoke.yaml --out runs/quality --shard-index 1 --num-shards 4 --backend ray\n"
               "  embeval run --list",
        formatter_class=_RAW)
    p.add_argument("spec", type=Path, nargs="?", help="the run spec YAML (see config/runs/)")
    p.add_argument("--out", type=Path, help="run folder (default: the spec's output_dir, else runs/<name>-<hash8>)")
    p.add_argument("--check", action="store_true", help="only validate the spec and print the plan; run nothing")
    p.add_argument("--list", action="store_true", help="list the registered evaluators and backends")
    p.add_argument("--doctor", action="store_true",
                   help="first run `embeval subjects doctor` on every policy subject; exit 1 (nothing run) if one fails")
    _shard_args(p)
    p.set_defaults(func=_run)

    p = sub.add_parser(
        "resume", help="continue a run folder: skip done units, retry failed and missing ones",
        description="Continue the run in RUN with the spec it was started with.",
        epilog="example:\n  embeval resume runs/quality --backend ray", formatter_class=_RAW)
    p.add_argument("run_dir", type=Path, metavar="RUN", help="the run folder made by `embeval run`")
    _shard_args(p)
    p.set_defaults(func=_resume)

    p = sub.add_parser(
        "status", help="show done/total per shard with rates",
        description="Show a run's progress: done, failed and total units per shard and the recent rate.",
        epilog="examples:\n  embeval status runs/quality --num-shards 4\n  embeval status runs/quality --watch --every 10",
        formatter_class=_RAW)
    p.add_argument("run_dir", type=Path, metavar="RUN", help="the run folder")
    p.add_argument("--num-shards", type=positive_int, metavar="N", help="group by N shards (default: as last run)")
    p.add_argument("--watch", action="store_true",
                   help="follow a running run: print done/total, failures and ETA every --every seconds until it ends "
                        "(exit 0: all done; 1: it stopped with units failed or left)")
    p.add_argument("--every", type=float_in(0.1, 3600), default=5.0, metavar="S",
                   help="seconds between two --watch lines, 0.1..3600 (default: 5)")
    p.set_defaults(func=_status)

    p = sub.add_parser(
        "export", help="export a run's results to Parquet",
        description="Write one row per unit (keys, status, error, provenance, raw outputs as JSON and one out.<name> column per scalar output).",
        epilog="example:\n  embeval export runs/quality --parquet results.parquet", formatter_class=_RAW)
    p.add_argument("run_dir", type=Path, metavar="RUN", help="the run folder")
    p.add_argument("--parquet", type=Path, required=True, metavar="OUT", help="the Parquet file to write")
    p.add_argument("--status", choices=["done", "failed"], help="only units with this status")
    p.set_defaults(func=_export)

    p = sub.add_parser(
        "merge", help="merge run folders of the same spec (shards run on other machines) into one",
        description="Copy the units of SOURCE run folders into RUN (created if missing). Done units are never\n"
                    "overwritten or counted twice; a failed unit is replaced by a done one.",
        epilog="example:\n  embeval merge runs/big runs/big-shard0 runs/big-shard1 runs/big-shard2", formatter_class=_RAW)
    p.add_argument("run_dir", type=Path, metavar="RUN", help="the run folder to merge into")
    p.add_argument("sources", type=Path, nargs="+", metavar="SOURCE", help="run folders to merge from")
    p.set_defaults(func=_merge)

    p = sub.add_parser(
        "report", help="write a self-contained HTML report (tables and figures) of a run",
        description="Build an HTML report from the run's store; every figure names the run spec hash and code version.",
        epilog="example:\n  embeval report runs/quality --out report.html", formatter_class=_RAW)
    p.add_argument("run_dir", type=Path, metavar="RUN", help="the run folder")
    p.add_argument("--out", type=Path, help="the HTML file (default: RUN/report.html)")
    p.add_argument("--embed-max-mb", type=float_in(0, 1024), default=4.0, metavar="MB",
                   help="videos and images in the run folder up to this size (MB) are embedded in the HTML, larger ones "
                        "linked relative to it (default 4; 0 links all)")
    p.set_defaults(func=_report)


def _overrides(args) -> dict:
    kw = {"shard_index": args.shard_index, "num_shards": args.num_shards, "backend": args.backend,
          "rerun_changed": args.rerun_changed}
    if args.no_progress:
        kw["progress"] = False
    if args.unit_timeout is not None:
        from embeval import checks
        from embeval.runs.spec import MAX_UNIT_TIMEOUT_S

        checks.number(args.unit_timeout, "--unit-timeout", 0, MAX_UNIT_TIMEOUT_S, unit="s",
                      why="at most a week; 0: no watchdog")
        kw["unit_timeout_s"] = args.unit_timeout or None
    return kw


def _print_summary(s) -> int:
    shard = f" shard {s.shard_index}/{s.num_shards}" if s.num_shards > 1 else ""
    print(f"run {s.run_id}{shard} ({s.backend}): {s.skipped + s.done}/{s.total} done "
          f"({s.done} now, {s.skipped} before), {s.failed} failed, {s.elapsed_s:.1f} s, {s.rate_per_s:.1f} units/s")
    for e in s.errors:
        print(f"  error: {e}")
    print(f"results: {s.run_dir}/results.sqlite")
    _print_videos(s.run_dir)
    if s.failed:
        print(f"{s.failed} unit(s) failed; fix the cause and run `embeval resume {s.run_dir}` to retry them")
        return 1
    return 0


def _print_videos(run_dir) -> None:
    """Where the run's episode videos are (``record_video`` in its spec), and how many there are."""
    from pathlib import Path

    from embeval.runs.runner import load_run_spec

    spec = load_run_spec(run_dir)
    if spec.record_video != "none":
        folder = Path(spec.video_dir) if spec.video_dir else Path(run_dir) / "videos"
        n = len(list(folder.glob("*.mp4"))) if folder.is_dir() else 0
        print(f"videos ({spec.record_video}): {n} mp4 file(s) in {folder}/ (`embeval report {run_dir}` shows them)")


def _run(args) -> int:
    from embeval.errors import ConfigError

    if args.list:
        from embeval.runs.backends import BACKENDS
        from embeval.runs.registry import list_evaluators

        print("evaluators: " + ", ".join(list_evaluators()))
        print("backends:   " + ", ".join(BACKENDS))
        return 0
    if args.spec is None:
        raise ConfigError("give a run spec: embeval run SPEC.yaml (examples in config/runs/)")
    from embeval.runs import runner
    from embeval.runs.plan import plan_run
    from embeval.runs.spec import load_spec
    from embeval.runs.units import select_shard

    spec = load_spec(args.spec)
    if args.check:  # the command-line overrides are checked too, as `run` would check them
        from embeval.runs.spec import with_backend

        kw = _overrides(args)
        changes = {k: kw[k] for k in ("progress", "unit_timeout_s") if k in kw}
        if kw["backend"] is not None:
            changes["name"] = kw["backend"]
        spec = with_backend(spec, **changes) if changes else spec
        plan = plan_run(spec)
        from embeval.subjects.model_files import check_subject

        for s in spec.subjects:  # model folders that would run their own code: refused here, nothing loaded
            check_subject(s.adapter, spec.resolve_path(s.path) if s.path else None, s.params)
        units = select_shard(plan.units, args.shard_index, args.num_shards)
        print(f"spec OK: evaluator {spec.evaluator}, hash {spec.hash}, {len(plan.subjects)} subject(s), "
              f"{len(plan.units)} units ({len(units)} in shard {args.shard_index}/{args.num_shards}); "
              f"run folder {args.out or spec.default_run_dir()}"
              + (f"; trackers: {', '.join(t.name for t in spec.trackers)} (offline)" if spec.trackers else ""))
        return 0
    if args.doctor:
        from embeval.subjects.doctor import gate

        code = gate([s.to_subject_mapping() for s in spec.subjects if s.kind == "policy"], base_dir=spec.base_dir)
        if code:
            print("embeval run: a policy failed the doctor (above); nothing was run. Fix its subject spec, or run "
                  "without --doctor to evaluate it as it is", file=sys.stderr)
            return code

    def announce(spec, out) -> None:  # only once the spec and the options are valid
        print(f"run {spec.hash} -> {out} (if it stops: embeval resume {out})", flush=True)

    return _print_summary(runner.run(spec, args.out, on_start=announce, **_overrides(args)))


def _resume(args) -> int:
    from embeval.runs import runner

    return _print_summary(runner.resume(args.run_dir, **_overrides(args)))


def _status(args) -> int:
    import time

    from embeval.runs import runner

    if args.watch:
        return runner.watch(args.run_dir, args.every, emit=lambda line: print(line, flush=True))
    st = runner.status(args.run_dir, args.num_shards)
    print(f"run {st['run_id']} ({st['name'] or st['evaluator']}): {st['done']}/{st['total']} done, {st['failed']} failed, "
          f"{st['sessions']} session(s); created by {st['code_version']}")
    print(f"{'shard':>7} {'done':>8} {'failed':>7} {'total':>8} {'%':>6} {'rate/s':>8}  last finished")
    now = time.time()
    for s in st["shards"]:
        pct = 100.0 * s["done"] / s["total"] if s["total"] else 100.0
        rate = f"{s['rate_per_s']:.2f}" if s["rate_per_s"] else "-"
        last = f"{now - s['last_finished']:.0f} s ago" if s["last_finished"] else "-"
        print(f"{s['shard']:>3}/{s['num_shards']:<3} {s['done']:>8} {s['failed']:>7} {s['total']:>8} {pct:>6.1f} {rate:>8}  {last}")
    from embeval.runs.lock import describe

    for (i, n), holder in st["running"]:
        print(f"running now: shard {i}/{n} by {describe(holder)}")
    return 0


def _export(args) -> int:
    from embeval.runs.export import export_parquet

    out = export_parquet(args.run_dir, args.parquet, status=args.status)
    print(f"wrote {out}")
    return 0


def _report(args) -> int:
    from embeval.runs.report import MediaLimits, build_report

    out = build_report(args.run_dir, args.out, MediaLimits(embed_file_bytes=int(args.embed_max_mb * 2**20)))
    print(f"wrote {out}")
    return 0


def _merge(args) -> int:
    from embeval.runs.runner import merge

    r = merge(args.run_dir, args.sources)
    print(f"merged {len(args.sources)} run folder(s) into {args.run_dir}: {r['new_done']} new done units, {r['done']} done in all")
    return 0
