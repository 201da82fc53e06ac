"""The ``embeval`` command.

Sub-commands are discovered, not listed: every module ``embeval_cli/<name>.py``
(not starting with ``_``) defines ``register(subparsers)`` and adds its parser
with ``set_defaults(func=handler)``. Handlers import heavy dependencies lazily so
``embeval --help`` stays fast. Handlers return an exit code (or None for 0) and
raise :class:`embeval.errors.EmbevalError` for user errors.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import sys

from embeval import __version__
from embeval.env import configure
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
    _accept_negative_numbers(parser)
    return parser


#: what argparse must take as a value, not an option: -1, -.5, -1e-3, -inf, -nan (its default takes only -1 and -.5,
#: so `--distorted -inf ...` said "expected 7 arguments")
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


def _accept_negative_numbers(parser: argparse.ArgumentParser) -> None:
    """Let every (sub-)parser read negative numbers in any float spelling as values (no option looks like one)."""
    parser._negative_number_matcher = _NEGATIVE_NUMBER
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in action.choices.values():
                _accept_negative_numbers(sp)


def main(argv: list[str] | None = None) -> int:
    configure()  # localhost-only DDS, offline hubs, Agg plots (see embeval.env)
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
    except BrokenPipeError:  # output piped into `head` & co.: stop quietly, like other command-line tools
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:  # a path that does not exist, a read-only folder, a full disk: one line, no traceback
        print(f"embeval: error: {os_error_message(exc)}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:  # a text file read without embeval.errors.read_text: still one line
        from embeval.errors import unicode_problem

        print(f"embeval: error: an input file is not UTF-8 text ({unicode_problem(exc)}); save it as UTF-8 "
              "(or check that it is the right file, not a binary)", file=sys.stderr)
        return 2


def os_error_message(exc: OSError) -> str:
    """One line naming the file and the fix for an operating-system error (missing folder, permission, full disk)."""
    import errno

    what = exc.strerror or type(exc).__name__
    where = f" {exc.filename}" if exc.filename is not None else ""
    hints = {
        errno.ENOENT: "check the path (create the folder first if it is an output folder)",
        errno.EACCES: "check its permissions or choose another folder",
        errno.EPERM: "check its permissions or choose another folder",
        errno.ENOSPC: "free some disk space or write somewhere else",
        errno.EISDIR: "give a file name, not a folder",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.EEXIST: "a file of that name stands where a folder is needed; choose another path",
        errno.EROFS: "the file system is read-only; write somewhere else",
    }
    hint = hints.get(exc.errno, "check the path and try again")
    return f"{what}:{where}; {hint}" if where else f"{what} ({exc}); {hint}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
