"""The README documents the two commands and every `embeval` command with an example."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from embeval_cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _commands(parser: argparse.ArgumentParser, prefix: str = "embeval") -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = f"{prefix} {name}"
                nested = _commands(sub, path)
                found += nested or [path]
    return found


def test_readme_shows_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text


def test_every_cli_command_has_an_example_in_the_readme():
    text = (ROOT / "README.md").read_text()
    commands = _commands(build_parser())
    assert len(commands) >= 20  # the suite has many commands; a broken discovery would find few
    missing = [c for c in commands if not re.search(re.escape(c) + r"(\s|$|`)", text)]
    assert not missing, f"README lacks an example for: {missing}"


def test_every_command_has_help(capsys):
    parser = build_parser()
    for command in _commands(parser):
        args = command.split()[1:] + ["--help"]
        try:
            parser.parse_args(args)
        except SystemExit as exc:
            assert exc.code == 0
        out = capsys.readouterr().out
        assert "usage:" in out and len(out) > 80, command
