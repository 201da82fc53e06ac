"""``embeval camera``: record a RealSense cell once (librealsense's recorder) to evaluate against the recording anywhere."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def register(sub) -> None:
    from embeval_cli._util import add_group, int_in

    g = add_group(sub, "camera", "record a RealSense camera to a file for later runs (embeval camera record --out cell.db3)")
    p = g.add_parser("record", help="record a connected RealSense (colour + depth) to a librealsense .db3 file",
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="Record colour (rgb8) and depth (z16) of a connected RealSense with librealsense's recorder "
                     "to a rosbag2 .db3 file, with a progress line. Play it back anywhere, without the camera: camera node "
                     "`source: realsense` + `recording: FILE`, `embeval iqa build --source realsense --path FILE`.",
                     epilog="examples:\n  embeval camera record --out runs/cell.db3 --seconds 10\n"
                            "  embeval camera record --out cell.db3 --frames 300 --width 848 --height 480 --fps 30 --no-depth")
    p.add_argument("--out", type=Path, required=True, help="recording to write (.db3; never overwritten)")
    p.add_argument("--seconds", type=float, default=0.0, help="record this long (s)")
    p.add_argument("--frames", type=int_in(1, 10**7, "colour frames to record"), default=0, help="record this many colour frames")
    p.add_argument("--width", type=int_in(1, 8192, "image width (px)"), default=640, help="colour and depth width (default 640)")
    p.add_argument("--height", type=int_in(1, 8192, "image height (px)"), default=480, help="colour and depth height (default 480)")
    p.add_argument("--fps", type=int_in(1, 300, "frames per second"), default=30, help="frame rate (default 30)")
    p.add_argument("--serial", default="", help="camera serial number (default: the first connected)")
    p.add_argument("--depth", action=argparse.BooleanOptionalAction, default=True, help="record depth too (default: on)")
    p.set_defaults(func=_record)


def _record(args, device=None) -> int:
    """The handler; ``device``: a pyrealsense2 device to record instead of the connected camera (a software device)."""
    from embeval.camera.realsense import record
    from embeval.checks import number
    from embeval.errors import ConfigError

    seconds = number(args.seconds, "--seconds", lo=0.0)
    if seconds <= 0 and args.frames <= 0:
        raise ConfigError("give --seconds S or --frames N (how long to record)")
    tty, last = sys.stderr.isatty(), [0.0]

    def progress(colour: int, depth: int, elapsed: float) -> None:
        now = time.monotonic()
        if tty or now - last[0] >= 1.0 or colour == args.frames:
            last[0] = now
            goal = f"/{args.frames}" if args.frames else f" ({elapsed:.1f}/{seconds:g} s)"
            line = f"recording {args.out}: {colour}{goal} colour, {depth} depth frames, {colour / max(elapsed, 1e-9):.1f} fps"
            print(("\r" + line) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    res = record(args.out, width=args.width, height=args.height, fps=args.fps, depth=args.depth, frames=args.frames,
                 seconds=seconds, serial=args.serial, device=device, progress=progress)
    if tty:
        print(file=sys.stderr)
    print(f"recorded {res.colour_frames} colour + {res.depth_frames} depth frames ({res.profiles}) in {res.seconds:.1f} s "
          f"to {res.path}")
    return 0
