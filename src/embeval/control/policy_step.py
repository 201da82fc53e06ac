"""One guarded policy step: the policy acts only on fresh inputs; actions are clipped; dry run by default.

Units: translation deltas in metres, rotation deltas in radians (see :mod:`embeval.subjects.protocols`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embeval.action import Action, Observation
from embeval.control.watchdog import Watchdog
from embeval.errors import ConfigError, EmbevalError
from embeval.subjects.protocols import Policy


@dataclass(frozen=True)
class StepperConfig:
    """Guards around a policy (seconds, metres, radians)."""

    max_image_age_s: float = 0.5  # older image -> hold
    max_instruction_age_s: float = 600.0  # an instruction is valid this long after it arrived
    max_step_translation: float = 0.05  # per-step clip of |[dx,dy,dz]| (m)
    max_step_rotation: float = 0.25  # per-step clip of |[droll,dpitch,dyaw]| (rad)
    dry_run: bool = True  # compute and report actions, never command them

    def __post_init__(self):
        from embeval.robot.safety import check_range

        for name, hi in (("max_image_age_s", 60.0), ("max_instruction_age_s", 86400.0)):
            object.__setattr__(self, name, check_range(name, getattr(self, name), 0.0, hi, "s"))
        for name in ("max_step_translation", "max_step_rotation"):  # finite, in LIMIT_RANGES (NaN would clip nothing)
            object.__setattr__(self, name, check_range(name, getattr(self, name)))
        from embeval import checks

        object.__setattr__(self, "dry_run", checks.flag(bool(self.dry_run) if isinstance(self.dry_run, np.bool_)
                                                        else self.dry_run, "dry_run"))  # never guessed from None, "", 0


@dataclass(frozen=True)
class PolicyStep:
    """``action``: what the policy proposed after clipping (None when held); ``command``: whether to send it."""

    action: Action | None
    command: bool
    status: str  # "ok" | "dry_run" | "hold" | "error"
    reason: str = ""
    clipped: bool = False
    model_s: float = 0.0  # seconds inside policy.act()


def clip_action(vector, max_translation: float, max_rotation: float) -> tuple[np.ndarray, bool]:
    """Scale translation and rotation parts down to their norms' limits; clip gripper to [0, 1]."""
    v = np.asarray(vector, dtype=np.float64).reshape(-1).copy()
    clipped = False
    for sl, lim in ((slice(0, 3), max_translation), (slice(3, 6), max_rotation)):
        n = float(np.linalg.norm(v[sl]))
        if n > lim:
            v[sl] *= lim / n
            clipped = True
    g = float(np.clip(v[6], 0.0, 1.0))
    clipped |= g != v[6]
    v[6] = g
    return v, clipped


class PolicyStepper:
    """Wrap a :class:`Policy` with input watchdogs, per-step clipping and dry run.

    Feed inputs with :meth:`set_instruction` / :meth:`set_image` (``now``: monotonic seconds),
    then call :meth:`step`. A new instruction resets the policy.
    """

    def __init__(self, policy: Policy, config: StepperConfig = StepperConfig()):
        self.policy, self.config = policy, config
        self.watchdog = Watchdog({"instruction": config.max_instruction_age_s, "image": config.max_image_age_s})
        self.instruction = ""
        self.images: dict[str, np.ndarray] = {}
        self.state: dict[str, np.ndarray] = {}
        self.steps = 0

    def set_instruction(self, text: str, now: float) -> None:
        text = text.strip()
        if not text:
            raise ConfigError("empty instruction; publish a task such as 'pick up the red cube'")
        self.instruction = text
        self.policy.reset(text)
        self.steps = 0
        self.watchdog.feed("instruction", now)

    def set_image(self, image: np.ndarray, now: float, camera: str = "third_person") -> None:
        self.images[camera] = image
        self.watchdog.feed("image", now)

    def step(self, now: float, timestamp: float = 0.0) -> PolicyStep:
        """Run the policy once if inputs are fresh; never raises for model errors (status "error")."""
        import time

        reason = self.watchdog.reason(now)
        if reason:
            return PolicyStep(None, False, "hold", reason)
        obs = Observation(images=dict(self.images), instruction=self.instruction, state=dict(self.state), timestamp=timestamp)
        t0 = time.perf_counter()
        try:
            action = self.policy.act(obs)
            vec = np.asarray(action.vector if isinstance(action, Action) else action, dtype=np.float64)
            if vec.shape != (7,) or not np.all(np.isfinite(vec)):
                raise EmbevalError(f"policy returned an invalid action {vec.tolist()}")
        except Exception as exc:  # a broken model must stop the arm, not crash the node
            return PolicyStep(None, False, "error", f"{type(exc).__name__}: {exc}", model_s=time.perf_counter() - t0)
        model_s = time.perf_counter() - t0
        v, clipped = clip_action(vec, self.config.max_step_translation, self.config.max_step_rotation)
        self.steps += 1
        act = Action(v)
        if self.config.dry_run:
            return PolicyStep(act, False, "dry_run", "dry_run is on: set dry_run:=false to command the arm", clipped, model_s)
        return PolicyStep(act, True, "ok", "", clipped, model_s)
