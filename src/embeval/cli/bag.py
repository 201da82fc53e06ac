"""``embeval bag``: inspect and recover rosbag2 (MCAP) bags written by the recorder."""
from __future__ import annotations

import argparse
from pathlib import Path


def register(sub) -> None:
    from embeval.cli._util import add_group

    g = add_group(sub, "bag", "inspect and recover rosbag2 (MCAP) bags (embeval bag info runs/bags/embeval_...)")
    p = g.add_parser("info", help="topics, types, message counts and duration of a bag",
                     description="Print a bag's topics, types, counts and duration.",
                     epilog="example:\n  embeval bag info runs/bags/embeval_20260101_120000",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bag", type=Path, help="bag folder (holds metadata.yaml) or a single .mcap file")
    p.set_defaults(func=_info)
    p = g.add_parser("recover", help="make a killed or damaged bag consistent (rebuild metadata.yaml, set bad segments aside)",
                     description="Read every MCAP segment in full, rebuild metadata.yaml from the good ones and move partial "
                     "or corrupt ones into BAG/damaged/ (never deleted).",
                     epilog="example:\n  embeval bag recover runs/bags/embeval_20260101_120000",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bag", type=Path, help="bag folder")
    p.set_defaults(func=_recover)


def _info(args) -> int:
    from embeval.recording import bag_info

    info = bag_info(args.bag)
    print(f"{info['path']}: {info['message_count']} messages, {info['duration_s']:.2f} s")
    for topic, t in sorted(info["topics"].items()):
        print(f"  {topic:<50} {t['type']:<36} {t['count']:>8}")
    return 0


def _recover(args) -> int:
    from embeval.recording import recover_bag

    from embeval.recording.bag import DAMAGED_DIR

    r = recover_bag(args.bag)
    aside = f"set aside in {Path(args.bag) / DAMAGED_DIR}: {', '.join(r.discarded)}" if r.discarded else "nothing set aside"
    print(f"kept {len(r.kept)} segment(s), {r.message_count} messages; {aside}")
    return 0
