"""A saved quality predictor folder that is garbage, empty, truncated, pickled or inconsistent: ``load_predictor``
and ``embeval iqa gate --predictor`` refuse it in one line naming the file (exit 2), never unpickling."""
from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pytest

from embeval_cli import main
from embeval.errors import ConfigError
from embeval.iqa.features import nr_features
from embeval.iqa.predictor import FeatureSVRPredictor, load_predictor

SETS = ("colour", "stats")  # the cheap feature sets: the file handling is under test
FIX = "train one with `embeval iqa bench --db DB --save-predictor DIR` or copy the folder again"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    rng = np.random.default_rng(0)
    ims = [rng.integers(0, 255, (48, 64, 3), dtype=np.uint8) for _ in range(4)]
    d = tmp_path_factory.mktemp("pred") / "good"
    FeatureSVRPredictor(sets=SETS).fit_features(nr_features(ims, SETS), np.array([0.2, 0.4, 0.6, 0.8])).save(d)
    return d, ims


class Boom:
    def __reduce__(self):  # unpickling this would run code: the loader must never get that far
        return (exec, ("raise SystemExit('unpickled')",))


def _arrays(d):
    with np.load(d / "model.npz") as z:
        return {k: z[k] for k in z.files}


CASES = {
    "garbage": (lambda d: (d / "model.npz").write_bytes(b"garbage" * 10),
                "are bytes starting b'garb', not an .npz archive saved by embeval"),
    "empty": (lambda d: (d / "model.npz").write_bytes(b""), "are empty (0 bytes)"),
    "truncated": (lambda d: (d / "model.npz").write_bytes((d / "model.npz").read_bytes()[:300]),
                  "are truncated or not an .npz archive"),
    "pickled array": (lambda d: np.savez(d / "model.npz", **{**_arrays(d), "mean": np.array([Boom()], dtype=object)}),
                      "hold pickled Python objects, which embeval never loads (unpickling can run code)"),
    "a raw pickle": (lambda d: (d / "model.npz").write_bytes(pickle.dumps(Boom())), "are bytes starting b'\\x80\\x04"),
    "an npy": (lambda d: np.save(d / "model.npz", np.zeros(3)) or (d / "model.npz.npy").rename(d / "model.npz"),
               "are a single .npy array, not an .npz archive"),
    "missing array": (lambda d: np.savez(d / "model.npz", **{k: v for k, v in _arrays(d).items() if k != "gamma"}),
                      "miss array(s) gamma"),
    "wrong shape": (lambda d: np.savez(d / "model.npz", **{**_arrays(d), "dual": np.zeros(2)}),
                    "array 'dual' has shape (2,), which does not fit the others (features 27, support vectors 4)"),
    "NaN": (lambda d: np.savez(d / "model.npz", **{**_arrays(d), "gamma": np.array([np.nan])}),
            "array 'gamma' must be 1-D finite numbers"),
    "json field missing": (lambda d: (d / "predictor.json").write_text('{"arch": "nr-fusion"}'),
                           "predictor.json misses field 'sets'"),
    "json C a string": (lambda d: (d / "predictor.json").write_text(json.dumps(
        {**json.loads((d / "predictor.json").read_text()), "C": "3"})), "field 'C' must be a positive number, got \"3\""),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_predictor_file_is_one_line_naming_it(tmp_path, capsys, good, case):
    src, ims = good
    d = tmp_path / "p"
    shutil.copytree(src, d)
    damage, problem = CASES[case]
    damage(d)
    with pytest.raises(ConfigError) as exc:
        load_predictor(d)
    msg = str(exc.value)
    assert problem in msg and msg.endswith(FIX) and "\n" not in msg
    assert str(d) in msg
    img = tmp_path / "x.png"
    from PIL import Image

    Image.fromarray(ims[0]).save(img)
    rc = main(["iqa", "gate", "--predictor", str(d), "--threshold", "0.5", str(img)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.strip().splitlines() == [f"embeval: error: {msg}"]


def test_feature_sets_that_do_not_fit_the_weights(tmp_path, good):
    src, ims = good
    d = tmp_path / "p"
    shutil.copytree(src, d)
    doc = json.loads((d / "predictor.json").read_text())
    (d / "predictor.json").write_text(json.dumps({**doc, "sets": ["colour"]}))
    with pytest.raises(ConfigError, match=r"was saved for 27 features but its feature sets colour give \d+; the folder"):
        load_predictor(d)(ims[0])
    assert np.isfinite(load_predictor(src)(ims[0]))  # the intact folder still loads and scores


def test_cnniqa_weights_torn_or_empty(tmp_path):
    from embeval.iqa.predictor import NRPredictor, PredictorConfig, build_net

    d = NRPredictor(build_net(PredictorConfig()), PredictorConfig()).save(tmp_path / "cnn")
    weights = d / "model.safetensors"
    for data, problem in [(b"garbage" * 20, "cannot be read or do not fit its predictor.json (Error while deserializing"),
                          (b"", "are empty (0 bytes)")]:
        weights.write_bytes(data)
        with pytest.raises(ConfigError) as exc:
            load_predictor(d)
        assert str(exc.value).startswith(f"predictor weights {weights} {problem}")
    (d / "predictor.json").write_text(json.dumps({"n_kers": "many"}))
    with pytest.raises(ConfigError, match="predictor.json does not fit this embeval"):
        load_predictor(d)
