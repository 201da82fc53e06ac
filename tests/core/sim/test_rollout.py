"""The one closed-loop rollout (:func:`embeval.sim.rollout.rollout`): the order of its stop rules, what it keeps, what
it executes, and that every episode runner goes through it (the sim backends', Act2Answer's on every backend, the
embedded success evaluation)."""
from __future__ import annotations

import numpy as np

from embeval.action import Action, Observation
from embeval.sim.episode_env import StepResult
from embeval.sim.rollout import rollout


class _Line:
    """A 1-D env: x moves by the executed action's dx; done at x >= goal (metres)."""

    def __init__(self, goal=1.0):
        self.x, self.goal, self.executed = 0.0, goal, []

    @property
    def done(self):
        return self.x >= self.goal

    def step(self, a):
        self.executed.append(a.vector.copy())
        self.x += float(a.vector[0])
        return StepResult(Observation({}, "go", {"x": np.array([self.x])}), success=self.done, done=self.done,
                          stopped=self.x > 5, reason="limit" if self.x > 5 else "")


class _Const:
    def __init__(self, dx):
        self.dx, self.seen = dx, []

    def act(self, obs):
        self.seen.append(float(obs.state["x"][0]) if obs.state else None)
        return [self.dx, 0, 0, 0, 0, 0, 1.0 / 3]  # 7 numbers, not an Action: the loop makes one


def _obs():
    return Observation({}, "go", {"x": np.array([0.0])})


def test_stops_on_done_then_cap_then_rule():
    env, pol = _Line(), _Const(0.3)
    r = rollout(env, pol, _obs(), keep_actions=True)
    assert (r.steps, r.end_reason) == (4, "done") and np.isclose(env.x, 1.2)
    assert np.allclose(pol.seen, [0.0, 0.3, 0.6, 0.9]) and r.last.success
    assert isinstance(r.first_action, Action) and r.actions[0] == [0.3, 0, 0, 0, 0, 0, 1.0 / 3]
    r = rollout(_Line(), _Const(0.3), _obs(), max_steps=2)
    assert (r.steps, r.end_reason, r.actions) == (2, "max_steps", [])  # actions kept only when asked
    r = rollout(_Line(), _Const(0.3), _obs(), max_steps=0)
    assert (r.steps, r.end_reason, r.last, r.first_action) == (0, "max_steps", None, None)
    # until_done=False ignores env.done; the rule's reason ends it
    env = _Line()
    r = rollout(env, _Const(2.0), _obs(), until_done=False, max_steps=10,
                after_step=lambda res: res.reason if res.stopped else None)
    assert (r.steps, r.end_reason, env.x) == (3, "limit", 6.0)


def test_keeps_the_policy_action_rounded_and_executes_the_transformed_one():
    env = _Line(goal=10)
    r = rollout(env, _Const(0.1), _obs(), max_steps=3, keep_actions=True, digits=6,
                execute=lambda a, n: Action(np.r_[a.vector[:6] * (n + 1), 0.0]))
    assert r.actions == [[0.1, 0, 0, 0, 0, 0, 0.333333]] * 3  # what the policy said, 6 decimals
    assert [float(v[0]) for v in env.executed] == [0.1, 0.2, 0.30000000000000004]  # what ran: step index 0, 1, 2
    assert [float(v[6]) for v in env.executed] == [0.0] * 3


class _Still:
    id = "still"

    def reset(self, instruction):
        pass

    def act(self, obs):
        return Action(np.r_[np.zeros(6), 1.0])


def test_the_episode_runners_go_through_it(monkeypatch, tmp_path):
    """The sim backends' run_episode and Act2Answer's pybullet runner call the loop (counted) and keep its steps."""
    import embeval.sim.backends as backends
    import embeval.sim.rollout as mod
    from embeval.act2answer.episode import run_items
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.sim.backends import SimSpec, make_episode_env, run_episode

    calls, real = [], mod.rollout

    def counted(*a, **k):
        calls.append(k.get("until_done", True))
        return real(*a, **k)

    monkeypatch.setattr(mod, "rollout", counted)
    monkeypatch.setattr(backends, "rollout", counted)
    env = make_episode_env(SimSpec(backend="pybullet", env="Pick", width=32, height=32, max_steps=3))
    try:
        rec = run_episode(env, _Still(), seed=1, keep_actions=True)
    finally:
        env.close()
    assert calls == [True] and rec.steps == len(rec.actions) == 3 and rec.actions[0] == [0.0] * 6 + [1.0]
    item = generate_items(tmp_path, ["color"], 1, seed=0)[0]
    recs = list(run_items(_Still(), [item], EpisodeSpec(max_steps=2), seed=0))
    assert calls == [True, False, False] and [r.steps for r in recs] == [2, 2]
    assert [r.end_reason for r in recs] == ["max_steps", "max_steps"] and recs[0].actions == [[0.0] * 6 + [1.0]] * 2
