"""Fine-tuning pyiqa's learned metrics through pyiqa's own training code (GeneralIQAModel, its datasets
and loader): randomly initialised LPIPS (FR) and TOPIQ-NR (ResNet-18 backbone to keep the CPU test
short) for a few steps on a small database; the
training loss falls, the tables are written with mean and median over splits; missing pretrained files
are named."""
from __future__ import annotations

import pandas as pd
import pytest
from conftest import folder_iqa_database

pytest.importorskip("pyiqa")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return folder_iqa_database(tmp_path_factory, 6, 30, distortions=["darken", "brighten", "white_noise"], levels=[1, 3, 5],
                               seed=0, subjects=[{"id": "stats", "kind": "policy", "adapter": "image_stats",
                                                  "params": {"scale": 0.2}}])[0]


@pytest.mark.slow  # ~20 s of CPU, 45 s wall on a busy 2-core machine
def test_finetune_two_architectures_through_pyiqa_training(db, tmp_path, capsys):
    from embeval_cli import main

    out = tmp_path / "ft"
    rc = main(["iqa", "bench", "--db", str(db), "--out", str(out), "--splits", "2", "--test-size", "0.34",
               "--trained", "", "--zero-shot", "psnr", "--finetune", "lpips", "topiq_nr", "--finetune-random-init",
               "--finetune-epochs", "2", "--finetune-steps", "6", "--finetune-batch", "4", "--finetune-lr", "1e-3",
               "--finetune-size", "32", "32", "--finetune-option", "semantic_model_name=resnet18"])
    assert rc == 0
    text = capsys.readouterr().out
    per = pd.read_csv(out / "finetune_per_split.csv")
    summary = pd.read_csv(out / "finetune_summary.csv")
    assert set(per["metric"]) == {"lpips", "topiq_nr"} and set(per["split"]) == {1, 2}
    assert (per["steps"] == 6).all() and per["random_init"].all()
    # the training objective falls: MSE on the training part, scored in evaluation mode, before vs after
    assert (per["train_mse_after"] < per["train_mse_before"]).all(), per[["metric", "split", "train_mse_before", "train_mse_after"]]
    for m, g in per.groupby("metric"):
        row = summary[summary["metric"] == m].iloc[0]
        assert row["srcc_mean"] == pytest.approx(g["srcc"].mean(), nan_ok=True)
        assert row["srcc_median"] == pytest.approx(g["srcc"].median(), nan_ok=True)
        assert row["n_splits"] == 2
    assert {"lpips": "FR", "topiq_nr": "NR"} == dict(zip(summary["metric"], summary["mode"]))
    assert "SRCC mean" in text and "lpips" in text


def test_pretrained_weights_must_be_in_the_cache(db, tmp_path, monkeypatch):
    from pyiqa.utils import download_util

    from embeval.errors import ConfigError, MissingWeightsError
    from embeval_analysis.iqa.finetune import FinetuneConfig, finetune

    monkeypatch.setattr(download_util, "DEFAULT_CACHE_DIR", str(tmp_path / "empty_cache"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    with pytest.raises(MissingWeightsError, match=r"(pyiqa's cache|torch hub's cache|local cache)"):
        finetune(db, ["lpips"], tmp_path / "o", FinetuneConfig(max_steps=1, splits=1), n_splits=2, test_size=0.34, log=None)
    with pytest.raises(ConfigError, match="not a pyiqa metric"):
        finetune(db, ["nope"], tmp_path / "o", FinetuneConfig(random_init=True), log=None)
    with pytest.raises(ConfigError, match="device"):
        finetune(db, ["lpips"], tmp_path / "o", FinetuneConfig(random_init=True, device="tpu"), log=None)
    with pytest.raises(ConfigError, match="cannot be built with random weights"):
        finetune(db, ["clipiqa"], tmp_path / "o", FinetuneConfig(random_init=True), log=None)
