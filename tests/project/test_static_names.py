"""Every Python file of the project parses, uses no undefined name and imports nothing it does not use, judged by
ruff (an independent linter).

The benchmarks are not run by the test suite, so a name left behind by a refactor (``_time`` in
``bench/bench_embedded.py``, renamed to ``per_call`` elsewhere) would only show up in ``make bench``.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: syntax errors (E9), undefined names (F821, F822 in __all__, F823 used before assignment), misused comparisons
#: and statements (F63, F7): each a bug, never a style choice; unused imports (F401): what a refactor left behind
RULES = "E9,F401,F63,F7,F821,F822,F823"


def _ruff() -> str:
    exe = Path(sys.executable).with_name("ruff")
    found = str(exe) if exe.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is missing: it is a project dependency (pyproject.toml); run `make install`")
    return found


def test_no_undefined_names_syntax_errors_or_unused_imports():
    dirs = [d for d in ("src", "analysis", "bench", "tests", "launch", "scripts") if (ROOT / d).is_dir()]
    p = subprocess.run([_ruff(), "check", "--no-cache", "--isolated", "--select", RULES, "--output-format", "concise", *dirs],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_check_finds_an_undefined_name(tmp_path):
    """The check is live: the bench's old mistake is reported, and the import it left unused."""
    bad = tmp_path / "bench_x.py"
    bad.write_text("from bench.timing import per_call\n\n\ndef run():\n    return _time(lambda: 0, 3)\n")
    p = subprocess.run([_ruff(), "check", "--no-cache", "--isolated", "--select", RULES, "--output-format", "concise", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "F821 Undefined name `_time`" in p.stdout, p.stdout
    assert "F401 [*] `bench.timing.per_call` imported but unused" in p.stdout, p.stdout
