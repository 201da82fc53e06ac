"""Numbers from outside, validated where they enter: ``train demos --noise`` (finite, 0..1), ``kinematics fk`` joints
(finite and within the arm's joint limits, as IK returns), ``kinematics ik --q6/--near`` (finite), a subject spec's
``params`` (no NaN/inf anywhere), and the "dataset exists" hint naming ``--overwrite`` on the CLI but
``overwrite=True`` in the API. Each refusal is one line, exit 2, no traceback."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import one_error_line
from embeval_cli import main
from embeval.errors import ConfigError, InvalidInputError

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- train demos
@pytest.mark.parametrize("value", ["nan", "-1", "inf", "-inf", "1.5", "abc"])
def test_train_demos_refuses_a_noise_outside_0_1(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as e:
        main(["train", "demos", "--out", str(tmp_path / "d"), "--noise", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --noise:" in err and "0..1" in err and "Traceback" not in err
    assert not (tmp_path / "d").exists()


def test_train_demos_refuses_zero_episodes(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "demos", "--out", str(tmp_path / "d"), "--episodes", "0"])
    assert e.value.code == 2
    assert "argument --episodes: must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("field, value", [("noise", float("nan")), ("noise", -0.1), ("noise", 1.01),
                                          ("kick_prob", 2.0), ("kick_std", float("inf")), ("episodes", 0)])
def test_demo_config_validates_its_numbers(field, value):
    from embeval.datasets.demos import DemoConfig

    with pytest.raises(ConfigError, match=f"DemoConfig.{field} must be"):
        DemoConfig(**{field: value})
    assert DemoConfig(noise=0.0).noise == 0.0 and DemoConfig(noise=1.0).noise == 1.0


def _fake_dataset(root: Path) -> Path:
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v3.0"}))
    return root


def test_an_existing_dataset_names_the_cli_flag_on_the_cli(tmp_path, capsys):
    root = _fake_dataset(tmp_path / "d")
    assert main(["train", "demos", "--episodes", "1", "--out", str(root)]) == 2
    line = one_error_line(capsys)
    assert line == f"embeval: error: {root} already holds a dataset; choose another --out or pass --overwrite"
    assert sorted(p.name for p in root.iterdir()) == ["meta"]  # nothing recorded, nothing overwritten


def test_an_existing_dataset_names_the_argument_in_the_api(tmp_path):
    from embeval.datasets.demos import DemoConfig, record_demos
    from embeval.datasets.lerobot_format import DatasetExistsError

    root = _fake_dataset(tmp_path / "d")
    with pytest.raises(DatasetExistsError, match="choose another root folder or pass overwrite=True") as e:
        record_demos(root, DemoConfig(episodes=1))
    assert isinstance(e.value, ConfigError) and e.value.root == root and "--" not in str(e.value)


# ---------------------------------------------------------------- kinematics
@pytest.mark.parametrize("q, problem", [
    (["100", "0", "0", "0", "0", "0"], "q1 = 100 rad lies outside the joint limits -6.2832..6.2832"),
    (["0", "0", "1e308", "0", "0", "0"], "q3 = 1e+308 rad lies outside the joint limits -3.1416..3.1416"),
    (["0", "0", "3.2", "0", "0", "0"], "q3 = 3.2 rad lies outside"),  # the elbow is +/- pi
    (["0", "0", "0", "0", "0", "-inf"], "q6 = -inf is not a finite number"),
    (["0", "nan", "0", "0", "0", "0"], "q2 = nan is not a finite number"),
])
def test_fk_refuses_joints_outside_the_limits(capsys, q, problem):
    assert main(["kinematics", "fk", *q]) == 2
    line = one_error_line(capsys)
    assert problem in line and "joints (ur5)" in line


def test_fk_accepts_the_limits_themselves_and_matches_the_api(capsys):
    from embeval.kinematics import UR, matrix_to_pose

    q = [2 * np.pi, -2 * np.pi, np.pi, 0.3, -1.2, 2 * np.pi]
    assert main(["kinematics", "fk", *[repr(v) for v in q], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(out["pose_xyz_rotvec"], matrix_to_pose(UR("ur5").fk(q)).round(6), atol=1e-6)


def test_fk_uses_the_limits_of_a_params_file(tmp_path, capsys):
    p = tmp_path / "k.yaml"
    p.write_text(yaml.safe_dump({"base": "ur5", "limits": {"lower": [-3.0] * 6, "upper": [3.0] * 6}}))
    assert main(["kinematics", "fk", "3.1", "0", "0", "0", "0", "0", "--params", str(p)]) == 2
    assert "q1 = 3.1 rad lies outside the joint limits -3.0000..3.0000" in one_error_line(capsys)


def test_joint_limits_check_is_the_ik_filter():
    from embeval.kinematics import UR, pose_to_matrix

    arm = UR("ur5")
    T = pose_to_matrix([0.4, 0.1, 0.3, np.pi, 0, 0])
    Q, valid = arm.ik_batch(T[None])
    for q in Q[0][valid[0]]:  # every IK answer passes the check fk applies
        arm.limits.check(q)
    with pytest.raises(InvalidInputError, match="must have 6 values"):
        arm.limits.check([0.0] * 5)


@pytest.mark.parametrize("extra, problem", [(["--q6", "nan"], "--q6: must be a finite number, got nan"),
                                            (["--near", "0", "inf", "0", "0", "0", "0"],
                                             "--near: must be a finite number, got inf (value 2 of 6)")])
def test_ik_refuses_non_finite_options(capsys, extra, problem):
    assert main(["kinematics", "ik", "0.4", "0.1", "0.3", "3.1416", "0", "0", *extra]) == 2
    assert problem in one_error_line(capsys)


# ---------------------------------------------------------------- subject specs
@pytest.mark.parametrize("value, where", [(".nan", "params.seed: nan"), (".inf", "params.seed: inf"),
                                          ("[1, -.inf]", "params.seed[1]: -inf"),
                                          ("{a: {b: .nan}}", "params.seed.a.b: nan")])
def test_subjects_check_refuses_a_non_finite_param(tmp_path, capsys, value, where):
    text = (ROOT / "config/subjects/scripted_llm.yaml").read_text()
    assert "  seed: 0\n" in text
    spec = tmp_path / "s.yaml"
    spec.write_text(text.replace("  seed: 0\n", f"  seed: {value}\n"))
    assert main(["subjects", "check", str(spec)]) == 2
    line = one_error_line(capsys)
    field, shown = where.split(": ")
    assert f"{spec}: {field}: must be a finite number, got {shown}" in line


def test_subject_spec_api_refuses_nan_and_keeps_finite_params():
    from embeval.subjects.registry import SubjectSpec

    ok = SubjectSpec.from_mapping({"kind": "policy", "adapter": "image_stats", "params": {"scale": 0.1, "k": [1, 2.5]}})
    assert ok.params == {"scale": 0.1, "k": [1, 2.5]}
    with pytest.raises(ConfigError, match=r"params.scale: must be a finite number, got nan"):
        SubjectSpec.from_mapping({"kind": "policy", "adapter": "image_stats", "params": {"scale": float("nan")}})
    with pytest.raises(ConfigError, match=r"serve.limits.max: must be a finite number, got inf"):
        SubjectSpec.from_mapping({"kind": "policy", "adapter": "image_stats", "serve": {"limits": {"max": float("inf")}}})
