"""The policy-decision evaluator: registry policies on reference vs distorted images."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.errors import ConfigError, MissingFileError
from embeval.provenance import derive_seed
from embeval.runs import ResultsStore, parse_spec, plan_run, run

SPEC = {
    "evaluator": "policy-decision",
    "subjects": [
        {"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}},
        {"id": "const", "kind": "policy", "adapter": "scripted", "params": {"vector": [0.01, 0, 0, 0, 0, 0.1, 1]}},
    ],
    "items": {"source": "synthetic", "count": 2, "params": {"size": [48, 40]}},
    "distortions": ["none", "darken", "white_noise"],
    "levels": [2, 5],
    "params": {"tasks": ["pick up the block", "press the button"]},
    "backend": {"progress": False},
}


def _independent_decision(a: np.ndarray, b: np.ndarray) -> float:
    """Position/rotation/state parts written out for these policies (no rotation or equal rotations)."""
    total = 0.0
    for x, y in zip(a, b):
        d, den = np.linalg.norm(x[:3] - y[:3]), np.linalg.norm(x[:3]) + np.linalg.norm(y[:3])
        pos = 1 - d / den if den > 0 else 1.0
        rot = 1.0 if np.allclose(x[3:6], y[3:6]) else None
        assert rot is not None
        total += (pos + rot + (1 - abs(x[6] - y[6]))) / 3
    return total


def test_decision_scores_match_an_independent_computation(tmp_path):
    from embeval.distortion import distort
    from embeval.runs.evaluators._images import DistortedImageEvaluator

    spec = parse_spec(SPEC, base_dir=tmp_path)
    s = run(spec, tmp_path / "run")
    assert (s.total, s.done, s.failed) == (2 * 2 * (1 + 2 * 2), 20, 0)
    with ResultsStore(tmp_path / "run" / "results.sqlite") as st:
        rows = st.rows(s.run_id)
    ref_of = {}
    for r in rows:
        o = r["outputs"]
        a, b = np.array(o["reference_actions"]), np.array(o["distorted_actions"])
        assert a.shape == b.shape == (2, 7) and o["n_tasks"] == 2
        if r["subject"] == "const":
            assert o["decision"] == pytest.approx(2.0)  # the same action whatever the image
            continue
        item = r["item"]
        if item not in ref_of:
            ref_of[item] = DistortedImageEvaluator().reference(spec, {}, item)
        ref = ref_of[item]
        seed = derive_seed("policy-decision", r["subject"], item, r["distortion"], r["level"], r["seed"])
        dist = ref if r["distortion"] == "none" else distort(ref, r["distortion"], r["level"], seed=seed)
        for img, acts in ((ref, a), (dist, b)):  # ImageStatsPolicy: 0.2 * (mean RGB - 0.5)
            assert np.allclose(acts[:, :3], 0.2 * (img.reshape(-1, 3).mean(0) / 255 - 0.5))
        assert o["decision"] == pytest.approx(_independent_decision(a, b), abs=1e-12)
        if r["distortion"] == "none":
            assert o["decision"] == pytest.approx(2.0)
    stats = {(r["distortion"], r["level"]): r["outputs"]["decision"] for r in rows if r["subject"] == "stats" and r["item"] == "item00000"}
    assert stats[("darken", 5)] < stats[("darken", 2)] < 2.0  # darker image, more different action
    _check_corpus_report(spec, tmp_path / "run", rows)


def _check_corpus_report(spec, run_dir, rows):
    """The report's Decision: the paper's min-max normalisation over every unit of the run, written out."""
    from embeval.runs.evaluators.policy_decision import PolicyDecisionEvaluator, corpus_decision
    from embeval.runs.export import results_frame

    dt = np.concatenate([r["outputs"]["position_distance_m"] for r in rows])
    dr = np.concatenate([r["outputs"]["rotation_distance_rad"] for r in rows])
    assert dt.min() == 0.0 and dt.max() > 0 and dr.max() == 0.0  # 'none' units anchor 0; no policy rotates
    with ResultsStore(run_dir / "results.sqlite") as st:
        frame = results_frame(st)
    got = corpus_decision(frame, spec.params)
    for (_, f), dec in zip(frame.iterrows(), got.itertuples()):
        o = next(r["outputs"] for r in rows if (r["subject"], r["item"], r["distortion"], r["level"]) ==
                 (f["subject"], f["item"], f["distortion"], f["level"]))
        pos = 1 - np.asarray(o["position_distance_m"]) / dt.max()
        a, b = np.array(o["reference_actions"]), np.array(o["distorted_actions"])
        state = 1 - np.abs(a[:, 6] - b[:, 6])
        assert dec.decision == pytest.approx(np.sum((pos + 1.0 + state) / 3), abs=1e-12)
    sec = PolicyDecisionEvaluator().report_sections(spec, frame, "stamp")
    assert "corpus" in sec[0].caption and "20 units" in sec[0].caption


def test_policy_subject_errors_fail_before_work(tmp_path):
    bad = dict(SPEC, subjects=[{"id": "x", "kind": "policy", "adapter": "nope"}])
    with pytest.raises(ConfigError, match=r"spec.subjects\[0\]: .*unknown adapter 'nope'"):
        plan_run(parse_spec(bad, base_dir=tmp_path))
    missing = dict(SPEC, subjects=[SPEC["subjects"][0], {"id": "vla", "kind": "policy", "adapter": "embedded", "path": "ckpt/tiny-vla"}])
    with pytest.raises(MissingFileError, match=r"spec.subjects\[1\].path: file not found: .*ckpt/tiny-vla"):
        plan_run(parse_spec(missing, base_dir=tmp_path))
    with pytest.raises(ConfigError, match=r"spec.subjects\[0\].kind: evaluator 'policy-decision' takes subjects of kind policy"):
        plan_run(parse_spec(dict(SPEC, subjects=[{"id": "v", "kind": "vlm", "adapter": "scripted"}]), base_dir=tmp_path))
    with pytest.raises(ConfigError, match="spec.params.tasks"):
        plan_run(parse_spec(dict(SPEC, params={"tasks": []}), base_dir=tmp_path))


def test_batched_policies_give_the_same_results(tmp_path):
    from embeval.subjects import register_adapter
    from embeval.subjects.scripted import ImageStatsPolicy

    calls = {"batch": 0}

    class BatchedStats(ImageStatsPolicy):  # the same policy with an act_batch, as the tiny VLA has
        def act_batch(self, observations):
            calls["batch"] += 1
            return np.stack([self.act(o).vector for o in observations])

    register_adapter("_batched_stats", "policy", BatchedStats)
    subj = [{"id": "stats", "kind": "policy", "adapter": "_batched_stats", "params": {"scale": 0.2}}]
    one = run(parse_spec(dict(SPEC, subjects=subj), base_dir=tmp_path), tmp_path / "one")
    assert calls["batch"] == 0  # batch_size 1: unit by unit
    spec8 = parse_spec(dict(SPEC, subjects=subj, backend={"progress": False, "batch_size": 4}), base_dir=tmp_path)
    eight = run(spec8, tmp_path / "batched")
    assert calls["batch"] == 3 * 2  # 10 units in batches of 4, 4, 2 (same subject), one call per task
    with ResultsStore(tmp_path / "one" / "results.sqlite") as a, ResultsStore(tmp_path / "batched" / "results.sqlite") as b:
        assert a.results(one.run_id) == b.results(eight.run_id) and len(a.results(one.run_id)) == 10


def test_a_failing_batch_is_said_once_and_rerun_unit_by_unit(tmp_path, capsys):
    """A batched call that raises is not silent: one warning line naming the subject and the error, then the
    units run one at a time and give the unbatched results."""
    from embeval.subjects import register_adapter
    from embeval.subjects.scripted import ImageStatsPolicy

    class BrokenBatch(ImageStatsPolicy):
        def act_batch(self, observations):
            raise RuntimeError("CUDA out of memory (planted)")

    register_adapter("_broken_batch", "policy", BrokenBatch)
    subj = [{"id": "broken", "kind": "policy", "adapter": "_broken_batch", "params": {"scale": 0.2}}]
    one = run(parse_spec(dict(SPEC, subjects=subj), base_dir=tmp_path), tmp_path / "one")
    capsys.readouterr()
    batched = run(parse_spec(dict(SPEC, subjects=subj, backend={"progress": False, "batch_size": 4}), base_dir=tmp_path),
                  tmp_path / "batched")
    err = capsys.readouterr().err
    assert batched.done == 10 and batched.failed == 0
    assert err.count("warning: a batch of 4 units of subject 'broken' failed (RuntimeError: CUDA out of memory "
                     "(planted)); running them one at a time") == 1, err
    with ResultsStore(tmp_path / "one" / "results.sqlite") as a, ResultsStore(tmp_path / "batched" / "results.sqlite") as b:
        assert a.results(one.run_id) == b.results(batched.run_id)


def test_policies_that_read_several_cameras_and_a_state(tmp_path):
    """`camera: [third_person, wrist]` hands the one image under both keys and `state` the proprioception,
    as the embedded tiny VLA needs; both paths (unit by unit and batched) see the same observation."""
    from embeval.subjects import register_adapter
    from embeval.subjects.scripted import ImageStatsPolicy

    seen: list = []

    class NeedsWristAndState(ImageStatsPolicy):
        def act(self, observation):
            assert set(observation.images) == {"third_person", "wrist"}
            assert observation.images["wrist"] is observation.images["third_person"]
            seen.append(np.asarray(observation.state["tcp_pose"]).tolist())
            return super().act(observation)

        def act_batch(self, observations):
            return np.stack([self.act(o).vector for o in observations])

    register_adapter("_wrist_state", "policy", NeedsWristAndState)
    params = {"tasks": ["pick up the block"], "camera": ["third_person", "wrist"],
              "state": {"tcp_pose": [0.45, 0.0, 0.25, 1, 0, 0, 0], "gripper": [1]}}
    subj = [{"id": "w", "kind": "policy", "adapter": "_wrist_state"}]
    for batch in (1, 4):
        s = run(parse_spec(dict(SPEC, subjects=subj, params=params, backend={"progress": False, "batch_size": batch}),
                           base_dir=tmp_path), tmp_path / f"b{batch}")
        assert (s.done, s.failed) == (10, 0)
    assert seen and all(v == [0.45, 0.0, 0.25, 1, 0, 0, 0] for v in seen)
    for bad in ({"camera": []}, {"camera": 3}, {"state": {"tcp_pose": "up"}}):
        with pytest.raises(ConfigError, match="spec.params"):
            plan_run(parse_spec(dict(SPEC, params={**params, **bad}), base_dir=tmp_path))


def test_rotation_param_paper_cosine_by_default_angle_as_option():
    """params.rotation: the corpus Decision's rotation part is the paper's cosine by default (Embodied-IQA §3.4),
    `angle` on request, each equal to embeval.scoring.decision with that rotation; the report shows the other one
    beside; an unknown value is refused at --check."""
    import json

    import pandas as pd

    from embeval.runs.evaluators.policy_decision import PolicyDecisionEvaluator, corpus_decision
    from embeval.scoring.decision import DecisionConfig, decision_corpus

    rng = np.random.default_rng(3)
    pairs = [(np.c_[rng.normal(0, 0.05, (2, 6)), rng.uniform(0, 1, (2, 1))],
              np.c_[rng.normal(0, 0.05, (2, 6)), rng.uniform(0, 1, (2, 1))]) for _ in range(5)]
    frame = pd.DataFrame({"subject": ["p"] * 5, "distortion": ["jpeg"] * 5, "level": [1, 2, 3, 4, 5],
                          "out.decision": [0.0] * 5,
                          "outputs": [json.dumps({"reference_actions": a.tolist(), "distorted_actions": b.tolist()})
                                      for a, b in pairs]})
    want = {r: [s.total for s in decision_corpus(pairs, DecisionConfig(rotation=r))] for r in ("cosine", "angle")}
    assert want["cosine"] != pytest.approx(want["angle"])  # the two definitions differ on rotating actions
    assert list(corpus_decision(frame, {})["decision"]) == pytest.approx(want["cosine"], abs=1e-12)
    assert list(corpus_decision(frame, {"rotation": "angle"})["decision"]) == pytest.approx(want["angle"], abs=1e-12)
    spec = parse_spec({**SPEC, "params": {**SPEC["params"], "rotation": "cosine"}})
    sec = PolicyDecisionEvaluator().report_sections(spec, frame, "stamp")[0]
    assert "decision (angle)" in sec.html and "rotation part: cosine (the paper)" in sec.caption
    with pytest.raises(ConfigError, match="spec.params.rotation: must be one of cosine, angle"):
        plan_run(parse_spec({**SPEC, "params": {**SPEC["params"], "rotation": "quaternion"}}))
