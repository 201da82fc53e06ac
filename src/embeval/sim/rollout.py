"""The one closed-loop rollout every episode runner uses: a policy acts on an env's observations, each action is
executed, until the env is done, a stop rule fires or the step cap.

The sim backends' episodes (:func:`embeval.sim.backends.run_episode`), Act2Answer's on every backend
(:func:`embeval.act2answer.episode.closed_loop`), the embedded policy's success evaluation, the IQA database's
closed-loop runs and :func:`embeval.sim.execute.run_policy` are this loop with their own rules; the vectorised runners
(:mod:`embeval.sim.vector`) run those runners in their workers. Under an open episode video
(:mod:`embeval.recording.video`) every step's observation and action is recorded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from embeval.action import Action


@dataclass
class Rollout:
    """What one rollout did: the last ``observation`` and step result (``last``; None before any step), the
    ``steps`` executed, the ``actions`` kept (7-vectors as lists, as the policy gave them, before ``execute``),
    the first action and why the loop ended: ``"done"`` (the env said so), ``"max_steps"`` (the cap) or the
    reason ``after_step`` returned."""

    observation: Any
    last: Any = None
    steps: int = 0
    actions: list[list[float]] = field(default_factory=list)
    first_action: Action | None = None
    end_reason: str = ""


def rollout(env, policy, observation, *, max_steps: int | None = None, until_done: bool = True,
            keep_actions: bool = False, digits: int | None = None,
            execute: Callable[[Action, int], Action] | None = None,
            after_step: Callable[[Any], str | None] | None = None,
            clean: Callable[[], Mapping[str, np.ndarray] | None] | None = None) -> Rollout:
    """Step ``policy`` (already reset; ``act(observation)`` -> an :class:`Action` or 7 numbers) on ``env``
    (``step(action).observation``; ``done`` read when ``until_done``) from ``observation``.

    Each step: the action is kept when ``keep_actions`` (rounded to ``digits`` decimals when given), recorded by an
    open video (``clean()``: the undistorted images of the observation, or None), executed as ``execute(action,
    step)`` (0-based; default: itself); then ``after_step(step_result)`` may end the loop by returning a reason.
    The loop stops first on ``env.done`` (``until_done``), then on ``max_steps`` (None: no cap)."""
    from embeval.recording.video import video_last, video_step

    r = Rollout(observation)
    while True:
        if until_done and env.done:
            r.end_reason = "done"
            break
        if max_steps is not None and r.steps >= max_steps:
            r.end_reason = "max_steps"
            break
        a = policy.act(r.observation)
        a = a if isinstance(a, Action) else Action(np.asarray(a, dtype=np.float64))
        if r.first_action is None:
            r.first_action = a
        if keep_actions:
            r.actions.append(a.vector.tolist() if digits is None else [round(float(v), digits) for v in a.vector])
        video_step(r.observation, a, clean() if clean else None)
        r.last = env.step(a if execute is None else execute(a, r.steps))
        r.observation, r.steps = r.last.observation, r.steps + 1
        reason = after_step(r.last) if after_step else None
        if reason:
            r.end_reason = reason
            break
    video_last(r.observation, clean() if clean else None)
    return r
