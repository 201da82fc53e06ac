"""The IQA-metric registry: one Metric record per metric; the old per-fact tables are its views (same contents
as the six dicts they replace), records agree with pyiqa's DEFAULT_CONFIGS, bad records and names are refused in
one line, and a zero-shot metric computed by a function runs through zero_shot_scores and the benchmark."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.errors import ConfigError


def test_the_tables_are_views_with_the_old_contents():
    from embeval_analysis.iqa.finetune import NO_RANDOM_INIT, PAPER_METRICS
    from embeval_analysis.iqa.metrics import (
        BATCH_SIZE,
        FEATURE_METRICS,
        NEEDS_FILES,
        TRAINED,
        ZERO_SHOT,
        FRFusion,
    )

    assert dict(ZERO_SHOT) == {"psnr": ("FR", True), "ssim": ("FR", True), "gmsd": ("FR", False), "nlpd": ("FR", False),
                               "vif": ("FR", True), "fsim": ("FR", True), "piqe": ("NR", False)}
    assert dict(BATCH_SIZE) == {"ssim": 1, "psnr": 8}
    assert {k: NEEDS_FILES[k] for k in ("niqe", "brisque", "ilniqe", "nrqm", "lpips", "dists")} == {
        "niqe": "niqe_modelparameters.mat", "brisque": "brisque_svm_weights.pth", "ilniqe": "ILNIQE_templateModel.mat",
        "nrqm": "NRQM_model.mat", "lpips": "alexnet + LPIPS weights", "dists": "vgg16 + DISTS weights"}
    assert dict(FEATURE_METRICS) == {"brisque-svr": {"sets": ("nss",)}, "nr-fusion": {
        "sets": ("nss", "colour", "stats", "signal"), "target_transform": "rank", "epsilon": 0.1}}
    assert list(TRAINED) == ["cnniqa", "brisque-svr", "nr-fusion", "fr-fusion"]
    assert TRAINED["fr-fusion"] == ("FR", "SVR over psnr/ssim/gmsd") and FRFusion().features == ("psnr", "ssim", "gmsd")
    assert set(PAPER_METRICS) == {"dbcnn", "hyperiqa", "topiq_nr", "topiq_fr", "clipiqa", "liqe", "ahiq", "ckdn", "dists",
                                  "lpips", "qalign"}
    assert dict(NO_RANDOM_INIT) == {"clipiqa": "CLIP weights", "liqe": "CLIP weights", "qalign": "the mPLUG-Owl2 checkpoint"}
    with pytest.raises(KeyError):
        ZERO_SHOT["niqe"]  # needs a file: not in the no-file table


def test_bench_defaults_come_from_the_records():
    from embeval_analysis.iqa.bench import BenchConfig

    cfg = BenchConfig()
    assert cfg.zero_shot == ["psnr", "ssim", "gmsd", "piqe", "niqe", "brisque"]
    assert cfg.trained == ["cnniqa", "brisque-svr", "nr-fusion", "fr-fusion"]


def test_records_agree_with_pyiqa():
    from embeval_analysis.iqa.metric_registry import metrics
    from pyiqa.default_model_configs import DEFAULT_CONFIGS

    checked = 0
    for m in metrics():
        if m.pyiqa_name is None:
            continue
        cfg = DEFAULT_CONFIGS[m.pyiqa_name]
        assert cfg["metric_mode"] == m.mode, m.name
        assert (not cfg.get("lower_better", False)) == m.higher_is_better, m.name
        checked += 1
    assert checked == 22


def test_bad_records_and_names_are_refused_in_one_line():
    from embeval_analysis.iqa.bench import BenchConfig
    from embeval_analysis.iqa.metric_registry import (
        Metric,
        get_metric,
        register_metric,
        unregister_metric,
    )

    with pytest.raises(ConfigError, match="mode must be FR"):
        Metric("sharp", "XR")
    with pytest.raises(ConfigError, match="lower-case words"):
        Metric("Sharp Ness", "NR")
    with pytest.raises(ConfigError, match="needs trainer, one of fusion, features, cnniqa"):
        Metric("svr2", "NR", "trained")
    with pytest.raises(ConfigError, match="subset of nss, colour, stats, signal"):
        Metric("svr2", "NR", "trained", trainer="features", features=("edges",))
    with pytest.raises(ConfigError, match="a fusion metric is FR"):
        Metric("fuse", "NR", "trained", trainer="fusion", fusion_of=("psnr",))
    with pytest.raises(ConfigError, match="batch_size must be a whole number"):
        Metric("x", "FR", batch_size=0)
    with pytest.raises(ConfigError, match="takes an embeval_analysis.iqa.metric_registry.Metric"):
        register_metric({"name": "x"})
    with pytest.raises(ConfigError, match=r"unknown IQA metric 'nr-fuson' \(did you mean 'nr-fusion'\?\)"):
        get_metric("nr-fuson")
    with pytest.raises(ConfigError, match="unknown IQA metric 'gone'"):
        unregister_metric("gone")
    with pytest.raises(ConfigError, match=r"iqa bench trained: unknown IQA metric 'cnn' .*choose from"):
        BenchConfig(trained=["cnn"]).check()
    with pytest.raises(ConfigError, match="'psnr' is a zero-shot metric"):
        BenchConfig(trained=["psnr"]).check()


def _colourfulness(dist, refs):
    """Hasler and Suesstrunk's colourfulness of each distorted image (no reference)."""
    out = []
    for img in dist:
        r, g, b = (img[..., i].astype(float) for i in range(3))
        rg, yb = r - g, 0.5 * (r + g) - b
        out.append(np.hypot(rg.std(), yb.std()) + 0.3 * np.hypot(rg.mean(), yb.mean()))
    return np.asarray(out)


def test_a_function_metric_runs_in_zero_shot_scores():
    from embeval_analysis.iqa.metric_registry import (
        METRICS,
        Metric,
        register_metric,
        unregister_metric,
    )
    from embeval_analysis.iqa.metrics import ZERO_SHOT, zero_shot_scores

    before = METRICS.names()
    register_metric(Metric("colourful", "NR", fn=_colourfulness, description="colourfulness"))
    try:
        grey = np.full((8, 8, 3), 128, np.uint8)
        red = np.zeros((8, 8, 3), np.uint8)
        red[..., 0] = 200
        vals, missing, hib = zero_shot_scores([grey, red], [grey, grey], ("colourful", "psnr"))
        assert vals["colourful"][0] == 0.0 and vals["colourful"][1] == pytest.approx(0.3 * np.hypot(200, 100))
        assert vals["psnr"][0] == 60.0  # identical frames: the record's cap
        assert hib == {"colourful": True, "psnr": True} and not missing
        assert ZERO_SHOT["colourful"] == ("NR", True)
        register_metric(Metric("broken", "NR", fn=lambda d, r: np.zeros(3)))
        with pytest.raises(ValueError, match="fn returned 3 values for 2 images"):
            zero_shot_scores([grey, red], [grey, grey], ("broken",))
    finally:
        for name in ("colourful", "broken"):
            if name in METRICS:
                unregister_metric(name)
    assert METRICS.names() == before
