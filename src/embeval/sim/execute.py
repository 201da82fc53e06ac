"""Execute actions or a policy in the workcell and score Execution (reference run vs distorted run).

Example::

    from embeval.sim import SimEnv, make_task
    from embeval.sim.execute import execute_pair

    scene, task = make_task("Pick", seed=3)
    with SimEnv() as env:
        rec = execute_pair(env, scene, task, reference=[[0.05, 0.0, -0.1, 0, 0, 0, 1]],
                           distorted=[[0.02, 0.03, -0.1, 0, 0, 0, 1]], seed=3)
    print(rec.score, rec.reason, rec.distance_cm)
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from embeval.action import Action
from embeval.scoring.execution import ExecutionOutcome, ExecutionRecord, execution_score
from embeval.sim.env import SimEnv, as_action
from embeval.sim.scene import SceneSpec
from embeval.sim.tasks import TaskSpec


def outcome(env: SimEnv, n_actions: int) -> ExecutionOutcome:
    """The current episode's :class:`ExecutionOutcome` (final TCP pose, success, stop, object poses)."""
    cell = env.cell
    ws = cell.world_state()
    objects = {k: {"position": v.position.tolist(), "orientation_xyzw": v.orientation.tolist(),
                   **({"joint": v.joint} if v.joint is not None else {})} for k, v in ws.objects.items()}
    st = cell.safety.status
    return ExecutionOutcome(
        final_tcp_pose=tuple(cell.tcp_pose()), success=env.success(), stopped=st.stopped, stop_reason=st.reason,
        n_actions=n_actions, duration=cell.time, final_joint_positions=tuple(cell.q),
        extra={"objects": objects, "task": env.task.verb if env.task else "", "seed": env.seed},
    )


def run_actions(env: SimEnv, scene: SceneSpec, task: TaskSpec, actions: Sequence[Action | Sequence[float]], seed: int = 0,
                settle: float = 0.3) -> ExecutionOutcome:
    """Reset to ``scene``/``task`` and execute ``actions`` (7-DoF deltas, frame base) in order.

    Stops early at a safety stop. After the last action, physics runs ``settle`` seconds (released
    objects come to rest) before the success predicate is read.
    """
    acts = [as_action(a) for a in actions]  # validate everything before moving
    env.reset(seed, task, scene, render=False)
    n = 0
    for a in acts:
        r = env.step(a, render=False)
        n += 1
        if r.stopped:
            break
    if env.cell.safety.ok and settle > 0:
        env.cell.idle(settle)
    return outcome(env, n)


def execute_pair(env: SimEnv, scene: SceneSpec, task: TaskSpec, reference: Sequence, distorted: Sequence, seed: int = 0,
                 reference_outcome: ExecutionOutcome | None = None) -> ExecutionRecord:
    """Run the reference and the distorted action sequences from the same start and score Execution.

    ``reference`` / ``distorted``: one 7-DoF action or a sequence of them. Pass
    ``reference_outcome`` to reuse a reference run across many distortions.
    """
    ref = reference_outcome or run_actions(env, scene, task, _seq(reference), seed)
    dis = run_actions(env, scene, task, _seq(distorted), seed)
    return execution_score(ref, dis)


def run_policy(env: SimEnv, policy, scene: SceneSpec | None = None, task: TaskSpec | str = "Pick", seed: int = 0,
              max_steps: int | None = None) -> ExecutionOutcome:
    """Closed-loop episode of a :class:`~embeval.subjects.protocols.Policy` (reset(instruction), act(obs))."""
    from embeval.sim.rollout import rollout

    obs = env.reset(seed, task, scene)
    policy.reset(env.task.instruction)
    return outcome(env, rollout(env, policy, obs, max_steps=max_steps or env.task.max_steps).steps)


def _seq(actions) -> list:
    """One action (7 numbers or an :class:`Action`) -> [action]; a sequence of actions -> list."""
    if isinstance(actions, Action):
        return [actions]
    items = list(actions)
    if items and all(isinstance(x, (int, float, np.integer, np.floating)) for x in items):
        return [actions]
    return items
