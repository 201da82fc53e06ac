"""Hostile input on the command line: files that are not UTF-8, a torn LeRobot config.json, a single file where a
folder is expected, -inf and NaN on the command line, one corrupt image among good ones, unknown embedded model
names. Each ends in the exact one-line message and exit code (2 a user error, 1 where part of the work was done),
never a traceback."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from embeval_cli import main

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _error_line(err: str) -> str:
    """The one ``embeval: error:`` line of ``err`` (exactly one, no traceback)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("embeval: error:")]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------ files that are not UTF-8
NOT_UTF8 = b"id: x\nkind: policy\nadapter: scripted\nparams: {default: \xff\xfe}\n"


@pytest.mark.parametrize("argv, what", [
    (["subjects", "check", "{f}"], "subject spec"),
    (["run", "{f}", "--check"], "run spec"),
    (["sim", "render", "--scene", "{f}"], "scene spec"),
    (["graph", "--params", "{f}"], "parameter file"),
    (["kinematics", "fk", "0", "0", "0", "0", "0", "0", "--params", "{f}"], "kinematics file"),
    (["iqa", "build", "--config", "{f}", "--out", "{f}.db"], "IQA build config"),
])
def test_a_file_that_is_not_utf8_is_one_line_with_its_position(tmp_path, capsys, argv, what):
    f = tmp_path / "latin1.yaml"
    f.write_bytes(NOT_UTF8)
    rc, _, err = _run(capsys, *[a.replace("{f}", str(f)) for a in argv])
    assert rc == 2
    assert _error_line(err) == (f"embeval: error: {what} {f} is not UTF-8 text (byte 0xff at line 4, column 19); save it "
                                "as UTF-8 (or check that it is the right file, not a binary)")


def test_a_subject_file_listed_in_a_run_spec_that_is_not_utf8(tmp_path, capsys):
    (tmp_path / "subj.yaml").write_bytes(NOT_UTF8)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"evaluator": "synthetic", "subjects": ["subj.yaml"], "items": {"source": "list", "ids": ["a"]}}))
    rc, _, err = _run(capsys, "run", spec, "--check")
    assert rc == 2
    assert f"subject file {tmp_path / 'subj.yaml'} is not UTF-8 text (byte 0xff at line 4, column 19)" in _error_line(err)


def test_an_empty_or_huge_spec_file(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    rc, _, err = _run(capsys, "run", empty, "--check")
    assert rc == 2 and "the run spec is empty; it needs at least 'evaluator'" in _error_line(err)
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as f:
        f.truncate((16 << 20) + 1)  # sparse: no disk used
    rc, _, err = _run(capsys, "subjects", "check", huge)
    assert rc == 2
    assert _error_line(err) == (f"embeval: error: subject spec {huge} is larger than 16 MiB; give the small YAML/JSON "
                                "text file, not a data or weights file")
    rc, _, err = _run(capsys, "run", tmp_path, "--check")  # a folder, not a file
    assert rc == 2 and f"run spec {tmp_path} is a folder, not a file; give the run spec YAML file itself" in _error_line(err)


def test_an_unguarded_unicode_error_is_still_one_line(monkeypatch, capsys):
    """The safety net in main(): a UnicodeDecodeError from a reader not using read_text is one line, exit 2."""
    import embeval_cli.distort as distort

    def boom(args):
        b"\xc3(".decode("utf-8")

    monkeypatch.setattr(distort, "_list", boom)
    rc, _, err = _run(capsys, "distort", "list")
    assert rc == 2
    assert _error_line(err) == ("embeval: error: an input file is not UTF-8 text (byte 0xc3 at offset 0); save it as UTF-8 "
                                "(or check that it is the right file, not a binary)")


# ------------------------------------------------------------------ a LeRobot checkpoint with a torn config.json
@pytest.mark.parametrize("content, problem", [
    ("", "is empty"),
    ("   \n", "is empty"),
    ("{\n", "is not valid JSON (line 2, column 1: Expecting property name enclosed in double quotes)"),
    ("[]", "is a JSON list, not an object"),
    ('{"n_obs_steps": 1}', "is not a policy config (no 'type' field; expected e.g. \"type\": \"act\")"),
])
def test_lerobot_checkpoint_with_a_broken_config_json(tmp_path, capsys, content, problem):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text(content)
    (ck / "model.safetensors").write_bytes(b"\0" * 16)
    subj = tmp_path / "lr.yaml"
    subj.write_text(yaml.safe_dump({"id": "lr", "kind": "policy", "adapter": "lerobot", "path": str(ck)}))
    rc, out, err = _run(capsys, "subjects", "check", subj)
    assert rc == 2 and "loaded" not in out
    assert _error_line(err) == (f"embeval: error: LeRobot config {ck / 'config.json'} {problem}; copy it again from the "
                                "trained checkpoint (policy.save_pretrained writes it)")


def test_lerobot_checkpoint_config_json_not_utf8(tmp_path, capsys):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_bytes(b'{"type": "\xe9"}')
    (ck / "model.safetensors").write_bytes(b"\0" * 16)
    subj = tmp_path / "lr.yaml"
    subj.write_text(yaml.safe_dump({"id": "lr", "kind": "policy", "adapter": "lerobot", "path": str(ck)}))
    rc, _, err = _run(capsys, "subjects", "check", subj)
    assert rc == 2
    assert f"LeRobot config {ck / 'config.json'} is not UTF-8 text (byte 0xe9 at line 1, column 11)" in _error_line(err)


# ------------------------------------------------------------------ distort apply --in FILE
def _png(path: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(path)
    return path


def test_distort_apply_takes_a_single_image_file(tmp_path, capsys):
    img = _png(tmp_path / "frame.png")
    out = tmp_path / "out"
    rc, stdout, err = _run(capsys, "distort", "apply", "--in", img, "--out", out, "--type", "jpeg", "--level", "2")
    assert rc == 0, err
    assert stdout.splitlines()[-1] == f"1 images in {out}/ (manifest: {out / 'manifest.jsonl'})"
    assert [p.name for p in (out / "jpeg" / "L2").iterdir()] == ["frame.png"]


def test_distort_apply_names_what_is_wrong_with_in(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    rc, _, err = _run(capsys, "distort", "apply", "--in", text, "--out", tmp_path / "o", "--type", "jpeg")
    assert rc == 2
    assert _error_line(err) == (f"embeval: error: {text} is a file but not an image (.png, .jpg, .jpeg, .bmp, .tif, .tiff, "
                                ".webp); pass an image file or a folder of images with --in")
    rc, _, err = _run(capsys, "distort", "apply", "--in", tmp_path / "nope", "--out", tmp_path / "o", "--type", "jpeg")
    assert rc == 2
    assert _error_line(err) == (f"embeval: error: input {tmp_path / 'nope'} does not exist; pass a folder of images (or one "
                                "image file) with --in")
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    rc, _, err = _run(capsys, "distort", "apply", "--in", empty, "--out", tmp_path / "o", "--type", "jpeg", "--level", "1")
    assert rc == 1
    assert f"embeval: skipped: cannot read image {empty}: cannot identify image file" in err
    assert _error_line(err).startswith("embeval: error: 1 input file(s) are not readable images and were skipped")


# ------------------------------------------------------------------ numbers that are not finite
@pytest.mark.parametrize("value, shown", [("-inf", "-inf"), ("inf", "inf"), ("nan", "nan"), ("-Infinity", "-inf"),
                                          ("1e999", "inf")])
def test_sim_execute_says_a_value_is_not_finite(capsys, value, shown):
    rc, out, err = _run(capsys, "sim", "execute", "--reference", "0", "0", "0", "0", "0", "0", "1",
                        "--distorted", value, "0", "0", "0", "0", "0", "1")
    assert rc == 2 and out == ""
    assert _error_line(err) == f"embeval: error: --distorted: must be a finite number, got {shown} (value 1 of 7)"


def test_negative_numbers_in_any_spelling_are_values_not_options(capsys):
    from embeval_cli import build_parser

    args = build_parser().parse_args(["sim", "execute", "--reference", "-1e-3", "-.5", "-2.", "-0", "0", "0", "1",
                                      "--distorted", "-INF", "-nan", "0", "0", "0", "0", "1"])
    assert args.reference[:4] == [-1e-3, -0.5, -2.0, 0.0]
    assert args.distorted[0] == float("-inf") and np.isnan(args.distorted[1])
    # a real option is still an option
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sim", "execute", "--reference", "-x"])


def test_a_huge_action_is_a_short_estop_message(capsys):
    rc, out, err = _run(capsys, "sim", "execute", "--reference", "0", "0", "0", "0", "0", "0", "1",
                        "--distorted", "1e300", "0", "0", "0", "0", "0", "1")
    assert rc == 0 and "Traceback" not in err
    last = out.splitlines()[-1]
    assert last == "Execution score 0.0 (estop; distance 0.00 cm); workspace limit: TCP x=1e+300 not in [0.100, 0.900]"


# ------------------------------------------------------------------ iqa gate with one corrupt image
@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    from embeval.iqa.features import nr_features
    from embeval.iqa.predictor import FeatureSVRPredictor

    d = tmp_path_factory.mktemp("gate")
    files = [_png(d / f"g{i}.png", seed=i) for i in range(4)]
    sets = ("colour", "stats")  # the cheap feature sets: the gate's file handling is under test, not the metric
    X = nr_features([np.asarray(Image.open(f)) for f in files], sets=sets)
    FeatureSVRPredictor(sets=sets).fit_features(X, np.array([0.2, 0.4, 0.6, 0.8])).save(d / "pred")
    return d / "pred", files


def test_iqa_gate_scores_the_good_images_and_names_the_corrupt_one(tmp_path, capsys, predictor):
    pred, files = predictor
    bad = tmp_path / "corrupt.png"
    bad.write_bytes(b"not a png")
    rc, out, err = _run(capsys, "iqa", "gate", "--predictor", pred, "--threshold", "0.5", files[0], bad, files[1])
    assert rc == 1
    rows = out.splitlines()
    assert [r.split()[-1] for r in rows[:2]] == [str(files[0]), str(files[1])]  # a score for each good image
    assert all(r.split()[0] in ("PASS", "WITHHOLD") and np.isfinite(float(r.split()[1])) for r in rows[:2])
    assert rows[2].startswith("withheld ") and "/2 at threshold 0.5000" in rows[2]
    assert f"embeval: skipped: cannot read image {bad}: cannot identify image file" in err
    assert _error_line(err) == (f"embeval: error: 1 of 3 image(s) could not be read and got no score ({bad}); replace them "
                                "and run again")
    # only corrupt images: nothing scored, a user error
    rc, out, err = _run(capsys, "iqa", "gate", "--predictor", pred, "--threshold", "0.5", bad)
    assert rc == 2 and out == ""
    assert _error_line(err).startswith("embeval: error: 1 of 1 image(s) could not be read")
    # a folder among the images
    rc, out, err = _run(capsys, "iqa", "gate", "--predictor", pred, "--threshold", "0.5", files[0], tmp_path)
    assert rc == 1 and "embeval: skipped: cannot read image" in err and "a folder; give image files" in err


def test_iqa_gate_rejects_non_finite_threshold_and_rate_out_of_range(capsys, predictor):
    pred, files = predictor
    rc, _, err = _run(capsys, "iqa", "gate", "--predictor", pred, "--threshold", "nan", files[0])
    assert rc == 2 and _error_line(err) == "embeval: error: --threshold: must be a finite number, got nan"
    rc, _, err = _run(capsys, "iqa", "gate", "--predictor", pred, "--rate", "1.5", files[0])
    assert rc == 2
    assert _error_line(err) == "embeval: error: --rate: the share of images to withhold must lie in [0, 1), got 1.5"


# ------------------------------------------------------------------ embedded model names
@pytest.fixture()
def suite(tmp_path, capsys):
    assert main(["act2answer", "items", "generate", "--out", str(tmp_path / "suite"), "--categories", "color",
                 "--per-category", "1"]) == 0
    capsys.readouterr()
    return tmp_path / "suite" / "items.jsonl"


SHIPPED_VLA = ("tiny-vla, tiny-vla-a2a-frozen, tiny-vla-a2a-full, tiny-vla-avgpool, tiny-vla-nofilm, tiny-vla-waypoint, tiny-vla-wide, tiny-vla-wrist "
               "(or tiny-vla-untrained for random weights, a floor)")


def test_a_typo_in_a_policy_name_is_an_error_not_an_untrained_model(tmp_path, capsys, suite):
    out = tmp_path / "res"
    rc, stdout, err = _run(capsys, "act2answer", "run", "--items", suite, "--policy", "tiny-vlaa", "--out", out)
    assert rc == 2 and stdout == "" and not out.exists()
    assert _error_line(err) == (
        f"embeval: error: no embedded vla named or at 'tiny-vlaa'; did you mean 'tiny-vla'? shipped: {SHIPPED_VLA}; give a "
        "shipped name, a checkpoint folder (config.json + model.safetensors) or train one with `embeval train vla --out DIR`")
    assert "untrained" not in stdout


def test_policy_none_means_no_policy(tmp_path, capsys, suite):
    out = tmp_path / "res"
    rc, stdout, err = _run(capsys, "act2answer", "run", "--items", suite, "--policy", "none", "--out", out)
    assert rc == 2 and not out.exists()
    assert _error_line(err) == ("embeval: error: nothing to run: --policy none (or an empty --policy) and no --vlm; give a "
                                "policy or a VLM subject")
    rc, _, err = _run(capsys, "act2answer", "run", "--items", suite, "--policy", "none", "tiny-vla", "--out", out)
    assert rc == 2
    assert _error_line(err) == "embeval: error: --policy none means no policy; it cannot be combined with tiny-vla"
    vlm = tmp_path / "vlm.yaml"
    vlm.write_text(yaml.safe_dump({"id": "says-left", "kind": "vlm", "adapter": "scripted", "params": {"default": "Left."}}))
    rc, stdout, err = _run(capsys, "act2answer", "run", "--items", suite, "--policy", "none", "--vlm", vlm, "--out", out)
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["answers_says-left.jsonl", "category_table.csv"]  # no episodes at all
    assert "untrained" not in stdout and " episodes -> " not in stdout
    assert stdout.splitlines()[1].split() == ["subject", "says-left", "(text)"]  # the table has the VLM only


def test_a_typo_in_a_vlm_name_lists_the_shipped_ones(tmp_path, capsys, suite):
    rc, _, err = _run(capsys, "act2answer", "run", "--items", suite, "--policy", "none", "--vlm", "tiny-vlmm",
                      "--out", tmp_path / "res")
    assert rc == 2
    line = _error_line(err)
    assert line.startswith("embeval: error: no embedded vlm named or at 'tiny-vlmm'; did you mean 'tiny-vlm'? shipped: tiny-vlm, ")


def test_untrained_weights_only_on_explicit_request():
    from embeval.act2answer.subjects import UNTRAINED, embedded_policy
    from embeval.errors import MissingWeightsError

    pol = embedded_policy(UNTRAINED, seed=3)
    assert pol.id == "tiny-vla-untrained"
    with pytest.raises(MissingWeightsError, match="did you mean 'tiny-vla-wide'"):
        embedded_policy("tiny-vla-wid")
    with pytest.raises(MissingWeightsError):  # even when fall-back is allowed, an unknown name is not a known model
        embedded_policy("tiny-vlaa", allow_untrained=True)
    assert embedded_policy("tiny-vla").id == "tiny-vla"


def _policy_spec(tmp_path: Path, adapter: str, path: str) -> Path:
    """A policy-decision run spec with one policy subject."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "evaluator": "policy-decision", "subjects": [{"id": "p", "kind": "policy", "adapter": adapter, "path": path}],
        "items": {"source": "synthetic", "count": 1}, "distortions": ["jpeg"], "levels": [1],
        "params": {"tasks": ["pick up the cube"]}}))
    return spec


def test_a_run_spec_with_an_unknown_embedded_name_fails_before_running(tmp_path, capsys):
    rc, _, err = _run(capsys, "run", _policy_spec(tmp_path, "embedded", "tiny-vlaa"), "--check")
    assert rc == 2
    assert _error_line(err).startswith(
        "embeval: error: spec.subjects[0].path: no embedded vla named or at 'tiny-vlaa'; did you mean 'tiny-vla'?")


# ------------------------------------------------------------------ more hostile input on the same commands
def test_seeds_must_be_whole_numbers_in_range(capsys):
    for bad, why in (("-1", "must lie in 0..2**63-1, got -1"), (str(2**63), f"must lie in 0..2**63-1, got {2**63}"),
                     ("1.5", "must be an integer in 0..2**63-1, got '1.5'")):
        with pytest.raises(SystemExit) as exc:
            main(["sim", "execute", "--seed", bad, "--reference", *"0000001", "--distorted", *"0000001"])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1] == f"embeval sim execute: error: argument --seed: {why}" and "Traceback" not in err


def test_act2answer_run_refuses_empty_items_and_bad_options_before_any_work(tmp_path, capsys, suite):
    vlm = tmp_path / "vlm.yaml"
    vlm.write_text(yaml.safe_dump({"id": "v", "kind": "vlm", "adapter": "scripted", "params": {"default": "Left."}}))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = tmp_path / "res"
    rc, _, err = _run(capsys, "act2answer", "run", "--items", empty, "--policy", "none", "--vlm", vlm, "--out", out)
    assert rc == 2 and not out.exists()
    assert _error_line(err) == (f"embeval: error: item file {empty} holds no items; make some with `embeval act2answer "
                                "items generate --out DIR`")
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'{"id": "\xe9"}\n')
    rc, _, err = _run(capsys, "act2answer", "run", "--items", latin1, "--policy", "none", "--vlm", vlm, "--out", out)
    assert rc == 2 and f"item file {latin1} is not UTF-8 text (byte 0xe9 at line 1, column 9)" in _error_line(err)
    rc, stdout, err = _run(capsys, "act2answer", "run", "--items", suite, "--policy", "none", "--vlm", vlm, "--out", out,
                           "--delta", "nan")
    assert rc == 2 and stdout == "" and not out.exists()  # refused before answering, not after
    assert _error_line(err) == "embeval: error: --delta: the regime margin around chance 0.5 must lie in [0, 0.5), got nan"
    with pytest.raises(SystemExit) as exc:
        main(["act2answer", "run", "--items", str(suite), "--limit", "0"])
    assert exc.value.code == 2 and "argument --limit: must be >= 1, got 0" in capsys.readouterr().err


def test_act2answer_report_names_a_file_that_is_not_jsonl(tmp_path, capsys):
    f = tmp_path / "spec.yaml"
    f.write_text("evaluator: synthetic\n")
    rc, _, err = _run(capsys, "act2answer", "report", f)
    assert rc == 2
    assert _error_line(err) == (f"embeval: error: results file {f} line 1 is not valid JSON (Expecting value); give the "
                                "episodes_*.jsonl / answers_*.jsonl files `embeval act2answer run` writes")


@pytest.mark.parametrize("config, weights, problem", [
    ("", None, "checkpoint config {cfg} is empty; point at a folder written by `embeval train vla` or copy the checkpoint again"),
    ('{"a": 1}', None, "checkpoint config {cfg} is not an embeval embedded-model config (no 'kind'); point at a folder "
                       "written by `embeval train vla` or copy the checkpoint again"),
    (None, b"torn", "weights file {w} cannot be read (SafetensorError: Error while deserializing header: header too "
                    "small); copy the checkpoint again or train it anew"),
])
def test_an_embedded_checkpoint_folder_with_a_torn_file(tmp_path, capsys, suite, config, weights, problem):
    import shutil

    from embeval.subjects.embedded.zoo import MODELS_DIR

    ck = tmp_path / "my-vla"
    shutil.copytree(MODELS_DIR / "tiny-vla", ck)
    if config is not None:
        (ck / "config.json").write_text(config)
    if weights is not None:
        (ck / "model.safetensors").write_bytes(weights)
    rc, _, err = _run(capsys, "act2answer", "run", "--items", suite, "--policy", ck, "--out", tmp_path / "res")
    assert rc == 2
    assert _error_line(err) == "embeval: error: " + problem.format(cfg=ck / "config.json", w=ck / "model.safetensors")


def test_iqa_gate_with_a_damaged_predictor_or_gate_file(tmp_path, capsys, predictor):
    import shutil

    pred, files = predictor
    p = tmp_path / "pred"
    shutil.copytree(pred, p)
    (p / "gate.json").write_text('{"threshold": null}')
    rc, _, err = _run(capsys, "iqa", "gate", "--predictor", p, files[0])
    assert rc == 2
    assert _error_line(err) == (f"embeval: error: gate file {p / 'gate.json'} has no finite 'threshold' (got None); "
                                "calibrate it again with `embeval iqa gate --predictor P --rate R IMAGES`")
    (p / "predictor.json").write_text("")
    rc, _, err = _run(capsys, "iqa", "gate", "--predictor", p, files[0])
    assert rc == 2
    assert _error_line(err) == (f"embeval: error: predictor config {p / 'predictor.json'} is empty; train one with "
                                "`embeval iqa bench --db DB --save-predictor DIR` or copy the folder again")


# ------------------------------------------------------------------ run folders
def _synthetic_run(tmp_path: Path, capsys) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"evaluator": "synthetic", "items": {"source": "synthetic", "count": 3},
                                    "backend": {"progress": False}}))
    d = tmp_path / "run"
    assert main(["run", str(spec), "--out", str(d)]) == 0
    capsys.readouterr()
    return d


def test_run_folder_with_damaged_files(tmp_path, capsys):
    d = _synthetic_run(tmp_path, capsys)
    for argv in (["status", d], ["export", d, "--parquet", tmp_path / "x.parquet"], ["report", d], ["resume", d]):
        (d / "results.sqlite").write_bytes(b"this is not sqlite" * 100)
        for side in ("-wal", "-shm"):
            Path(f"{d / 'results.sqlite'}{side}").unlink(missing_ok=True)
        rc, _, err = _run(capsys, *argv)
        assert rc == 2, argv
        assert _error_line(err) == (f"embeval: error: {d / 'results.sqlite'} is not a results store (file is not a "
                                    "database); it was overwritten or damaged: start a new run folder (--out), or restore the file")
    (d / "run.json").write_text("")
    rc, _, err = _run(capsys, "resume", d)
    assert rc == 2
    assert _error_line(err) == f"embeval: error: run metadata {d / 'run.json'} is empty; the run folder is damaged: choose another --out"
    rc, _, err = _run(capsys, "status", tmp_path / "spec.yaml")
    assert rc == 2
    assert _error_line(err) == (f"embeval: error: {tmp_path / 'spec.yaml'} is a file, not a run folder; give the folder made "
                                "by `embeval run` (or its results.sqlite)")


def test_run_options_with_hostile_numbers(tmp_path, capsys):
    import time

    d = _synthetic_run(tmp_path, capsys)
    for value, why in (("nan", "--unit-timeout: must be a finite number in 0..604800 s, got nan (at most a week; 0: no watchdog)"),
                       ("-1", "--unit-timeout: must lie in 0..604800 s, got -1.0 (at most a week; 0: no watchdog)")):
        rc, _, err = _run(capsys, "resume", d, "--unit-timeout", value)
        assert rc == 2 and _error_line(err) == f"embeval: error: {why}"
    # a huge shard count is a valid (if silly) choice; status afterwards stays instant instead of listing 10**9 shards
    assert main(["resume", str(d), "--num-shards", str(10**9), "--no-progress"]) == 0
    capsys.readouterr()
    t0 = time.perf_counter()
    rc, out, _ = _run(capsys, "status", d)
    assert rc == 0 and time.perf_counter() - t0 < 5
    assert len(out.splitlines()) == 2 + 3  # header lines + one row per non-empty shard (3 groups)
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump({"evaluator": "synthetic", "items": {"source": "synthetic", "count": 1},
                                    "backend": {"unit_timeout_s": float("inf")}}))
    rc, _, err = _run(capsys, "run", spec, "--check")
    assert rc == 2 and "spec.backend.unit_timeout_s: must be a finite number in 0..604800, got inf" in _error_line(err)


def test_the_real_process_prints_exactly_one_line(tmp_path):
    """`embeval ...` as a user runs it: the whole stderr is the one error line (no warning, no traceback), exit 2."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(NOT_UTF8)
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text("")
    (ck / "model.safetensors").write_bytes(b"\0" * 16)
    subj = tmp_path / "lr.yaml"
    subj.write_text(yaml.safe_dump({"id": "lr", "kind": "policy", "adapter": "lerobot", "path": str(ck)}))
    cases = [
        (["run", str(spec), "--check"], f"embeval: error: run spec {spec} is not UTF-8 text (byte 0xff at line 4, column 19); "
                                        "save it as UTF-8 (or check that it is the right file, not a binary)"),
        (["subjects", "check", str(subj)], f"embeval: error: LeRobot config {ck / 'config.json'} is empty; copy it again "
                                           "from the trained checkpoint (policy.save_pretrained writes it)"),
        (["sim", "execute", "--reference", *"0000001", "--distorted", "-inf", *"000001"],
         "embeval: error: --distorted: must be a finite number, got -inf (value 1 of 7)"),
    ]
    for argv, line in cases:
        p = subprocess.run([sys.executable, "-m", "embeval_cli", *argv], capture_output=True, text=True, env=env, timeout=120)
        assert (p.returncode, p.stderr) == (2, line + "\n"), (argv, p.stderr)


def test_iqa_gate_with_a_huge_threshold_prints_it_short(capsys, predictor):
    pred, files = predictor
    rc, out, _ = _run(capsys, "iqa", "gate", "--predictor", pred, "--threshold", "1e308", files[0])
    assert rc == 0
    assert out.splitlines()[-1] == "withheld 1/1 at threshold 1e+308 (predicted decision score)"


def test_subjects_check_with_a_folder_as_image(tmp_path, capsys):
    rc, _, err = _run(capsys, "subjects", "check", ROOT / "config/subjects/image_stats_policy.yaml", "--image", tmp_path)
    assert rc == 2 and _error_line(err) == f"embeval: error: image {tmp_path} is a folder; give an image file"


def test_a_run_spec_with_a_torn_lerobot_config_fails_at_check(tmp_path, capsys):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text("")
    (ck / "model.safetensors").write_bytes(b"\0" * 16)
    rc, _, err = _run(capsys, "run", _policy_spec(tmp_path, "lerobot", "ck"), "--check")
    assert rc == 2
    assert _error_line(err) == (f"embeval: error: spec.subjects[0].path: LeRobot config {ck / 'config.json'} is empty; "
                                "copy it again from the trained checkpoint (policy.save_pretrained writes it)")
