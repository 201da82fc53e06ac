"""The conductor's episode logic (pure Python, no rclpy): phases, the Act2Answer cube-height estimate, verdicts.

:class:`Conductor` runs a list of episodes through a graph it reaches only through a
:class:`ConductorIO` (events, the instruction, the arm's reset/settle services, the log); the ROS
conductor node (``embeval_ros.conductor_node``) is that IO plus the parameters and subscriptions,
and feeds the inputs (``on_action``, ``on_joints``, ``on_cube``, ...). Times are monotonic seconds.

Phases: ``wait`` (graph connecting) -> [``operator`` (real cell: wait for the operator's go)] ->
``resetting`` (arm reset) -> ``settling`` (``episode_start`` sent) -> ``running`` (instruction sent,
actions counted) -> one of: ``ending`` at once (plain episode); ``judging`` (arm settles) ->
``verdict`` (success by ``success_from``: :func:`select_verdict`); Act2Answer: ``answering`` (arm
settles) -> [``measure``: operator measures the cube] -> ``ending`` -> next episode ... ``done``.

Act2Answer without cube sensing (``cube_source == "tcp"``): :class:`CubeEstimate` takes the cube
as carried by the TCP while the gripper is closed (its height rises with the TCP above the grasp
height) and as released where the gripper opened.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from embeval.action import gripper_closed

#: Act2Answer cube source -> where the episode's success (the zone) comes from (SUCCESS_SOURCES);
#: an estimate from the TCP is the operator's when they kept it, else none
A2A_SUCCESS_SOURCES = {"sim": "sim", "tracker": "sensor", "measured": "operator"}

#: success_from values: auto (arm, then sensor, then operator with operator_confirm) or one source only
SUCCESS_FROM = ("auto", "arm", "sensor", "operator", "none")

#: topic names quoted in verdict details and operator prompts (the ROS graph's names)
EXECUTION_SUCCESS_TOPIC = "/embeval/execution/success"
CONDUCTOR_SUCCESS_SERVICE = "/embeval/conductor/success"
CONDUCTOR_NEXT_SERVICE = "/embeval/conductor/next"
CUBE_POSE_TOPIC = "/embeval/act2answer/cube_pose"

#: how long a reset/settle call may take before the conductor goes on without its answer (s)
SERVICE_WAIT_S = 10.0


def parse_settle(msg: str) -> dict:
    """The arm's settle answer (JSON; {} when empty or not JSON)."""
    try:
        out = json.loads(msg or "{}")
    except json.JSONDecodeError:
        return {}
    return out if isinstance(out, dict) else {}


def select_verdict(success_from: str, confirm: bool, settle_msg: str, sensor: tuple[bool, float] | None,
                   operator: tuple[bool, float] | None, t_stop: float, waited: float,
                   verdict_timeout: float) -> dict | None:
    """An episode's success by ``success_from`` or None to keep waiting.

    ``sensor``/``operator``: (success, monotonic time) of the last verdict, counted only when given at or
    after ``t_stop`` (the episode's stop). ``auto``: the arm's (from state), else a fresh sensor verdict,
    else with ``confirm`` the operator's (waiting for it); ``sensor`` waits ``verdict_timeout`` s.
    """
    arm = parse_settle(settle_msg)
    src = success_from
    if src in ("auto", "arm") and arm.get("success") is not None:
        return {"success": bool(arm["success"]), "success_source": str(arm.get("success_source", "sim")),
                "success_detail": str(arm.get("detail", ""))}

    def fresh(verdict) -> bool:  # given after this episode stopped
        return verdict is not None and verdict[1] >= t_stop

    if src in ("auto", "sensor") and fresh(sensor):
        return {"success": sensor[0], "success_source": "sensor", "success_detail": EXECUTION_SUCCESS_TOPIC}
    if (src == "operator" or (src == "auto" and confirm)) and fresh(operator):
        return {"success": operator[0], "success_source": "operator", "success_detail": CONDUCTOR_SUCCESS_SERVICE}
    if src == "operator" or (src == "auto" and confirm) or (src == "sensor" and waited < verdict_timeout):
        return None
    why = arm.get("detail") or f"success_from {src}: no verdict"
    return {"success": None, "success_source": "none", "success_detail": str(why)}


def a2a_success_source(cube_source: str, kept: bool) -> str:
    """Where an Act2Answer episode's success comes from, by its cube source; ``kept``: the operator
    accepted the TCP estimate."""
    return A2A_SUCCESS_SOURCES.get(cube_source) or ("operator" if kept else "none")


class CubeEstimate:
    """The cube's height during an Act2Answer episode, fed to its :class:`~embeval.act2answer.episode.Termination`.

    ``source``: "pose" (a cube pose arrived since the scene loaded: simulated cell or tracker) or "tcp"
    (no cube sensing: a closed gripper carries the cube with the TCP). Metres, frame base; gripper 0..1
    (1 = open). ``update`` returns True when the rule ends the episode (released after the lift).
    """

    def __init__(self, spec, cube_xyz: list[float] | None):
        from embeval.act2answer.episode import Termination

        self.source = "tcp" if cube_xyz is None else "pose"
        self.z0 = cube_xyz[2] if cube_xyz is not None else spec.cube_size / 2
        self.rule = Termination(spec, self.z0, lifted=spec.start == "grasped")
        self.grasp_tcp_z: float | None = None  # TCP height when the gripper closed
        self.release_xy: list[float] | None = None  # TCP x, y when the gripper opened again

    def height(self, gripper: float, prev_gripper: float, tcp: list[float] | None, cube: list[float] | None) -> float:
        """The cube height after a state update (``prev_gripper``: the gripper before it); records the
        grasp height and the release point on the way."""
        if self.source != "tcp":
            return cube[2] if cube is not None else self.z0
        if gripper_closed(gripper) and not gripper_closed(prev_gripper) and tcp is not None:
            self.grasp_tcp_z = tcp[2]
        held = gripper_closed(gripper) and self.grasp_tcp_z is not None and tcp is not None
        cube_z = self.z0 + max(0.0, tcp[2] - self.grasp_tcp_z) if held else self.z0
        if not gripper_closed(gripper) and gripper_closed(prev_gripper) and tcp is not None:
            self.release_xy = tcp[:2]
        return cube_z

    def update(self, gripper: float, prev_gripper: float, tcp: list[float] | None, cube: list[float] | None) -> bool:
        return self.rule.update(self.height(gripper, prev_gripper, tcp, cube), gripper)


def cube_answer(settle_msg: str, est: CubeEstimate, measuring: bool, cube: list[float] | None, cube_t: float,
                t_phase: float, tcp: list[float] | None, default_xy) -> dict:
    """Where the cube ended: the settled sim cube, else a pose the operator published after the episode
    (``measuring`` and ``cube_t > t_phase``), else a tracked pose, else the TCP at release (else the TCP,
    else ``default_xy``); ``cube_source``: sim, measured, tracker or tcp."""
    settled = parse_settle(settle_msg).get("cube")
    if settled is not None:
        return {"cube_xyz": settled, "cube_source": "sim"}
    if measuring and est.source == "tcp" and cube is not None and cube_t > t_phase:
        return {"cube_xyz": cube, "cube_source": "measured"}
    if est.source == "pose" and cube is not None:
        return {"cube_xyz": cube, "cube_source": "tracker"}
    xy = est.release_xy or (tcp[:2] if tcp is not None else list(default_xy))
    return {"cube_xyz": [*xy, None], "cube_source": "tcp"}


def act2answer_episodes(scene_set, units: list[str], distortion: str, level: int) -> list[dict]:
    """Episodes of an Act2Answer scene set (one per unit, in the set's order unless ``units``)."""
    chosen = [scene_set.unit(u) for u in units] if units else list(scene_set.units.values())
    if distortion not in ("", "none"):
        from embeval.distortion import registry

        registry.get(distortion).param_for(level)
    return [{"item": u.unit, "instruction": u.instruction, "distortion": distortion or "none",
             "level": level if distortion not in ("", "none") else 0} for u in chosen]


def execution_episodes(n_images: int, seed: int, distortions: list[str], levels: list[int]) -> list[dict]:
    """The paper's Execution protocol: per reference image, its easiest task from the reference image, then
    from each distorted image (the non-``none`` entries of ``distortions``/``levels``)."""
    from embeval.sim.references import image_task

    variants = [(d, int(lv)) for d, lv in zip(distortions, levels) if d not in ("", "none")]
    episodes = []
    for k in range(n_images):
        scene, task = image_task(k, seed)
        block = {"image": k, "scene": scene.to_dict(), "task": task.to_dict(), "settle_s": 0.3}
        for d, lv in [("none", 0), *variants]:
            episodes.append({"item": scene.name, "instruction": task.instruction, "distortion": d, "level": lv,
                             "execution": block})
    return episodes


def public_fields(ep: dict) -> dict:
    """An episode's fields for ``episode_end`` (the scene and task of an Execution episode went out at the start)."""
    out = {k: v for k, v in ep.items() if k != "execution"}
    if "execution" in ep:
        out["execution"] = {"image": ep["execution"]["image"], "task": ep["execution"]["task"]}
    return out


class ConductorIO(Protocol):
    """What the conductor does to the graph. ``call_reset``/``call_settle`` return a future-like object
    (``done()``, ``result().message``) or None when the service is not there (the conductor goes on)."""

    def event(self, ev: dict) -> None: ...
    def instruction(self, text: str) -> None: ...
    def call_reset(self) -> Any: ...
    def call_settle(self) -> Any: ...
    def info(self, msg: str) -> None: ...
    def missing_nodes(self, now: float) -> list[str]: ...


@dataclass
class ConductorConfig:
    """The conductor's settings (the node's parameters of the same names; seconds)."""

    steps: int = 5  # actions per episode (an Act2Answer scene set's max_steps replaces it)
    timeout: float = 30.0
    settle: float = 0.5
    subject: str = ""
    start_delay: float = 1.0
    seed: int = 0
    confirm: bool = False  # operator_confirm
    success_from: str = "auto"
    verdict_timeout: float = 10.0
    control_hz: float = 10.0  # policy steps per second (the policy node's rate_hz): the intent metrics' 3 s dwell


class Conductor:
    """The episode state machine (see the module docstring); call :meth:`tick` periodically (the node: 20 Hz)."""

    def __init__(self, cfg: ConductorConfig, episodes: list[dict], io: ConductorIO, scene_set=None,
                 clock: Callable[[], float] = time.monotonic):
        self.cfg, self.episodes, self.io, self.a2a, self.clock = cfg, episodes, io, scene_set, clock
        self.steps = scene_set.spec.max_steps if scene_set is not None else cfg.steps
        self.operator_verdict = None  # (success, monotonic time) of the operator's last answer
        self.sensor_verdict = None  # (success, monotonic time) of the sensing node's last verdict
        self.t_stop = 0.0  # when the running episode was stopped (monotonic s)
        self.cube = None  # latest cube position [x, y, z] (m, frame base)
        self.cube_t = 0.0  # when it arrived (monotonic s)
        self.tcp = None  # latest TCP position [x, y, z]
        self.gripper = 1.0
        self.intent = None  # the running Act2Answer episode's IntentTracker
        self.arm_reason = ""  # the first stop cause the arm reported in this episode
        self.end_reason, self.stopped, self.est = "", False, None
        self._confirmed = False
        self._settle_msg = ""
        self._timed_out = False
        self.index = -1
        self.phase = "wait"
        self.t_phase = clock()
        self.actions = 0
        self.finished = False
        self._future = None

    # -- inputs -------------------------------------------------------------------------------------
    def on_action(self) -> None:
        if self.phase == "running":
            if self.a2a is not None and self.actions:
                self._intent_step()  # the TCP now is the one after the previous action
            self.actions += 1

    def _intent_step(self) -> None:
        """Feed the intent metrics one executed step: the latest TCP and whether the gripper is closed (the cube's
        grasp is not observable on a real cell; a closed gripper is taken as holding it)."""
        if self.intent is not None and self.tcp is not None:
            self.intent.update(self.tcp, gripper_closed(self.gripper))

    def on_cube(self, xyz: list[float]) -> None:
        self.cube, self.cube_t = list(xyz), self.clock()

    def on_tcp(self, xyz: list[float]) -> None:
        self.tcp = list(xyz)

    def on_gripper(self, g: float) -> None:
        """A gripper opening from the joint states (0..1, 1 = open)."""
        if self.a2a is not None and self.phase == "running":
            self._track(g)
        self.gripper = g

    def on_safety_mode(self, mode: int) -> None:
        """UR safety mode (1 = normal)."""
        if self.a2a is not None and self.phase == "running" and int(mode) != 1 and not self.end_reason:
            self.stopped = True  # the arm's own reason replaces this when the episode ends
            self.end_reason = f"protective stop (UR safety mode {int(mode)})"

    def on_arm_error(self, message: str) -> None:
        if message and not self.arm_reason:  # the first cause, not the later refusals
            self.arm_reason = message

    def on_next(self) -> str:
        """The operator's go; returns the reply text."""
        self._confirmed = True
        return {"operator": "next episode", "measure": "estimate kept"}.get(self.phase, f"conductor is {self.phase}")

    def on_operator_verdict(self, success: bool) -> tuple[bool, str]:
        """The operator's verdict; returns (accepted, reply text)."""
        self.operator_verdict = (bool(success), self.clock())
        waiting = self.phase == "verdict"
        return waiting, (f"recorded: {'success' if success else 'failure'} (operator)" if waiting
                         else f"not waiting for a verdict (conductor is {self.phase})")

    def on_sensor_verdict(self, success: bool) -> None:
        self.sensor_verdict = (bool(success), self.clock())

    # -- logic --------------------------------------------------------------------------------------
    def judged(self, ep: dict) -> bool:
        """Whether an episode ends with a success verdict (stop, settle, verdict) rather than at once."""
        sf = self.cfg.success_from
        return self.a2a is None and ("execution" in ep or sf in ("arm", "sensor", "operator") or (sf == "auto" and self.cfg.confirm))

    def a2a_block(self) -> dict:
        """What every node needs to know about the running Act2Answer unit (JSON-safe)."""
        from embeval.provenance import derive_seed

        u = self.a2a.unit(self.episodes[self.index]["item"])
        return {"item": u.item, "layout": u.layout, "correct_side": u.correct_side, "category": u.category,
                "scene": str(u.scene.resolve()), "spec": self.a2a.spec.to_dict(),
                "seed": int(derive_seed(self.cfg.seed, u.item, u.layout))}

    def _track(self, gripper: float) -> None:
        """Feed the termination rule after a state update (gripper 0..1, 1 = open)."""
        if self.end_reason:
            return
        if self.est.update(gripper, self.gripper, self.tcp, self.cube):
            self.end_reason = "released"

    def _start_running(self) -> None:
        self.end_reason, self.stopped, self.arm_reason = "", False, ""
        # a cube pose published since the scene loaded: simulated cell or a tracker on the real one
        self.est = CubeEstimate(self.a2a.spec, self.cube)
        from embeval.act2answer.protocol import IntentTracker

        side = self.a2a.unit(self.episodes[self.index]["item"]).correct_side
        self.intent = IntentTracker(self.a2a.spec, side, self.cfg.control_hz)

    def answer(self, settle_msg: str) -> dict:
        return cube_answer(settle_msg, self.est, self.phase == "measure", self.cube, self.cube_t, self.t_phase, self.tcp,
                           self.a2a.spec.cube_xy)

    def _enter(self, phase: str) -> None:
        self.phase, self.t_phase = phase, self.clock()

    def _event(self, **ev) -> None:
        self.io.event(ev)

    @staticmethod
    def _result(future) -> str:
        return future.result().message if future is not None and future.done() else ""

    def tick(self) -> None:
        now = self.clock()
        age = now - self.t_phase
        cfg = self.cfg
        if self.phase == "wait":
            if age >= cfg.start_delay and not self.io.missing_nodes(now):
                self._next()
        elif self.phase == "operator":
            if self._confirmed:
                self._reset_arm()
        elif self.phase == "resetting":
            if self._future is None or self._future.done() or age > SERVICE_WAIT_S:
                ep = self.episodes[self.index]
                extra = {"act2answer": self.a2a_block()} if self.a2a is not None else {}
                if extra:
                    extra["seed"] = extra["act2answer"]["seed"]
                self._event(event="episode_start", index=self.index, subject=cfg.subject, **ep, **extra)
                self.cube = None  # only poses of the new scene count
                self._enter("settling")
        elif self.phase == "settling":
            if age >= cfg.settle:
                self.actions = 0
                if self.a2a is not None:
                    self._start_running()
                self.io.instruction(self.episodes[self.index]["instruction"])
                self._enter("running")
        elif self.phase == "running":
            self._tick_running(age)
        elif self.phase == "judging":  # the arm settles and judges from state (sim, mirror), or cannot
            if self._future is None or self._future.done() or age > SERVICE_WAIT_S:
                self._settle_msg = self._result(self._future)
                self._enter("verdict")
                self._prompt_verdict()
        elif self.phase == "verdict":  # the arm's verdict, a sensing node's, or the operator's
            verdict = select_verdict(cfg.success_from, cfg.confirm, self._settle_msg, self.sensor_verdict,
                                     self.operator_verdict, self.t_stop, age, cfg.verdict_timeout)
            if verdict is not None:
                ep = self.episodes[self.index]
                self._event(event="episode_end", index=self.index, actions=self.actions, timed_out=self._timed_out,
                            **public_fields(ep), **verdict)
                self.io.info(f"episode {self.index + 1}/{len(self.episodes)} {ep['item']} ({ep['distortion']}): success "
                             f"{verdict['success']} ({verdict['success_source']})")
                self._enter("ending")
        elif self.phase == "answering":
            if self._future is None or self._future.done() or age > SERVICE_WAIT_S:
                msg = self._result(self._future)
                est = self.answer(msg)
                if cfg.confirm and est["cube_source"] == "tcp":  # no cube sensing: the operator may measure it
                    self.io.info(
                        f"episode {self.episodes[self.index]['item']} ended ({self.end_reason}): publish the cube's measured "
                        f"position on {CUBE_POSE_TOPIC} (frame base), or accept the {est['cube_source']} estimate "
                        f"{[round(v, 3) for v in est['cube_xyz'][:2]]} with: ros2 service call {CONDUCTOR_NEXT_SERVICE} "
                        "std_srvs/srv/Trigger")
                    self._confirmed, self._settle_msg = False, msg
                    self._enter("measure")
                    return
                self._finish(msg)
        elif self.phase == "measure":  # real cell: wait for a measured cube position or the operator's go
            if self._confirmed or self.cube_t > self.t_phase:
                self._finish(self._settle_msg)
        elif self.phase == "ending" and age >= 0.2:  # let the scorer see the last state
            self._next()

    def _tick_running(self, age: float) -> None:
        cfg = self.cfg
        if self.a2a is not None:
            if self.end_reason or self.actions >= self.steps or age >= cfg.timeout:
                if not self.end_reason:
                    self.end_reason = "max_steps" if self.actions >= self.steps else "timeout"
                self._event(event="episode_stop", index=self.index, reason=self.end_reason)  # the policy stops now
                self._future = self.io.call_settle()
                self._enter("answering")
        elif self.actions >= self.steps or age >= cfg.timeout:
            ep = self.episodes[self.index]
            if self.judged(ep):
                self._event(event="episode_stop", index=self.index, reason="max_steps" if self.actions >= self.steps else "timeout")
                self.t_stop, self._timed_out = self.clock(), self.actions < self.steps
                self._future = self.io.call_settle()
                self._enter("judging")
            else:
                self._event(event="episode_end", index=self.index, actions=self.actions, timed_out=self.actions < self.steps,
                            **public_fields(ep))
                self._enter("ending")

    def _prompt_verdict(self) -> None:
        """Tell the operator how to answer when the verdict is theirs to give."""
        sf = self.cfg.success_from
        if sf == "operator" or (sf == "auto" and self.cfg.confirm):
            if sf == "auto" and parse_settle(self._settle_msg).get("success") is not None:
                return
            ep = self.episodes[self.index]
            self.io.info(
                f"episode {ep['item']} ({ep['distortion']}) ended: did it succeed ({ep['instruction']!r})? Answer with "
                f"`embeval operator` (y/n), or: ros2 service call {CONDUCTOR_SUCCESS_SERVICE} std_srvs/srv/SetBool "
                "\"{data: true}\"")

    def _finish(self, settle_msg: str) -> None:
        """Announce the Act2Answer episode's end with the cube's final position and what ended it."""
        reason = self.arm_reason if self.stopped and self.arm_reason else self.end_reason
        if self.actions:
            self._intent_step()  # the last action's
        ans = self.answer(settle_msg)
        kept = self.phase == "measure" and self._confirmed  # the operator accepted the TCP estimate
        ans.update(end_reason=reason, stopped=self.stopped, steps=self.actions,
                   intent=self.intent.metrics() if self.intent is not None else {},
                   success_source=a2a_success_source(ans["cube_source"], kept))
        self._event(event="episode_end", index=self.index, actions=self.actions, timed_out=self.end_reason == "timeout",
                    **self.episodes[self.index], act2answer={**self.a2a_block(), **ans})
        self._enter("ending")

    def _next(self) -> None:
        self.index += 1
        if self.index >= len(self.episodes):
            if not self.finished:
                self._event(event="graph_done", episodes=len(self.episodes))
                self.io.info(f"all {len(self.episodes)} episodes done")
            self.finished = True
            self._enter("done")
            return
        if self.cfg.confirm:
            self._confirmed = False
            where = ""
            if self.a2a is not None:
                u, spec = self.a2a.unit(self.episodes[self.index]["item"]), self.a2a.spec
                where = (f": scene {u.scene} (left card at {spec.left_card_xy}, right card at {spec.right_card_xy}, cube at "
                         f"{spec.cube_xy}, m in frame base)")
            self.io.info(f"episode {self.index + 1}/{len(self.episodes)} {self.episodes[self.index]['item']}{where}; "
                         f"set up the cell, then: ros2 service call {CONDUCTOR_NEXT_SERVICE} std_srvs/srv/Trigger")
            self._enter("operator")
            return
        self._reset_arm()

    def _reset_arm(self) -> None:
        self._future = self.io.call_reset()
        self._enter("resetting")
