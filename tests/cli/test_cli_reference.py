"""docs/cli.md is what scripts/cli_reference.py writes from the parsers, and every command has help and an example."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from embeval_cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("_cli_reference", ROOT / "scripts" / "cli_reference.py")
cli_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cli_reference)
commands = cli_reference.commands


def test_cli_reference_is_current():
    page = (ROOT / "docs" / "cli.md").read_text()
    assert page == cli_reference.render(), "docs/cli.md is out of date: run .venv/bin/python scripts/cli_reference.py"


def test_every_command_has_an_example_in_the_reference():
    page = (ROOT / "docs" / "cli.md").read_text()
    found = commands(build_parser())
    assert len(found) >= 20  # the suite has many commands; a broken discovery would find few
    sections = dict(re.findall(r"^## (embeval[^\n]*)\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    missing = [c for c, _ in found if c not in sections or not re.search(re.escape(c) + r"(\s|$)", sections[c])]
    assert not missing, f"no example in the command's --help epilog: {missing}"


def test_every_command_has_help(capsys):
    parser = build_parser()
    for command, _ in commands(parser):
        args = command.split()[1:] + ["--help"]
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(args)
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert "usage:" in out and len(out) > 80, command


def test_the_reference_is_independent_of_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    narrow = cli_reference.render()
    monkeypatch.setenv("COLUMNS", "200")
    assert cli_reference.render() == narrow
