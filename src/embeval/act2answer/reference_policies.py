"""Reference policies that bound an Act2Answer table (privileged: they read the simulator state).

- :class:`ExpertPolicy` ``("answer")``: the scripted expert carries the cube to the correct card
  (soft success 1 when control works: the control ceiling);
- ``ExpertPolicy(side="left")``: always the left card (a pure position bias: SR 0.5, bias +1).

They are plumbing checks, not models: never report them as subjects.
"""
from __future__ import annotations

from dataclasses import replace

from embeval.act2answer.scene import EpisodeSpec
from embeval.subjects.protocols import Action, ActionSpec, Observation


class ExpertPolicy:
    action_spec = ActionSpec(frame="base")

    def __init__(self, env, target: str = "answer", spec: EpisodeSpec | None = None):
        if target not in ("answer", "left", "right"):
            from embeval.errors import ConfigError

            raise ConfigError(f"ExpertPolicy target must be 'answer', 'left' or 'right', got {target!r}")
        self.env, self.target, self.spec = env, target, spec or EpisodeSpec()
        self.id = "expert-answer" if target == "answer" else f"expert-always-{target}"
        self._expert = None

    def reset(self, instruction: str) -> None:
        self._expert = None

    def act(self, observation: Observation) -> Action:
        if self._expert is None:
            if self.target != "answer":
                self.env.task = replace(self.env.task, goal=self.spec.card_xy(self.target))
            self._expert = self.env.expert()
        return self._expert.act(observation)
