"""The ``embeval`` command.

Sub-commands are discovered, not listed: every module ``embeval/cli/<name>.py``
(not starting with ``_``) defines ``register(subparsers)`` and adds its parser
with ``set_defaults(func=handler)``. Handlers import heavy dependencies lazily so
``embeval --help`` stays fast. Handlers return an exit code (or None for 0) and
raise :class:`embeval.errors.EmbevalError` for user errors.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from embeval import __version__
from embeval.errors import EmbevalError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embeval",
        description="Evaluate embodied AI the way robots see and act (Embodied-IQA, Act2Answer, A2Eval).",
    )
    parser.add_argument("--version", action="version", version=f"embeval {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{mod.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        # a group without a sub-command, or no command at all
        (getattr(args, "_parser", None) or parser).print_help()
        return 0
    try:
        return int(func(args) or 0)
    except EmbevalError as exc:
        print(f"embeval: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("embeval: interrupted; results written so far are kept.", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
