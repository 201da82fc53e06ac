"""``python -m bench [AREA ...] [--quick]``: run the benchmarks and print their tables."""
from __future__ import annotations

import argparse
import importlib
import json
import math
import numbers
import pkgutil
import platform
import sys
import time
import traceback
from pathlib import Path

import bench


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def print_table(rows: list[dict]) -> None:
    if not rows:
        return
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    widths = {c: max(len(c), *(len(_fmt(r.get(c, ""))) for r in rows)) for c in cols}
    print("  ".join(c.ljust(widths[c]) for c in cols))
    print("  ".join("-" * widths[c] for c in cols))
    for r in rows:
        print("  ".join(_fmt(r.get(c, "")).ljust(widths[c]) for c in cols))


def check_rows(rows: list[dict]) -> list[dict]:
    """``rows`` unchanged if they are a non-empty list of dicts with no NaN or infinite number (a column
    that does not apply to a row is left out of it, so the saved JSON is strict); else ValueError naming the cell."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"run() must return a non-empty list of dicts, got {type(rows).__name__} {str(rows)[:80]}")
    for i, r in enumerate(rows):
        for k, v in r.items():
            if isinstance(v, numbers.Real) and not isinstance(v, bool) and not math.isfinite(v):
                raise ValueError(f"row {i} ({next(iter(r.values()))!s:.60}): column {k!r} is {v}")
    return rows


def main(argv=None) -> int:
    from embeval.env import configure

    configure()  # localhost DDS, offline hubs, Agg plots: the defaults every embeval program sets
    areas = sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    ap = argparse.ArgumentParser(prog="python -m bench", description="Run embeval benchmarks.")
    ap.add_argument("areas", nargs="*", metavar="AREA", help=f"areas to run (default: all of {', '.join(areas)})")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    ap.add_argument("--out", type=Path, default=Path("build/bench"),
                    help="folder for the <area>.json row files (default: build/bench)")
    args = ap.parse_args(argv)
    unknown = [a for a in args.areas if a not in areas]
    if unknown:
        ap.error(f"unknown area {', '.join(unknown)}: choose from {', '.join(areas)}")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    failed = []
    for area in args.areas or areas:
        print(f"\n## {area}")
        t0 = time.perf_counter()
        try:
            rows = importlib.import_module(f"bench.bench_{area}").run(quick=args.quick)
            print_table(rows)
            text = json.dumps(check_rows(rows), indent=2, default=str, allow_nan=False)
        except Exception as exc:  # report and go on: one area's failure must not hide the others
            where = traceback.extract_tb(exc.__traceback__)[-1]
            print(f"FAILED: {type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})")
            failed.append(area)
            continue
        print(f"({time.perf_counter() - t0:.1f} s)")
        (args.out / f"{area}.json").write_text(text)
    if failed:
        print(f"\nfailed areas: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
