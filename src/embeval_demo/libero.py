"""Demo stage "libero": LIBERO (its own interpreter, scripts/install_libero.sh) on the CPU. libero_spatial:0's
agent view at initial state 0, then one short episode of a scripted reach (the hand moves forward and down,
then holds) run clean and with every camera frame distorted, scored Decision / Execution the way
``embeval sim episodes --backend libero --distortion`` scores it; one video per episode."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from embeval.action import Action

TASK = "libero_spatial:0"
SIDE = 128  # pixels, the image size published LIBERO checkpoints take
DISTORTION = ("gaussian_blur", 3)


class ReachPolicy:
    """A scripted motion (not a solver): 1 cm forward and 0.5 cm down per step for ``reach`` steps, then hold."""

    id = "scripted-reach"

    def __init__(self, reach: int = 8):
        self.reach, self.t = reach, 0

    def reset(self, instruction: str) -> None:
        self.t = 0

    def act(self, obs) -> Action:
        self.t += 1
        if self.t <= self.reach:
            return Action(np.array([0.01, 0.0, -0.005, 0.0, 0.0, 0.0, 1.0]))
        return Action.hold()


def run(ctx) -> None:
    from embeval.sim.libero import libero_python

    if not libero_python().is_file():
        print(f"skipped: LIBERO's interpreter {libero_python()} is missing; run scripts/install_libero.sh")
        return
    from embeval.image_io import save_image
    from embeval.recording.video import EpisodeRecorder, maybe_episode
    from embeval.sim.backends import (
        SimSpec,
        make_episode_env,
        run_episode,
        score_episode,
    )

    out = Path(ctx.out_dir) / "libero"
    out.mkdir(parents=True, exist_ok=True)
    steps = 10 if ctx.quick else 20
    # the fast render mode (no multisampling, no reflections: docs/sim.md) keeps the stage well under a minute;
    # a policy trained on LIBERO's published images should be evaluated with the default mode
    spec = SimSpec("libero", TASK, width=SIDE, height=SIDE, max_steps=steps, options={"render_mode": "fast"})
    env = make_episode_env(spec)
    videos = EpisodeRecorder("2", out / "videos", camera="agentview")
    policy, seed = ReachPolicy(), 0
    try:
        print(f"{TASK}: {env.instruction!r} (LIBERO initial state {seed}, {steps} control steps of 50 ms, "
              "fast render mode)")
        with maybe_episode(videos, f"{policy.id}_{TASK.replace(':', '-')}_init{seed}_clean") as video:
            ref = run_episode(env, policy, seed, None)
            if video is not None:
                video.finish(ref.outcome.success)
        view = save_image(out / "agentview.png", ref.first_observation.images["agentview"], "agentview")
        print(f"agent view, initial state {seed} ({SIDE}x{SIDE}, policy orientation): {view}")
        name, level = DISTORTION
        with maybe_episode(videos, f"{policy.id}_{TASK.replace(':', '-')}_init{seed}_{name}{level}") as video:
            sc, ref, dis = score_episode(env, policy, seed, (name, level, seed), reference=ref)
            if video is not None:
                video.finish(dis.outcome.success, f"Execution {sc.execution.score:.1f}")
    finally:
        env.close()
    e = sc.execution
    print(f"\n{policy.id} in {TASK} ({SIDE}x{SIDE} agentview + wrist, every frame distorted), vs its clean episode:")
    print(f"{'distortion':<14} {'L':>1}  {'decision':>8}  {'execution':>9}  {'cm':>5}  {'steps':>5}  success")
    print(f"{name:<14} {level:>1}  {sc.decision:8.3f}  {e.score:9.1f}  {e.distance_cm:5.2f}  "
          f"{dis.outcome.extra['control_steps']:>5}  {e.reference.success}/{e.distorted.success}")
    print(f"episode videos (clean and {name} {level}): {', '.join(str(p) for p in videos.written)}")
