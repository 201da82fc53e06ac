"""The small protocols every subject (model) implements. Nothing in the core knows
which model it is talking to: real models enter through adapters.

The vocabulary they speak (images, :class:`~embeval.action.Action`, :class:`~embeval.action.ActionSpec`,
:class:`~embeval.action.Observation`) lives in :mod:`embeval.action`.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from embeval.action import Action, ActionSpec, Observation


@runtime_checkable
class VLM(Protocol):
    """A vision-language model: images + prompt -> text."""

    id: str

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str: ...


@runtime_checkable
class Policy(Protocol):
    """A vision-language-action policy."""

    id: str
    action_spec: ActionSpec

    def reset(self, instruction: str) -> None: ...

    def act(self, observation: Observation) -> Action: ...


@runtime_checkable
class LLM(Protocol):
    """A text model with chat and choice."""

    id: str

    def chat(self, messages: Sequence[Mapping[str, str]], json_schema: Mapping | None = None, **gen: Any) -> str: ...

    def choose(self, prompt: str, options: Sequence[str]) -> str: ...
