"""Role -> LLM wiring, structured calls with validation and re-asking, and the offline rule-based stand-in.

Each A2Eval role (``proposer``, ``reviewer``, ``voter``s, ``evaluator``, ``scorer``) gets an LLM
from its config entry, resolved through the subject registry (:func:`embeval.subjects.load_subject`):

- ``rules``  -> :class:`RulesLLM`, a deterministic rule-based stand-in (keyword taxonomy for the
  Data Agent roles, code templates for the Eval Agent roles). It is **not** a language model; it
  is the CI test double and the offline default for the roles the tiny Gemma cannot play.
- ``gemma``  -> the embedded Gemma 3 270M GGUF through llama.cpp (weak: log-likelihood voting).
- a mapping  -> any subject spec, e.g. ``{kind: llm, adapter: openai, url: http://127.0.0.1:8000/v1,
  params: {model: qwen2.5-7b-instruct}}`` for an OpenAI-compatible endpoint.

Every role LLM is wrapped in :class:`embeval.subjects.cache.CachedLLM` (calls keyed by a hash of
messages, schema and parameters) when a cache path is configured.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping, Sequence

from embeval.errors import ConfigError, InvalidInputError

ROLE_TAG = "[a2eval:{role}]"

#: Generic embodied-capability taxonomy the rule-based Proposer draws from (name -> (description, cue words)).
TAXONOMY: dict[str, tuple[str, tuple[str, ...]]] = {
    "counting": ("Counting objects or instances in the scene.", ("how many", "count", "number of")),
    "spatial": ("Spatial relations between objects: left/right, nearer/farther, above/below.",
                ("left of", "right of", "closer", "farther", "above", "below", "next to", "behind")),
    "affordance": ("Where and how to act on an object: grasp points, contact regions.",
                   ("grasp", "point to", "pick point", "handle", "pixel coordinates")),
    "physics": ("Intuitive physics: stability, support, collisions, falling.",
                ("topple", "fall", "stable", "stack", "support", "collide")),
    "planning": ("Task planning: ordering actions and preconditions to reach a goal.",
                 ("to pick up", "removed first", "order", "steps", "before", "plan")),
    "dynamics": ("Motion over time from several frames: direction, speed, trajectories.",
                 ("frames", "moving", "direction", "trajectory", "speed", "consecutive")),
    "recognition": ("Recognising object categories and attributes.", ("what is", "which object", "color of", "identify")),
    "navigation": ("Navigating a space: routes, rooms, turns.", ("navigate", "room", "turn", "route", "door")),
    "text_reading": ("Reading text or symbols in the scene.", ("read", "label", "written", "sign")),
}

PROPOSAL_SCHEMA = {
    "type": "object",
    "properties": {
        "dimensions": {"type": "array", "minItems": 2, "maxItems": 12, "items": {
            "type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z][a-z0-9_]{1,31}$"},
                                             "description": {"type": "string", "minLength": 8}},
            "required": ["name", "description"]}},
        "rationale": {"type": "string"},
    },
    "required": ["dimensions", "rationale"],
}
REVIEW_SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["accept", "revise"]},
        "critique": {"type": "string"},
        "dimensions": PROPOSAL_SCHEMA["properties"]["dimensions"],
    },
    "required": ["verdict", "critique", "dimensions"],
}
CODE_SCHEMA = {"type": "object", "properties": {"code": {"type": "string", "minLength": 10},
                                                "notes": {"type": "string"}}, "required": ["code"]}


def tagged(role: str, text: str) -> list[dict[str, str]]:
    """Messages for ``role``: a system message carrying the role tag, then the user prompt."""
    return [{"role": "system", "content": f"{ROLE_TAG.format(role=role)} You are the A2Eval {role}."},
            {"role": "user", "content": text}]


def ask_json(llm: Any, role: str, prompt: str, schema: Mapping[str, Any], max_retries: int = 2,
             check: Callable[[Any], str | None] | None = None, log: list | None = None) -> Any:
    """Ask ``llm`` for JSON valid against ``schema`` (and ``check``, which returns an error text or
    None); on failure re-ask with the error appended, up to ``max_retries`` times; then raise
    :class:`InvalidInputError` naming the last error."""
    from embeval.subjects.json_output import parse_and_validate

    msg, err = prompt, None
    for attempt in range(max_retries + 1):
        raw = llm.chat(tagged(role, msg), json_schema=schema)
        try:
            value = parse_and_validate(raw, schema, source=f"{role} ({getattr(llm, 'id', 'llm')})")
            err = check(value) if check else None
        except InvalidInputError as exc:
            value, err = None, str(exc)
        if log is not None:
            log.append({"role": role, "attempt": attempt, "error": err})
        if err is None:
            return value
        msg = f"{prompt}\n\nYour previous answer was rejected: {err}\nAnswer again with valid JSON only."
    raise InvalidInputError(f"the {role} gave no valid answer after {max_retries + 1} attempts; last error: {err}. "
                            "Use a stronger model for this role (config roles.{role}).")


# --------------------------------------------------------------------------- the rule-based stand-in


def _role_of(messages: Sequence[Mapping[str, Any]]) -> str:
    for m in messages:
        mm = re.search(r"\[a2eval:(\w+)\]", str(m.get("content", "")))
        if mm:
            return mm.group(1)
    return ""


def _section(text: str, name: str) -> str:
    m = re.search(rf"<{name}>\n?(.*?)</{name}>", text, re.S)
    return m.group(1) if m else ""


class RulesLLM:
    """Deterministic rule-based stand-in for the A2Eval roles (see module docstring); not an LLM.

    - proposer: the taxonomy dimensions whose cue words occur in at least ``min_share`` of the
      sampled items (plus, after a critique, the reviewer's retained set);
    - reviewer: drops dimensions with < ``min_share`` coverage in the sample or in the balance
      statistics, accepts when nothing changed;
    - voter (``choose``): the option whose cue words (or description words) occur most in the item,
      ``other`` when none do; ``variant`` > 0 drops the variant-th cue of each dimension, so voters differ;
    - evaluator / scorer: code templates per answer type, repaired from the error feedback.
    """

    def __init__(self, id: str = "a2eval-rules", min_share: float = 0.04, variant: int = 0):
        self.id = id if not variant else f"{id}-v{variant}"  # distinct ids keep the call caches apart
        self.min_share, self.variant = min_share, variant

    # -- LLM protocol
    def chat(self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping | None = None, **gen: Any) -> str:
        role = _role_of(messages)
        text = str(messages[-1].get("content", ""))
        fn = {"proposer": self._propose, "reviewer": self._review, "evaluator": self._evaluator,
              "scorer": self._scorer}.get(role)
        if fn is None:
            return json.dumps({"answer": "other"}) if json_schema else "other"
        return json.dumps(fn(text))

    def choose(self, prompt: str, options: Sequence[str]) -> str:
        low = prompt.lower()
        item = _section(prompt, "item").lower() or low
        best, score = "other" if "other" in options else options[-1], 0
        for opt in options:
            cues = self._cues(opt, prompt)
            s = sum(1 for c in cues if c in item)
            if s > score:
                best, score = opt, s
        return best

    # -- helpers
    def _cues(self, name: str, prompt: str = "") -> tuple[str, ...]:
        if name in TAXONOMY:
            cues = TAXONOMY[name][1]
            if self.variant and len(cues) > 2:
                cues = tuple(c for i, c in enumerate(cues) if i != (self.variant - 1) % len(cues))
            return cues
        desc = re.search(rf"- {re.escape(name)}: (.*)", prompt)
        return tuple(w for w in re.findall(r"[a-z]{5,}", desc.group(1).lower())) if desc else ()

    def _coverage(self, samples: list[str]) -> dict[str, float]:
        n = max(len(samples), 1)
        return {d: sum(any(c in s.lower() for c in cues) for s in samples) / n for d, (_, cues) in TAXONOMY.items()}

    def _propose(self, text: str) -> dict[str, Any]:
        samples = [s for s in _section(text, "samples").split("\n---\n") if s.strip()]
        cov = self._coverage(samples)
        keep = [d for d, c in sorted(cov.items(), key=lambda kv: -kv[1]) if c >= self.min_share]
        retained = re.findall(r"^- ([a-z_]+):", _section(text, "current"), re.M)
        dropped = set(re.findall(r"drop ([a-z_]+)", _section(text, "critique")))
        names = [d for d in dict.fromkeys(keep + [r for r in retained if r in TAXONOMY]) if d not in dropped]
        if len(names) < 2:
            names = (names + [d for d in TAXONOMY if d not in names])[:2]
        return {"dimensions": [{"name": d, "description": TAXONOMY[d][0]} for d in names],
                "rationale": "cue-word coverage in the sample: " + ", ".join(f"{d} {cov[d]:.2f}" for d in names)}

    def _review(self, text: str) -> dict[str, Any]:
        samples = [s for s in _section(text, "samples").split("\n---\n") if s.strip()]
        cov = self._coverage(samples)
        proposal = json.loads(_section(text, "proposal") or '{"dimensions": []}')
        balance = json.loads(_section(text, "balance") or "{}")
        dims, notes = [], []
        for d in proposal.get("dimensions", []):
            share = balance.get("shares", {}).get(d["name"])
            if d["name"] in cov and cov[d["name"]] < self.min_share:
                notes.append(f"drop {d['name']} (covers {cov[d['name']]:.0%} of the sample)")
            elif share is not None and share < self.min_share / 2:
                notes.append(f"drop {d['name']} (only {share:.0%} of assigned items)")
            elif any(d["name"] == e["name"] for e in dims):
                notes.append(f"merge duplicate {d['name']}")
            else:
                dims.append(d)
        other = balance.get("shares", {}).get("other", 0.0)
        if other > 0.2:
            notes.append(f"{other:.0%} of items fall in 'other': consider a new dimension")
        prev = re.findall(r"^- ([a-z_]+):", _section(text, "current"), re.M)
        same = sorted(prev) == sorted(d["name"] for d in dims)
        return {"verdict": "accept" if (not notes and same) else "revise",
                "critique": "; ".join(notes) or "dimensions are distinct and cover the sample",
                "dimensions": dims if len(dims) >= 2 else proposal.get("dimensions", [])[:2]}

    def _evaluator(self, text: str) -> dict[str, Any]:
        atype = (re.search(r"answer_type: (\w+)", text) or [None, "exact"])[1]
        fmt = {"mc": "Answer with the option letter only.", "numeric": "Answer with a single number.",
               "point": "Answer with pixel coordinates x, y.", "exact": "Answer briefly, exactly as asked."}.get(atype, "")
        code = f'''def build_prompt(doc):
    text = doc["question"]
    if doc.get("options"):
        text += "\\n" + "\\n".join(doc["options"])
    return text + "\\n{fmt}"


def run_vlm_inference(doc):
    reply = generate(build_prompt(doc), doc.get("image_ids", []))
    return str(reply).strip()
'''
        return {"code": code, "notes": f"template for answer_type {atype}"}

    def _scorer(self, text: str) -> dict[str, Any]:
        atype = (re.search(r"answer_type: (\w+)", text) or [None, "exact"])[1]
        return {"code": SCORER_TEMPLATES.get(atype, SCORER_TEMPLATES["exact"]), "notes": f"template for {atype}"}


SCORER_TEMPLATES = {
    "mc": '''import re


def eval_score(doc, prediction):
    letters = "ABCDEFGHIJ"[: len(doc["options"])]
    m = re.search(r"(?:^|[\\s\\(\\[:])([A-J])(?:[\\s\\)\\]\\.:,]|$)", str(prediction).strip())
    got = m.group(1) if m and m.group(1) in letters else None
    if got is None:
        low = str(prediction).lower()
        hits = [letters[i] for i, o in enumerate(doc["options"]) if o.split(". ", 1)[-1].lower() in low]
        got = hits[0] if len(hits) == 1 else None
    gold = str(doc["answer"]).strip()[:1].upper()
    return 1.0 if got == gold else 0.0
''',
    "numeric": '''import re

WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten".split())}


def eval_score(doc, prediction):
    for tok in re.findall(r"-?\\d+(?:\\.\\d+)?|[a-zA-Z]+", str(prediction)):
        if tok.lower() in WORDS:
            value = float(WORDS[tok.lower()])
        else:
            try:
                value = float(tok)
            except ValueError:
                continue
        tol = doc.get("tolerance") or 0.0
        return 1.0 if abs(value - float(doc["answer"])) <= tol + 1e-9 else 0.0
    return 0.0
''',
    "point": '''import re


def eval_score(doc, prediction):
    nums = [float(v) for v in re.findall(r"-?\\d+(?:\\.\\d+)?", str(prediction))[:2]]
    if len(nums) < 2:
        return 0.0
    x0, y0, x1, y1 = doc["mask"]
    return 1.0 if x0 <= nums[0] <= x1 and y0 <= nums[1] <= y1 else 0.0
''',
    "exact": '''import re


def _norm(s):
    s = re.sub(r"[^a-z0-9, ]+", " ", str(s).lower())
    s = re.sub(r"\\s*,\\s*", ",", s)
    return re.sub(r"\\s+", " ", s).strip(" ,")


def eval_score(doc, prediction):
    return 1.0 if _norm(prediction) == _norm(doc["answer"]) else 0.0
''',
}


# --------------------------------------------------------------------------- role wiring

PRESETS: dict[str, Callable[..., Any]] = {
    "rules": lambda **kw: RulesLLM(**kw),
    "gemma": lambda **kw: _gemma(**kw),
}


def _gemma(**kw):
    from embeval.subjects.registry import load_subject

    return load_subject({"kind": "llm", "adapter": "llama_cpp", "id": "gemma3-270m", "params": kw})


def build_llm(entry: Any, cache: str | None = None, role: str = "") -> Any:
    """An LLM for one role from its config entry: a preset name (``rules``, ``gemma``), a preset with
    parameters (``{preset: rules, variant: 2}``), or a subject spec mapping / YAML path."""
    if isinstance(entry, str) and entry in PRESETS:
        llm = PRESETS[entry]()
    elif isinstance(entry, Mapping) and "preset" in entry:
        name = entry["preset"]
        if name not in PRESETS:
            raise ConfigError(f"roles.{role}: unknown preset {name!r}; choose from {', '.join(PRESETS)} or give a subject spec")
        llm = PRESETS[name](**{k: v for k, v in entry.items() if k != "preset"})
    elif isinstance(entry, (Mapping, str)):
        from embeval.subjects.registry import load_subject

        llm = load_subject(entry)
    elif hasattr(entry, "chat"):
        llm = entry
    else:
        raise ConfigError(f"roles.{role}: expected a preset name, a subject spec or an LLM object, got {entry!r}")
    if cache:
        from embeval.subjects.cache import CachedLLM

        llm = CachedLLM(llm, cache)
    return llm
