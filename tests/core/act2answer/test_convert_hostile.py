"""Record ids from outside data name files: each must be one safe component inside the output folder.

The attack: an MMBench record with ``"index": "../../../../../../x/ESCAPED"`` made `embeval act2answer items convert`
write PNGs outside ``--out``; a record that is not an object ended the run in a traceback.
"""
from __future__ import annotations

import json

import pytest

from conftest import one_error_line
from embeval import checks
from embeval.errors import ConfigError
from embeval_cli import main


def _convert(tmp_path, capsys, *records):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "a" / "b" / "out"
    rc = main(["act2answer", "items", "convert", "--input", str(src), "--layout", "mmbench", "--out", str(out)])
    return rc, out


@pytest.mark.parametrize("rid", ["../../../../x/ESCAPED", "/abs/olute", "a\\b", "..", "x\0y", "x" * 200])
def test_a_record_id_that_leaves_the_folder_is_one_error_naming_the_record(tmp_path, capsys, rid):
    good = {"index": "ok-1", "question": "which?", "A": "cat", "B": "dog", "answer": "A"}
    rc, out = _convert(tmp_path, capsys, good, dict(good, index=rid))
    assert rc != 0
    line = one_error_line(capsys)
    assert "record 1 field 'index'" in line
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.png"))
    assert all(p.startswith("a/b/out/images/") for p in written), written  # before: a/x/ESCAPED_A.png and the like
    assert not (tmp_path / "x").exists() and not (tmp_path / "a" / "x").exists()


def test_a_record_that_is_not_an_object_is_one_error(tmp_path, capsys):
    good = {"index": "ok-1", "question": "which?", "A": "cat", "B": "dog", "answer": "A"}
    rc, _ = _convert(tmp_path, capsys, good, 7)
    assert rc != 0 and "record 1: a int, not a record" in one_error_line(capsys)


def test_file_component_accepts_ordinary_ids():
    assert checks.file_component("mmbench-12_A.v2", "id") == "mmbench-12_A.v2"
    assert checks.file_component(42, "id") == "42"
    with pytest.raises(ConfigError, match="path separator"):
        checks.file_component("a/b", "id")
