"""``embeval sim episodes`` says why each episode ended: success, the step budget, or the safety stop's reason."""
from __future__ import annotations

import json

import pytest

from embeval_cli import main


@pytest.mark.parametrize("vector, success, ended", [
    (None, True, "success"),                                           # the scripted expert
    ([0, 0, 0, 0, 0, 0, 1], False, "max_steps (the task's step budget ran out)"),  # holds still
    ([0, 0, -0.05, 0, 0, 0, 1], False, "safety stop: workspace limit: TCP z="),    # drives into the table
])
def test_episode_rows_name_the_end(tmp_path, capsys, vector, success, ended):
    args = ["sim", "episodes", "--backend", "pybullet", "--episodes", "1", "--state-only", "--json", str(tmp_path / "r.json")]
    if vector is not None:
        spec = tmp_path / "policy.yaml"
        spec.write_text(json.dumps({"kind": "policy", "adapter": "scripted", "params": {"vector": vector}}))
        args += ["--subject", str(spec)]
    assert main(args) == 0
    row = json.loads((tmp_path / "r.json").read_text())[0]
    assert row["success"] is success and row["ended"].startswith(ended)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-1] == "ended" and row["ended"] in out[1]


def test_end_reason_without_a_backend_reason():
    """A backend env with no ``reason`` of its own: the outcome decides (stop reason, success, else "done")."""
    from embeval_cli.sim import end_reason
    from embeval.scoring.execution import ExecutionOutcome

    pose = (0.4, 0, 0.3, 0, 0, 0)
    assert end_reason(object(), ExecutionOutcome(pose, success=True, stopped=False)) == "success"
    assert end_reason(object(), ExecutionOutcome(pose, success=False, stopped=False)) == "done"
    stop = ExecutionOutcome(pose, success=False, stopped=True, stop_reason="contact: wrist_3_link with table")
    assert end_reason(object(), stop) == "safety stop: contact: wrist_3_link with table"
