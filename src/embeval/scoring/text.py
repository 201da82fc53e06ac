"""Text similarity metrics for answer pairs: BLEU, ROUGE-L, CIDEr-D (pure Python, no Java).

Conventions
- Tokenisation (:func:`tokenize`): lower case, punctuation dropped as pycocoevalcap's PTBTokenizer
  output does, English clitics split off (``don't`` -> ``do n't``), whitespace split. Pass
  already-tokenised text with ``tokenizer=str.split``.
- A *corpus* is a list of candidates (hypotheses) and, per candidate, one or more references.
  In Embodied-IQA the candidate is the answer for the distorted image and the reference the
  answer for the reference image.
- BLEU-n (default n = 4, uniform weights), two variants:
  ``"smooth"``: sentence BLEU with add-one smoothing for orders >= 2 (Lin & Och 2004; NLTK's
  ``SmoothingFunction().method2``), closest reference length, 0 when no unigram matches;
  ``"coco"``: pycocoevalcap's per-sentence BLEU (epsilon smoothing 1e-15 / 1e-9, which collapses
  to ~0 whenever an order has no match - usual for short answers).
- ROUGE-L: LCS-based F-measure with beta = 1.2, best precision and recall over the references
  (pycocoevalcap's definition).
- CIDEr-D: pycocoevalcap's implementation (n = 1..4, sigma = 6, clipped tf-idf, Gaussian length
  penalty, x10; range 0..10). Document frequencies come from the references of the *whole corpus*
  scored in one call (or of a fixed ``idf_refs`` corpus): a corpus of one pair gives CIDEr-D 0.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from embeval.errors import ConfigError, InvalidInputError

Tokenizer = Callable[[str], list]

# PTBTokenizer punctuation that pycocoevalcap drops after tokenising
_PUNCT = re.compile(r"[\"'`.,?!:;()\[\]{}<>]|--+|-(?=\s)|(?<=\s)-|^-|-$|\.\.\.")
_CLITIC = re.compile(r"(?i)\b(\w+)(n't|'s|'re|'ve|'ll|'d|'m)\b")


def tokenize(text: str) -> list[str]:
    """PTB-like tokens: lower case, clitics split as PTB does (``don't`` -> ``do n't``, ``it's`` ->
    ``it 's``), punctuation removed, whitespace split. Hyphenated words and decimals (``3.5``) stay
    one token."""
    if not isinstance(text, str):
        raise InvalidInputError(f"answer must be a string, got {type(text).__name__}")
    t = text.lower()
    t = _CLITIC.sub(lambda m: f"{m.group(1)} {m.group(2)}", t)
    t = re.sub(r"(?<=\d)\.(?=\d)", "\0", t)  # protect decimal points
    keep = {"n't", "'s", "'re", "'ve", "'ll", "'d", "'m"}
    out = []
    for tok in t.split():
        if tok in keep:
            out.append(tok)
            continue
        tok = _PUNCT.sub(" ", tok)
        out.extend(x.replace("\0", ".") for x in tok.split())
    return out


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    c: Counter = Counter()
    for k in range(1, n + 1):
        c.update(tuple(tokens[i:i + k]) for i in range(len(tokens) - k + 1))
    return c


def _as_refs(refs) -> list[list[str]]:
    return [refs] if isinstance(refs, str) else list(refs)


def _prep(hyps: Sequence[str], refs: Sequence, tokenizer: Tokenizer):
    if isinstance(hyps, str):
        raise InvalidInputError("hyps must be a list of answers, not one string; wrap it: [answer]")
    if len(hyps) != len(refs):
        raise InvalidInputError(f"{len(hyps)} candidates but {len(refs)} reference entries; they must pair up")
    th = [tokenizer(h) for h in hyps]
    tr = []
    for r in refs:
        rs = _as_refs(r)
        if not rs:
            raise InvalidInputError("every candidate needs at least one reference answer")
        tr.append([tokenizer(x) for x in rs])
    return th, tr


# ----------------------------------------------------------------------------------------- BLEU
def _bleu_counts(hyp: list[str], refs: list[list[str]], n: int):
    hc = _ngrams(hyp, n)
    maxref: Counter = Counter()
    for r in refs:
        for g, c in _ngrams(r, n).items():
            if c > maxref[g]:
                maxref[g] = c
    correct = [0] * n
    for g, c in hc.items():
        correct[len(g) - 1] += min(c, maxref[g])
    guess = [max(0, len(hyp) - k) for k in range(n)]
    return correct, guess


def _closest_ref_len(hyp_len: int, refs: list[list[str]]) -> int:
    return min((abs(len(r) - hyp_len), len(r)) for r in refs)[1]


def bleu_smooth(hyp: list[str], refs: list[list[str]], n: int = 4) -> float:
    """Sentence BLEU-n with add-one smoothing for orders >= 2 (NLTK method2) on token lists."""
    correct, guess = _bleu_counts(hyp, refs, n)
    if correct[0] == 0:
        return 0.0
    c = len(hyp)
    r = _closest_ref_len(c, refs)
    bp = 1.0 if c > r else math.exp(1 - r / c)
    logp = math.log(correct[0] / max(1, guess[0]))
    for k in range(1, n):
        logp += math.log((correct[k] + 1) / (max(1, guess[k]) + 1))
    return bp * math.exp(logp / n)


def bleu_coco(hyp: list[str], refs: list[list[str]], n: int = 4) -> float:
    """pycocoevalcap's per-sentence BLEU-n (``Bleu(n).compute_score(...)[1][n-1]``) on token lists."""
    tiny, small = 1e-15, 1e-9
    correct, guess = _bleu_counts(hyp, refs, n)
    c = len(hyp)
    r = _closest_ref_len(c, refs)
    bleu = 1.0
    for k in range(n):
        bleu *= (correct[k] + tiny) / (guess[k] + small)
    score = bleu ** (1.0 / n)
    ratio = (c + tiny) / (r + small)
    if ratio < 1:
        score *= math.exp(1 - 1 / ratio)
    return score


BLEU_VARIANTS: dict[str, Callable[..., float]] = {"smooth": bleu_smooth, "coco": bleu_coco}


def bleu(hyps: Sequence[str], refs: Sequence, n: int = 4, variant: str = "smooth",
         tokenizer: Tokenizer = tokenize) -> list[float]:
    """Per-candidate BLEU-n (see module docstring for the variants)."""
    if variant not in BLEU_VARIANTS:
        raise ConfigError(f"unknown BLEU variant {variant!r}; choose from {', '.join(BLEU_VARIANTS)}")
    if n < 1:
        raise ConfigError(f"BLEU order n must be >= 1, got {n}")
    th, tr = _prep(hyps, refs, tokenizer)
    f = BLEU_VARIANTS[variant]
    return [f(h, r, n) for h, r in zip(th, tr)]


# -------------------------------------------------------------------------------------- ROUGE-L
def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def rouge_l_tokens(hyp: list[str], refs: list[list[str]], beta: float = 1.2) -> float:
    """ROUGE-L F (pycocoevalcap's definition) on token lists; empty vs empty counts as identical (1)."""
    hyp = hyp or [""]
    prec, rec = [], []
    for r in refs:
        r = r or [""]
        lcs = _lcs(r, hyp)
        prec.append(lcs / len(hyp))
        rec.append(lcs / len(r))
    p, rr = max(prec), max(rec)
    if p == 0 or rr == 0:
        return 0.0
    return (1 + beta ** 2) * p * rr / (rr + beta ** 2 * p)


def rouge_l(hyps: Sequence[str], refs: Sequence, beta: float = 1.2, tokenizer: Tokenizer = tokenize) -> list[float]:
    """Per-candidate ROUGE-L F-measure (beta = 1.2)."""
    th, tr = _prep(hyps, refs, tokenizer)
    return [rouge_l_tokens(h, r, beta) for h, r in zip(th, tr)]


# --------------------------------------------------------------------------------------- CIDEr-D
@dataclass(frozen=True)
class _Vec:
    w: list  # per order: dict ngram -> tf-idf weight
    norm: list
    length: int  # pycocoevalcap counts *bigrams* here (its ``if n == 1``); kept for compatibility


def _cider_vec(counts: Counter, df: Counter, log_n: float, n: int) -> _Vec:
    w = [dict() for _ in range(n)]
    norm = [0.0] * n
    length = 0
    for g, tf in counts.items():
        k = len(g) - 1
        v = float(tf) * (log_n - math.log(max(1.0, df.get(g, 0.0))))
        w[k][g] = v
        norm[k] += v * v
        if k == 1:
            length += tf
    return _Vec(w, [math.sqrt(x) for x in norm], length)


def cider_d(hyps: Sequence[str], refs: Sequence, n: int = 4, sigma: float = 6.0,
            tokenizer: Tokenizer = tokenize, idf_refs: Sequence | None = None) -> list[float]:
    """Per-candidate CIDEr-D over the corpus (pycocoevalcap-compatible; 0..10).

    Document frequencies and the log corpus size come from the references of this call, or from
    ``idf_refs`` (a fixed corpus of reference answers, one entry per document) when given, so that a
    candidate's score does not depend on what else is scored with it.
    """
    th, tr = _prep(hyps, refs, tokenizer)
    ref_counts = [[_ngrams(r, n) for r in rs] for rs in tr]
    if idf_refs is None:
        docs = ref_counts
    else:
        docs = [[_ngrams(tokenizer(x), n) for x in _as_refs(r)] for r in idf_refs]
        if not docs:
            raise InvalidInputError("idf_refs is empty; give the fixed reference corpus")
    df: Counter = Counter()
    for rs in docs:
        df.update(set(g for c in rs for g in c))
    log_n = math.log(float(len(docs))) if docs else 0.0
    pen = 2 * sigma ** 2
    scores = []
    for h, rcs in zip(th, ref_counts):
        vh = _cider_vec(_ngrams(h, n), df, log_n, n)
        total = 0.0
        for rc in rcs:
            vr = _cider_vec(rc, df, log_n, n)
            delta = float(vh.length - vr.length)
            g = math.exp(-(delta ** 2) / pen)
            val = 0.0
            for k in range(n):
                s = 0.0
                wr = vr.w[k]
                for gram, x in vh.w[k].items():
                    y = wr.get(gram, 0.0)
                    s += min(x, y) * y
                if vh.norm[k] != 0 and vr.norm[k] != 0:
                    s /= vh.norm[k] * vr.norm[k]
                val += s * g
            total += val / n
        scores.append(total / len(rcs) * 10.0)
    return scores
