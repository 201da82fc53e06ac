"""Small helpers shared by CLI modules."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_group(sub, name: str, help: str) -> argparse._SubParsersAction:
    """Add a command group (``embeval NAME SUBCOMMAND``); prints its help when called bare."""
    parser = sub.add_parser(name, help=help, description=help)
    parser.set_defaults(func=None, _parser=parser)
    return parser.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")


def _adapt(check, parse=int):
    """An argparse ``type=`` from a shared check of :mod:`embeval.checks`: parse the text with ``parse`` (text that
    does not parse is checked as the text itself, so the message names what was expected), run ``check(value,
    where)`` and turn its ConfigError into :class:`argparse.ArgumentTypeError` without the ``where`` (argparse
    names the option and prints the usage line, exit 2)."""
    from embeval.errors import ConfigError

    def parse_text(text: str):
        try:
            value = parse(text)
        except ValueError:
            value = text
        try:
            return check(value, _WHERE)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{_WHERE}: ")) from None

    return parse_text


#: the placeholder ``where`` of a check run for argparse (argparse itself names the option)
_WHERE = "value"


def int_in(lo: int | None, hi: int | None = None, meaning: str = ""):
    """argparse ``type=`` factory: a whole number in ``lo .. hi`` (:func:`embeval.checks.integer`; either bound may
    be None); ``meaning`` (e.g. "environments stepped together") is named in the errors."""
    from embeval import checks

    return _adapt(lambda v, where: checks.integer(v, where, lo, hi, why=meaning))


def float_in(lo: float | None, hi: float | None, unit: str = "", lo_open: bool = False):
    """argparse ``type=`` factory: a finite number in ``lo .. hi`` (``lo < x`` with ``lo_open``; NaN and infinities
    refused; :func:`embeval.checks.number`)."""
    from embeval import checks

    return _adapt(lambda v, where: checks.number(v, where, lo, hi, unit=unit, lo_open=lo_open), float)


#: argparse ``type=`` for counts and sizes: an integer >= 1
positive_int = int_in(1, None)


def image_side(text: str) -> int:
    """argparse ``type=`` for an image width or height: an integer in 1 .. :data:`embeval.image_io.MAX_IMAGE_SIDE`."""
    from embeval.image_io import MAX_IMAGE_SIDE

    return int_in(1, MAX_IMAGE_SIDE, "pixels per side")(text)


def seed(text: str) -> int:
    """argparse ``type=`` for seeds: an integer in 0 .. :data:`embeval.checks.MAX_SEED` (2**63-1)."""
    from embeval import checks

    return _adapt(checks.seed)(text)


def port(text: str) -> int:
    """argparse ``type=`` for a TCP port to listen on: a whole number 1..65535 (:func:`embeval.checks.port`)."""
    from embeval import checks

    return _adapt(checks.port)(text)


def body_mb(text: str) -> float:
    """argparse ``type=`` for a request-body limit in MiB: a finite number > 0 and at most
    :data:`embeval.serving.limits.MAX_BODY_MB`."""
    from embeval import checks
    from embeval.serving.limits import MAX_BODY_MB

    return _adapt(lambda v, where: checks.mib(v, where, MAX_BODY_MB), float)(text)


def finite(values, name: str):
    """``values`` (a number or a list of numbers from argparse) unchanged, or a ConfigError naming the option and
    the first value that is NaN or infinite (:func:`embeval.checks.number`; which one of several, when several)."""
    from embeval import checks

    seq = values if isinstance(values, (list, tuple)) else [values]
    for i, v in enumerate(seq):
        if v is not None:
            checks.number(v, name, why=f"value {i + 1} of {len(seq)}" if len(seq) > 1 else "")
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
