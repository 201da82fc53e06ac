"""``python -m`` entry points of core packages (the UR emulator, the subject servers) that child processes run.

The core starts these, never the ``embeval`` command (``embeval_cli`` stands on the floor above the core). Each
package defines its arguments once, in a function that both its ``__main__`` and the ``embeval`` sub-command call.
"""
from __future__ import annotations

import argparse
import sys

from embeval.errors import EmbevalError


def run_entry(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse ``argv`` with ``parser`` (its ``func`` default runs the command: ``func(args) -> exit code``) and run it.
    A user error (:class:`EmbevalError`, :class:`OSError`) is one line ``PROG: error: ...`` on stderr, exit 2;
    Ctrl-C exits 130."""
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (EmbevalError, OSError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
