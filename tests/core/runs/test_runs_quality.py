"""The distortion-quality evaluator: metrics cross-checked against independent implementations."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
from PIL import Image

from embeval.errors import ConfigError
from embeval.runs.plan import plan_run
from embeval.runs.runner import run
from embeval.runs.spec import parse_spec
from embeval.runs.store import ResultsStore

SPEC = {
    "evaluator": "distortion-quality",
    "subjects": [{"id": "fr", "kind": "metric", "params": {"metrics": ["psnr", "ssim", "mse", "mae"]}}],
    "items": {"source": "folder", "path": "imgs", "glob": "*.png"},
    "distortions": ["none", "gaussian_blur", "white_noise"],
    "levels": [1, 3, 5],
    "seeds": [0],
    "backend": {"progress": False},
}


@pytest.fixture()
def image_dir(tmp_path):
    from embeval.distortion.samples import synthetic_tabletop

    (tmp_path / "imgs").mkdir()
    for k in range(3):
        Image.fromarray(synthetic_tabletop(48, 40, seed=k)).save(tmp_path / "imgs" / f"scene{k}.png")
    return tmp_path


def test_metrics_match_independent_implementations(image_dir):
    from embeval.distortion import distort
    from embeval.provenance import derive_seed

    spec = parse_spec(SPEC, base_dir=image_dir)
    s = run(spec, image_dir / "run")
    assert (s.total, s.done, s.failed) == (3 * (1 + 2 * 3), 21, 0)  # 'none' is scored once, at level 0
    with ResultsStore(image_dir / "run" / "results.sqlite") as st:
        rows = st.rows(s.run_id)
    for r in rows:
        ref = np.asarray(Image.open(image_dir / "imgs" / r["item"]).convert("RGB"))
        out = r["outputs"]
        if r["distortion"] == "none":
            assert out["psnr"] is None and out["ssim"] == pytest.approx(1.0) and out["mse"] == 0
            continue
        dist = distort(ref, r["distortion"], r["level"], seed=derive_seed("distortion-quality", *[r[k] for k in ("subject", "item", "distortion", "level", "seed")]))
        assert out["psnr"] == pytest.approx(cv2.PSNR(ref, dist), abs=1e-6)  # OpenCV's PSNR, independent
        mse = np.mean((ref.astype(float) - dist.astype(float)) ** 2)
        assert out["mse"] == pytest.approx(mse) and out["psnr"] == pytest.approx(10 * np.log10(255**2 / mse))
        assert out["mae"] == pytest.approx(np.mean(np.abs(ref.astype(float) - dist.astype(float))))
        assert -1 <= out["ssim"] < 1
    # severity rises with the level: PSNR and SSIM fall for every item
    for d in ("gaussian_blur", "white_noise"):
        for item in {r["item"] for r in rows}:
            ps = [r["outputs"]["psnr"] for r in sorted(rows, key=lambda r: r["level"]) if r["item"] == item and r["distortion"] == d]
            assert ps == sorted(ps, reverse=True)


def test_sharded_quality_run_equals_whole_and_keeps_references_together(image_dir):
    spec = parse_spec(SPEC, base_dir=image_dir)
    plan = plan_run(spec)
    assert {u.group for u in plan.units} == {u.item for u in plan.units}  # one group per reference image
    whole = run(spec, image_dir / "whole")
    for k in range(2):
        run(spec, image_dir / "sharded", shard_index=k, num_shards=2)
    with ResultsStore(image_dir / "whole" / "results.sqlite") as a, ResultsStore(image_dir / "sharded" / "results.sqlite") as b:
        assert a.results(whole.run_id) == b.results(whole.run_id)


def test_reference_only_spec_needs_no_levels(image_dir):
    spec = parse_spec({**SPEC, "distortions": ["none"], "levels": [0]}, base_dir=image_dir)
    assert [u.key[2:] for u in plan_run(spec).units] == [("none", 0, 0)] * 3


@pytest.mark.parametrize("changes, msg", [
    ({"distortions": ["gaussian_blur", "blurr"]}, r"spec.distortions\[1\]: unknown distortion 'blurr'"),
    ({"levels": [1, 6]}, r"spec.levels\[1\]: distortion levels run 1..5"),
    ({"subjects": [{"id": "fr", "kind": "metric", "params": {"metrics": ["psnr", "lpips"]}}]},
     r"spec.subjects\[0\].params.metrics\[1\]: unknown metric 'lpips'"),
    ({"items": {"source": "synthetic", "count": 2, "params": {"size": [4, 4]}}}, "spec.items.params.size"),
])
def test_quality_spec_errors_name_the_field(image_dir, changes, msg):
    with pytest.raises(ConfigError, match=msg):
        plan_run(parse_spec({**SPEC, **changes}, base_dir=image_dir))


def test_every_report_figure_names_spec_hash_and_code_version(image_dir):
    from embeval.provenance import code_version
    from embeval.runs import ResultsStore, get_evaluator, results_frame
    from embeval.runs.report import _generic_sections

    spec = parse_spec(SPEC, base_dir=image_dir)
    run(spec, image_dir / "run")
    with ResultsStore(image_dir / "run" / "results.sqlite") as st:
        frame = results_frame(st)
        shards = st.shard_status(spec.run_id)
    stamp = f"run spec {spec.hash} | {code_version()}"
    sections = get_evaluator(spec.evaluator).report_sections(spec, frame, stamp) + _generic_sections(frame, shards, stamp)
    figs = [f for s in sections for f in s.figures]
    assert len(figs) == 4 + 1  # psnr, ssim, mse, mae + the time histogram
    for f in figs:
        assert spec.hash in f.axes[0].get_title() and code_version() in f.axes[0].get_title()
