"""conductor node: run a list of episodes through the graph (reference and distorted runs of items).

For each episode: reset the arm (/embeval/arm/reset), announce ``episode_start`` on /embeval/events
(item, distortion, level: the distortion node switches), wait ``settle_s``, publish the
instruction (latched), count the policy's actions, and after ``steps_per_episode`` actions or
``episode_timeout_s`` announce ``episode_end``. Episodes are parallel lists: ``items[i]``,
``instructions[i]``, ``distortions[i]``, ``levels[i]`` (distortion ``none`` marks the reference run).

Act2Answer mode (``act2answer_scenes``: a folder from ``embeval act2answer scenes``): the episodes
are that folder's item x layout units (``act2answer_items`` selects some). ``episode_start`` carries
the unit's scene, correct side, category and episode spec (the sim arm loads the scene); the episode
ends by the spec's termination rule (:class:`embeval.act2answer.episode.Termination` fed the cube
height from /embeval/act2answer/cube_pose and the gripper from /joint_states after each step), at
``max_steps`` actions, at a protective stop or at the timeout; then /embeval/arm/settle lets the
cell settle and ``episode_end`` carries the cube's final position (``cube_source``: sim, tracker
when a cube pose arrived from elsewhere, or tcp: the TCP where the gripper opened, for a real cell
without a tracker), which the scorer classifies. ``operator_confirm`` (real cell): before each
episode the node logs where to put the cards and waits for /embeval/conductor/next (std_srvs/Trigger);
without cube sensing it also waits after each episode for the cube's measured position on
/embeval/act2answer/cube_pose (``cube_source: measured``) or /embeval/conductor/next (keep the TCP estimate).
Every Act2Answer ``episode_end`` says where the zone's evidence came from (``success_source``: sim, sensor
for a tracker, operator for a measured position or an estimate the operator kept, none for an unconfirmed
TCP estimate).

Execution success (Embodied-IQA: 100 on success, else ``100 - cm``, 0 after a stop): ``episode_end`` carries
``success`` (true/false/null) and ``success_source`` (:data:`embeval.scoring.execution.SUCCESS_SOURCES`).
The paper's protocol (``execution_images: N``): reference image k of ``embeval sim references --seed
seed`` (scene ``sim<k>``) with its easiest task, run closed loop once from the reference image (distortion
none) and once per entry of ``distortions``/``levels``; ``episode_start`` carries an ``execution`` block
(scene, task) the arm loads. After such an episode (or with ``success_from`` other than auto/none) the
conductor announces ``episode_stop``, calls /embeval/arm/settle and takes the verdict by ``success_from``:
``auto`` the arm's from state (sim cell, mirror cell), else a sensing node's std_msgs/Bool on
/embeval/execution/success, else with ``operator_confirm`` the operator's (/embeval/conductor/success,
std_srvs/SetBool: data true = success; ``embeval operator`` answers it with one key), else none;
``arm``, ``sensor``, ``operator`` or ``none`` take only that source.

The episode logic (phases, the cube-height estimate from the TCP, which source to trust) is
:class:`embeval.control.conductor.Conductor`; this node reads the parameters and wires topics and services to it.
"""
from __future__ import annotations

import json

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, String, UInt8
from std_srvs.srv import SetBool, Trigger

from embeval.control.conductor import (
    SUCCESS_FROM,
    Conductor,
    ConductorConfig,
    act2answer_episodes,
    execution_episodes,
)
from embeval.errors import ConfigError
from embeval_ros import topics as T
from embeval_ros.base import EmbevalNode
from embeval_ros.node_spec import RosNode
from embeval_ros.runtime import qos_latched, qos_reliable, run_node

NODE = RosNode("embeval_conductor", "ConductorNode", start=70,
               description="runs the episodes: distortion schedule, resets, episode events")


class ConductorNode(EmbevalNode):
    """ROS plumbing around :class:`embeval.control.conductor.Conductor` (the episode logic)."""

    def __init__(self, **kw):
        super().__init__(NODE.name, **kw)
        items = list(self.param("items", ["item-0", "item-0"], "item id of each episode"))
        instr = list(self.param("instructions", ["pick up the red cube"] * 2, "instruction of each episode"))
        dists = list(self.param("distortions", ["none", "gaussian_blur"], "distortion of each episode (none: reference)"))
        levels = list(self.param("levels", [0, 3], "distortion level of each episode (0 for none)"))
        n_images = int(self.param("execution_images", 0, "Embodied-IQA Execution protocol: run the easiest task of "
                                  "reference images 0..N-1 (seed: seed) from the reference and each distorted image "
                                  "(the distortions/levels pairs; items and instructions unused); 0: off"))
        if len(dists) != len(levels) or (n_images <= 0 and not len(items) == len(instr) == len(dists)):
            raise ConfigError(f"items ({len(items)}), instructions ({len(instr)}), distortions ({len(dists)}) and levels "
                              f"({len(levels)}) must have the same length: one entry per episode")
        episodes = [{"item": a, "instruction": b, "distortion": c, "level": int(d)} for a, b, c, d in zip(items, instr, dists, levels)]
        from embeval.distortion import registry

        for d, lv in zip(dists, levels):  # fail at start-up, not when the distortion node meets the episode
            if d not in ("", "none"):
                try:
                    registry.get(d).param_for(int(lv))
                except ConfigError as exc:
                    raise ConfigError(f"episode with distortion {d} level {lv}: {exc}") from None
        steps = int(self.param("steps_per_episode", 5, "actions per episode"))
        timeout = float(self.param("episode_timeout_s", 30.0, "end an episode after this long even without actions (s)"))
        settle = float(self.param("settle_s", 0.5, "wait between episode_start and the instruction (s)"))
        subject = self.param("subject_id", "", "subject id written into the episode records")
        self.use_reset = bool(self.param("reset_arm", True, "call /embeval/arm/reset before each episode"))
        start_delay = float(self.param("start_delay_s", 1.0, "wait for the graph to connect before the first episode (s)"))
        self.wait_for = [n for n in self.param("wait_for_nodes", [""], "before the first episode, also wait until these nodes "
                         "subscribe to /embeval/events (one process per node: they may start late)") if n]
        self._waiting_logged = 0.0
        seed = int(self.param("seed", 0, "run seed; episode seed = derive_seed(seed, item, layout) in Act2Answer mode"))
        scenes = str(self.param("act2answer_scenes", "", "Act2Answer scene folder (`embeval act2answer scenes`); "
                                "empty: the items/instructions lists above"))
        units = [u for u in self.param("act2answer_items", [""], "Act2Answer units (<item>@<layout>) to run; "
                                       "empty: every unit of act2answer_scenes") if u]
        dist = str(self.param("act2answer_distortion", "none", "image distortion of every Act2Answer episode"))
        dlevel = int(self.param("act2answer_level", 0, "its level (0 for none)"))
        control_hz = float(self.param("control_hz", 10.0, "policy steps per second (the policy node's rate_hz): the "
                                      "Act2Answer intent metrics' 3 s dwell"))
        confirm = bool(self.param("operator_confirm", False, "real cell: wait for /embeval/conductor/next before "
                                  "each episode (place the cards and the cube first)"))
        success_from = str(self.param("success_from", "auto", "where an episode's success comes from: auto (the "
                                           "arm's from state, a sensing node, the operator with operator_confirm), "
                                           "arm, sensor, operator or none"))
        if success_from not in SUCCESS_FROM:
            raise ConfigError(f"success_from must be auto, arm, sensor, operator or none, got {success_from!r}")
        verdict_timeout = float(self.param("verdict_timeout_s", 10.0, "success_from sensor: wait this long for the "
                                                "sensing node's verdict before scoring by distance (s)"))
        scene_set = None
        if scenes:
            from embeval.act2answer.scene import load_scene_set

            scene_set = load_scene_set(scenes)
            episodes = act2answer_episodes(scene_set, units, dist, dlevel)
        elif n_images > 0:
            episodes = execution_episodes(n_images, seed, dists, levels)
        cfg = ConductorConfig(steps=steps, timeout=timeout, settle=settle, subject=subject, start_delay=start_delay, seed=seed,
                              confirm=confirm, success_from=success_from, verdict_timeout=verdict_timeout,
                              control_hz=control_hz)
        self.core = Conductor(cfg, episodes, self, scene_set)
        self.event_pub = self.create_publisher(String, T.EVENTS, qos_reliable(50))
        self.instr_pub = self.create_publisher(String, T.INSTRUCTION, qos_latched())
        self.create_subscription(JointState, T.ACTION_PROPOSED, lambda _m: self.core.on_action(), qos_reliable(50))
        self.reset_client = self.create_client(Trigger, T.ARM_RESET)
        self.settle_client = self.create_client(Trigger, T.ARM_SETTLE)
        self.create_subscription(PoseStamped, T.CUBE_POSE, self._on_cube, qos_reliable())
        self.create_subscription(PoseStamped, T.TCP_POSE, self._on_tcp, qos_reliable())
        self.create_subscription(JointState, T.JOINT_STATES, self._on_joints, qos_reliable())
        self.create_subscription(UInt8, T.SAFETY_MODE, lambda m: self.core.on_safety_mode(int(m.data)), qos_reliable())
        self.create_subscription(DiagnosticArray, T.ARM_STATUS, self._on_arm_status, qos_reliable())
        self.create_service(Trigger, T.CONDUCTOR_NEXT, self._on_next)
        self.create_service(SetBool, T.CONDUCTOR_SUCCESS, self._on_operator_verdict)
        self.create_subscription(Bool, T.EXECUTION_SUCCESS, lambda m: self.core.on_sensor_verdict(bool(m.data)), qos_reliable())
        self.create_timer(0.05, self.core.tick)

    @property
    def phase(self) -> str:
        """The core's phase (see :class:`~embeval.control.conductor.Conductor`)."""
        return self.core.phase

    @property
    def finished(self) -> bool:
        return self.core.finished

    @property
    def episodes(self) -> list[dict]:
        return self.core.episodes

    # -- ConductorIO ----------------------------------------------------------------------------------
    def event(self, ev: dict) -> None:
        self.event_pub.publish(String(data=json.dumps(ev)))

    def instruction(self, text: str) -> None:
        self.instr_pub.publish(String(data=text))

    def call_reset(self):
        return self.reset_client.call_async(Trigger.Request()) if self.use_reset and self.reset_client.service_is_ready() else None

    def call_settle(self):
        return self.settle_client.call_async(Trigger.Request()) if self.settle_client.service_is_ready() else None

    def info(self, msg: str) -> None:
        self.get_logger().info(msg)

    def missing_nodes(self, now: float) -> list[str]:
        """``wait_for_nodes`` not yet subscribed to /embeval/events (logged every 10 s while waiting)."""
        if not self.wait_for:
            return []
        have = {info.node_name for info in self.get_subscriptions_info_by_topic(T.EVENTS)}
        missing = [n for n in self.wait_for if n not in have]
        if missing and now - self._waiting_logged >= 10.0:
            self._waiting_logged = now
            self.get_logger().warning(f"waiting for {', '.join(missing)} (wait_for_nodes) before the first episode; "
                                      "is it running?")
        return missing

    # -- subscriptions and services -------------------------------------------------------------------
    def _on_cube(self, msg) -> None:
        p = msg.pose.position
        self.core.on_cube([p.x, p.y, p.z])
        if self.core.a2a is not None and msg.header.frame_id not in ("", "base"):
            self.get_logger().warning(f"cube pose in frame {msg.header.frame_id!r}, expected base", throttle_duration_sec=5.0)

    def _on_tcp(self, msg) -> None:
        p = msg.pose.position
        self.core.on_tcp([p.x, p.y, p.z])

    def _on_joints(self, msg) -> None:
        pos = dict(zip(msg.name, msg.position))
        if "gripper_opening" in pos:
            self.core.on_gripper(float(pos["gripper_opening"]))

    def _on_arm_status(self, msg) -> None:
        for st in msg.status:
            level = st.level[0] if isinstance(st.level, (bytes, bytearray)) else int(st.level)  # a byte field in rclpy
            if level >= 2:
                self.core.on_arm_error(st.message)

    def _on_next(self, request, response):
        response.success, response.message = True, self.core.on_next()
        return response

    def _on_operator_verdict(self, request, response):
        response.success, response.message = self.core.on_operator_verdict(bool(request.data))
        return response


def main(args=None) -> int:
    return run_node(ConductorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
