"""Write the command-line reference, ``docs/cli.md``, from the ``embeval`` argument parsers.

One section per command (every leaf of the sub-command tree): its description, a table of its arguments
(flags, value, default, help) and the examples of its ``--help`` epilog. Built from the parsers' actions, not from
argparse's formatted help, so the page is the same on every Python version and terminal width.
``tests/cli/test_cli_reference.py`` fails when the page is not what this script writes now.

    .venv/bin/python scripts/cli_reference.py            # rewrite docs/cli.md
    .venv/bin/python scripts/cli_reference.py --check    # exit 1 when docs/cli.md is out of date
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"


def commands(parser: argparse.ArgumentParser, prefix: str = "embeval") -> list[tuple[str, argparse.ArgumentParser]]:
    """Every leaf command under ``parser``: ``[("embeval sim render", parser), ...]``, in the parsers' order."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = f"{prefix} {name}"
                found += commands(sub, path) or [(path, sub)]
    return found


def _cell(text: str) -> str:
    """One markdown table cell: one line, pipes escaped."""
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def _help(action: argparse.Action, prog: str) -> str:
    """The action's help with argparse's ``%(default)s``-style fields filled in, as ``--help`` shows it."""
    text = action.help or ""
    if "%" not in text:
        return text
    fields = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    fields["prog"] = prog
    for key in ("choices",):
        if fields.get(key) is not None:
            fields[key] = ", ".join(map(str, fields[key]))
    try:
        return text % fields
    except (KeyError, TypeError, ValueError):
        return text


def _value(action: argparse.Action) -> str:
    """What the argument takes: its metavar, its choices, or nothing for a flag."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        metavar = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None:
        metavar = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        metavar = action.dest.upper() if action.option_strings else action.dest
    return {None: metavar, "?": f"[{metavar}]", "*": f"[{metavar} ...]", "+": f"{metavar} [...]"}.get(
        action.nargs, " ".join([metavar] * action.nargs) if isinstance(action.nargs, int) else metavar)


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.nargs == 0 or default in (None, argparse.SUPPRESS) or action.required:
        return ""
    if isinstance(default, (list, tuple)):
        return " ".join(map(str, default))
    return str(default)


def _anchor(command: str) -> str:
    """The heading anchor GitHub and most renderers give ``## embeval sim render``."""
    return re.sub(r"[^a-z0-9 -]", "", command.lower()).replace(" ", "-")


def section(command: str, parser: argparse.ArgumentParser) -> str:
    """The markdown section of one command."""
    lines = [f"## {command}", ""]
    if parser.description:
        lines += [parser.description.strip(), ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help is argparse.SUPPRESS:
            continue
        name = ", ".join(action.option_strings) if action.option_strings else (
            action.metavar if isinstance(action.metavar, str) else action.dest)
        value = _value(action) if action.option_strings else ("..." if action.nargs in ("*", "+") else "")
        rows.append(f"| `{_cell(name)}` | {('`' + _cell(value) + '`') if value else ''} | "
                    f"{_cell(_default(action))} | {_cell(_help(action, parser.prog))} |")
    if rows:
        lines += ["| argument | value | default | meaning |", "|---|---|---|---|", *rows, ""]
    if parser.epilog:
        lines += ["```text", parser.epilog.strip("\n"), "```", ""]
    return "\n".join(lines)


def render() -> str:
    """The whole page, as this script writes it."""
    from embeval_cli import build_parser

    found = commands(build_parser())
    groups: dict[str, list[str]] = {}
    for command, _ in found:
        groups.setdefault(command.split()[1], []).append(command)
    head = [
        "# embeval command reference",
        "",
        "Generated from the argument parsers by `.venv/bin/python scripts/cli_reference.py`; do not edit by hand",
        "(`tests/cli/test_cli_reference.py` fails when this page and the parsers disagree). Every command prints the same",
        "with `--help`. The guides in this folder explain what the commands are for.",
        "",
        f"{len(found)} commands:",
        "",
    ]
    for group, members in groups.items():
        head.append(f"- **{group}**: " + ", ".join(f"[`{c[len('embeval '):]}`](#{_anchor(c)})" for c in members))
    head.append("")
    return "\n".join(head) + "\n" + "\n".join(section(c, p) for c, p in found)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write docs/cli.md from the embeval argument parsers.")
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/cli.md differs from what would be written")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run .venv/bin/python scripts/cli_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT / "src"), str(ROOT / "analysis")]
    raise SystemExit(main())
