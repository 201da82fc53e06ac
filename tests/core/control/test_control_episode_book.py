"""The ROS scorer's episode book (pure Python): pairing with the reference and the Execution score
through embeval.scoring.execution (no local copy of the formula, malformed poses fail loudly)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from embeval.control import EpisodeBook, score_pair
from embeval.scoring.record import EpisodeRecord
from embeval.errors import InvalidInputError

DOWN = [math.pi, 0.0, 0.0]
REF_TCP = [0.50, 0.10, 0.20, *DOWN]
ACT = [0.01, 0.0, -0.01, 0.0, 0.0, 0.1, 1.0]


def _ep(distortion="gaussian_blur", tcp=(0.53, 0.14, 0.20), **kw) -> EpisodeRecord:
    final = None if tcp is None else [*tcp, *DOWN]
    return EpisodeRecord(item="it", distortion=distortion, level=0 if distortion == "none" else 3, actions=[list(ACT)],
                   final_tcp=final, **kw)


def test_execution_score_by_distance_matches_numpy():
    ref = _ep("none", tcp=REF_TCP[:3])
    dist = _ep(tcp=(0.53, 0.14, 0.20))  # 3-4-5 triangle: 5 cm
    s = score_pair(ref, dist)
    d_cm = 100 * np.linalg.norm(np.subtract(ref.final_tcp[:3], dist.final_tcp[:3]))
    assert s["execution"] == pytest.approx(100 - d_cm) == pytest.approx(95.0)
    assert s["execution_reason"] == "failure" and s["execution_distance_cm"] == pytest.approx(5.0)
    assert s["decision"] == pytest.approx(1.0)  # identical first actions
    far = score_pair(ref, _ep(tcp=(0.50, 0.10, 1.50)))  # 130 cm: the paper's 100 - d is not floored
    assert far["execution"] == pytest.approx(-30.0) and far["execution_distance_cm"] == pytest.approx(130.0)


def test_success_and_stop_override_the_distance():
    ref = _ep("none", tcp=REF_TCP[:3])
    assert score_pair(ref, _ep(tcp=(0.9, 0.4, 0.5), success=True))["execution"] == 100.0
    s = score_pair(ref, _ep(tcp=REF_TCP[:3], stopped=True, stop_reason="contact: wrist_3_link with table"))
    assert s["execution"] == 0.0 and s["execution_reason"] == "estop"  # same pose, but the run hit the table
    assert score_pair(ref, ref)["execution"] == 100.0  # the sanity row


def test_missing_pose_is_nan_unless_stopped():
    ref = _ep("none", tcp=REF_TCP[:3])
    assert math.isnan(score_pair(ref, _ep(tcp=None))["execution"])
    assert score_pair(ref, _ep(tcp=None, stopped=True))["execution"] == 0.0
    assert math.isnan(score_pair(_ep("none", tcp=None), _ep())["execution"])  # the reference's pose is missing


def test_malformed_pose_fails_loudly():
    ref = _ep("none", tcp=REF_TCP[:3])
    bad = _ep()
    bad.final_tcp = [0.5, 0.1]  # not a 6-vector: no silent fallback to some other formula
    with pytest.raises(InvalidInputError, match="6 finite numbers"):
        score_pair(ref, bad)


def test_book_pairs_late_reference_and_keeps_raw_episodes():
    book = EpisodeBook()
    assert book.finish(_ep("gaussian_blur", tcp=(0.52, 0.10, 0.20))) == []  # waits for its reference
    recs = book.finish(_ep("none", tcp=REF_TCP[:3]))
    assert [r["distortion"] for r in recs] == ["gaussian_blur", "none"]
    assert recs[0]["scores"]["execution"] == pytest.approx(98.0) and recs[1]["scores"]["execution"] == 100.0
    assert recs[0]["raw"]["reference"]["final_tcp"] == REF_TCP
    late = book.finish(_ep("darken", tcp=(0.50, 0.10, 0.23)))  # reference known: scored at once
    assert late[0]["scores"]["execution"] == pytest.approx(97.0) and len(book.records) == 3
