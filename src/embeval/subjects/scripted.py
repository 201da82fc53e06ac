"""Deterministic test doubles for CI: a scripted LLM, a scripted VLM and simple policies.

They are real subjects (they satisfy the protocols and load from YAML with ``adapter: scripted``),
with rule-based answers: the same input always gives the same output, JSON answers are always
valid against the requested schema, and the latest calls are recorded in ``calls`` for assertions
(a :class:`CallLog`: bounded, so a long-running server holding one does not grow per request).
They are plumbing, never opinions: do not report scores from them as model results.
"""
from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from embeval.action import Action, ActionSpec, Observation, check_image
from embeval.errors import ConfigError, ContextLengthError, InvalidInputError
from embeval.provenance import canonical_json, derive_seed
from embeval.subjects.json_output import example_from_schema, parse_and_validate

Response = str | Callable[..., str]


def message_text(messages: Sequence[Mapping[str, Any]], role: str | None = "user") -> str:
    """Text of the last message with ``role`` (any role when None); joins OpenAI-style content parts."""
    for m in reversed(list(messages)):
        if role is None or m.get("role") == role:
            content = m.get("content", "")
            if isinstance(content, str):
                return content
            return " ".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


@dataclass
class Rule:
    """``pattern`` (regex, case-insensitive, searched in the prompt) -> ``response`` (text or callable)."""

    pattern: str
    response: Response

    def __post_init__(self):
        try:
            self._rx = re.compile(self.pattern, re.IGNORECASE | re.DOTALL)
        except re.error as exc:
            raise ConfigError(f"rule pattern {self.pattern!r} is not a valid regular expression: {exc}") from None

    def matches(self, text: str) -> bool:
        return bool(self._rx.search(text))


def _rules(rules: Sequence[Rule | Mapping[str, Any] | tuple] | None) -> list[Rule]:
    out = []
    for r in rules or []:
        if isinstance(r, Rule):
            out.append(r)
        elif isinstance(r, Mapping):
            if "match" not in r or "response" not in r:
                raise ConfigError(f"each rule needs 'match' and 'response', got {dict(r)}")
            out.append(Rule(str(r["match"]), r["response"]))
        else:
            out.append(Rule(*r))
    return out


#: calls a scripted subject keeps in ``calls`` (the oldest are dropped)
KEEP_CALLS = 100
#: characters of message text the kept calls may hold together (the newest call is always kept)
KEEP_CHARS = 1 << 20


def _chars(record: Mapping[str, Any]) -> int:
    """Characters of prompt text a call record holds (message contents, prompt, options)."""
    n = len(str(record.get("prompt", "")))
    for m in record.get("messages") or []:
        c = m.get("content", "") if isinstance(m, Mapping) else ""
        n += len(c) if isinstance(c, str) else sum(len(str(p.get("text", ""))) for p in c if isinstance(p, Mapping))
    return n + sum(len(str(o)) for o in record.get("options") or [])


class CallLog(deque):
    """The latest calls a scripted subject answered, oldest first: at most :data:`KEEP_CALLS` records whose
    text is at most :data:`KEEP_CHARS` characters together (the newest is kept whatever its size).
    ``total`` counts every call ever recorded."""

    def __init__(self, keep: int = KEEP_CALLS, keep_chars: int = KEEP_CHARS):
        super().__init__(maxlen=keep)
        self.keep_chars, self.total, self._sizes = keep_chars, 0, deque(maxlen=keep)

    def append(self, record: dict[str, Any]) -> None:
        super().append(record)
        self._sizes.append(_chars(record))
        self.total += 1
        while len(self) > 1 and sum(self._sizes) > self.keep_chars:
            self.popleft()
            self._sizes.popleft()


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


class ScriptedLLM:
    """Rule-based LLM. ``chat``: the first rule whose pattern matches the last user message answers;
    with a JSON schema and no matching rule, a deterministic schema-valid instance (seeded by the
    prompt) is returned; otherwise ``default`` or a short deterministic sentence. ``choose``: a
    matching rule whose response is an option, else the option sharing most words with the prompt
    (ties broken by a seeded hash). Never returns an empty string. A ``max_tokens`` in ``chat``'s ``gen``
    cuts a plain answer after that many tokens (a JSON-schema answer is never cut).
    """

    def __init__(self, id: str = "scripted-llm", rules: Sequence[Any] | None = None, default: str | None = None, seed: int = 0,
                 context_window: int | None = None):
        self.id = id
        self.rules = _rules(rules)
        self.default = default
        self.seed = seed
        self.context_window = int(context_window) if context_window else None  # tokens, as count_tokens counts them
        self.calls = CallLog()

    def count_tokens(self, text: str) -> int:
        """This model's tokens: words and single punctuation marks (``\\w+|[^\\w\\s]``)."""
        return len(re.findall(r"\w+|[^\w\s]", text))

    def _rule_response(self, text: str, *args: Any) -> str | None:
        for rule in self.rules:
            if rule.matches(text):
                r = rule.response
                return str(r(*args) if callable(r) else r)
        return None

    def chat(self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping | None = None, **gen: Any) -> str:
        text = message_text(messages)
        if self.context_window and self.count_tokens(text) > self.context_window:
            raise ContextLengthError(f"{self.id}: the messages take {self.count_tokens(text)} tokens, over the context "
                                     f"window of {self.context_window}; shorten the prompt")
        self.calls.append({"method": "chat", "messages": list(messages), "json_schema": json_schema, "gen": gen})
        out = self._rule_response(text, messages, json_schema)
        if json_schema is not None:
            if out is None:
                seed = derive_seed(self.seed, text, canonical_json(json_schema))
                return canonical_json(example_from_schema(json_schema, seed=seed))
            parse_and_validate(out, json_schema, source=f"ScriptedLLM rule for {text[:40]!r}")
            return out
        if not out:
            words = re.findall(r"\w+", text)[:8]
            out = self.default or "scripted answer: " + (" ".join(words) if words else "ok")
        return self._cut(out, gen.get("max_tokens"))

    def _cut(self, text: str, max_tokens: int | None) -> str:
        """``text`` cut after its first ``max_tokens`` tokens (as :meth:`count_tokens` counts them), as a model
        stops generating there; unchanged without a limit."""
        if not max_tokens:
            return text
        ends = [m.end() for m in re.finditer(r"\w+|[^\w\s]", text)]
        return text[:ends[int(max_tokens) - 1]] if len(ends) > max_tokens else text

    def choose(self, prompt: str, options: Sequence[str]) -> str:
        options = list(options)
        if not options:
            raise InvalidInputError("choose() needs at least one option")
        self.calls.append({"method": "choose", "prompt": prompt, "options": options})
        out = self._rule_response(prompt, prompt, options)
        if out is not None and out in options:
            return out
        pt = _tokens(prompt)
        scores = [len(pt & _tokens(o)) for o in options]
        best = max(scores)
        tied = [o for o, s in zip(options, scores) if s == best]
        return tied[derive_seed(self.seed, prompt, options) % len(tied)]


_COLOURS = {"red": (1, 0, 0), "green": (0, 1, 0), "blue": (0, 0, 1), "white": (1, 1, 1), "black": (0, 0, 0),
            "yellow": (1, 1, 0), "grey": (0.5, 0.5, 0.5)}


class ScriptedVLM:
    """Rule-based VLM: a matching prompt rule answers; otherwise the answer names the image's
    brightness and dominant colour and the prompt's verb, so it is deterministic and changes when
    the image changes enough (e.g. under strong distortion)."""

    def __init__(self, id: str = "scripted-vlm", rules: Sequence[Any] | None = None, default: str | None = None):
        self.id = id
        self.rules = _rules(rules)
        self.default = default
        self.calls = CallLog()

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str:
        images = [check_image(im, f"images[{i}]") for i, im in enumerate(images)]
        self.calls.append({"method": "generate", "n_images": len(images), "prompt": prompt, "gen": gen})
        for rule in self.rules:
            if rule.matches(prompt):
                r = rule.response
                return str(r(images, prompt) if callable(r) else r)
        if self.default:
            return self.default
        if not images:
            return "no image given; " + " ".join(prompt.split()[:6])
        mean = np.concatenate([im.reshape(-1, 3) for im in images]).mean(axis=0) / 255.0
        colour = min(_COLOURS, key=lambda c: float(np.sum((np.array(_COLOURS[c]) - mean) ** 2)))
        bright = "bright" if mean.mean() > 0.5 else "dark"
        from embeval.sim.scene import VERBS  # the registered task verbs (embeval.sim.tasks); sim loads on first use

        verbs = {v.lower() for v in VERBS}
        verb = next((w for w in prompt.lower().split() if w in verbs), "move")
        return f"{verb} the object in the {bright} {colour} scene with the gripper"



class ConstantPolicy:
    """A policy that always returns the same 7-DoF action (embeval convention, gripper 1 = open)."""

    def __init__(self, id: str = "constant-policy", vector: Sequence[float] = (0, 0, 0, 0, 0, 0, 1)):
        self.id = id
        self.action = Action(np.asarray(vector, dtype=np.float64))
        self.action_spec = ActionSpec()
        self.instruction = ""

    def reset(self, instruction: str) -> None:
        self.instruction = instruction

    def act(self, observation: Observation) -> Action:
        return self.action


class SequencePolicy:
    """Replays a fixed list of 7-DoF actions (embeval convention), one per :meth:`act`, from the start at every
    :meth:`reset`; after the last one it holds (zero move, the last gripper command). For rehearsing a cell
    with a recorded demonstration (e.g. the scripted expert's actions for a task), never as a subject."""

    def __init__(self, id: str = "sequence-policy", actions: Sequence[Sequence[float]] = ()):
        self.id = id
        self.actions = [Action(np.asarray(a, dtype=np.float64)) for a in actions]
        if not self.actions:
            raise InvalidInputError("SequencePolicy needs at least one action: actions=[[dx,dy,dz,droll,dpitch,dyaw,gripper], ...]")
        self.action_spec = ActionSpec()
        self.instruction = ""
        self.index = 0

    def reset(self, instruction: str) -> None:
        self.instruction, self.index = instruction, 0

    def act(self, observation: Observation) -> Action:
        if self.index < len(self.actions):
            self.index += 1
            return self.actions[self.index - 1]
        return Action.hold(self.actions[-1].gripper)


class ImageStatsPolicy:
    """A deterministic image-dependent policy for plumbing tests: translation = ``scale`` * (mean
    RGB of the first camera image - 0.5) in metres, no rotation, gripper = 1 (open) when the image
    is brighter than mid-grey else 0."""

    def __init__(self, id: str = "image-stats-policy", scale: float = 0.1, camera: str | None = None):
        self.id = id
        self.scale = float(scale)
        self.camera = camera
        self.action_spec = ActionSpec()
        self.instruction = ""

    def reset(self, instruction: str) -> None:
        self.instruction = instruction

    def act(self, observation: Observation) -> Action:
        if not observation.images:
            raise InvalidInputError("ImageStatsPolicy needs at least one camera image in the observation")
        name = self.camera or next(iter(observation.images))
        img = check_image(observation.images[name], f"images[{name!r}]")
        mean = img.reshape(-1, 3).mean(axis=0) / 255.0
        v = np.zeros(7)
        v[:3] = self.scale * (mean - 0.5)
        v[6] = 1.0 if mean.mean() > 0.5 else 0.0
        return Action(v)
