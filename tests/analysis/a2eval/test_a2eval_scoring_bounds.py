"""Host-side handling of what sandboxed, LLM-written code returns: bounded scoring and numbers of any type.

Attacks: a 2 KB prediction ``"answer" + 2000 spaces + "x"`` cost 43 s of host CPU in ``mc_index`` (three adjacent
``\\s*``), a 3.5 MB prediction passed the sandbox's checks, and a score of ``10**400`` raised OverflowError in
``score_check`` (ending synthesis instead of rejecting that output).
"""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from embeval_analysis.a2eval.sandbox import score_check, text_check
from embeval_analysis.a2eval.scorers import MAX_PREDICTION_CHARS, REFERENCE_SCORERS, mc_index, norm_text

OPTIONS = ["a red cube", "a blue ball", "a green cone"]


@pytest.mark.parametrize("text,want", [
    ("B", 1), ("(B)", 1), ("B.", 1), ("Answer: B", 1), ("The answer is C", 2), ("answer:A", 0), ("answer is: B", 1),
    ("answer is C.", 2), ("we pick [A] here", 0), ("a blue ball", 1), ("it is a green cone, clearly", 2), ("Z", None),
    ("nothing here", None),
])
def test_mc_index_reads_the_same_spellings(text, want):
    assert mc_index(text, OPTIONS) == want


def test_norm_text_is_unchanged_on_ordinary_text():
    assert norm_text("  Red ,  green,blue\t\n cube!  ") == "red,green,blue cube"
    assert norm_text("A , B") == "a,b"


@pytest.mark.parametrize("pred", [
    "answer" + " " * 2000 + "x",
    "answer" + " " * (MAX_PREDICTION_CHARS - 8) + "x",
    ("answer is " * 3000)[:MAX_PREDICTION_CHARS],
    "x" + " " * (MAX_PREDICTION_CHARS - 2) + "x",
    ("a , " * 5000)[:MAX_PREDICTION_CHARS],
    ("1a" * 9000)[:MAX_PREDICTION_CHARS],
])
def test_every_reference_scorer_is_fast_on_crafted_predictions_at_the_cap(pred):
    item = SimpleNamespace(answer="B", options=OPTIONS, tolerance=None, mask=[0, 0, 10, 10])
    for name, scorer in REFERENCE_SCORERS.items():
        if name == "numeric":
            item.answer = "3"
        t = time.process_time()
        scorer(item, pred)
        assert time.process_time() - t < 0.5, name  # before: 43 s for the first one (mc)


def test_sandbox_text_outputs_are_capped():
    assert text_check("B") is None
    assert "at most" in text_check("x" * (MAX_PREDICTION_CHARS + 1))
    assert text_check(3) is not None


@pytest.mark.parametrize("v", [10 ** 400, -10 ** 400, 2, float("nan"), float("inf"), 1.5])
def test_score_check_rejects_any_out_of_range_number_in_one_line(v):
    msg = score_check(0.0, 1.0)(v)
    assert msg is not None and "\n" not in msg and len(msg) < 200


@pytest.mark.parametrize("v", [0, 1, 0.25, True])
def test_score_check_accepts_scores_in_range(v):
    assert (score_check(0.0, 1.0)(v) is None) == (not isinstance(v, bool))
