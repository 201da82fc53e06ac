"""Embodied-IQA on ManiSkill: the ``maniskill`` IQA source and the ``sim-iqa`` run evaluator
(Decision on the first frame recomputed independently from the source's reference image; Execution
from the env's success and the final TCP distance; resumable)."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.errors import ConfigError
from embeval.runs import ResultsStore, parse_spec, plan_run, run

pytest.importorskip("mani_skill")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SPEC = {
    "evaluator": "sim-iqa",
    "sim": {"backend": "maniskill", "env": "PickCube-v1", "width": 64, "height": 64, "max_steps": 4},
    "subjects": [{"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}}],
    "items": {"source": "synthetic", "count": 1},
    "distortions": ["none", "darken"],
    "levels": [5],
    "backend": {"progress": False},
}


@pytest.fixture(scope="module")
def references():
    from embeval_analysis.iqa.sources import load_references

    return load_references("maniskill", n=2, seed=0, size=(64, 64), envs=["PickCube-v1"])


def test_maniskill_source_gives_seeded_first_frames(references):
    a, b = references
    assert (a.ref_id, b.ref_id) == ("ms_PickCube_v1_s0000", "ms_PickCube_v1_s0001")
    assert a.image.shape == (64, 64, 3) and a.image.dtype == np.uint8 and not np.array_equal(a.image, b.image)
    assert a.tasks[0] == "pick up the red cube and move it to the goal" and len(a.tasks) == 5
    assert a.sim == {"backend": "maniskill", "env": "PickCube-v1", "seed": 0, "camera": "base_camera"}
    assert len(a.state["tcp_pose"]) == 7 and a.view == "third_person" and a.scene_id != b.scene_id


def test_sim_iqa_scores_match_an_independent_computation(tmp_path, references):
    from embeval.distortion import distort, frame_seed
    from embeval.provenance import derive_seed
    from embeval.scoring.decision import DecisionConfig, decision_score

    spec = parse_spec(SPEC, base_dir=tmp_path)
    s = run(spec, tmp_path / "run")
    assert (s.total, s.done, s.failed) == (2, 2, 0)
    with ResultsStore(tmp_path / "run" / "results.sqlite") as st:
        rows = {r["distortion"]: r for r in st.rows(s.run_id)}
    clean = references[0].image  # the first frame of seed 0 (rendering is deterministic)
    ref_act = 0.2 * (clean.reshape(-1, 3).mean(0) / 255 - 0.5)
    none, dark = rows["none"]["outputs"], rows["darken"]["outputs"]
    assert np.allclose(none["reference_first_action"][:3], ref_act, atol=1e-9)
    assert (none["decision"], none["execution"], none["distance_cm"]) == (1.0, 100.0, 0.0)
    useed = derive_seed("sim-iqa", "stats", "item00000", "darken", 5, 0)
    img = distort(clean, "darken", 5, frame_seed(useed, "base_camera", 0, "darken", 5))
    dis_act = np.r_[0.2 * (img.reshape(-1, 3).mean(0) / 255 - 0.5), 0, 0, 0, 1.0 if img.mean() / 255 > 0.5 else 0.0]
    assert np.allclose(dark["distorted_first_action"], dis_act, atol=1e-9)
    assert dark["decision"] == pytest.approx(decision_score([none["reference_first_action"]], [dis_act], DecisionConfig(normalisation="per_pair")).total, abs=1e-9)
    assert dark["decision"] < 1.0
    d = np.linalg.norm(np.subtract(dark["reference_tcp"][:3], dark["distorted_tcp"][:3])) * 100
    assert dark["distance_cm"] == pytest.approx(d) and d > 0.1  # a darker image moves the arm elsewhere
    assert dark["execution"] == pytest.approx(100 - d if not dark["distorted_success"] else 100.0)
    # sim.max_steps = 4 control steps; an action that also moves the fingers takes one more
    assert 2 <= dark["reference_steps"] <= 4 and 2 <= dark["distorted_steps"] <= 4
    again = run(spec, tmp_path / "run")  # resumable: nothing left to do
    assert (again.done, again.failed) == (0, 0)


def test_sim_iqa_spec_errors_fail_before_work(tmp_path):
    with pytest.raises(ConfigError, match="spec.sim: evaluator 'sim-iqa' needs a simulator"):
        plan_run(parse_spec({k: v for k, v in SPEC.items() if k != "sim"}, base_dir=tmp_path))
    with pytest.raises(ConfigError, match=r"spec.sim.backend: 'mujoco' is not a simulator backend"):
        plan_run(parse_spec(dict(SPEC, sim={"backend": "mujoco"}), base_dir=tmp_path))
    with pytest.raises(ConfigError, match=r"spec.sim.camera: unknown field; .*allowed: aliases, backend"):
        plan_run(parse_spec(dict(SPEC, sim={"camera": "x"}), base_dir=tmp_path))


def test_specs_without_sim_keep_their_hash(tmp_path):
    plain = {"evaluator": "synthetic", "items": {"source": "synthetic", "count": 2}}
    a = parse_spec(plain, base_dir=tmp_path)
    assert "sim" not in a.hashed_dict()
    assert parse_spec(dict(plain, sim={"backend": "maniskill"}), base_dir=tmp_path).hash != a.hash
