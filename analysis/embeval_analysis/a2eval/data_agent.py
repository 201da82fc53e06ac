"""The Data Agent: induce capability dimensions (Proposer + Reviewer with a shared memory), assign
every example (Assigner), and sample a compact balanced suite (diversity-aware sampling).

Loop (round r = 1 .. ``max_rounds``):
1. the Proposer sees a seeded sample of item texts, the current dimensions, the last critique and
   the balance statistics, and returns dimensions as JSON (schema-validated; re-asked on errors);
2. the Reviewer sees the proposal, the sample and the balance statistics and returns a verdict,
   a critique and the retained dimensions;
3. the Assigner labels a probe sample with the retained dimensions; the label shares (and the
   share of ``other``) are the balance statistics fed back in the next round.
Stop when the dimension set is unchanged from the previous round (``"unchanged"``), the reviewer
accepts an unchanged set, or at the round cap (``"round cap"``). Every proposal, critique and
balance table is appended to the memory (JSONL, persisted when a path is given).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embeval.config import from_mapping, in_range, opts
from embeval.errors import ConfigError
from embeval_analysis.a2eval.assigner import OTHER, Assignment, Dimension, EmbeddingVoter, LLMVoter, assign
from embeval_analysis.a2eval.llm import PROPOSAL_SCHEMA, REVIEW_SCHEMA, ask_json, build_llm
from embeval_analysis.a2eval.sampling import parse_k


@dataclass
class VoterConfig:
    kind: str = field(default="llm", metadata=opts(choices=("llm", "embedding"), noun="voter kind"))  # llm | embedding
    llm: Any = "rules"  # preset name, preset mapping or subject spec (kind llm)
    variant: int = 0  # prompt variant
    max_calls: int | None = None  # LLM voters: at most this many calls to the model (a cost cap)
    # past max_calls: stand_in = a rule-based voter votes instead (every item keeps N_v votes); abstain = no vote
    beyond_cap: str = field(default="stand_in", metadata=opts(choices=("stand_in", "abstain"), noun="beyond_cap"))
    threshold: float = 0.05  # embedding voter: below -> other

    def check_config(self, where: str = "data_agent.voters[i]") -> None:
        in_range(self.variant, f"{where}.variant", 0)
        if self.max_calls is not None:
            in_range(self.max_calls, f"{where}.max_calls", 1)


@dataclass
class DataAgentConfig:
    """``data_agent`` of an A2Eval config, read by :func:`embeval.config.from_mapping` (strict): bounds in
    :meth:`check_config`, ``k_per_dim`` by :func:`~.sampling.parse_k` (so a bad K fails before any work)."""

    proposer: Any = "rules"
    reviewer: Any = "rules"
    voters: list[VoterConfig] = field(default_factory=lambda: [
        VoterConfig("llm", "rules", 0), VoterConfig("llm", {"preset": "rules", "variant": 1}, 1),
        VoterConfig("llm", {"preset": "rules", "variant": 2}, 2), VoterConfig("llm", {"preset": "rules", "variant": 3}, 0),
        VoterConfig("embedding")])
    max_rounds: int = 5
    max_retries: int = 2
    sample_size: int = 40  # items shown to the proposer / reviewer per round
    probe_size: int = 80  # items the assigner labels per round for the balance statistics
    # int, {dimension: K, default: K} or "auto" (sampling.default_k: the paper's 500/24,519 scaled)
    k_per_dim: Any = field(default="auto", metadata=opts(parse=parse_k))
    keep_other: bool = False  # sample 'other' items too (as their own stratum)
    # majority-vote ties: first_voter = the earliest voter's label among the tied; other = label the item other
    tie_rule: str = field(default="first_voter", metadata=opts(choices=("first_voter", "other"), noun="tie rule"))
    seed: int = 0
    cache: str | None = None  # LLM call cache (SQLite) shared by all roles

    def check_config(self, where: str = "data_agent") -> None:
        in_range(self.max_rounds, f"{where}.max_rounds", 1, 100)
        in_range(self.max_retries, f"{where}.max_retries", 0, 20)
        in_range(self.sample_size, f"{where}.sample_size", 1, 10_000)
        in_range(self.probe_size, f"{where}.probe_size", 1, 100_000)
        in_range(self.seed, f"{where}.seed", 0)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, where: str = "data_agent") -> "DataAgentConfig":
        """Strict reading (:func:`embeval.config.from_mapping`): unknown keys, wrong types and bounds refused."""
        return from_mapping(cls, d, where, strict=True)


@dataclass
class Round:
    round: int
    proposal: list[dict[str, str]]
    rationale: str
    verdict: str
    critique: str
    dimensions: list[str]
    balance: dict[str, float]
    seconds: float


@dataclass
class InductionResult:
    dimensions: list[Dimension]
    rounds: list[Round]
    stop_reason: str
    llm_log: list[dict[str, Any]] = field(default_factory=list)


class Memory:
    """Proposals, critiques and balance statistics of every round; appended to ``path`` (JSONL)."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else None
        self.records: list[dict[str, Any]] = []
        if self.path and self.path.exists():
            from embeval.errors import read_jsonl

            fix = "delete it to start with an empty memory (curate --out does)"
            self.records = [rec for _, rec in read_jsonl(self.path, "Data Agent memory", fix, utf8_fix=fix)]

    def add(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as fh:
                fh.write(json.dumps(rec) + "\n")

    def last(self, kind: str) -> dict[str, Any] | None:
        return next((r for r in reversed(self.records) if r.get("kind") == kind), None)


def build_voters(cfg: DataAgentConfig) -> list[Any]:
    """The configured voters. An LLM voter whose model cannot load here (e.g. llama-cpp-python not
    installed for the embedded Gemma) is replaced by a rule-based voter, named as such, with a note."""
    from embeval.errors import EmbevalError
    from embeval_analysis.a2eval.llm import RulesLLM

    out = []
    for i, v in enumerate(cfg.voters):
        if v.kind == "llm":
            try:
                llm = build_llm(v.llm, cfg.cache, f"voters[{i}]")
                out.append(LLMVoter(llm, v.variant, v.max_calls, fallback=RulesLLM(variant=4 + i),
                                    beyond_cap=v.beyond_cap))
            except (EmbevalError, ImportError) as exc:
                print(f"a2eval: voter {i} ({v.llm}) unavailable ({str(exc)[:120]}); using a rule-based voter instead")
                out.append(LLMVoter(RulesLLM(variant=4 + i), v.variant, None,
                                    name=f"llm:a2eval-rules-v{4 + i}#{v.variant} (fallback for {v.llm})"))
        elif v.kind == "embedding":
            out.append(EmbeddingVoter(v.threshold))
        else:
            raise ConfigError(f"data_agent.voters[{i}].kind must be llm or embedding, got {v.kind!r}")
    return out


class DataAgent:
    def __init__(self, cfg: DataAgentConfig | None = None, memory_path: str | Path | None = None, voters=None,
                 proposer=None, reviewer=None):
        self.cfg = cfg or DataAgentConfig()
        self.memory = Memory(memory_path)
        self.proposer = proposer or build_llm(self.cfg.proposer, self.cfg.cache, "proposer")
        self.reviewer = reviewer or build_llm(self.cfg.reviewer, self.cfg.cache, "reviewer")
        self.voters = voters if voters is not None else build_voters(self.cfg)

    def induce(self, texts: Sequence[str]) -> InductionResult:
        """Run the Proposer/Reviewer loop on the item texts; returns the final dimensions."""
        from embeval.provenance import derive_seed

        cfg = self.cfg
        dims: list[Dimension] = []
        critique, balance = "", {}
        rounds: list[Round] = []
        log: list[dict[str, Any]] = []
        stop = "round cap"
        for r in range(1, cfg.max_rounds + 1):
            t0 = time.perf_counter()
            rng = np.random.default_rng(derive_seed("a2eval-data-agent", cfg.seed, r))
            sample = [texts[i] for i in rng.choice(len(texts), min(cfg.sample_size, len(texts)), replace=False)]
            current = "\n".join(d.line() for d in dims)
            bal = json.dumps({"shares": balance}) if balance else "{}"
            history = "\n".join(  # the shared memory, compact: what was proposed and criticised so far
                f"round {m['round']} {m['kind']}: " + (", ".join(d["name"] for d in m.get("dimensions", []))
                                                      + (f" | {m['critique']}" if m.get("critique") else ""))
                for m in self.memory.records if m.get("kind") in ("proposal", "critique"))
            prompt = ("Induce the capability dimensions these embodied benchmark examples test. Give 2-12 distinct "
                      "dimensions (snake_case names, one-sentence descriptions).\n"
                      f"<samples>\n" + "\n---\n".join(sample) + "\n</samples>\n"
                      f"<current>\n{current}\n</current>\n<critique>\n{critique}\n</critique>\n<balance>\n{bal}\n</balance>\n"
                      f"<memory>\n{history}\n</memory>")
            proposal = ask_json(self.proposer, "proposer", prompt, PROPOSAL_SCHEMA, cfg.max_retries, _check_dims, log)
            self.memory.add({"kind": "proposal", "round": r, **proposal})
            rprompt = ("Review the proposed capability dimensions: merge duplicates, drop dimensions the examples do "
                       "not cover, flag imbalance. Return the verdict, a critique and the retained dimensions.\n"
                       f"<proposal>\n{json.dumps(proposal)}\n</proposal>\n<samples>\n" + "\n---\n".join(sample) +
                       f"\n</samples>\n<current>\n{current}\n</current>\n<balance>\n{bal}\n</balance>")
            review = ask_json(self.reviewer, "reviewer", rprompt, REVIEW_SCHEMA, cfg.max_retries, _check_dims, log)
            critique = review["critique"]
            self.memory.add({"kind": "critique", "round": r, **review})
            new = [Dimension(d["name"], d["description"]) for d in review["dimensions"]]
            probe_idx = rng.choice(len(texts), min(cfg.probe_size, len(texts)), replace=False)
            # balance statistics from the unbudgeted voters (budgeted ones keep their calls for the final labels)
            cheap = [v for v in self.voters if getattr(v, "max_calls", None) is None] or self.voters
            balance = assign([texts[i] for i in probe_idx], new, cheap, cfg.tie_rule).shares
            self.memory.add({"kind": "balance", "round": r, "shares": balance})
            unchanged = sorted(d.name for d in new) == sorted(d.name for d in dims)
            rounds.append(Round(r, proposal["dimensions"], proposal.get("rationale", ""), review["verdict"], critique,
                                [d.name for d in new], balance, time.perf_counter() - t0))
            dims = new
            if unchanged:
                stop = "unchanged"
                break
        return InductionResult(dims, rounds, stop, log)


def _check_dims(value: dict[str, Any]) -> str | None:
    names = [d["name"] for d in value["dimensions"]]
    if len(set(names)) != len(names):
        return f"dimension names must be unique, got {names}"
    if OTHER in names:
        return "'other' is reserved for examples outside every dimension; do not propose it"
    return None


# --------------------------------------------------------------------------- the whole curation


@dataclass
class Curation:
    """What ``embeval a2eval curate`` produces."""

    dimensions: list[Dimension]
    induction: InductionResult
    assignment: Assignment
    selection: Any  # sampling.Selection
    item_ids: list[str]
    seconds: dict[str, float]

    def subset_ids(self) -> list[str]:
        return [self.item_ids[i] for i in self.selection.indices]

    def save(self, out: str | Path) -> Path:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "dimensions.json").write_text(json.dumps([asdict(d) for d in self.dimensions], indent=2))
        (out / "induction.json").write_text(json.dumps({"stop_reason": self.induction.stop_reason,
                                                        "rounds": [asdict(r) for r in self.induction.rounds],
                                                        "llm_log": self.induction.llm_log}, indent=2))
        with (out / "assignments.jsonl").open("w") as fh:
            for i, iid in enumerate(self.item_ids):
                fh.write(json.dumps({"id": iid, "label": self.assignment.labels[i], "votes": self.assignment.votes[i],
                                     "agreement": self.assignment.agreement[i], "tie": self.assignment.tie[i],
                                     "tied": self.assignment.tied[i] if self.assignment.tied else []}) + "\n")
        (out / "selection.json").write_text(json.dumps({
            "item_ids": self.subset_ids(), **self.selection.to_dict(), "voters": self.assignment.voters,
            "kappa": self.assignment.kappa, "kappa_items": self.assignment.kappa_items,
            "kappa_voters": self.assignment.kappa_voters, "kappa_all_voters": self.assignment.kappa_all_voters,
            "kappa_all_items": self.assignment.kappa_all_items,
            "tie_rule": self.assignment.tie_rule, "ties": sum(self.assignment.tie),
            "votes_per_item": self.assignment.votes_per_item, "stand_in_votes": self.assignment.stand_in_votes,
            "shares": self.assignment.shares, "seconds": self.seconds,
            "pool_ids": self.item_ids}, indent=2))
        return out


def curate(items: Sequence[Any], cfg: DataAgentConfig | None = None, embed_cfg=None, out: str | Path | None = None,
           agent: DataAgent | None = None, X: np.ndarray | None = None) -> Curation:
    """Induce dimensions, assign every item, embed, k-means per dimension; saves to ``out`` if given.
    ``X`` (precomputed embeddings) skips the embedding step."""
    from embeval_analysis.a2eval.sampling import diversity_sample, embed_items, resolve_k

    cfg = cfg or DataAgentConfig()
    agent = agent or DataAgent(cfg, memory_path=(Path(out) / "memory.jsonl") if out else None)
    texts = [it.text() for it in items]
    t = {}
    t0 = time.perf_counter()
    ind = agent.induce(texts)
    t["induce"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    asg = assign(texts, ind.dimensions, agent.voters, cfg.tie_rule)
    t["assign"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if X is None:
        X = embed_items(items, embed_cfg)
    t["embed"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    k, k_rule = resolve_k(cfg.k_per_dim, len(items))
    sel = diversity_sample(X, asg.labels, k, cfg.seed, exclude=() if cfg.keep_other else (OTHER,))
    sel.k_rule = k_rule
    t["sample"] = time.perf_counter() - t0
    cur = Curation(ind.dimensions, ind, asg, sel, [it.id for it in items], t)
    if out:
        cur.save(out)
    return cur
