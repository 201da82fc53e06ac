"""Reference policies that bound an Act2Answer table (privileged: they read the simulator state).

- :class:`ExpertPolicy` ``("answer")``: the scripted expert carries the cube to the correct card
  (soft success 1 when control works: the control ceiling);
- ``ExpertPolicy(side="left")``: always the left card (a pure position bias: SR 0.5, bias +1);
- :class:`ScriptedPlacer`: not privileged and open loop: fixed waypoints from the episode geometry
  carry the cube to one side's card; it runs unchanged in the ROS graph and on the real cell.

They are plumbing checks, not models: never report them as subjects.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from embeval.act2answer.scene import EpisodeSpec
from embeval.action import Action, ActionSpec, Observation


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
            if self.spec.start == "grasped":  # the cube already in the gripper: skip the approach and descent
                self._expert.resume()
        return self._expert.act(observation)


class ScriptedPlacer:
    """Open-loop plumbing policy: pick the cube at its start, put it on the ``side`` card, open, hold.

    Waypoints (frame base, metres) come from the episode geometry (``episode``: an :class:`EpisodeSpec`,
    its dict, or a YAML path) and the TCP position of the first observation (``state["tcp_pose"]``;
    the workcell's home (0.45, 0, 0.30) when absent): above the cube at ``approach_z``, down to the
    cube's centre, close, up, over the card, down to ``release_z`` above the card, open, then zero
    actions; a grasped start (``episode.start``) skips the pick: over the card, down, open. Straight segments are cut into equal steps of at most ``max_step`` m, so the same
    action sequence results whatever the timing (simulation in process, ROS graph, real arm).
    Tool pointing down, no rotation; gripper 1 = open, 0 = closed.
    """

    action_spec = ActionSpec(frame="base")

    def __init__(self, side: str = "left", episode: EpisodeSpec | dict | str | None = None, id: str = "",
                 approach_z: float = 0.12, release_z: float = 0.07, max_step: float = 0.04):
        if side not in ("left", "right"):
            from embeval.errors import ConfigError

            raise ConfigError(f"ScriptedPlacer side must be 'left' or 'right', got {side!r}")
        if isinstance(episode, (str, Path)):
            episode = EpisodeSpec.from_yaml(episode)
        self.spec = episode if isinstance(episode, EpisodeSpec) else EpisodeSpec.from_dict(episode)
        self.side, self.id = side, id or f"scripted-placer-{side}"
        self.approach_z, self.release_z, self.max_step = float(approach_z), float(release_z), float(max_step)
        self._plan: list[list[float]] | None = None
        self._n = 0

    def reset(self, instruction: str) -> None:
        self._plan, self._n = None, 0

    def plan(self, start_xyz) -> list[list[float]]:
        """The whole action list from a TCP at ``start_xyz``."""
        s = self.spec
        cube_z = s.cube_size / 2
        card = s.card_xy(self.side)
        pick = [((*s.cube_xy, self.approach_z), 1.0), ((*s.cube_xy, cube_z), 1.0), (None, 0.0),
                ((*s.cube_xy, self.approach_z), 0.0)] if s.start == "table" else []
        legs = pick + [((*card, self.approach_z), 0.0), ((*card, self.release_z), 0.0)]
        out, pos = [], [float(v) for v in start_xyz[:3]]
        for target, grip in legs:
            if target is None:  # gripper only
                out.append([0.0] * 6 + [grip])
                continue
            d = [t - p for t, p in zip(target, pos)]
            n = max(1, math.ceil(math.dist(target, pos) / self.max_step - 1e-9))
            out += [[v / n for v in d] + [0.0, 0.0, 0.0, grip] for _ in range(n)]
            pos = list(target)
        if s.start == "grasped":  # the gripper is held closed anyway: open once the hold is over
            out += [[0.0] * 6 + [0.0]] * max(0, s.hold_steps - len(out))
        return out + [[0.0] * 6 + [1.0]]

    def act(self, observation: Observation) -> Action:
        import numpy as np

        if self._plan is None:
            tcp = observation.state.get("tcp_pose")
            self._plan = self.plan(tcp[:3] if tcp is not None else (0.45, 0.0, 0.30))
        vec = self._plan[self._n] if self._n < len(self._plan) else [0.0] * 6 + [1.0]
        self._n += 1
        return Action(np.asarray(vec, dtype=np.float64))
