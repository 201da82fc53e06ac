"""Small helpers shared by CLI modules."""
from __future__ import annotations

import argparse
from pathlib import Path

from embeval.argtypes import (  # noqa: F401 - re-exported for the CLI modules
    float_in, image_side, int_in, port, positive_int, record_video, seed)


def add_group(sub, name: str, help: str) -> argparse._SubParsersAction:
    """Add a command group (``embeval NAME SUBCOMMAND``); prints its help when called bare."""
    parser = sub.add_parser(name, help=help, description=help)
    parser.set_defaults(func=None, _parser=parser)
    return parser.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")


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


def add_video_args(p: argparse.ArgumentParser, default_dir: str) -> None:
    """``--record-video {none,failures,all,N}`` and ``--video-dir DIR`` of a command that runs episodes
    (read them with :func:`embeval.recording.video.recorder_from_args`)."""
    from embeval.recording.video import FPS, VideoPolicy

    p.add_argument("--record-video", type=record_video, default=VideoPolicy(), metavar="{none,failures,all,N}",
                   help="write one H.264 mp4 per episode (the policy's camera view, step / action / outcome text, "
                        f"{FPS} fps): none (default), failures (episodes that did not succeed), all, or N (the first N)")
    p.add_argument("--video-dir", type=Path, metavar="DIR",
                   help=f"folder of the episode videos (default {default_dir}); <episode>.mp4 each")


class RegistryChoices:
    """``choices=`` of an option naming a registry entry, read from the registry only when argparse checks a value
    or prints help (so building the parser imports nothing heavy). ``registry``: ``"module:attr"`` of a Registry."""

    def __init__(self, registry: str):
        self.registry = registry

    def _names(self) -> list[str]:
        from embeval.registry import load_target

        return load_target(self.registry).names()

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())
