"""argparse ``type=`` functions over :mod:`embeval.checks`: the command lines of ``embeval`` and of the core's own
``python -m`` entry points (the UR emulator, the subject servers) read numbers with the same checks, and wording,
as configs, ROS parameters and safety limits. Each turns the check's ConfigError into
:class:`argparse.ArgumentTypeError` (argparse names the option, prints the usage line and exits 2)."""
from __future__ import annotations

import argparse


def adapt(check, parse=int):
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

    return adapt(lambda v, where: checks.integer(v, where, lo, hi, why=meaning))


def float_in(lo: float | None, hi: float | None, unit: str = "", lo_open: bool = False):
    """argparse ``type=`` factory: a finite number in ``lo .. hi`` (``lo < x`` with ``lo_open``; NaN and infinities
    refused; :func:`embeval.checks.number`)."""
    from embeval import checks

    return adapt(lambda v, where: checks.number(v, where, lo, hi, unit=unit, lo_open=lo_open), float)


#: argparse ``type=`` for counts and sizes: an integer >= 1
positive_int = int_in(1, None)


def image_side(text: str) -> int:
    """argparse ``type=`` for an image width or height: an integer in 1 .. :data:`embeval.image_io.MAX_IMAGE_SIDE`."""
    from embeval.image_io import MAX_IMAGE_SIDE

    return int_in(1, MAX_IMAGE_SIDE, "pixels per side")(text)


def seed(text: str) -> int:
    """argparse ``type=`` for seeds: an integer in 0 .. :data:`embeval.checks.MAX_SEED` (2**63-1)."""
    from embeval import checks

    return adapt(checks.seed)(text)


def port(text: str) -> int:
    """argparse ``type=`` for a TCP port to listen on: a whole number 1..65535 (:func:`embeval.checks.port`)."""
    from embeval import checks

    return adapt(checks.port)(text)


def record_video(text: str):
    """argparse ``type=`` for ``--record-video``: none, failures, all or N (a :class:`VideoPolicy`)."""
    from embeval.errors import ConfigError
    from embeval.recording.video import VideoPolicy

    try:
        return VideoPolicy.parse(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None
