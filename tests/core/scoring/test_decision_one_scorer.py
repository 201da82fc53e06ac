"""Decision has one scorer (`embeval.scoring.decision.decision_corpus`) and one set of output names
(`embeval.scoring.decision.OUTPUTS`): the sim episode score, the ROS episode book, the policy_decision run
evaluator and the IQA database all call it and report under those names, with the numbers an independent
numpy/scipy computation of the per-pair formula gives."""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.transform import Rotation

from embeval.control import score_pair
from embeval.runs.evaluators.policy_decision import corpus_decision
from embeval.scoring.decision import OUTPUTS, DecisionConfig, decision_corpus
from embeval.scoring.execution import ExecutionOutcome
from embeval.scoring.record import EpisodeRecord
from embeval.sim.backends import score_runs

ROOT = Path(__file__).resolve().parents[3]
SCORER = ROOT / "src" / "embeval" / "scoring" / "decision.py"
A = [0.02, -0.01, 0.03, 0.10, -0.05, 0.20, 1.0]
B = [0.01, 0.02, 0.01, -0.05, 0.10, 0.15, 0.25]


def _per_pair(a, b) -> dict[str, float]:
    """The per-pair Decision of one task, written out (module docstring of embeval.scoring.decision)."""
    a, b = np.asarray(a), np.asarray(b)
    pos = 1 - np.linalg.norm(a[:3] - b[:3]) / max(np.linalg.norm(a[:3]) + np.linalg.norm(b[:3]), 1e-3)
    ua, ub = (Rotation.from_euler("xyz", v[3:6]).as_rotvec() for v in (a, b))
    rot = (1 + ua @ ub / (np.linalg.norm(ua) * np.linalg.norm(ub))) / 2
    state = 1 - abs(a[6] - b[6])
    return {"decision": (pos + rot + state) / 3, "position": pos, "rotation": rot, "state": state}


def _calls_outside_the_scorer(names: set[str]) -> list[str]:
    found = []
    for d in ("src", "analysis", "bench", "launch", "ros2_ws/src"):
        for f in sorted((ROOT / d).rglob("*.py")):
            if f == SCORER or "/build/" in f.as_posix() or "/install/" in f.as_posix():
                continue
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call):
                    fn = node.func
                    name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                    if name in names:
                        found.append(f"{f.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def test_only_the_scorer_calls_the_decision_internals():
    assert _calls_outside_the_scorer({"decision_score", "decision_parts"}) == []


def test_the_static_check_is_live():
    assert any("decision.py" not in c for c in _calls_outside_the_scorer({"decision_corpus"}))  # the callers exist


def test_the_scorer_matches_the_formula_and_names_its_outputs():
    (s,) = decision_corpus([([A], [B])], DecisionConfig(normalisation="per_pair"))
    assert tuple(s.outputs()) == OUTPUTS == ("decision", "position", "rotation", "state")
    assert s.outputs() == pytest.approx(_per_pair(A, B), abs=1e-12)


def test_every_reporter_uses_the_scorers_names_and_numbers():
    want = _per_pair(A, B)
    # the sim episode score (pybullet, ManiSkill, LIBERO workers)
    end = ExecutionOutcome(final_tcp_pose=(0.5, 0.0, 0.2, math.pi, 0.0, 0.0), success=False, stopped=False)
    sim = score_runs(SimpleNamespace(first_action=A, outcome=end), SimpleNamespace(first_action=B, outcome=end)).to_dict()
    assert {k: sim[k] for k in OUTPUTS} == pytest.approx(want, abs=1e-12)
    # the ROS graph's episode book
    ros = score_pair(EpisodeRecord(item="i", distortion="none", level=0, actions=[A], final_tcp=[0.5, 0, 0.2, math.pi, 0, 0]),
                     EpisodeRecord(item="i", distortion="gaussian_blur", level=3, actions=[B],
                             final_tcp=[0.5, 0, 0.2, math.pi, 0, 0]))
    assert {k: ros[k] for k in OUTPUTS} == pytest.approx(want, abs=1e-12)
    assert not any(k.startswith("decision_") for k in ros)  # no second naming of the parts
    # the run evaluator's report (one unit per row, scored per pair on request)
    frame = pd.DataFrame({"outputs": [json.dumps({"reference_actions": [A], "distorted_actions": [B]})]})
    run = corpus_decision(frame, {"normalisation": "per_pair"})
    assert list(run.columns) == list(OUTPUTS)
    assert run.iloc[0].to_dict() == pytest.approx(want, abs=1e-12)
