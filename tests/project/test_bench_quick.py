"""The benchmarks (``make bench`` = ``python -m bench``) run by the suite: every area whose ``--quick`` run
takes under ~20 s runs here through ``bench.__main__.main`` (in process, ``--quick``), and its saved
``<area>.json`` must hold rows whose ratio columns are finite positive numbers, plus each area's own
correctness columns (agreement with the reference implementation, solved poses, expert successes).
Speeds are never asserted (they are ``make bench``'s to report). The areas whose quick run takes
longer (``SLOW_AREAS``) run only with ``EMBEVAL_BENCH_ALL=1``; every area must be in one of the two
lists, so a new area cannot go unrun by accident.
"""
from __future__ import annotations

import json
import math
import os
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

import bench
from bench.__main__ import check_rows, main

AREAS = sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))


def _ratios(rows: list[dict], key: str) -> list[float]:
    """The ``key`` cells of the rows that have it (a row leaves out a column that does not apply)."""
    return [r[key] for r in rows if key in r and r[key] != ""]


def _a2eval(rows):
    ev = rows[0]
    assert ev["items_ratio"] > 1 and ev["a2eval_s"] > 0, ev  # the subset is smaller than the pool and was evaluated
    train = [r for r in rows if "train step" in r["case"]]
    assert [r["case"].split()[0] for r in train] == ["a2eval-base", "a2eval-wide"]
    assert train[0]["ratio"] == 1.0  # the base member is the baseline


def _batching(rows):
    speed = [r for r in rows if "act_slots batch" in r["case"]]
    assert [r["case"].split(" batch ")[1].split(",")[0] for r in speed] == ["1", "8", "32"] * 2, speed
    assert speed[0]["ratio"] == 1.0 and speed[3]["ratio"] == 1.0  # batch 1 is each model's baseline
    diffs = [r for r in rows if "max_abs_diff" in r]
    assert len(diffs) == 2
    for r in diffs:  # batched actions equal batch-1 actions
        assert r["max_abs_diff"] < 1e-5 and r["met"] == "yes", r


def _distortion(rows):
    from embeval.distortion import list_distortions

    assert [r["type"] for r in rows[:-1]] == list(list_distortions())
    assert rows[-1]["type"].startswith("ALL")
    assert all(r["img_per_s_1core"] > 0 and math.isfinite(r["img_per_s_1core"]) for r in rows)


def _embedded(rows):
    assert rows[0]["ratio"] == 1.0 and "baseline" in rows[0]["case"]
    assert any(r["case"].startswith("tiny-vla-a2a-full train step") for r in rows)
    assert all(r["ms"] > 0 for r in rows)


def _iqa(rows):
    pyiqa_rows = [r for r in rows if "(pyiqa)" in r["what"]]
    assert [r["what"].split()[0] for r in pyiqa_rows] == ["psnr", "ssim", "gmsd", "piqe"]
    for r in pyiqa_rows:  # batching changes no score (up to float noise)
        assert r["max_abs_diff"] < 1e-4, r
    nss = next(r for r in rows if r["what"].startswith("BRISQUE NSS"))
    assert nss["max_abs_diff"] < 1e-9, nss


def _kinematics(rows):
    assert rows[0]["method"].startswith("ikpy") and rows[0]["vs_ikpy"] == 1.0
    assert rows[0]["solved"] > 0  # ikpy, the independent solver, solved poses our FK made
    batch = next(r for r in rows if "solved" in r and r["method"].startswith("analytic ik_batch"))
    assert batch["solved"] == 1.0 and batch["max_err_m"] < 1e-9 and batch["max_err_rad"] < 1e-9, batch
    assert 1 <= batch["mean_solutions"] <= 8


def _ros_graph(rows):
    stages = {r["stage"]: r for r in rows}
    for s in ("camera", "distortion", "policy", "arm", "recorder"):
        assert stages[s]["messages"] > 0 and stages[s]["p99_ms"] >= stages[s]["p50_ms"] > 0, stages[s]
    assert stages["rate achieved (Hz)"]["p50_ms"] > 1  # the 30 Hz camera ran (a loose floor: the machine is shared)


def _scoring(rows):
    vs_coco = [r for r in rows if "pycocoevalcap_s" in r]
    assert [r["what"] for r in vs_coco] == ["BLEU-4 (coco variant)", "ROUGE-L", "CIDEr-D"]
    for r in vs_coco:  # our metrics agree with pycocoevalcap on the same corpus
        assert r["max_abs_diff"] < 1e-9, r


def _sim(rows):
    assert rows[0]["ratio"] == 1.0 and "bare pybullet" in rows[0]["case"]
    for r in rows:
        if "/" in str(r.get("success", "")) and "episodes/s" in r["case"]:
            ok, n = map(int, r["success"].split("/"))
            assert ok == n, r  # the scripted expert solves every seeded episode


def _subjects(rows):
    assert {r["baseline"] for r in rows} >= {"in-process act", "in-process generate", "uncached call"}
    assert all(r["ms_per_call"] > 0 and r["baseline_ms"] > 0 for r in rows)


def _ur_emulator(rows):
    measures = [r["measure"] for r in rows]
    assert measures[:2] == ["RTDE data packages on the wire", "RTDE packages seen by rtde_receive"]
    assert any(m.startswith("moveL round trip") for m in measures)
    assert all(r["value"] > 0 for r in rows)


@dataclass(frozen=True)
class Check:
    """What an area's quick run must produce: ``ratios`` names the ratio columns (each cell finite and > 0,
    at least ``min_ratios`` cells in all), ``extra`` the area's own assertions on its rows."""

    ratios: tuple[str, ...]
    min_ratios: int
    extra: Callable[[list[dict]], None] = field(default=lambda rows: None)


#: areas run by this test (quick wall time here, 2 shared cores, load ~2-3)
QUICK_AREAS: dict[str, Check] = {
    "a2eval": Check(("speedup", "ratio"), 6, _a2eval),  # ~15 s
    "batching": Check(("ratio",), 7, _batching),  # ~12 s
    "distortion": Check(("ratio_vs_albu",), 15, _distortion),  # ~9 s
    "embedded": Check(("ratio",), 13, _embedded),  # ~13 s
    "iqa": Check(("speedup_vs_per_image", "speedup"), 8, _iqa),  # ~14 s
    "kinematics": Check(("vs_ikpy",), 5, _kinematics),  # ~3 s
    "ros_graph": Check(("p50_ms",), 10, _ros_graph),  # ~18 s: 3 s warm-up, 10 s at 30 Hz, 2 s drain (here 2 + 4 + 2)
    "scoring": Check(("speedup",), 3, _scoring),  # ~1 s
    "sim": Check(("ratio",), 10, _sim),  # ~4 s
    "subjects": Check(("ratio",), 4, _subjects),  # ~3 s
    "ur_emulator": Check(("vs_target",), 5, _ur_emulator),  # ~7 s
}
#: areas whose quick run is too long for every test run (quick wall time here); EMBEVAL_BENCH_ALL=1 runs them
SLOW_AREAS: dict[str, Check] = {
    "act2answer": Check(("speed vs policy (cpu)",), 2),  # ~25 s: 3 policies x 40 episodes
    "maniskill": Check(("ratio",), 5),  # ~25 s: four ManiSkill env builds
    "runs": Check(("vs_bare_loop",), 12),  # ~37 s: Ray start-up (~9 s) and 12 runs
    "train_memory": Check(("value",), 4),  # ~40 s: writes a 2,400-frame dataset, two training processes
}


def test_every_area_is_listed_once():
    assert set(QUICK_AREAS).isdisjoint(SLOW_AREAS)
    assert sorted({**QUICK_AREAS, **SLOW_AREAS}) == AREAS, "add the new bench area to QUICK_AREAS or SLOW_AREAS"


def test_results_page_lists_every_area():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    para = next(p for p in readme.split("\n\n") if p.startswith("`make bench`"))
    assert [a for a in AREAS if f"`{a}`" not in para] == [], "docs/results.md's `make bench` paragraph misses these areas"
    assert "eleven areas" in para and len(QUICK_AREAS) == 11, "docs/results.md says how many areas make test runs"


@pytest.mark.parametrize("rows, cell", [([], "non-empty"), ([{"case": "x", "ratio": float("nan")}], "'ratio' is nan"),
                                        ([{"case": "x", "ratio": float("inf")}], "'ratio' is inf")])
def test_check_rows_refuses_empty_and_non_finite(rows, cell):
    with pytest.raises(ValueError, match=cell):
        check_rows(rows)


def test_unknown_area_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        main(["no_such_area", "--quick"])
    assert e.value.code == 2 and "unknown area no_such_area: choose from a2eval" in capsys.readouterr().err


def test_failing_area_is_reported_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    import bench.bench_scoring as scoring

    def broken(quick):
        return [{"what": "x", "speedup": float("nan")}]

    monkeypatch.setattr(scoring, "run", broken)
    assert main(["scoring", "kinematics", "--quick", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "FAILED: ValueError: row 0 (x): column 'speedup' is nan" in out.out
    assert "failed areas: scoring" in out.err
    assert not (tmp_path / "scoring.json").exists() and (tmp_path / "kinematics.json").exists()


def _run_area(area: str, check: Check, tmp_path, capsys) -> None:
    rc = main([area, "--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert f"## {area}" in out and "FAILED" not in out

    def no_constants(token):
        raise AssertionError(f"{area}.json holds {token}: not strict JSON")

    rows = json.loads((tmp_path / f"{area}.json").read_text(), parse_constant=no_constants)
    assert isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows)
    ratios = [v for k in check.ratios for v in _ratios(rows, k)]
    assert len(ratios) >= check.min_ratios, (check.ratios, rows)
    for v in ratios:
        assert isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0, (v, rows)
    check.extra(rows)


@pytest.fixture
def keep_threads():
    """A bench area pins torch's and OpenCV's thread counts; the test process keeps its own."""
    import cv2
    import torch

    threads = torch.get_num_threads(), cv2.getNumThreads()
    yield
    assert torch.get_num_threads() == threads[0], "the bench area left torch's thread count changed"
    cv2.setNumThreads(threads[1])


@pytest.mark.parametrize("area", [pytest.param(a, marks=pytest.mark.ros) if a == "ros_graph" else a for a in sorted(QUICK_AREAS)])
def test_quick_area(area, tmp_path, capsys, keep_threads, monkeypatch):
    if area == "ros_graph":  # the same graph and rows for 4 s instead of 10 (+3 s warm-up): ~9 s of the test time
        import bench.bench_ros_graph as rg

        monkeypatch.setattr(rg, "QUICK_RUN_S", 4.0)
        monkeypatch.setattr(rg, "WARMUP_S", 2.0)
    _run_area(area, QUICK_AREAS[area], tmp_path, capsys)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("EMBEVAL_BENCH_ALL") != "1", reason="quick run over 20 s: EMBEVAL_BENCH_ALL=1 runs it")
@pytest.mark.parametrize("area", sorted(SLOW_AREAS))
def test_slow_area(area, tmp_path, capsys, keep_threads, monkeypatch):
    monkeypatch.chdir(tmp_path)  # train_memory writes its dataset under ./build/bench
    _run_area(area, SLOW_AREAS[area], tmp_path / "out", capsys)
