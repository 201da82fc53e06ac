"""policy node: run any registry subject (policy) on the latest image and instruction, guarded.

Dry run by default: actions go to /embeval/action_proposed only; with ``dry_run:=false`` they
are also commanded on /embeval/action. The instruction topic is latched (transient local), so a
late-starting policy still gets the task. A stale image or instruction holds the arm (no action);
each action is clipped per step (``max_step_translation`` m, ``max_step_rotation`` rad). Status
(ok | dry_run | hold | error, reason, model time) goes to /embeval/policy/status.
"""
from __future__ import annotations

import json
import time

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String

from embeval.action import pose6_to_pose7
from embeval.kinematics import JOINT_NAMES
from embeval_ros import topics as T
from embeval_ros.base import EmbevalNode
from embeval_ros.conversions import (
    action_to_msg,
    msg_to_image,
    msg_to_pose6,
    stamp_to_ns,
)
from embeval_ros.diagnostics import diag
from embeval_ros.node_spec import RosNode
from embeval_ros.runtime import qos_latched, qos_reliable, run_node, str_list

NODE = RosNode("embeval_policy", "PolicyNode", start=30,
               description="runs the policy subject on each distorted frame and publishes the action")


def load_policy(subject: str, params_json: str = ""):
    """``subject``: a subject YAML path, an adapter name of kind policy (e.g. ``image_stats``, ``embedded``),
    or ``module:attribute`` of a policy class/factory (e.g. ``embeval.act2answer.reference_policies:ScriptedPlacer``),
    called with the ``params_json`` keyword arguments."""
    from pathlib import Path

    from embeval.errors import ConfigError
    from embeval.registry import load_target
    from embeval.subjects.protocols import Policy
    from embeval.subjects.registry import load_subject

    params = json.loads(params_json) if params_json else {}
    module, colon, attr = subject.partition(":")
    if colon and not Path(subject).exists():
        try:
            factory = load_target(subject)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"subject {subject!r}: cannot import {attr!r} from {module!r} ({exc})") from None
        policy = factory(**params)
        if not isinstance(policy, Policy):
            raise ConfigError(f"subject {subject!r} built a {type(policy).__name__}, which is not a policy (reset/act)")
        return policy
    if subject.endswith((".yaml", ".yml")) or Path(subject).exists():
        return load_subject(subject, **({"params": params} if params else {}))
    return load_subject({"kind": "policy", "adapter": subject, "params": params})


class PolicyNode(EmbevalNode):
    def __init__(self, **kw):
        super().__init__(NODE.name, **kw)
        from embeval.control import PolicyStepper, StepperConfig

        subject = self.param("subject", "image_stats", "subject YAML path or policy adapter name (`embeval subjects list`)")
        params_json = self.param("subject_params", "", "JSON object of adapter parameters, e.g. '{\"scale\": 0.1}'")
        self.config = StepperConfig(
            max_image_age_s=float(self.param("max_image_age_s", 0.5, "hold when the newest image is older (s)")),
            max_instruction_age_s=float(self.param("max_instruction_age_s", 600.0, "hold when the instruction is older (s)")),
            max_step_translation=float(self.param("max_step_translation", 0.05, "per-step translation clip (m)")),
            max_step_rotation=float(self.param("max_step_rotation", 0.25, "per-step rotation clip (rad)")),
            dry_run=self.param("dry_run", True, "true: never command the arm, only publish proposed actions (only true "
                               "or false: an empty or quoted value is refused at startup)"),
        )
        self.rate_hz = self.param("rate_hz", 10.0, "maximum policy rate (Hz), in [0, 1000]; 0: act on every image",
                                  lo=0, hi=1000)
        self.max_steps = self.param("max_steps", 0, "actions per instruction, then hold (0: unlimited)", lo=0)
        self.sync = bool(self.param("sync_to_arm", False, "step-synchronous: act only on an image captured after the arm "
                                    "reported the previous command (/embeval/arm/status), like the in-process runner"))
        self._pending = None  # (stamp ns, monotonic s) of the command the arm has not reported yet (sync_to_arm)
        self._exec_done_ns = 0  # wall clock (ns) when the arm's report of the last command arrived
        image_topic = self.param("image_topic", T.IMAGE_DISTORTED, "image topic the policy sees")
        keys = self.param("image_keys", [""], "observation camera names the image is given as (default: the "
                          "policy's own cameras, e.g. third_person and wrist for the tiny VLA, else third_person)")
        extra = str_list(self.param("camera_topics", [""], "more cameras as 'key=topic' (e.g. "
                                    "'wrist=/embeval/camera/wrist/image_raw'; a string: entries separated by commas): "
                                    "the policy's camera key is filled from that topic"))
        self.policy = self.shared.get("policy") or load_policy(subject, params_json)
        declared = list(getattr(getattr(self.policy, "cfg", None), "cameras", None) or ["third_person"])
        self.camera_topics = {}
        for entry in extra:
            key, sep, topic = str(entry).partition("=")
            if not sep or not key or not topic:
                from embeval.errors import ConfigError

                raise ConfigError(f"camera_topics entry {entry!r}: use 'key=topic', e.g. 'wrist=/embeval/camera/wrist/image_raw'")
            self.camera_topics[key] = topic
        # the main image topic fills the policy's cameras that no camera_topics entry fills
        self.image_keys = [k for k in ([str(k) for k in keys if k] or declared) if k not in self.camera_topics]
        self.stepper = PolicyStepper(self.policy, self.config)
        self.frame = getattr(getattr(self.policy, "action_spec", None), "frame", "base")
        self.action_pub = self.create_publisher(JointState, T.ACTION, qos_reliable())
        self.proposed_pub = self.create_publisher(JointState, T.ACTION_PROPOSED, qos_reliable())
        self.status_pub = self.create_publisher(DiagnosticArray, T.POLICY_STATUS, qos_reliable())
        self.create_subscription(Image, image_topic, self._on_image, qos_reliable(10))
        for key, topic in self.camera_topics.items():
            self.create_subscription(Image, topic, lambda m, k=key: self.stepper.set_image(msg_to_image(m), time.monotonic(), k),
                                     qos_reliable(10))
        self.create_subscription(String, T.INSTRUCTION, self._on_instruction, qos_latched())
        self.create_subscription(PoseStamped, T.TCP_POSE, self._on_pose, qos_reliable())
        self.create_subscription(JointState, T.JOINT_STATES, self._on_joints, qos_reliable())
        self.create_subscription(String, T.EVENTS, self._on_event, qos_reliable(50))
        if self.sync:
            self.create_subscription(DiagnosticArray, T.ARM_STATUS, self._on_arm_status, qos_reliable())
        self.paused = False  # between episodes (episode_stop / episode_end until the next instruction): no actions
        self._last_step = 0.0
        self.model_s: list[float] = []
        self.last_status = ""
        self.create_timer(0.5, self._watchdog)

    def _on_event(self, msg: String) -> None:
        try:
            kind = json.loads(msg.data).get("event")
        except (json.JSONDecodeError, AttributeError):
            return
        # episode_start does not pause: the policy is paused since the last episode's end anyway, and with the
        # executor busy the next instruction's callback may run before the start event's (rclpy serves ready
        # subscriptions in creation order), which would leave the episode without actions
        if kind in ("episode_stop", "episode_end"):
            self.paused = True

    def _on_arm_status(self, msg: DiagnosticArray) -> None:
        """sync_to_arm: the arm has executed (or refused) the command with this stamp."""
        if self._pending is not None and stamp_to_ns(msg.header.stamp) == self._pending[0]:
            self._pending, self._exec_done_ns = None, self.now_ns()

    def _synced(self, image_stamp_ns: int, now: float) -> bool:
        """sync_to_arm: True when the image was captured after the arm finished the last command."""
        if self._pending is not None:
            if now - self._pending[1] < 5.0:
                return False
            self.get_logger().warning("sync_to_arm: no arm status for the last command in 5 s; acting again")
            self._pending = None
        return image_stamp_ns > self._exec_done_ns

    def _on_instruction(self, msg: String) -> None:
        self.paused = False
        self._pending = None
        try:
            self.stepper.set_instruction(msg.data, time.monotonic())
            self.get_logger().info(f"instruction: {msg.data!r}")
        except Exception as exc:  # noqa: BLE001
            self._status("error", str(exc), 0)

    def _on_pose(self, msg: PoseStamped) -> None:
        self.stepper.state["tcp_pose"] = pose6_to_pose7(msg_to_pose6(msg))

    def _on_joints(self, msg: JointState) -> None:
        """Proprioception for policies that read it: joint positions and the gripper opening (0..1, 1 = open)."""
        import numpy as np

        pos = dict(zip(msg.name, msg.position))
        if "gripper_opening" in pos:
            self.stepper.state["gripper"] = np.array([pos["gripper_opening"]])
        joints = [pos[n] for n in JOINT_NAMES if n in pos]
        if len(joints) == len(JOINT_NAMES):
            self.stepper.state["joint_positions"] = np.array(joints)

    def _on_image(self, msg: Image) -> None:
        t_in = time.perf_counter()
        self.log.received += 1
        now = time.monotonic()
        image = msg_to_image(msg)
        for key in self.image_keys:  # one camera topic; a policy trained on several cameras gets it under each
            self.stepper.set_image(image, now, key)
        if self.rate_hz > 0 and now - self._last_step < 1.0 / self.rate_hz:
            return
        if self.paused or (self.max_steps and self.stepper.steps >= self.max_steps):
            return
        stamp = stamp_to_ns(msg.header.stamp)
        if self.sync and not self.config.dry_run and not self._synced(stamp, now):
            return
        self._last_step = now
        res = self.stepper.step(now, timestamp=stamp / 1e9)
        if res.action is not None:
            m = action_to_msg(res.action.vector, stamp, self.frame)
            self.proposed_pub.publish(m)
            if res.command:
                self.action_pub.publish(m)
                if self.sync:
                    self._pending = (stamp, now)
            self.model_s.append(res.model_s)
            self.log.latency_s.append(time.perf_counter() - t_in - res.model_s)  # stage latency without model time
            self.log.published += 1
        self._status(res.status, res.reason, stamp, model_ms=f"{1e3 * res.model_s:.2f}", clipped=res.clipped,
                     steps=self.stepper.steps)

    def _watchdog(self) -> None:
        reason = self.stepper.watchdog.reason(time.monotonic())
        if reason and self.stepper.instruction:
            self._status("hold", reason, self.now_ns())

    def _status(self, status: str, reason: str, stamp_ns: int, **values) -> None:
        level = {"ok": "ok", "dry_run": "ok", "hold": "warn", "error": "error"}[status]
        if status != self.last_status and status in ("hold", "error"):
            self.get_logger().warning(f"policy {status}: {reason}")
        self.last_status = status
        self.status_pub.publish(diag("policy", level, reason or status,
                                     {"status": status, "subject": getattr(self.policy, "id", "?"),
                                      "dry_run": self.config.dry_run, **values}, stamp_ns))


def main(args=None) -> int:
    return run_node(PolicyNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
