"""Hostile use of `embeval iqa build | bench | export | analyse`: out-of-range --size / --n / --execution-images (the
message quotes the value given, nothing is created), a garbage scores.csv (named), and a bad output folder or missing
fine-tuning weights reported before the benchmark runs. Each is one line and exit 2."""
from __future__ import annotations

import time

import pytest

from conftest import folder_iqa_database
from embeval.image_io import MAX_IMAGE_SIDE
from test_cli_hostile import _error_line, _run


@pytest.mark.parametrize("argv, problem", [
    (["--size", "0", "0"], "build.source_params.size (--size W H): width and height must be whole numbers of pixels in "
                           f"1..{MAX_IMAGE_SIDE}, got [0, 0]"),
    (["--size", "100000", "100000"], "build.source_params.size (--size W H): width and height must be whole numbers of "
                                     f"pixels in 1..{MAX_IMAGE_SIDE}, got [100000, 100000]"),
    (["--n", "-4"], "build.source_params.n (--n): the number of reference images must be a whole number in 1..100000, got -4"),
    (["--n", "-7"], "build.source_params.n (--n): the number of reference images must be a whole number in 1..100000, got -7"),
    (["--execution-images", "-1"], "build.execution_images (--execution-images): the number of images scored in simulation "
                                   "must be a whole number >= 0 (0: none), got -1"),
    (["--levels", "1,x"], "--levels: 'sample', 'all' or comma-separated levels such as 1,3,5, got '1,x'"),
    (["--levels", "0"], "build.levels (--levels): 'sample', 'all' or a list of levels 1..5, got [0]"),
    (["--source", "folder"], "image source 'folder' needs build.source_params.path (--path); see `embeval iqa build --help`"),
    (["--distortions", "bogus"], "unknown distortion 'bogus'"),
])
def test_iqa_build_validates_options_before_creating_anything(tmp_path, capsys, argv, problem):
    out = tmp_path / "ib1"
    t0 = time.perf_counter()
    rc, _, err = _run(capsys, "iqa", "build", "--out", out, *argv)
    assert rc == 2 and problem in _error_line(err)
    assert time.perf_counter() - t0 < 10 and not out.exists()


def test_iqa_build_a_folder_without_images_leaves_no_folder(tmp_path, capsys):
    (tmp_path / "imgs").mkdir()
    rc, _, err = _run(capsys, "iqa", "build", "--out", tmp_path / "db", "--source", "folder", "--path", tmp_path / "imgs")
    assert rc == 2 and _error_line(err)
    assert not (tmp_path / "db").exists()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return folder_iqa_database(tmp_path_factory, 4, 40, distortions=["darken", "white_noise"], levels=[1, 5], seed=0,
                               subjects=[{"id": "stats", "kind": "policy", "adapter": "image_stats",
                                          "params": {"scale": 0.2}}])[0]


@pytest.mark.parametrize("content, problem", [
    (b"\xff\xfe\x00garbage\n\x00\x01", "is not UTF-8 text (byte 0xff at offset 0), not a database table"),
    (b"", "is empty, not a database table"),
    (b'a,b\n1,2\n"x\n', "is not a valid CSV table (Error tokenizing data. C error: EOF inside string starting at row 2)"),
    (b"a,b\n1,2\n", "has no column(s) image_id, path, ref_path, scene_id; it is not this database's scores.csv:"),
])
def test_a_garbage_scores_csv_is_named(tmp_path, capsys, db, content, problem):
    bad = tmp_path / "db"
    bad.mkdir()
    (bad / "scores.csv").write_bytes(content)
    (bad / "subject_scores.csv").write_bytes((db / "subject_scores.csv").read_bytes())
    fix = f"rebuild it with `embeval iqa build --out {bad}` (finished units are kept), or check --db"
    for cmd in (["export"], ["analyse"], ["bench", "--trained", "", "--zero-shot", "psnr"]):
        rc, _, err = _run(capsys, "iqa", *cmd, "--db", bad, "--out", tmp_path / "out")
        line = _error_line(err)
        assert rc == 2 and line.startswith(f"embeval: error: {bad / 'scores.csv'} ") and problem in line, cmd
        assert line.endswith(fix) and not (tmp_path / "out").exists(), cmd


@pytest.mark.parametrize("out, problem", [
    ("/proc/x", "--out /proc/x: cannot write in /proc ("),
    ("{db}/scores.csv", "--out {db}/scores.csv is a file, not a folder; choose a folder"),
    ("{db}/scores.csv/sub", "--out {db}/scores.csv/sub: {db}/scores.csv is a file, not a folder; choose another output folder"),
])
def test_iqa_bench_checks_the_output_folder_before_the_benchmark(capsys, db, out, problem):
    out = out.format(db=db)
    t0 = time.perf_counter()
    rc, _, err = _run(capsys, "iqa", "bench", "--db", db, "--out", out, "--trained", "cnniqa", "--zero-shot", "psnr")
    assert rc == 2 and _error_line(err).startswith(f"embeval: error: {problem.format(db=db)}")
    assert time.perf_counter() - t0 < 5  # the benchmark (CNNIQA training) never started


def test_iqa_bench_checks_finetune_weights_before_the_benchmark(tmp_path, capsys, db, monkeypatch):
    pytest.importorskip("pyiqa")
    from pyiqa.utils import download_util

    monkeypatch.setattr(download_util, "DEFAULT_CACHE_DIR", str(tmp_path / "empty_cache"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    import embeval_analysis.iqa.bench as bench

    monkeypatch.setattr(bench, "run_bench", lambda *a, **k: pytest.fail("the benchmark ran before the weights check"))
    rc, _, err = _run(capsys, "iqa", "bench", "--db", db, "--out", tmp_path / "b", "--finetune", "lpips")
    line = _error_line(err)
    assert rc == 2 and line.startswith("embeval: error: lpips: ") and "cache" in line
    assert not (tmp_path / "b").exists()
