"""Hostile use of the run commands (merge, status, run/resume): a run merged into itself, a 0-byte or foreign results
store read by `status`, a run folder given as a spec, invalid options after the resume hint. Each is one line, exit 2,
nothing created or written."""
from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest
import yaml

from embeval_cli import main
from test_cli_hostile import _error_line, _run


def _spec(tmp_path: Path, name: str = "spec.yaml", **changes) -> Path:
    d = {"evaluator": "synthetic", "items": {"source": "synthetic", "count": 3}, "backend": {"progress": False}}
    d.update(changes)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d))
    return p


@pytest.fixture()
def run_dir(tmp_path, capsys) -> Path:
    d = tmp_path / "run"
    assert main(["run", str(_spec(tmp_path)), "--out", str(d)]) == 0
    capsys.readouterr()
    return d


def _snapshot(p: Path) -> tuple[bytes, int]:
    return p.read_bytes(), p.stat().st_mtime_ns


def test_a_run_merged_into_itself_is_refused_at_once(tmp_path, capsys, run_dir, monkeypatch):
    store = run_dir / "results.sqlite"
    before = _snapshot(store)
    (tmp_path / "link").symlink_to(run_dir)
    monkeypatch.chdir(tmp_path)
    for into, src in ((run_dir, run_dir), (run_dir, tmp_path / "link"), ("run", "./link/"), ("link", "../" + tmp_path.name + "/run")):
        t0 = time.perf_counter()
        rc, out, err = _run(capsys, "merge", into, src)
        assert rc == 2 and time.perf_counter() - t0 < 5 and out == ""
        assert _error_line(err) == (f"embeval: error: {Path(src)} is the run folder being merged into ({Path(into)}); a run cannot be "
                                    "merged into itself: give the other run folders (shards) as SOURCE")
    # the same store through a hard link; and the self-merge named among good sources creates nothing
    (tmp_path / "hard").mkdir()
    for name in ("run.json", "spec.yaml"):
        (tmp_path / "hard" / name).write_bytes((run_dir / name).read_bytes())
    os.link(store, tmp_path / "hard" / "results.sqlite")
    rc, _, err = _run(capsys, "merge", run_dir, tmp_path / "hard")
    assert rc == 2 and "a run cannot be merged into itself" in _error_line(err)
    rc, _, err = _run(capsys, "merge", tmp_path / "new", run_dir, tmp_path / "new")
    assert rc == 2 and "a run cannot be merged into itself" in _error_line(err) and not (tmp_path / "new").exists()
    assert _snapshot(store) == before
    # a real merge still works
    assert main(["merge", str(tmp_path / "copy"), str(run_dir)]) == 0 and "3 new done units" in capsys.readouterr().out


def test_status_of_an_empty_or_foreign_store_names_it_and_writes_nothing(tmp_path, capsys):
    d = tmp_path / "z"
    d.mkdir()
    store = d / "results.sqlite"
    store.write_bytes(b"")
    os.utime(store, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    for argv in (["status", d], ["export", d, "--parquet", tmp_path / "x.parquet"], ["report", d]):
        rc, _, err = _run(capsys, *argv)
        assert rc == 2, argv
        assert _error_line(err) == (f"embeval: error: {store} is empty (0 bytes), not a results store; it was truncated or "
                                    "never written: start a new run folder (--out), or restore the file")
        assert store.stat().st_size == 0 and store.stat().st_mtime_ns == 1_600_000_000_000_000_000
    with sqlite3.connect(store) as c:  # a valid SQLite file of something else
        c.execute("CREATE TABLE other(x)")
    c.close()
    before = _snapshot(store)
    rc, _, err = _run(capsys, "status", d)
    assert rc == 2 and _error_line(err) == (f"embeval: error: {store} is an SQLite file but not a results store (no runs/"
                                            "results tables); give the results.sqlite of a run folder made by `embeval run`")
    assert _snapshot(store) == before


def test_status_and_export_open_the_store_read_only(tmp_path, capsys, run_dir):
    store = run_dir / "results.sqlite"
    before = _snapshot(store)
    rc, out, _ = _run(capsys, "status", run_dir)
    assert rc == 0 and "3/3 done" in out
    assert main(["export", str(run_dir), "--parquet", str(tmp_path / "x.parquet")]) == 0
    assert _snapshot(store) == before
    from embeval.runs.runner import open_store

    with open_store(run_dir) as st, pytest.raises(sqlite3.OperationalError, match="readonly"):
        st.conn.execute("DELETE FROM results")


def test_run_given_a_folder_instead_of_a_spec(tmp_path, capsys, run_dir):
    rc, _, err = _run(capsys, "run", run_dir)
    assert rc == 2 and _error_line(err) == (f"embeval: error: {run_dir} is a run folder, not a run spec; continue it with "
                                            f"`embeval resume {run_dir}` (or see its progress with `embeval status {run_dir}`)")
    rc, _, err = _run(capsys, "run", tmp_path, "--check")
    assert rc == 2 and _error_line(err) == (f"embeval: error: run spec {tmp_path} is a folder, not a file; give the run "
                                            "spec YAML file itself")


@pytest.mark.parametrize("spec, argv, problem", [
    ({}, ["--shard-index", "3", "--num-shards", "2"], "--shard-index must lie in 0..1 for --num-shards 2, got 3"),
    ({"evaluator": "distortion-quality", "subjects": [{"id": "m", "kind": "metric", "params": {"metrics": ["psnr"]}}],
      "distortions": ["none", "jpeg"], "levels": [0, 9]}, [],
     "spec.levels[0]: distortion levels run 1..5, got 0 (the undistorted reference is the distortion 'none')"),
    ({"evaluator": "distortion-quality", "subjects": [{"id": "m", "kind": "metric", "params": {"metrics": ["psnr"]}}],
      "distortions": ["none", "bogus"], "levels": [1]}, [], "spec.distortions[1]: unknown distortion 'bogus'"),
])
def test_run_validates_before_the_resume_hint(tmp_path, capsys, spec, argv, problem):
    out_dir = tmp_path / "out"
    rc, out, err = _run(capsys, "run", _spec(tmp_path, **spec), "--out", out_dir, *argv)
    assert rc == 2 and out == "" and "embeval resume" not in err
    assert problem in _error_line(err)
    assert not out_dir.exists()
