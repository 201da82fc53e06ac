"""BLEU, ROUGE-L and CIDEr-D agree with pycocoevalcap (and smoothed BLEU with NLTK) to 1e-6."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.scoring import text

REFS = [
    "Pick up the red cup and place it on the plate.",
    "Push the blue box to the left edge of the table.",
    "Open the drawer by pulling its handle.",
    "Pour the water from the bottle into the glass.",
    "Press the green button on the panel.",
    "Twist the cap of the jar counterclockwise.",
    "Insert the peg into the round hole.",
    "Cover the bowl with the lid.",
    "Move the sponge next to the sink.",
    "Place the banana in the basket.",
    "Pull the cloth towards the robot.",
    "Pick the apple.",
]
HYPS = [
    "Pick up the red cup and put it on the plate.",
    "Push the box to the left.",
    "Pull the drawer handle to open it.",
    "Pour water into the glass from the bottle.",
    "Press the red button.",
    "Turn the jar lid.",
    "Insert the peg into the square hole on the board.",
    "Cover the bowl with the lid.",
    "I cannot see a sponge.",
    "",
    "Pull it.",
    "Pick the apple.",
]


def _coco(hyps, refs):
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    res = {i: [" ".join(text.tokenize(h))] for i, h in enumerate(hyps)}
    gts = {i: [" ".join(text.tokenize(r)) for r in ([refs[i]] if isinstance(refs[i], str) else refs[i])]
           for i in range(len(hyps))}
    _, bleu = Bleu(4).compute_score(gts, res, verbose=0)
    _, rouge = Rouge().compute_score(gts, res)
    _, cider = Cider().compute_score(gts, res)
    return np.array(bleu), np.asarray(rouge), np.asarray(cider)


def test_agree_with_pycocoevalcap_single_reference():
    bleu, rouge, cider = _coco(HYPS, REFS)
    for n in range(1, 5):
        np.testing.assert_allclose(text.bleu(HYPS, REFS, n=n, variant="coco"), bleu[n - 1], atol=1e-6)
    np.testing.assert_allclose(text.rouge_l(HYPS, REFS), rouge, atol=1e-6)
    ours = text.cider_d(HYPS, REFS)
    np.testing.assert_allclose(ours, cider, atol=1e-6)
    assert ours[7] > 5 and ours[9] == 0.0  # identical answer scores high, empty answer 0


def test_agree_with_pycocoevalcap_multi_reference():
    refs = [[r, REFS[(i + 1) % len(REFS)]] for i, r in enumerate(REFS)]
    bleu, rouge, cider = _coco(HYPS, refs)
    np.testing.assert_allclose(text.bleu(HYPS, refs, variant="coco"), bleu[3], atol=1e-6)
    np.testing.assert_allclose(text.rouge_l(HYPS, refs), rouge, atol=1e-6)
    np.testing.assert_allclose(text.cider_d(HYPS, refs), cider, atol=1e-6)


def test_single_pair_cider_is_zero_corpus_is_not():
    assert text.cider_d(HYPS[:1], REFS[:1]) == [0.0]
    assert text.cider_d(HYPS, REFS)[0] > 1.0
    # a fixed idf corpus makes a pair's score independent of its batch
    alone = text.cider_d(HYPS[:1], REFS[:1], idf_refs=REFS)
    assert alone[0] == pytest.approx(text.cider_d(HYPS, REFS)[0], abs=1e-12)


def test_smoothed_bleu_agrees_with_nltk_method2():
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    sm = SmoothingFunction().method2
    ours = text.bleu(HYPS, REFS, n=4, variant="smooth")
    for h, r, o in zip(HYPS, REFS, ours):
        th, tr = text.tokenize(h), text.tokenize(r)
        ref = sentence_bleu([tr], th, smoothing_function=sm, auto_reweigh=False) if th else 0.0
        assert o == pytest.approx(ref, abs=1e-9), (h, r)
    # short answers: coco BLEU-4 collapses, the smoothed one does not
    i = HYPS.index("Press the red button.")  # no matching 4-gram (nor trigram)
    assert text.bleu([HYPS[i]], [REFS[i]], variant="coco")[0] < 1e-3 < 0.2 < ours[i]


def test_bleu_smooth_hand_computed():
    # hyp "a b c", ref "a b d": p1 = 2/3, p2 = (1+1)/(2+1), p3 = (0+1)/(1+1), p4 = (0+1)/(1+1); BP = 1
    expected = ((2 / 3) * (2 / 3) * 0.5 * 0.5) ** 0.25
    assert text.bleu(["a b c"], ["a b d"])[0] == pytest.approx(expected, abs=1e-12)


def test_rouge_hand_computed():
    # LCS("a b c d", "a c d e f") = 3; P = 3/4, R = 3/5; beta = 1.2
    p, r, b = 0.75, 0.6, 1.2
    assert text.rouge_l(["a b c d"], ["a c d e f"])[0] == pytest.approx((1 + b * b) * p * r / (r + b * b * p), abs=1e-12)
    assert text.rouge_l([""], [""])[0] == 1.0 and text.rouge_l(["a"], [""])[0] == 0.0


def test_tokenizer():
    assert text.tokenize("Don't push it's handle, 3.5 cm left-hand!") == ["do", "n't", "push", "it", "'s", "handle",
                                                                          "3.5", "cm", "left-hand"]
    assert text.tokenize("  ") == []


def test_errors():
    from embeval.errors import ConfigError, InvalidInputError

    with pytest.raises(InvalidInputError):
        text.bleu(["a"], ["a", "b"])
    with pytest.raises(InvalidInputError):
        text.bleu("a", ["a"])
    with pytest.raises(ConfigError):
        text.bleu(["a"], ["a"], variant="sacre")
    with pytest.raises(InvalidInputError):
        text.cider_d(["a"], [[]])
