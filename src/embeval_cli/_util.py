"""Small helpers shared by CLI modules."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_group(sub, name: str, help: str) -> argparse._SubParsersAction:
    """Add a command group (``embeval NAME SUBCOMMAND``); prints its help when called bare."""
    parser = sub.add_parser(name, help=help, description=help)
    parser.set_defaults(func=None, _parser=parser)
    return parser.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")


def positive_int(text: str) -> int:
    """argparse ``type=`` for counts and sizes: an integer >= 1 (argparse prints the usage line on error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def image_side(text: str) -> int:
    """argparse ``type=`` for an image width or height: an integer in 1 .. :data:`embeval.image_io.MAX_IMAGE_SIDE`."""
    from embeval.image_io import MAX_IMAGE_SIDE

    value = positive_int(text)
    if value > MAX_IMAGE_SIDE:
        raise argparse.ArgumentTypeError(f"at most {MAX_IMAGE_SIDE} pixels per side, got {value}")
    return value


def int_in(lo: int, hi: int, meaning: str = ""):
    """argparse ``type=`` factory: a whole number in ``lo .. hi``; ``meaning`` (e.g. "environments stepped
    together") is named in the errors."""
    what = f" ({meaning})" if meaning else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number in {lo}..{hi}{what}, got {text!r}") from None
        if not lo <= value <= hi:
            bound = f"at least {lo}" if value < lo else f"at most {hi}"
            raise argparse.ArgumentTypeError(f"must lie in {lo}..{hi}{what}: {bound}, got {value}")
        return value

    return parse


def float_in(lo: float, hi: float):
    """argparse ``type=`` factory: a finite number in ``lo .. hi`` (NaN and infinities refused)."""
    import math

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number in {lo:g}..{hi:g}, got {text!r}") from None
        if not math.isfinite(value) or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be a finite number in {lo:g}..{hi:g}, got {text}")
        return value

    return parse


#: seeds are whole numbers 0 .. 2**63 - 1 (numpy's generators refuse negative ones, torch's larger ones)
MAX_SEED = 2**63 - 1


def seed(text: str) -> int:
    """argparse ``type=`` for seeds: an integer in 0 .. :data:`MAX_SEED`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must lie in 0..2**63-1, got {value}")
    return value


def port(text: str) -> int:
    """argparse ``type=`` for a TCP port to listen on: a whole number 1..65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number 1..65535, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port lies in 1..65535, got {value}")
    return value


def body_mb(text: str) -> float:
    """argparse ``type=`` for a request-body limit in MiB: a finite number > 0 and at most
    :data:`embeval.serving.limits.MAX_BODY_MB`."""
    import math

    from embeval.serving.limits import MAX_BODY_MB

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of MiB, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= MAX_BODY_MB:
        raise argparse.ArgumentTypeError(f"must be a number of MiB in (0, {MAX_BODY_MB}], got {text!r}")
    return value


def finite(values, name: str):
    """``values`` (a number or a list of numbers from argparse) unchanged, or :class:`InvalidInputError` naming the
    option and the first value that is NaN or infinite."""
    import math

    from embeval.errors import InvalidInputError

    seq = values if isinstance(values, (list, tuple)) else [values]
    for i, v in enumerate(seq):
        if v is not None and not math.isfinite(v):
            at = f" (value {i + 1} of {len(seq)})" if len(seq) > 1 else ""
            raise InvalidInputError(f"{name}: {v} is not a finite number{at}; give finite numbers")
    return values


def parse_aliases(values: list[str] | None) -> dict[str, str]:
    """``--alias KEY=CAMERA`` values (repeatable) as ``{key: camera}``; a ConfigError naming a malformed one."""
    from embeval.errors import ConfigError

    out: dict[str, str] = {}
    for a in values or []:
        key, sep, cam = a.partition("=")
        if not sep or not key or not cam:
            raise ConfigError(f"--alias {a!r}: write KEY=CAMERA, e.g. third_person=base_camera")
        out[key] = cam
    return out


def record_video(text: str):
    """argparse ``type=`` for ``--record-video``: none, failures, all or N (a :class:`VideoPolicy`)."""
    from embeval.errors import ConfigError
    from embeval.recording.video import VideoPolicy

    try:
        return VideoPolicy.parse(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


def add_video_args(p: argparse.ArgumentParser, default_dir: str) -> None:
    """``--record-video {none,failures,all,N}`` and ``--video-dir DIR`` of a command that runs episodes
    (read them with :func:`embeval.recording.video.recorder_from_args`)."""
    from embeval.recording.video import FPS, VideoPolicy

    p.add_argument("--record-video", type=record_video, default=VideoPolicy(), metavar="{none,failures,all,N}",
                   help="write one H.264 mp4 per episode (the policy's camera view, step / action / outcome text, "
                        f"{FPS} fps): none (default), failures (episodes that did not succeed), all, or N (the first N)")
    p.add_argument("--video-dir", type=Path, metavar="DIR",
                   help=f"folder of the episode videos (default {default_dir}); <episode>.mp4 each")
