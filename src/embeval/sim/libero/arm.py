"""LIBERO as an arm backend (``backend: libero`` of the ROS arm node and ``embeval graph``) and a camera source.

:class:`LiberoArm` drives one :class:`~embeval.sim.libero.episodes.LiberoTask`: the arm node's rule for a 7-DoF
action (:func:`embeval.robot.base.execute_step`: the move, then the gripper) becomes LIBERO control steps through
the ``libero_osc`` convention (:func:`embeval.sim.libero.to_libero`):

- ``move_tcp(target)``: the base-frame delta from the current end-effector pose to ``target`` (LIBERO's world frame
  has the robot base's axes) with the latched gripper command, ONE LIBERO control step (50 ms at 20 Hz); the OSC
  controller moves the hand part of the way, as in every LIBERO evaluation;
- ``hold``: one step with a zero delta; ``set_gripper(g)``: latch the command (g < 0.5 closes: LIBERO's +1), then one
  step with a zero delta. ``state().gripper`` is the latched command (1 open, 0 closed), so only an action that
  changes it costs that extra step (the rule every backend shares);
- the episode ends on LIBERO's own success check (``env.check_success()``) or its step limit: the backend then
  latches a protective stop naming why, so later actions are refused; :meth:`reset_safety` (the arm node's
  /embeval/arm/reset) starts the next episode from initial state ``seed`` (settled as every LIBERO evaluation).

Joints are the Panda's 7 (:data:`JOINT_NAMES`); ``move_joints`` is refused (LIBERO is driven by OSC deltas).
:class:`LiberoCamera` (camera source ``libero``) publishes the same task's agent view (or wrist) in the policy
orientation; composed in one ``embeval graph`` process both share one LIBERO worker (:func:`share`).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from embeval.action import Action, pose_delta
from embeval.errors import ConfigError, InvalidInputError
from embeval.robot.base import ArmState, as_gripper, as_pose6
from embeval.robot.safety import ProtectiveStop, SafetyLimits
from embeval.sim.libero import CAMERAS, to_libero

#: embeval's camera names (what the camera node asks the composed graph's renderer for) -> LIBERO's
VIEWS = {"third_person": "agentview", "first_person": "wrist"}
#: the Panda's joints, in LIBERO's ``robot0_joint_pos`` order
JOINT_NAMES = tuple(f"panda_joint{i}" for i in range(1, 8))


class LiberoArm:
    """ArmBackend over one LIBERO task (see the module docstring). ``task``: SUITE:TASK_ID; ``seed``: the initial
    state every episode starts from; ``width`` x ``height``: camera pixels; ``cameras``: what :meth:`render` serves;
    ``render_mode``, ``hard_reset``, ``max_steps``: as :class:`~embeval.sim.libero.episodes.LiberoTask`.
    ``control_hz`` is accepted for the arm node's signature: LIBERO steps at its own control rate (20 Hz)."""

    name = "libero"
    joint_names = JOINT_NAMES  # what the arm node's /joint_states names

    def __init__(self, limits: SafetyLimits | None = None, task: str = "libero_spatial:0", seed: int = 0,
                 width: int = 128, height: int = 128, cameras: Sequence[str] = ("agentview",),
                 render_mode: str = "default", hard_reset: bool = True, max_steps: int | None = None,
                 control_hz: float | None = None):
        from embeval.sim.libero.episodes import LiberoTask

        self.lock = threading.RLock()
        self.limits = limits or SafetyLimits()
        self.task_name, self.seed = task, int(seed)
        self.env = LiberoTask(task, int(width), int(height), cameras=tuple(cameras), max_steps=max_steps,
                              render_mode=render_mode, hard_reset=hard_reset)
        self.control_hz = 1.0 / self.env.control_dt
        self.safety = ProtectiveStop()
        self.home_q = None  # no joint moves: /embeval/arm/reset restarts the episode instead
        self.episodes = 0
        self._t0 = time.monotonic()
        self.reset_episode()

    # ---- the episode -----------------------------------------------------------------------------------------
    def reset_episode(self, seed: int | None = None) -> ArmState:
        """Start an episode from LIBERO initial state ``seed`` (default :attr:`seed`); gripper open, stop cleared."""
        with self.lock:
            if seed is not None:
                self.seed = int(seed)
            self.obs = self.env.reset(self.seed)
            self.gripper = 1.0
            self.episodes += 1
            self.safety.reset()
            return self.state()

    @property
    def success(self) -> bool:
        """LIBERO's own success check after the last step."""
        return self.env.success

    @property
    def done(self) -> bool:
        """The episode is over: LIBERO's success check or its step limit."""
        return self.env.done

    @property
    def instruction(self) -> str:
        return self.env.instruction

    def _step(self, delta6) -> ArmState:
        self.safety.require_ok()
        a = Action(np.concatenate([np.asarray(delta6, dtype=np.float64), [self.gripper]]))
        r = self.env.step_libero(to_libero(a))
        self.obs = r.observation
        if r.done:
            why = "success (LIBERO's check_success)" if r.success else f"step limit {self.env.max_steps} reached"
            self.safety.trip(f"LIBERO episode over after {self.env.steps} steps: {why}; reset to start the next")
        return self.state()

    # ---- ArmBackend ------------------------------------------------------------------------------------------
    def state(self) -> ArmState:
        with self.lock:
            return ArmState(joint_positions=np.asarray(self.obs.state["joint_positions"], dtype=np.float64).copy(),
                            tcp_pose=np.asarray(self.env.tcp_pose6()), gripper=float(self.gripper),
                            safety=self.safety.status, timestamp=self.env.steps * self.env.control_dt)

    def move_tcp(self, pose: Sequence[float], speed: float | None = None, min_duration: float = 0.0) -> ArmState:
        with self.lock:
            return self._step(pose_delta(self.env.tcp_pose6(), as_pose6(pose)))

    def hold(self, seconds: float) -> ArmState:
        with self.lock:
            return self._step(np.zeros(6))

    def set_gripper(self, opening: float) -> ArmState:
        g = as_gripper(opening)
        with self.lock:
            self.safety.require_ok()
            self.gripper = 1.0 if g >= 0.5 else 0.0
            return self._step(np.zeros(6))

    def move_joints(self, q: Sequence[float], speed: float | None = None) -> ArmState:
        raise InvalidInputError("the LIBERO arm takes end-effector deltas (OSC), not joint moves; leave home_joints "
                                "unset (/embeval/arm/reset restarts the LIBERO episode)")

    def stop(self) -> ArmState:
        return self.state()  # each step is blocking: nothing moves between calls

    def protective_stop(self, reason: str) -> ArmState:
        with self.lock:
            self.safety.trip(reason)
            return self.state()

    def reset_safety(self) -> ArmState:
        """Clear a stop; after a finished episode (success or step limit) start the next one from :attr:`seed`."""
        with self.lock:
            if self.done:
                return self.reset_episode()
            self.safety.reset()
            return self.state()

    def render(self, camera: str = "agentview", width: int | None = None, height: int | None = None) -> np.ndarray:
        """The last observation's image of ``camera`` (agentview or wrist; the policy orientation). LIBERO renders
        at its construction size: ``width`` / ``height`` other than that are refused."""
        with self.lock:
            img = self.obs.images.get(VIEWS.get(camera, camera))
            if img is None:
                raise ConfigError(f"LIBERO camera {camera!r}: this arm renders {', '.join(self.obs.images) or 'none'} "
                                  f"(choose from {', '.join(CAMERAS)})")
            if (width and width != img.shape[1]) or (height and height != img.shape[0]):
                raise ConfigError(f"LIBERO renders {img.shape[1]}x{img.shape[0]}; asked for {width}x{height}")
            return img.copy()

    def fovy(self, camera: str) -> float:
        """The vertical field of view (degrees) of LIBERO camera ``camera`` in the loaded model."""
        p = self.env.scene_params()
        return float(np.asarray(p["cam_fovy"]).reshape(-1)[list(p["cameras"]).index(CAMERAS[VIEWS.get(camera, camera)])])

    def close(self) -> None:
        with self.lock:
            self.env.close()


def graph_shared(arm_params: dict[str, Any], camera_params: dict[str, Any], limits: SafetyLimits,
                 **options: Any) -> dict[str, Any]:
    """What ``embeval graph`` composes for ``embeval_arm.backend: libero``: one :class:`LiberoArm` (``arm``) that
    the arm node steps and whose images the camera node (``source: sim``) publishes (``renderer``). The arm's
    ``sim_task`` is the LIBERO task (SUITE:TASK_ID) and ``sim_seed`` its initial state; the camera's ``width`` /
    ``height``, ``sim_camera`` and ``extra_cameras`` (third_person = agentview, first_person = wrist) what LIBERO
    renders. ``options``: :class:`LiberoArm`'s ``render_mode``, ``hard_reset``, ``max_steps``."""
    from embeval.sim.libero import parse_task

    task = str(arm_params.get("sim_task", ""))
    if ":" not in task:
        raise ConfigError(f"embeval_arm.sim_task: backend libero runs a LIBERO task SUITE:TASK_ID (e.g. "
                          f"libero_spatial:0), got {task!r}")
    parse_task(task)
    cams: list[str] = []
    for c in [camera_params.get("sim_camera", "third_person"), *(camera_params.get("extra_cameras") or [])]:
        if not c:
            continue
        name = VIEWS.get(c, c)
        if name not in CAMERAS:
            raise ConfigError(f"embeval_camera camera {c!r}: LIBERO has {', '.join(CAMERAS)} (or third_person, first_person)")
        if name not in cams:
            cams.append(name)
    arm = LiberoArm(limits, task=task, seed=int(arm_params.get("sim_seed", 0)), width=int(camera_params.get("width", 128)),
                    height=int(camera_params.get("height", 128)), cameras=cams, **options)
    return {"arm": arm, "renderer": arm.render}


class LiberoCamera:
    """Camera source ``libero``: frames of a :class:`LiberoArm` (``arm``: the composed graph's shared one) or of its
    own (``task``, ``seed``, ``width``, ``height``, ...: a still scene at LIBERO's initial state, nothing moves it).
    ``camera``: agentview or wrist (third_person / first_person); intrinsics from the model's own field of view."""

    name = "libero"

    def __init__(self, arm: LiberoArm | None = None, camera: str = "agentview", **arm_kw: Any):
        from embeval.camera.base import Intrinsics
        from embeval.camera.sim import SimSource

        if VIEWS.get(camera, camera) not in CAMERAS:
            raise ConfigError(f"camera source libero: camera {camera!r}; choose from {', '.join(CAMERAS)}")
        self.own = arm is None
        self.arm = arm or LiberoArm(cameras=(VIEWS.get(camera, camera),), **arm_kw)
        first = self.arm.render(camera)
        self._src = SimSource(self.arm.render, camera,
                              Intrinsics.from_fov(first.shape[1], first.shape[0], self.arm.fovy(camera)))
        self.intrinsics = self._src.intrinsics

    def read(self):
        return self._src.read()

    def close(self) -> None:
        if self.own:
            self.arm.close()
