"""arm node: execute 7-DoF actions on a backend (sim | mock | ur_rtde) within safety limits.

Publishes the UR driver's topics (/joint_states, /tcp_pose_broadcaster/pose in frame ``base``,
/io_and_status_controller/safety_mode in UR numbering, /speed_scaling_state_broadcaster/speed_scaling)
at ``state_rate_hz``. Every action on /embeval/action goes through
:class:`embeval.control.ArmCommander` (workspace box, step translation and rotation, speed limits; every limit parameter
checked finite and in range at startup) and is executed the same way on
every backend (:func:`embeval.robot.base.execute_step`: the move lasting at least ``1 / control_hz``, or a
hold that long, then the gripper rule across 0.5); a stale command
(header.stamp older than ``max_command_age_s``), a malformed one, a limit violation or a backend
error trips a protective stop, latched until /embeval/arm/reset (std_srvs/Trigger).

Dry run (``dry_run``, default true; ``embeval graph`` and the launch files set it from the policy's
``dry_run``): the arm never moves on its own initiative. /embeval/arm/reset then clears the stop but does
not move home; it answers the joint move it would have made. A reset whose home move the backend refuses
(joint path leaving the workspace box, say) answers ``success: false`` with the reason. A lost controller
connection (ur_rtde) is latched and published like any stop (safety mode 3, /embeval/arm/status error).

Act2Answer (backend sim): an ``episode_start`` event on /embeval/events that carries
``act2answer.scene`` (a scene YAML from ``embeval act2answer scenes``) loads that scene (cards, cube,
arm at home) into the simulated cell and announces it (latched) on /embeval/act2answer/scene; the cube's pose is published on /embeval/act2answer/cube_pose
with every state; /embeval/arm/settle (std_srvs/Trigger) runs ``act2answer.spec.settle_s`` of physics
and answers the cube position as JSON. Other backends answer ``{"cube": null}`` (nothing simulated).

Execution episodes (an ``episode_start`` with an ``execution`` block: the episode's scene and task, see the
conductor's ``execution_images``): the sim backend loads the scene; with ``success_from_state`` the
non-sim backends load it into a :class:`embeval.sim.mirror.MirrorCell` that follows the arm after every
action. /embeval/arm/settle then also answers the task's success predicate on that state:
``"success"`` (true/false, null when nothing can judge it) and ``"success_source"`` (sim, mirror, none).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, String, UInt8
from std_srvs.srv import Trigger

import embeval.sim  # noqa: F401 - the sim layer registers its arm backend ("sim") on ARM_BACKENDS
from embeval import checks
from embeval.errors import ConfigError
from embeval.robot.backends import make_backend
from embeval.robot.safety import LIMIT_RANGES, SafetyLimits, check_range
from embeval_ros import topics as T
from embeval_ros.base import EmbevalNode
from embeval_ros.conversions import (
    act2answer_start,
    episode_start_block,
    joint_state_msg,
    msg_to_action,
    pose_msg,
    stamp_to_ns,
)
from embeval_ros.diagnostics import diag
from embeval_ros.node_spec import RosNode
from embeval_ros.runtime import qos_latched, qos_reliable, run_node, typed

NODE = RosNode("embeval_arm", "ArmNode", start=40,
               description="executes actions on an arm backend (sim, mock, ur_rtde) within safety limits")

def safety_limits(read: Callable[[str, Any, str], Any]) -> SafetyLimits:
    """The arm's :class:`SafetyLimits` from its parameters; ``read(name, default, description)`` reads one
    (the node's declared parameter, or a plain dict lookup where ``embeval graph`` builds the shared sim arm).
    Each value is type-checked (:func:`embeval_ros.runtime.typed`) and range-checked by SafetyLimits (finite,
    :data:`embeval.robot.safety.LIMIT_RANGES`): a wrong one is a ConfigError naming the parameter."""
    def param(name, default, description):
        return typed(f"embeval_arm.{name}", read(name, default, description), default)

    lo = param("workspace_lower", [0.10, -0.50, 0.0], "workspace box lower corner [x, y, z] (m, frame base)")
    hi = param("workspace_upper", [0.90, 0.50, 0.70], "workspace box upper corner [x, y, z] (m, frame base)")
    max_speed = param("max_tcp_speed", 0.25, "TCP speed cap (m/s), at most 3.0")
    speed = param("tcp_speed", 0.1, "commanded TCP speed (m/s), capped at max_tcp_speed")
    max_step = param("max_step_translation", 0.05, "refuse (protective stop) a single step longer than this (m), at most 1.0")
    max_rot = param("max_step_rotation", 0.25, "refuse (protective stop) a single step rotating more than |[droll, dpitch, "
                    "dyaw]| = this (rad), at most pi; the policy node clips to its own max_step_rotation (default 0.25)")
    check_range("tcp_speed", speed, *LIMIT_RANGES["default_tcp_speed"])
    return SafetyLimits(workspace_lower=tuple(lo), workspace_upper=tuple(hi), max_tcp_speed=max_speed,
                        default_tcp_speed=min(speed, max_speed), max_step_translation=max_step, max_step_rotation=max_rot)


def home_joints(value: list) -> list[float] | None:
    """The ``home_joints`` parameter: 6 finite joint angles (rad), or the default ``[0.0]`` (None: the backend's home)."""
    if list(value) == [0.0]:
        return None
    return list(checks.vector(value, "parameter embeval_arm.home_joints", 6,
                              why="joint angles in rad, or [0.0] for the backend's home"))


def robot_address(value: str, backend: str) -> str:
    """The ``robot_ip`` parameter: an IPv4/IPv6 address or host name (required for backend ur_rtde)."""
    import re

    if value and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}", value):
        raise ConfigError(f"parameter embeval_arm.robot_ip must be an IP address or host name, got {value!r}; "
                          "e.g. robot_ip: \"192.168.1.102\"")
    if backend == "ur_rtde" and not value:
        raise ConfigError("parameter embeval_arm.robot_ip is empty; set the UR controller's IP (robot_ip:=192.168.1.102)")
    return value


class ArmNode(EmbevalNode):
    def __init__(self, **kw):
        super().__init__(NODE.name, **kw)
        from embeval.control import ArmCommander

        backend = self.param("backend", "mock", "arm backend: sim | mock | ur_rtde")
        robot_ip = robot_address(self.param("robot_ip", "", "UR controller IP (backend=ur_rtde)"), backend)
        self.ur_type = self.param("ur_type", "ur5", "UR model (ur3, ur3e, ur5, ur5e, ur10, ur10e): with backend ur_rtde "
                                  "its kinematics check joint paths, compared with the controller's own FK")
        self.limits = safety_limits(self.param)
        self.max_age = check_range("max_command_age_s", self.param(
            "max_command_age_s", 1.0, "stale-command watchdog: older commands stop the arm (s), in (0, 60]"))
        self.frame = self.param("action_frame", "base", "frame of the deltas: base | tool0")
        rate = check_range("state_rate_hz", self.param("state_rate_hz", 50.0, "state publish rate (Hz), in (0, 1000]"))
        home = home_joints(self.param("home_joints", [0.0], "home joint angles (rad, 6 values); [0.0]: the backend's home"))
        self.go_home_on_reset = bool(self.param("home_on_reset", True, "move to home_joints on /embeval/arm/reset"))
        resume = self.param("reset_after_outside_stop", False, "true: /embeval/arm/reset also restarts a control script "
                            "stopped at the controller (the pendant's Stop, the RTDE watchdog, a program error); false: "
                            "only a person restarting the graph does (the conductor resets before every episode)")
        self.reset_after_outside_stop = bool(resume)
        dry = self.param("dry_run", True, "true: /embeval/arm/reset clears a stop but never moves home (it answers the move "
                         "it would make); embeval graph and the launch files take it from embeval_policy's dry_run")
        self.dry_run = dry  # a bool: typed() refuses anything else
        sim_task = self.param("sim_task", "Pick", "task verb of the generated sim scene (backend=sim)")
        sim_seed = self.param("sim_seed", 0, "seed of the generated sim scene (backend=sim)", lo=0)
        control_hz = check_range("control_hz", self.param(
            "control_hz", 10.0, "action rate (Hz), in (0, 500]: each action lasts at least 1/control_hz s (a short "
            "move is slowed or waits, a zero delta holds that long), as in the simulator"))
        extra = {"robot_ip": robot_ip, "ur_type": self.ur_type} if backend == "ur_rtde" else {"task": sim_task, "seed": sim_seed} if backend in ("sim", "libero") else {}
        extra["control_hz"] = control_hz
        judge = str(self.param("success_from_state", "auto", "Execution episodes: judge the task's success from state; auto: "
                               "sim on backend sim, a mirror cell (a simulated copy following the arm) on mock and on "
                               "ur_rtde at a loopback IP (the UR emulator), none on a real robot; or sim/mirror/none"))
        checks.choice(judge, "parameter embeval_arm.success_from_state", ("auto", "sim", "mirror", "none"), "judge")
        if judge == "auto":
            loopback = robot_ip.startswith("127.") or robot_ip == "localhost"
            judge = "sim" if backend == "sim" else "mirror" if backend == "mock" or loopback else "none"
        if judge == "sim" and backend != "sim":
            raise ConfigError(f"success_from_state sim needs backend sim (got {backend}); use mirror or none")
        self.judge = judge
        self.backend = self.shared.get("arm") or make_backend(backend, self.limits, **extra)
        check = getattr(self.backend, "check_kinematics", None)  # ur_rtde: ur_type against the controller's own FK
        if check is not None and "arm" not in self.shared:
            why = check()
            if why:
                self.backend.close()
                raise ConfigError(f"parameter embeval_arm.ur_type: {why} (checked at start, nothing moved)")
        self.home_q = home if home is not None else getattr(self.backend, "home_q", None)
        self.commander = ArmCommander(self.backend, self.limits, frame=self.frame, speed=self.limits.default_tcp_speed)
        self.executed = self.refused = 0
        self.halted = ""  # why the run was ended (halt): every later command and reset is refused
        self.command_age_s: list[float] = []
        cmd_group = MutuallyExclusiveCallbackGroup()
        self.js_pub = self.create_publisher(JointState, T.JOINT_STATES, qos_reliable())
        self.pose_pub = self.create_publisher(PoseStamped, T.TCP_POSE, qos_reliable())
        self.mode_pub = self.create_publisher(UInt8, T.SAFETY_MODE, qos_reliable())
        self.scale_pub = self.create_publisher(Float64, T.SPEED_SCALING, qos_reliable())
        self.status_pub = self.create_publisher(DiagnosticArray, T.ARM_STATUS, qos_reliable())
        self.create_subscription(JointState, T.ACTION, self._on_action, qos_reliable(), callback_group=cmd_group)
        self.create_service(Trigger, T.ARM_RESET, self._on_reset, callback_group=cmd_group)
        self.create_service(Trigger, T.ARM_STOP, self._on_stop)
        self.cube_pub = self.create_publisher(PoseStamped, T.CUBE_POSE, qos_reliable())
        self.scene_pub = self.create_publisher(String, T.SCENE, qos_latched())  # late joiners (a camera mirror) get it
        self.settle_s = 0.3  # physics after an Act2Answer episode (s); each episode_start may set it
        self.a2a_spec, self.a2a_step = None, 0  # the Act2Answer episode's spec and its actions so far (the hold)
        self.scene = ""  # the Act2Answer scene YAML loaded last
        self.task = None  # the Execution episode's TaskSpec (its success predicate), None outside one
        self.task_scene = None
        self.mirror = None  # MirrorCell following a non-sim arm through an Execution episode
        self.create_subscription(String, T.EVENTS, self._on_event, qos_reliable(50), callback_group=cmd_group)
        self.create_service(Trigger, T.ARM_SETTLE, self._on_settle, callback_group=cmd_group)
        self.create_timer(1.0 / rate, lambda: self._publish_state(), callback_group=MutuallyExclusiveCallbackGroup())

    def _on_action(self, msg: JointState) -> None:
        t_in = time.perf_counter()
        self.log.received += 1
        stamp = stamp_to_ns(msg.header.stamp)
        age = (self.now_ns() - stamp) / 1e9
        self.command_age_s.append(age)  # image capture -> command arrival (end-to-end latency)
        try:
            vec = msg_to_action(msg)
        except Exception as exc:  # noqa: BLE001
            res = self.commander.protective_stop(f"malformed action message: {exc}")
        else:
            if self.halted:
                from embeval.control.arm_step import ArmStepResult

                res = ArmStepResult(self.backend.state(), False, f"halted: {self.halted}")
            elif age > self.max_age:
                res = self.commander.protective_stop(f"stale command: {age:.2f} s old > max_command_age_s {self.max_age:.2f}")
            elif msg.header.frame_id and msg.header.frame_id != self.frame:
                res = self.commander.protective_stop(f"action frame {msg.header.frame_id!r} != arm action_frame {self.frame!r}")
            else:
                res = self.commander.step(self._held(vec))
        if self.mirror is not None:
            self.mirror.follow(res.state)
        if res.executed:
            self.executed += 1
        else:
            self.refused += 1
            self.get_logger().warning(f"action not executed: {res.reason}", throttle_duration_sec=2.0)
        self.log.add(t_in)
        self._publish_state(res.state)
        self.status_pub.publish(diag("arm", "ok" if res.executed else "error", res.reason or "executed",
                                     {"executed": self.executed, "refused": self.refused,
                                      "backend": getattr(self.backend, "name", "?"),
                                      "done_ns": self.now_ns()}, stamp))  # when the arm finished it (node clock)

    def _held(self, vec):
        """``vec`` as executed: an Act2Answer grasped start's first ``hold_steps`` actions with the gripper closed
        (:func:`embeval.act2answer.protocol.held_action`), counted from the episode's start."""
        if self.a2a_spec is None:
            return vec
        import numpy as np

        from embeval.act2answer.protocol import held_action

        forced = held_action(vec, self.a2a_step, self.a2a_spec)
        self.a2a_step += 1
        return vec if forced is None else np.asarray(forced, dtype=np.float64)

    def _on_reset(self, request, response):
        home = self.home_q if self.go_home_on_reset else None
        try:
            if self.halted:
                response.success, response.message = False, f"reset refused: halted ({self.halted})"
            elif getattr(self.backend, "stopped_outside", False) and not self.reset_after_outside_stop:
                response.success, response.message = False, (
                    f"reset refused: {self.backend.state().safety.reason.split(': call reset')[0]}. Stopped at the "
                    "controller, not by embeval: an automatic reset must not override the operator. Check the cell, "
                    "then start embeval again (or set embeval_arm.reset_after_outside_stop: true)")
            elif self.dry_run and home is not None:  # nothing moves until dry_run:=false
                state = self.commander.reset(None)
                response.success = state.safety.ok
                response.message = (f"protective stop cleared; dry run: NOT moved home (would moveJ to "
                                    f"{[round(float(v), 4) for v in home]} rad); set dry_run:=false to move")
            else:
                state = self.commander.reset(home)
                response.success = state.safety.ok
                response.message = ("protective stop cleared" + (", at home" if home is not None else "") if state.safety.ok
                                    else f"reset failed: {state.safety.reason}")
        except Exception as exc:  # noqa: BLE001
            response.success, response.message = False, f"reset failed: {exc}"
        if not response.success:
            self.get_logger().error(response.message)
        self._publish_state()
        return response

    def _sim(self):
        """The simulated backend (:class:`~embeval.sim.arm_backend.SimArmBackend`), or None (mock, ur_rtde)."""
        return self.backend if getattr(self.backend, "name", "") == "sim" else None

    def _load_scene(self, sim, scene) -> None:
        """Load a scene into the sim backend; its home becomes the reset target unless home_joints is set."""
        home = sim.load_scene(scene)  # robot at the scene's home, safety cleared
        if len(list(self.get_parameter("home_joints").value)) != 6:
            self.home_q = home

    def _on_event(self, msg: String) -> None:
        """Load an Act2Answer or Execution episode's scene into the simulated cell (serialised with the commands)."""
        if '"episode_start"' in msg.data:
            self.a2a_spec = None  # set again below for an Act2Answer episode
        if (ex := episode_start_block(msg, "execution")) is not None:
            self._start_execution(ex)
            return
        if '"episode_start"' in msg.data:  # any other episode: no Execution task to judge
            self._end_execution()
        a2a = act2answer_start(msg)
        if a2a is None:
            return
        self.settle_s = float((a2a.get("spec") or {}).get("settle_s", self.settle_s))
        from embeval.act2answer.scene import EpisodeSpec

        self.a2a_spec, self.a2a_step = EpisodeSpec.from_dict(a2a.get("spec") or {}), 0
        grasped = self.a2a_spec.start == "grasped"
        sim = self._sim()
        if sim is None:
            self.get_logger().info(f"episode {a2a.get('item')} {a2a.get('layout')}: set up the real cell as in {a2a['scene']}"
                                   + ("; close the gripper on the cube at the home pose" if grasped else ""))
            return
        from embeval.sim.scene import SceneSpec

        self._load_scene(sim, SceneSpec.from_yaml(a2a["scene"]))
        if grasped:
            sim.grasp_cube()
        self.scene = str(a2a["scene"])
        self.scene_pub.publish(String(data=self.scene))
        self._publish_state()

    def _start_execution(self, ex: dict) -> None:
        """An Execution episode: the sim cell loads its scene (arm at the scene's home); another backend's mirror
        loads it with the arm where the arm is now. Either keeps the task to judge at /embeval/arm/settle."""
        from dataclasses import replace

        from embeval.sim.scene import SceneSpec
        from embeval.sim.tasks import TaskSpec

        self._end_execution()
        scene, self.task = SceneSpec.from_dict(ex["scene"]), TaskSpec.from_dict(ex["task"])
        self.settle_s = float(ex.get("settle_s", 0.3))
        sim = self._sim()
        if sim is not None:
            self._load_scene(sim, scene)
        elif self.judge == "mirror":
            from embeval.sim.mirror import MirrorCell

            here = self.backend.state().tcp_pose
            scene = replace(scene, home_tcp=tuple(float(v) for v in here))  # the copy starts where the arm is
            try:
                self.mirror = MirrorCell(scene, self.limits, speed=self.limits.default_tcp_speed)
            except Exception as exc:  # noqa: BLE001 - no mirror: the episode's success stays unknown
                self.get_logger().error(f"cannot mirror Execution episode {scene.name} with the arm at {here.round(3).tolist()}: "
                                        f"{exc}; its success is not judged from state")
        else:
            self.get_logger().info(f"Execution episode {scene.name}: set up the cell as in that scene ({self.task.instruction})")
        self.task_scene = scene
        self._publish_state()

    def _end_execution(self) -> None:
        self.task = self.task_scene = None
        if self.mirror is not None:
            self.mirror.close()
            self.mirror = None

    def _verdict(self) -> dict:
        """The Execution episode's success from state (after the settle): sim cell or mirror, else unknown."""
        if self.task is None:
            return {"success": None, "success_source": "none", "detail": "no Execution task"}
        sim = self._sim()
        if sim is not None and self.judge == "sim":
            return sim.verdict(self.task, self.task_scene)
        if self.mirror is not None:
            return self.mirror.verdict(self.task)
        return {"success": None, "success_source": "none", "detail": f"backend {getattr(self.backend, 'name', '?')} cannot "
                "judge success from state (success_from_state none): a sensing node or the operator must"}

    def _cube_position(self):
        sim = self._sim()
        return None if sim is None else sim.object_pose("cube")

    def _on_settle(self, request, response):
        import json

        sim = self._sim()
        if sim is not None:
            sim.settle(self.settle_s)
        if self.mirror is not None:
            self.mirror.settle(self.settle_s)
        cube = self._cube_position()
        verdict = self._verdict()
        response.success = True
        response.message = json.dumps({"cube": None if cube is None else [float(v) for v in cube[0]],
                                       "backend": getattr(self.backend, "name", "?"), **verdict})
        self._publish_state()
        return response

    def halt(self, reason: str) -> None:
        """End the run's motion now (``embeval graph`` on Ctrl-C, from its main thread): a move in progress decelerates
        (a backend's ``halt``; else its protective stop) and every later command and reset is refused."""
        self.halted = reason
        halt = getattr(self.backend, "halt", None)
        try:
            halt(reason) if halt is not None else self.commander.protective_stop(reason)
        except Exception as exc:  # noqa: BLE001 - best effort: closing the backend stops the script next
            self.get_logger().error(f"halt failed: {exc}")

    def _on_stop(self, request, response):
        self.commander.protective_stop("protective stop requested on " + T.ARM_STOP)
        response.success, response.message = True, "protective stop latched; call " + T.ARM_RESET
        return response

    def _publish_state(self, state=None) -> None:
        from embeval.control import ur_safety_mode

        state = state or self.backend.state()
        now = self.now_ns()
        self.js_pub.publish(joint_state_msg(state.joint_positions, now, state.joint_velocities, gripper=state.gripper,
                                            names=getattr(self.backend, "joint_names", None)))  # LIBERO: the Panda's
        self.pose_pub.publish(pose_msg(state.tcp_pose, now, "base"))
        self.mode_pub.publish(UInt8(data=ur_safety_mode(state.safety)))
        scaling = getattr(self.backend, "speed_scaling_state", None)
        self.scale_pub.publish(Float64(data=float(scaling()) if scaling else 1.0))
        cube = self._cube_position()
        if cube is not None:
            import numpy as np
            from embeval.rotations import quat_to_rotvec

            self.cube_pub.publish(pose_msg(np.concatenate([cube[0], quat_to_rotvec(cube[1])]), now, "base"))

    def close(self) -> None:
        if self.mirror is not None:
            self.mirror.close()
        if "arm" not in self.shared:
            self.backend.close()


def main(args=None) -> int:
    return run_node(ArmNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
