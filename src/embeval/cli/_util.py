"""Small helpers shared by CLI modules."""
from __future__ import annotations

import argparse


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
