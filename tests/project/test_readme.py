"""The README is a short entry page: the two commands, a tour, and links that resolve."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_readme_shows_the_two_commands():
    text = README.read_text()
    assert "make demo" in text and "make test" in text


def test_readme_is_short():
    assert len(README.read_bytes()) <= 10_000, "README.md is an entry page: move detail into docs/"


def test_readme_and_docs_links_resolve():
    """Every relative link of the README and of docs/*.md names a file that exists."""
    pages = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_readme_tour_commands_exist():
    """The tour's commands are real commands (a renamed command must not leave the README behind)."""
    import importlib.util

    from embeval_cli import build_parser

    spec = importlib.util.spec_from_file_location("_cli_reference", ROOT / "scripts" / "cli_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    known = {c for c, _ in reference.commands(build_parser())}
    tour = re.findall(r"^(embeval [a-z0-9-]+(?: [a-z0-9-]+)*)", README.read_text(), re.M)
    assert tour
    for line in tour:
        words = line.split()
        assert any(" ".join(words[:n]) in known for n in range(2, len(words) + 1)), line
