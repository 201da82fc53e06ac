"""The Assigner: N_v voters label every example with one capability dimension or ``other``.

The paper (A2Eval, arXiv 2602.01640) labels every example by a majority vote of N_v = 5 voters.

Voters:
- :class:`LLMVoter`: ``llm.choose(prompt, options)`` over the dimension names plus ``other``
  (for a local model such as the embedded Gemma this is a log-likelihood choice). ``max_calls``
  bounds the model's calls (a cost cap: the embedded Gemma takes seconds a call). What happens to
  the items past the cap is ``beyond_cap``: ``"stand_in"`` (default) hands them to a stand-in model
  (a rule-based voter unless given), so every item still gets this voter's vote and N_v = 5 votes
  in all; ``"abstain"`` (option, embeval's earlier behaviour) votes ``None`` there, so
  those items get one vote fewer. The votes the stand-in cast are counted (``stand_in_votes``);
- :class:`EmbeddingVoter`: MiniLM cosine similarity between the item text and each dimension's
  ``name: description``; ``other`` when the best similarity is below ``threshold``.

Aggregation: majority vote over the non-abstaining voters. A **tie** is two or more labels with the
most votes (with 5 voters: 2-2-1, or 1-1-1-1-1); the paper does not say how it breaks one, so the
rule is explicit and recorded per item (``tie=True`` and the ``tied`` labels):
``tie_rule="first_voter"`` (default): among the tied labels, the one chosen by the earliest voter in
the configured order wins; ``tie_rule="other"``: a tied item is labelled ``other`` (no majority, so it
is not sampled). Per-item agreement = share of voting voters that chose the most-voted label.
Fleiss' kappa (Fleiss 1971) over the voters that rated every item, and over all voters on the
items every voter rated (with ``beyond_cap="abstain"``, budgeted voters abstain past their cap).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

OTHER = "other"
#: what a budgeted LLM voter does past ``max_calls``
BEYOND_CAP = ("stand_in", "abstain")
#: the tie rules of :func:`majority` and what each does
TIE_RULES = {"first_voter": "among the tied labels, the one chosen by the earliest voter in the configured order",
             "other": "a tied item (no single most-voted label) is labelled other and not sampled"}


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
    fails to load on its first call, e.g. the embedded GGUF without llama-cpp-python.
    ``max_calls``: at most this many calls to ``llm``; past them ``beyond_cap="stand_in"`` (default) asks
    ``stand_in`` (default: ``fallback``, else a rule-based voter) so every item gets a vote, and
    ``beyond_cap="abstain"`` votes ``None``."""

    def __init__(self, llm: Any, variant: int = 0, max_calls: int | None = None, name: str | None = None,
                 fallback: Any = None, beyond_cap: str = "stand_in", stand_in: Any = None):
        if beyond_cap not in BEYOND_CAP:
            raise ValueError(f"beyond_cap must be one of {', '.join(BEYOND_CAP)}, got {beyond_cap!r}")
        self.llm, self.variant, self.max_calls, self.fallback = llm, variant, max_calls, fallback
        self.beyond_cap = beyond_cap
        self.stand_in = None
        if max_calls is not None and beyond_cap == "stand_in":
            if stand_in is None and fallback is None:
                from embeval_analysis.a2eval.llm import RulesLLM

                stand_in = RulesLLM(variant=4)
            self.stand_in = stand_in if stand_in is not None else fallback
        self.name = name or f"llm:{getattr(llm, 'id', 'llm')}#{variant}"
        if self.stand_in is not None:
            self.name += f" (first {max_calls} items; then stand-in {getattr(self.stand_in, 'id', 'stand-in')})"
        self.calls = 0
        self.stand_in_votes = 0

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
                if self.stand_in is None:
                    out.append(None)
                    continue
                self.stand_in_votes += 1
                ans = str(self.stand_in.choose(voter_prompt(t, dims, self.variant), options)).strip()
                out.append(ans if ans in options else OTHER)
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
    tie_rule: str = "first_voter: " + TIE_RULES["first_voter"]
    shares: dict[str, float] = field(default_factory=dict)
    kappa_voters: list[str] = field(default_factory=list)
    kappa_all_voters: float = float("nan")  # all voters, on the ``kappa_all_items`` items every voter rated
    kappa_all_items: int = 0
    tied: list[list[str]] = field(default_factory=list)  # per item: the labels tied for the most votes ([] = no tie)
    votes_per_item: dict[int, int] = field(default_factory=dict)  # number of votes cast -> items
    stand_in_votes: dict[str, int] = field(default_factory=dict)  # voter -> votes its stand-in cast past the cap

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tied_labels(votes: Sequence[str | None]) -> list[str]:
    """The labels tied for the most votes, in the order of the first voter that chose each; [] without a tie."""
    cast = [v for v in votes if v is not None]
    counts = Counter(cast)
    top = max(counts.values(), default=0)
    tied = list(dict.fromkeys(v for v in cast if counts[v] == top))
    return tied if len(tied) > 1 else []


def majority(votes: Sequence[str | None], tie_rule: str = "first_voter") -> tuple[str, float, bool]:
    """(label, agreement, tie) for one item: the most-voted label of the non-abstaining votes, its share of
    them, and whether two or more labels tied for the most votes. A tie is broken by ``tie_rule`` (see
    :data:`TIE_RULES`): ``"first_voter"`` (default) or ``"other"``. No vote at all gives ``other``."""
    if tie_rule not in TIE_RULES:
        raise ValueError(f"tie_rule must be one of {', '.join(TIE_RULES)}, got {tie_rule!r}")
    cast = [v for v in votes if v is not None]
    if not cast:
        return OTHER, 0.0, False
    counts = Counter(cast)
    top = max(counts.values())
    tied = [lab for lab, c in counts.items() if c == top]
    if len(tied) > 1 and tie_rule == "other":
        return OTHER, top / len(cast), True
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


def assign(texts: Sequence[str], dims: Sequence[Dimension], voters: Sequence[Any],
           tie_rule: str = "first_voter") -> Assignment:
    """Run every voter on every item and aggregate (majority vote, ``tie_rule``, agreement, kappa)."""
    if tie_rule not in TIE_RULES:
        raise ValueError(f"tie_rule must be one of {', '.join(TIE_RULES)}, got {tie_rule!r}")
    before = [getattr(v, "stand_in_votes", 0) for v in voters]
    per_voter = [v.vote(texts, dims) for v in voters]
    votes = [list(col) for col in zip(*per_voter)] if per_voter else [[] for _ in texts]
    labels, agree, ties = [], [], []
    for row in votes:
        lab, a, t = majority(row, tie_rule)
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
    n_cast = Counter(sum(v is not None for v in row) for row in votes)
    stand = {v.name: getattr(v, "stand_in_votes", 0) - b for v, b in zip(voters, before) if getattr(v, "stand_in", None)}
    return Assignment(labels, votes, [v.name for v in voters], agree, ties, kappa, len(votes),
                      tie_rule=f"{tie_rule}: {TIE_RULES[tie_rule]}", shares=shares,
                      kappa_voters=[voters[j].name for j in complete], kappa_all_voters=kappa_all,
                      kappa_all_items=len(full), tied=[tied_labels(row) for row in votes],
                      votes_per_item=dict(sorted(n_cast.items())), stand_in_votes=stand)
