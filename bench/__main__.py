"""``python -m bench [AREA ...] [--quick]``: run the benchmarks and print their tables."""
from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import platform
import sys
import time
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


def main(argv=None) -> int:
    from embeval.env import configure

    configure()  # localhost DDS, offline hubs, Agg plots: the defaults every embeval program sets
    areas = sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    ap = argparse.ArgumentParser(prog="python -m bench", description="Run embeval benchmarks.")
    ap.add_argument("areas", nargs="*", choices=areas + [[]], help=f"areas (default: all of {', '.join(areas)})")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    ap.add_argument("--out", type=Path, default=Path("build/bench"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    failed = []
    for area in args.areas or areas:
        print(f"\n## {area}")
        t0 = time.perf_counter()
        try:
            rows = importlib.import_module(f"bench.bench_{area}").run(quick=args.quick)
        except Exception as exc:  # report and go on: one area's failure must not hide the others
            print(f"FAILED: {type(exc).__name__}: {exc}")
            failed.append(area)
            continue
        print_table(rows)
        print(f"({time.perf_counter() - t0:.1f} s)")
        (args.out / f"{area}.json").write_text(json.dumps(rows, indent=2, default=str))
    if failed:
        print(f"\nfailed areas: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
