"""The Assigner: N_v voters label every example with one capability dimension or ``other``.

Voters:
- :class:`LLMVoter`: ``llm.choose(prompt, options)`` over the dimension names plus ``other``
  (for a local model such as the embedded Gemma this is a log-likelihood choice); ``max_calls``
  bounds the calls, beyond which the voter abstains (``None``);
- :class:`EmbeddingVoter`: MiniLM cosine similarity between the item text and each dimension's
  ``name: description``; ``other`` when the best similarity is below ``threshold``.

Aggregation: majority vote over the non-abstaining voters. **Tie rule** (recorded per item as
``tie=True``): among the tied labels, the one chosen by the earliest voter in the configured
order wins. Per-item agreement = share of voting voters that chose the winning label.
Fleiss' kappa (Fleiss 1971) over the voters that rated every item, and over all voters on the
items every voter rated (budgeted LLM voters abstain beyond their budget).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

OTHER = "other"


@dataclass
class Dimension:
    name: str
    description: str

    def line(self) -> str:
        return f"- {self.name}: {self.description}"


def voter_prompt(item_text: str, dims: Sequence[Dimension], variant: int = 0) -> str:
    head = ["Which capability does this benchmark example test? Choose one dimension, or other.",
            "Label the embodied-reasoning skill this question mainly needs (or other).",
            "A robot evaluation item follows. Which capability dimension does it belong to?"][variant % 3]
    body = "\n".join(d.line() for d in dims)
    return f"{head}\nDimensions:\n{body}\n- other: none of the above\n<item>\n{item_text}\n</item>\nAnswer:"


class LLMVoter:
    """``fallback``: an LLM used instead (with a printed note, and the voter renamed) if ``llm``
    fails to load on its first call, e.g. the embedded GGUF without llama-cpp-python."""

    def __init__(self, llm: Any, variant: int = 0, max_calls: int | None = None, name: str | None = None,
                 fallback: Any = None):
        self.llm, self.variant, self.max_calls, self.fallback = llm, variant, max_calls, fallback
        self.name = name or f"llm:{getattr(llm, 'id', 'llm')}#{variant}"
        self.calls = 0

    def _choose(self, prompt: str, options: list[str]) -> str:
        from embeval.errors import EmbevalError

        try:
            return self.llm.choose(prompt, options)
        except (EmbevalError, ImportError) as exc:
            if self.fallback is None or self.llm is self.fallback:
                raise
            print(f"a2eval: voter {self.name} unavailable ({str(exc)[:100]}); "
                  f"using {getattr(self.fallback, 'id', 'fallback')} instead")
            self.name = f"llm:{getattr(self.fallback, 'id', 'fallback')}#{self.variant} (fallback for {self.name})"
            self.llm, self.max_calls = self.fallback, None
            return self.llm.choose(prompt, options)

    def vote(self, texts: Sequence[str], dims: Sequence[Dimension]) -> list[str | None]:
        options = [d.name for d in dims] + [OTHER]
        out: list[str | None] = []
        for t in texts:
            if self.max_calls is not None and self.calls >= self.max_calls:
                out.append(None)
                continue
            self.calls += 1
            ans = str(self._choose(voter_prompt(t, dims, self.variant), options)).strip()
            out.append(ans if ans in options else OTHER)
        return out


class EmbeddingVoter:
    def __init__(self, threshold: float = 0.05, encoder=None, name: str = "embedding:minilm"):
        self.threshold, self.name = threshold, name
        if encoder is None:
            from embeval_analysis.a2eval.sampling import minilm_text

            encoder = minilm_text
        self.encode = encoder

    def vote(self, texts: Sequence[str], dims: Sequence[Dimension]) -> list[str | None]:
        T = np.asarray(self.encode(list(texts)), float)
        D = np.asarray(self.encode([f"{d.name}: {d.description}" for d in dims]), float)
        T /= np.maximum(np.linalg.norm(T, axis=1, keepdims=True), 1e-12)
        D /= np.maximum(np.linalg.norm(D, axis=1, keepdims=True), 1e-12)
        S = T @ D.T
        return [dims[int(np.argmax(s))].name if s.max() >= self.threshold else OTHER for s in S]


@dataclass
class Assignment:
    """Labels for every pool item with the votes behind them."""

    labels: list[str]
    votes: list[list[str | None]]  # items x voters
    voters: list[str]
    agreement: list[float]
    tie: list[bool]
    kappa: float  # Fleiss' kappa of the voters that rated every item (``kappa_voters``), over all items
    kappa_items: int
    tie_rule: str = "earliest voter in configured order among the tied labels"
    shares: dict[str, float] = field(default_factory=dict)
    kappa_voters: list[str] = field(default_factory=list)
    kappa_all_voters: float = float("nan")  # all voters, on the ``kappa_all_items`` items every voter rated
    kappa_all_items: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def majority(votes: Sequence[str | None]) -> tuple[str, float, bool]:
    """(label, agreement, tie) for one item; see module docstring for the tie rule."""
    cast = [v for v in votes if v is not None]
    if not cast:
        return OTHER, 0.0, False
    counts = Counter(cast)
    top = max(counts.values())
    tied = [lab for lab, c in counts.items() if c == top]
    label = next(v for v in cast if v in tied)  # earliest voter among the tied labels
    return label, top / len(cast), len(tied) > 1


def fleiss_kappa(table: np.ndarray) -> float:
    """Fleiss' kappa from an items x categories count table (every row sums to the number of raters)."""
    t = np.asarray(table, float)
    n = t.sum(axis=1)
    if len(t) == 0 or np.any(n != n[0]) or n[0] < 2:
        raise ValueError("fleiss_kappa needs >= 1 item and the same number (>= 2) of ratings per item")
    N, r = t.shape[0], n[0]
    p_j = t.sum(axis=0) / (N * r)
    P_i = ((t * t).sum(axis=1) - r) / (r * (r - 1))
    P_bar, P_e = P_i.mean(), (p_j ** 2).sum()
    if np.isclose(P_e, 1.0):
        return 1.0 if np.isclose(P_bar, 1.0) else 0.0
    return float((P_bar - P_e) / (1 - P_e))


def assign(texts: Sequence[str], dims: Sequence[Dimension], voters: Sequence[Any]) -> Assignment:
    """Run every voter on every item and aggregate (majority vote, tie rule, agreement, kappa)."""
    per_voter = [v.vote(texts, dims) for v in voters]
    votes = [list(col) for col in zip(*per_voter)] if per_voter else [[] for _ in texts]
    labels, agree, ties = [], [], []
    for row in votes:
        lab, a, t = majority(row)
        labels.append(lab), agree.append(a), ties.append(t)
    cats = [d.name for d in dims] + [OTHER]

    def kappa_of(rows):
        table = np.array([[sum(v == c for v in row) for c in cats] for row in rows])
        return fleiss_kappa(table)

    # kappa over the voters that rated every item (budgeted voters that abstained are left out) ...
    complete = [j for j in range(len(voters)) if all(row[j] is not None for row in votes)]
    kappa = kappa_of([[row[j] for j in complete] for row in votes]) if len(complete) >= 2 and votes else float("nan")
    # ... and over all voters on the items every voter rated
    full = [row for row in votes if all(v is not None for v in row)]
    kappa_all = kappa_of(full) if full and len(voters) >= 2 else float("nan")
    counts = Counter(labels)
    shares = {c: counts.get(c, 0) / max(len(labels), 1) for c in cats}
    return Assignment(labels, votes, [v.name for v in voters], agree, ties, kappa, len(votes), shares=shares,
                      kappa_voters=[voters[j].name for j in complete], kappa_all_voters=kappa_all,
                      kappa_all_items=len(full))
