"""Text-metric speed: our BLEU / ROUGE-L / CIDEr-D against pycocoevalcap on the same tokenised corpus
(same run), and the cost of the correlation statistics."""
from __future__ import annotations

import numpy as np

from bench.timing import timed

WORDS = ("the a red blue green cup box bowl lid drawer handle plate bottle glass button jar peg hole "
         "left right top onto into towards next to on of gripper table edge slowly carefully").split()


def corpus(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` (candidate, reference) answer pairs of about 10 words, the candidate a perturbed reference."""
    from embeval.sim.tasks import TASKS

    verbs = [v.lower() for v in TASKS.names()]  # the registered task verbs, easiest first
    rng = np.random.default_rng(seed)
    refs, cands = [], []
    for _ in range(n):
        ref = [str(rng.choice(verbs))] + [str(w) for w in rng.choice(WORDS, int(rng.integers(6, 12)))]
        cand = [w if rng.random() > 0.3 else str(rng.choice(WORDS)) for w in ref]
        if rng.random() < 0.3:
            cand = cand[: int(rng.integers(3, len(cand) + 1))]
        refs.append(" ".join(ref))
        cands.append(" ".join(cand))
    return cands, refs


def run(quick: bool) -> list[dict]:
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    from embeval.scoring import stats, text

    n = 500 if quick else 5000
    cands, refs = corpus(n)
    res = {i: [c] for i, c in enumerate(cands)}
    gts = {i: [r] for i, r in enumerate(refs)}
    split = str.split
    rows = []
    for name, ours, coco in [
        ("BLEU-4 (coco variant)", lambda: text.bleu(cands, refs, variant="coco", tokenizer=split),
         lambda: Bleu(4).compute_score(gts, res, verbose=0)[1][3]),
        ("ROUGE-L", lambda: text.rouge_l(cands, refs, tokenizer=split), lambda: Rouge().compute_score(gts, res)[1]),
        ("CIDEr-D", lambda: text.cider_d(cands, refs, tokenizer=split), lambda: Cider().compute_score(gts, res)[1]),
    ]:
        t_ours, a = timed(ours)
        t_coco, b = timed(coco)
        rows.append({"what": name, "n": n, "ours_s": t_ours, "pycocoevalcap_s": t_coco, "speedup": t_coco / t_ours,
                     "max_abs_diff": float(np.max(np.abs(np.asarray(a) - np.asarray(b))))})
    t, _ = timed(lambda: text.bleu(cands, refs, variant="smooth", tokenizer=split))
    rows.append({"what": "BLEU-4 smoothed (default)", "n": n, "ours_s": t})
    rng = np.random.default_rng(0)
    m = 200 if quick else 1000
    x = rng.uniform(0, 1, m)
    y = 1 + 4 / (1 + np.exp(-(x - 0.5) / 0.1)) + rng.normal(0, 0.2, m)
    t, _ = timed(lambda: stats.correlations(x, y))
    rows.append({"what": "correlations (SRCC, KRCC, PLCC raw/4PL/5PL)", "n": m, "ours_s": t})
    t, _ = timed(lambda: stats.bootstrap_ci(x, y, "srcc", n_resamples=1000, seed=0))
    rows.append({"what": "bootstrap_ci srcc, 1000 resamples", "n": m, "ours_s": t})
    return rows
