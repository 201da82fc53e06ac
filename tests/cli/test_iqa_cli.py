"""`embeval iqa` commands end to end on a tiny folder database (scripted subjects)."""
from __future__ import annotations

import json

import numpy as np
import yaml
from PIL import Image

from embeval_cli import main
from embeval.distortion.samples import synthetic_tabletop


def test_iqa_cli_build_export_bench_analyse_gate(tmp_path, capsys):
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    for i in range(4):
        Image.fromarray(synthetic_tabletop(40, 32, seed=i)).save(imgs / f"a{i}.png")
    subj = []
    for name, spec in (("p.yaml", {"kind": "policy", "adapter": "image_stats", "params": {"scale": 0.1}}),
                       ("v.yaml", {"kind": "vlm", "adapter": "scripted"})):
        (tmp_path / name).write_text(yaml.safe_dump(spec))
        subj.append(str(tmp_path / name))
    db = tmp_path / "db"
    assert main(["iqa", "build", "--out", str(db), "--source", "folder", "--path", str(imgs),
                 "--distortions", "darken,white_noise", "--levels", "1,5", "--subjects", *subj]) == 0
    scores = __import__("pandas").read_csv(db / "scores.csv")
    assert len(scores) == 4 * 2 * 2 and set(scores["level"]) == {1, 5}
    # the darkest level moves the mean-colour policy more than the mildest
    d = scores[scores.distortion == "darken"].groupby("level")["decision"].mean()
    assert d[5] < d[1]

    assert main(["iqa", "export", "--db", str(db), "--out", str(tmp_path / "px"), "--splits", "3"]) == 0
    assert (tmp_path / "px" / "meta_nr_decision.csv").exists() and (tmp_path / "px" / "splits_8x2_3.pkl").exists()

    assert main(["iqa", "bench", "--db", str(db), "--out", str(tmp_path / "b"), "--splits", "2", "--test-size", "0.5", "--zero-shot", "psnr",
                 "--trained", "fr-fusion,nr-fusion"]) == 0
    out = capsys.readouterr().out
    assert "psnr" in out and "fr-fusion" in out and (tmp_path / "b" / "bench_summary.csv").exists()
    # the NR gate against a PSNR gate on both held-out splits, at 10 / 20 / 33 % withheld
    assert "Quality gate (nr-fusion, no reference, trained per split) vs PSNR gate" in out
    gate = __import__("pandas").read_csv(tmp_path / "b" / "gate_splits.csv")
    assert gate["rate"].round(3).tolist() == [0.1, 0.2, 0.333] and (gate["n_splits"] == 2).all()
    assert ((gate[["gate", "psnr"]] >= 0) & (gate[["gate", "psnr"]] <= 1)).all().all()

    assert main(["iqa", "analyse", "--db", str(db), "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "iqa_subject_srcc.png").exists()

    # a gate from a saved feature predictor: calibrate at 50 %, then apply the stored threshold
    from embeval.iqa.features import nr_features
    from embeval.iqa.predictor import FeatureSVRPredictor

    files = [db / p for p in scores["path"]]
    X = nr_features([np.asarray(Image.open(f)) for f in files])
    FeatureSVRPredictor().fit_features(X, scores["decision"].to_numpy()).save(tmp_path / "pred")
    assert main(["iqa", "gate", "--predictor", str(tmp_path / "pred"), "--rate", "0.5", *map(str, files)]) == 0
    assert "withheld 8/16" in capsys.readouterr().out
    assert json.loads((tmp_path / "pred" / "gate.json").read_text())["rate"] == 0.5
    assert main(["iqa", "gate", "--predictor", str(tmp_path / "pred"), str(files[0])]) == 0
    assert main(["iqa", "gate", "--predictor", str(tmp_path / "nope"), str(files[0])]) == 2  # MissingWeightsError


def test_iqa_help_lists_commands_with_examples(capsys):
    assert main(["iqa"]) == 0
    out = capsys.readouterr().out
    for cmd in ("build", "export", "bench", "analyse", "gate"):
        assert cmd in out
    try:
        main(["iqa", "bench", "--help"])
    except SystemExit:
        pass
    assert "embeval iqa bench --db" in capsys.readouterr().out
