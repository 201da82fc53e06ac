"""``embeval demo``: the end-to-end pipeline on the embedded defaults, offline, on the CPU."""
from __future__ import annotations

import argparse
from pathlib import Path

from embeval_cli._util import seed


def register(sub) -> None:
    from embeval_demo import STAGES

    p = sub.add_parser(
        "demo",
        help="run the end-to-end pipeline on the embedded defaults (offline, CPU)",
        description="Run the end-to-end demo. Stages: " + ", ".join(STAGES.names()),
        epilog="examples:\n  embeval demo                                  # every stage (what `make demo` runs)\n"
               "  embeval demo --quick --only kinematics workcell --out /tmp/demo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="output folder (default: runs/demo)")
    p.add_argument("--seed", type=seed, default=0, help="master seed (default: 0)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke test")
    p.add_argument("--only", nargs="+", metavar="STAGE", help="run only these stages")
    p.add_argument("--skip", nargs="+", metavar="STAGE", help="skip these stages")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from embeval_demo import DemoContext, run

    timings = run(DemoContext(out_dir=args.out, seed=args.seed, quick=args.quick), args.only, args.skip)
    print("\nDemo finished: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
    print(f"Outputs in {args.out}/")
    return 0
