"""The Eval Agent accepts a scorer as the paper does (A2Eval §3.3: "execution
succeeds and produces valid metrics"); agreement with the reference scorer is our stricter option."""
from __future__ import annotations

import json

import numpy as np
import pytest

from embeval.errors import ConfigError
from embeval_analysis.a2eval.eval_agent import EvalAgent, EvalAgentConfig, SynthesisResult, probe_predictions
from embeval_analysis.a2eval.procedural import procedural_pool
from embeval_analysis.a2eval.scorers import reference_score


class _FixedCoder:
    """Answers every Evaluator request with working inference code and every Scorer request with one
    fixed scorer: ``scores`` maps a prediction to a score (a valid number, but not the reference's)."""

    id = "fixed-coder"

    def __init__(self, scorer_code: str):
        self.scorer_code, self.scorer_calls = scorer_code, 0

    def chat(self, messages, json_schema=None, **gen):
        if "eval_score" in messages[-1]["content"]:
            self.scorer_calls += 1
            return json.dumps({"code": self.scorer_code})
        return json.dumps({"code": "def run_vlm_inference(doc):\n    return generate(doc['question'], doc['image_ids'])\n"})


class _Subject:
    id = "answers-A"

    def generate(self, images, prompt):
        return "A"


HALF = "def eval_score(doc, prediction):\n    return 0.5\n"  # runs, valid in [0, 1], agrees with nothing
ITEMS = [it for it in procedural_pool(n_items=80, seed=3) if it.answer_type == "mc"][:4]


def _probe_agreement(items, rng_seed: int, value: float) -> float:
    """The scorer's agreement on the probe set, computed by hand: the probe predictions of each item and
    the real subject's answer, scored by the reference scorer, compared with a constant score."""
    rng = np.random.default_rng(rng_seed)
    probe = [items[i] for i in rng.choice(len(items), min(4, len(items)), replace=False)]
    preds = [(it, p) for it in probe for p in probe_predictions(it, rng)] + [(it, "A") for it in probe]
    ref = np.array([reference_score(it, p) for it, p in preds])
    return float(np.mean(np.isclose(ref, value)))


def test_default_accepts_a_scorer_that_runs_and_returns_valid_scores():
    coder = _FixedCoder(HALF)
    syn = EvalAgent(EvalAgentConfig(probe_docs=4), evaluator=coder, scorer=coder).synthesise(ITEMS, _Subject(), seed=0)
    assert syn.acceptance == "paper" and "mc" in syn.scorer_code and not syn.failed
    assert coder.scorer_calls == 1  # accepted at the first attempt, no feedback
    assert syn.probe_fidelity["mc"] == pytest.approx(_probe_agreement(ITEMS, 0, 0.5))
    assert syn.probe_fidelity["mc"] < 0.95  # recorded, though it does not decide acceptance
    assert "0/1 also agree" in syn.acceptance_summary()


def test_the_option_requires_agreement_with_the_reference_as_before():
    coder = _FixedCoder(HALF)
    cfg = EvalAgentConfig(probe_docs=4, acceptance="reference_agreement", max_attempts=3)
    syn = EvalAgent(cfg, evaluator=coder, scorer=coder).synthesise(ITEMS, _Subject(), seed=0)
    assert "mc" not in syn.scorer_code and "disagrees with the reference" in syn.failed["scorer:mc"]
    assert coder.scorer_calls == 3
    assert [a.fidelity for a in syn.attempts if a.role == "scorer"] == [pytest.approx(_probe_agreement(ITEMS, 0, 0.5))] * 3


@pytest.mark.parametrize("code, why", [("def eval_score(doc, prediction):\n    return 1.5\n", "output rejected"),
                                       ("def eval_score(doc, prediction):\n    return float('nan')\n", "output rejected"),
                                       ("def eval_score(doc, prediction):\n    return 'high'\n", "output rejected"),
                                       ("def eval_score(doc, prediction):\n    raise KeyError('x')\n", "KeyError")])
def test_the_paper_rule_still_refuses_scorers_without_valid_metrics(code, why):
    coder = _FixedCoder(code)
    syn = EvalAgent(EvalAgentConfig(probe_docs=2, max_attempts=2), evaluator=coder, scorer=coder).synthesise(
        ITEMS, _Subject(), seed=0)
    assert "mc" not in syn.scorer_code and why in syn.failed["scorer:mc"]


def test_unknown_acceptance_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="eval_agent.acceptance: 'strict' is not one of"):
        EvalAgentConfig.from_dict({"acceptance": "strict"}).check_config()


def test_summary_names_both_rules():
    s = SynthesisResult(scorer_code={"mc": "", "numeric": ""}, probe_fidelity={"mc": 1.0, "numeric": 0.5})
    assert s.acceptance_summary().startswith("scorer acceptance: paper") and "1/2 also agree" in s.acceptance_summary()
    s.acceptance = "reference_agreement"
    assert "reference_agreement" in s.acceptance_summary()
