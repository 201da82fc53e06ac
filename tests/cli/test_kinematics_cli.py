"""``embeval kinematics fk | ik | urdf``."""
from __future__ import annotations

import json

import numpy as np

from embeval_cli import main
from embeval.kinematics import UR5, matrix_to_pose


def test_cli_fk_json_matches_api(capsys):
    q = [0.1, -1.2, 1.3, -1.6, -1.5, 0.2]
    assert main(["kinematics", "fk", *map(str, q), "--json", "--frame", "base"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert np.allclose(out["pose_xyz_rotvec"], matrix_to_pose(UR5().fk(q, frame="base")), atol=1e-6)


def test_cli_ik_all_and_near(capsys):
    q = np.array([0.1, -1.2, 1.3, -1.6, -1.5, 0.2])
    pose = matrix_to_pose(UR5().fk(q))
    assert main(["kinematics", "ik", *map(str, pose), "--json"]) == 0
    sols = json.loads(capsys.readouterr().out)
    assert len(sols) == 8 and all(s["err_m"] < 1e-9 for s in sols)
    assert main(["kinematics", "ik", *map(str, pose), "--near", *map(str, q + 0.01), "--json"]) == 0
    (best,) = json.loads(capsys.readouterr().out)
    assert np.allclose(best["q"], q, atol=1e-6)
    # unreachable: exit code 1 and a plain message, no traceback
    assert main(["kinematics", "ik", "3", "0", "0", "0", "0", "0"]) == 1
    assert "unreachable" in capsys.readouterr().out


def test_cli_tool_and_urdf(capsys, tmp_path):
    assert main(["kinematics", "fk", "0", "-1.57", "1.57", "0", "1.57", "0", "--tool", "gripper", "--json"]) == 0
    with_tool = json.loads(capsys.readouterr().out)
    assert main(["kinematics", "fk", "0", "-1.57", "1.57", "0", "1.57", "0", "--tool", "0,0,0.14,0,0,0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pose_xyz_rotvec"] == with_tool["pose_xyz_rotvec"]
    assert main(["kinematics", "fk", "0", "0", "0", "0", "0", "0", "--tool", "1,2"]) == 2  # ConfigError
    out = tmp_path / "ur5e.urdf"
    assert main(["kinematics", "urdf", "--model", "ur5e", "--gripper", "-o", str(out)]) == 0
    text = out.read_text()
    assert '<link name="tcp">' in text and 'name="ur5e_gripper"' in text


def test_docs_quickstart_runs():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "kinematics.md").read_text()
    first = re.findall(r"```python\n(.*?)```", text, re.DOTALL)[0]
    ns: dict = {}
    exec(compile(first, "docs/kinematics.md", "exec"), ns)  # noqa: S102 - our own documentation
    assert ns["q_grasp"] is not None and ns["Q"].shape == (1000, 8, 6)


def test_cli_params_file(capsys, tmp_path):
    f = tmp_path / "arm.yaml"
    f.write_text("base: ur5e\ndelta_theta: [0.001, 0, 0, 0, 0, 0]\n")
    assert main(["kinematics", "fk", "0", "-1.57", "1.57", "0", "1.57", "0", "--params", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    from embeval.kinematics import UR, DHParams

    ref = UR(DHParams.from_yaml(f)).fk([0, -1.57, 1.57, 0, 1.57, 0])
    assert np.allclose(out["pose_xyz_rotvec"], matrix_to_pose(ref), atol=1e-6)
    assert main(["kinematics", "fk", "0", "0", "0", "0", "0", "0", "--params", str(tmp_path / "missing.yaml")]) == 2
