"""Cognition (1 : 1 : 0.1 over 5 tasks) and decision scores."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation
from test_scoring_text import HYPS, REFS

from embeval.action import Action
from embeval.errors import InvalidInputError
from embeval.scoring import text
from embeval.scoring.cognition import (
    CognitionConfig,
    CognitionWeights,
    cognition_scores,
    score_pairs,
)
from embeval.errors import ConfigError
from embeval.scoring.decision import (
    DecisionConfig,
    DecisionRange,
    arm_of_larger_motion,
    decision_corpus,
    decision_parts,
    decision_score,
)

PP = DecisionConfig(normalisation="per_pair")
ANGLE = DecisionConfig(rotation="angle")  # the corpus form with the relative rotation angle (the earlier default)


def test_cognition_combines_and_sums_over_tasks():
    answers = {("vlm", "img0", "jpeg", 3): (REFS[:5], HYPS[:5]), ("vlm", "img1", "jpeg", 3): (REFS[5:10], HYPS[5:10])}
    out = cognition_scores(answers)
    b = text.bleu(HYPS[:10], REFS[:10])
    r = text.rouge_l(HYPS[:10], REFS[:10])
    c = text.cider_d(HYPS[:10], REFS[:10])  # the corpus is all 10 pairs, scored at once
    s0 = out[("vlm", "img0", "jpeg", 3)]
    assert len(s0.tasks) == 5
    assert s0.bleu == pytest.approx(sum(b[:5])) and s0.rouge_l == pytest.approx(sum(r[:5]))
    assert s0.cider_d == pytest.approx(sum(c[:5]))
    # the paper's weighted average of 1 : 1 : 0.1 (the weighted sum / 2.1; the sum was the earlier default)
    assert s0.total == pytest.approx((sum(b[:5]) + sum(r[:5]) + 0.1 * sum(c[:5])) / 2.1)
    assert s0.tasks[2].combined == pytest.approx((b[2] + r[2] + 0.1 * c[2]) / 2.1)
    s1 = out[("vlm", "img1", "jpeg", 3)]
    assert s1.total == pytest.approx((sum(b[5:]) + sum(r[5:]) + 0.1 * sum(c[5:])) / 2.1)


def test_cognition_config_variants():
    cfg = CognitionConfig(bleu_variant="coco", weights=CognitionWeights(bleu=0.0, rouge_l=0.0, cider_d=1.0))
    ps = score_pairs(HYPS, REFS, cfg)
    assert [p.combined for p in ps] == pytest.approx(text.cider_d(HYPS, REFS))
    assert [p.bleu for p in ps] == pytest.approx(text.bleu(HYPS, REFS, variant="coco"))
    with pytest.raises(InvalidInputError):
        cognition_scores({"a": (REFS[:5], HYPS[:4])})
    with pytest.raises(InvalidInputError):
        cognition_scores({"a": ("one answer", "one answer")})


def test_decision_hand_computed():
    a = np.array([0.03, 0.0, 0.04, 0.0, 0.0, 0.1, 1.0])
    b = np.array([0.0, 0.0, 0.04, 0.0, 0.0, -0.1, 0.25])
    p = decision_parts(a, b, PP)[0]
    assert p.position == pytest.approx(1 - 0.03 / (0.05 + 0.04))
    assert p.rotation == pytest.approx(0.0)  # opposite yaw directions: cos = -1
    assert p.state == pytest.approx(0.25)
    assert p.score == pytest.approx((p.position + p.rotation + p.state) / 3)
    assert decision_parts(a, a, PP)[0].score == pytest.approx(1.0)
    q = decision_parts(a, b, DecisionConfig(normalisation="per_pair", position_scale_m=0.1))[0]
    assert q.position == pytest.approx(0.7)


def test_decision_rotation_convention_against_scipy():
    rng = np.random.default_rng(0)
    A = np.c_[rng.normal(0, 0.02, (20, 3)), rng.normal(0, 0.3, (20, 3)), rng.uniform(0, 1, 20)]
    B = np.c_[rng.normal(0, 0.02, (20, 3)), rng.normal(0, 0.3, (20, 3)), rng.uniform(0, 1, 20)]
    parts = decision_parts(A, B, PP)
    for a, b, p in zip(A, B, parts):
        ra = Rotation.from_matrix(Rotation.from_euler("z", a[5]).as_matrix() @ Rotation.from_euler("y", a[4]).as_matrix()
                                  @ Rotation.from_euler("x", a[3]).as_matrix()).as_rotvec()
        rb = Rotation.from_matrix(Rotation.from_euler("z", b[5]).as_matrix() @ Rotation.from_euler("y", b[4]).as_matrix()
                                  @ Rotation.from_euler("x", b[3]).as_matrix()).as_rotvec()
        cos = ra @ rb / np.linalg.norm(ra) / np.linalg.norm(rb)
        assert p.rotation == pytest.approx((1 + cos) / 2, abs=1e-9)
        assert 0 <= p.position <= 1 and 0 <= p.score <= 1
    rpy = decision_parts(A, B, DecisionConfig(normalisation="per_pair", rotation_direction="rpy"))
    cos = np.einsum("ij,ij->i", A[:, 3:6], B[:, 3:6]) / np.linalg.norm(A[:, 3:6], axis=1) / np.linalg.norm(B[:, 3:6], axis=1)
    assert [p.rotation for p in rpy] == pytest.approx((1 + cos) / 2)


def test_decision_zero_rotations_and_actions():
    z = Action.hold(1.0)
    rot = Action(np.array([0, 0, 0, 0.2, 0, 0, 1.0]))
    assert decision_parts(z, z, PP)[0].rotation == 1.0 and decision_parts(z, z, PP)[0].position == 1.0
    assert decision_parts(z, rot, PP)[0].rotation == 0.5
    img = decision_score([z] * 5, [rot] * 5, PP)
    assert len(img.tasks) == 5
    assert img.total == pytest.approx(5 * (1 + 0.5 + 1) / 3)
    assert img.rotation == pytest.approx(2.5)
    with pytest.raises(InvalidInputError):
        decision_parts(np.zeros((2, 7)), np.zeros((3, 7)))
    with pytest.raises(InvalidInputError):
        decision_parts(np.zeros(6), np.zeros(6))
    with pytest.raises(InvalidInputError):
        decision_parts(np.r_[np.zeros(6), 2.0], np.zeros(7))


def test_decision_floors_for_tiny_motions():
    a = np.array([1e-5, 0, 0, 1e-5, 0, 0, 1.0])
    b = np.array([-1e-5, 0, 0, -1e-5, 0, 0, 1.0])  # opposite, but both below the noise floors
    p = decision_parts(a, b, PP)[0]
    assert p.position == pytest.approx(1 - 2e-5 / 1e-3) and p.rotation == 1.0
    strict = decision_parts(a, b, DecisionConfig(normalisation="per_pair", position_floor_m=1e-9, zero_rotation=1e-9))[0]
    assert strict.position == pytest.approx(0.0) and strict.rotation == pytest.approx(0.0)


def test_decision_corpus_normalisation_hand_computed():
    """Corpus form: distances min-max normalised over the corpus, then 1 - normalised distance (rotation
    distance: the relative angle option; the paper's cosine default: tests/project/test_paper_defaults.py)."""
    ref = np.array([0.0, 0, 0, 0, 0, 0, 1.0])
    img1 = (np.array([ref, ref]), np.array([[0.01, 0, 0, 0, 0, 0.1, 1.0], [0.03, 0, 0, 0, 0, 0.3, 0.5]]))
    img2 = (np.array([ref]), np.array([[0.0, 0.04, 0, 0, 0, -0.2, 1.0]]))
    s1, s2 = decision_corpus([img1, img2], ANGLE)
    # position distances 0.01, 0.03, 0.04 m: min 0.01, max 0.04 -> 1 - (d - 0.01) / 0.03 = 1, 1/3, 0
    # rotation angles 0.1, 0.3, 0.2 rad: min 0.1, max 0.3 -> 1, 0, 0.5
    assert [t.position for t in s1.tasks] == pytest.approx([1.0, 1 / 3])
    assert [t.rotation for t in s1.tasks] == pytest.approx([1.0, 0.0])
    assert [t.state for t in s1.tasks] == pytest.approx([1.0, 0.5])
    assert s1.total == pytest.approx((1 + 1 + 1) / 3 + (1 / 3 + 0 + 0.5) / 3)
    assert (s2.tasks[0].position, s2.tasks[0].rotation, s2.total) == pytest.approx((0.0, 0.5, (0 + 0.5 + 1) / 3))
    # the same image scored alone has another corpus: its range is its own pair
    alone = decision_score(*img1, ANGLE)
    assert [t.position for t in alone.tasks] == pytest.approx([1.0, 0.0])
    # a fitted range applies to new pairs (clipped to 0..1 outside it)
    rng = DecisionRange.fit([img1, img2], ANGLE)
    assert (rng.position, rng.rotation) == (pytest.approx((0.01, 0.04)), pytest.approx((0.1, 0.3)))
    far = decision_parts(ref, np.array([0.5, 0, 0, 0, 0, 0.2, 1.0]), ANGLE, corpus=rng)[0]
    assert (far.position, far.rotation) == pytest.approx((0.0, 0.5))
    # no spread: every pair scores 1 on that part
    same = decision_corpus([(np.array([ref]), np.array([[0.01, 0, 0, 0, 0, 0, 1.0]]))] * 2)
    assert same[0].total == pytest.approx(1.0)


def test_decision_corpus_rotation_distance_is_the_relative_angle():
    rng = np.random.default_rng(1)
    A = np.c_[rng.normal(0, 0.02, (12, 3)), rng.normal(0, 0.3, (12, 3)), rng.uniform(0, 1, 12)]
    B = np.c_[rng.normal(0, 0.02, (12, 3)), rng.normal(0, 0.3, (12, 3)), rng.uniform(0, 1, 12)]
    ang = np.array([np.linalg.norm((Rotation.from_euler("xyz", a[3:6]).inv() * Rotation.from_euler("xyz", b[3:6])).as_rotvec())
                    for a, b in zip(A, B)])
    dt = np.linalg.norm(A[:, :3] - B[:, :3], axis=1)
    parts = decision_parts(A, B, ANGLE)
    assert [p.rotation for p in parts] == pytest.approx(1 - (ang - ang.min()) / np.ptp(ang), abs=1e-9)
    assert [p.position for p in parts] == pytest.approx(1 - (dt - dt.min()) / np.ptp(dt), abs=1e-12)
    rpy = decision_parts(A, B, DecisionConfig(rotation="angle", rotation_direction="rpy"))
    dr = np.linalg.norm(A[:, 3:6] - B[:, 3:6], axis=1)
    assert [p.rotation for p in rpy] == pytest.approx(1 - (dr - dr.min()) / np.ptp(dr))
    with pytest.raises(ConfigError, match="normalisation"):
        decision_parts(A, B, DecisionConfig(normalisation="global"))


def test_two_arm_actions_score_the_arm_with_the_larger_motion():
    left = [0.01, 0, 0, 0, 0, 0, 1.0]
    right = [0, 0.05, 0, 0, 0, 0.2, 0.0]
    ref = np.array([left + right, right + left])  # the moving arm is the right one, then the left one
    dist = np.array([[0.01, 0, 0, 0, 0, 0, 1.0] + [0, 0.02, 0, 0, 0, 0.2, 0.0],
                     [0, 0.05, 0, 0, 0, 0.2, 1.0] + [0.09, 0, 0, 0, 0, 0, 0.0]])
    assert arm_of_larger_motion(ref[0]) == 1 and arm_of_larger_motion(ref[1]) == 0
    assert arm_of_larger_motion(np.r_[left, left]) == 0  # tie: the first arm
    p = decision_parts(ref, dist, PP)
    # pair 0 on arm 1: |dt| = 0.03 of |t_a| + |t_b| = 0.07; pair 1 on arm 0: gripper 0 -> 1
    assert p[0].position == pytest.approx(1 - 0.03 / 0.07) and p[0].state == 1.0
    assert p[1].position == pytest.approx(1.0) and p[1].state == 0.0
    q = decision_parts(ref, dist, DecisionConfig(normalisation="per_pair", arm=0))
    assert q[0].position == pytest.approx(1.0) and q[1].state == 0.0
    with pytest.raises(ConfigError, match="arm"):
        decision_parts(ref, dist, DecisionConfig(arm=2))
    with pytest.raises(InvalidInputError, match="7 k"):
        decision_parts(np.zeros((1, 10)), np.zeros((1, 10)))
