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
"""
from __future__ import annotations

import json
import time

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, String, UInt8
from std_srvs.srv import SetBool, Trigger

from embeval.action import gripper_closed
from embeval.errors import ConfigError
from embeval_ros import topics as T
from embeval_ros.base import EmbevalNode
from embeval_ros.runtime import qos_latched, qos_reliable, run_node

#: Act2Answer cube source -> where the episode's success (the zone) comes from (SUCCESS_SOURCES);
#: an estimate from the TCP is the operator's when they kept it, else none
A2A_SUCCESS_SOURCES = {"sim": "sim", "tracker": "sensor", "measured": "operator"}


class ConductorNode(EmbevalNode):
    def __init__(self, **kw):
        super().__init__("embeval_conductor", **kw)
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
        self.episodes = [{"item": a, "instruction": b, "distortion": c, "level": int(d)} for a, b, c, d in zip(items, instr, dists, levels)]
        from embeval.distortion import registry

        for d, lv in zip(dists, levels):  # fail at start-up, not when the distortion node meets the episode
            if d not in ("", "none"):
                try:
                    registry.get(d).param_for(int(lv))
                except ConfigError as exc:
                    raise ConfigError(f"episode with distortion {d} level {lv}: {exc}") from None
        self.steps = int(self.param("steps_per_episode", 5, "actions per episode"))
        self.timeout = float(self.param("episode_timeout_s", 30.0, "end an episode after this long even without actions (s)"))
        self.settle = float(self.param("settle_s", 0.5, "wait between episode_start and the instruction (s)"))
        self.subject = self.param("subject_id", "", "subject id written into the episode records")
        self.use_reset = bool(self.param("reset_arm", True, "call /embeval/arm/reset before each episode"))
        self.start_delay = float(self.param("start_delay_s", 1.0, "wait for the graph to connect before the first episode (s)"))
        self.wait_for = [n for n in self.param("wait_for_nodes", [""], "before the first episode, also wait until these nodes "
                         "subscribe to /embeval/events (one process per node: they may start late)") if n]
        self._waiting_logged = 0.0
        self.seed = int(self.param("seed", 0, "run seed; episode seed = derive_seed(seed, item, layout) in Act2Answer mode"))
        self.a2a = None
        scenes = str(self.param("act2answer_scenes", "", "Act2Answer scene folder (`embeval act2answer scenes`); "
                                "empty: the items/instructions lists above"))
        units = [u for u in self.param("act2answer_items", [""], "Act2Answer units (<item>@<layout>) to run; "
                                       "empty: every unit of act2answer_scenes") if u]
        dist = str(self.param("act2answer_distortion", "none", "image distortion of every Act2Answer episode"))
        dlevel = int(self.param("act2answer_level", 0, "its level (0 for none)"))
        self.confirm = bool(self.param("operator_confirm", False, "real cell: wait for /embeval/conductor/next before "
                                       "each episode (place the cards and the cube first)"))
        self.success_from = str(self.param("success_from", "auto", "where an episode's success comes from: auto (the "
                                           "arm's from state, a sensing node, the operator with operator_confirm), "
                                           "arm, sensor, operator or none"))
        if self.success_from not in ("auto", "arm", "sensor", "operator", "none"):
            raise ConfigError(f"success_from must be auto, arm, sensor, operator or none, got {self.success_from!r}")
        self.verdict_timeout = float(self.param("verdict_timeout_s", 10.0, "success_from sensor: wait this long for the "
                                                "sensing node's verdict before scoring by distance (s)"))
        if scenes:
            self._setup_act2answer(scenes, units, dist, dlevel)
        elif n_images > 0:
            self._setup_execution(n_images, dists, levels)
        self.event_pub = self.create_publisher(String, T.EVENTS, qos_reliable(50))
        self.instr_pub = self.create_publisher(String, T.INSTRUCTION, qos_latched())
        self.create_subscription(JointState, T.ACTION_PROPOSED, self._on_action, qos_reliable(50))
        self.reset_client = self.create_client(Trigger, T.ARM_RESET)
        self.settle_client = self.create_client(Trigger, T.ARM_SETTLE)
        self.create_subscription(PoseStamped, T.CUBE_POSE, self._on_cube, qos_reliable())
        self.create_subscription(PoseStamped, T.TCP_POSE, self._on_tcp, qos_reliable())
        self.create_subscription(JointState, T.JOINT_STATES, self._on_joints, qos_reliable())
        self.create_subscription(UInt8, T.SAFETY_MODE, self._on_safety, qos_reliable())
        self.create_subscription(DiagnosticArray, T.ARM_STATUS, self._on_arm_status, qos_reliable())
        self.create_service(Trigger, T.CONDUCTOR_NEXT, self._on_next)
        self.create_service(SetBool, T.CONDUCTOR_SUCCESS, self._on_operator_verdict)
        self.create_subscription(Bool, T.EXECUTION_SUCCESS, self._on_sensor_verdict, qos_reliable())
        self.operator_verdict = None  # (success, monotonic time) of the operator's last answer
        self.sensor_verdict = None  # (success, monotonic time) of the sensing node's last verdict
        self.t_stop = 0.0  # when the running episode was stopped (monotonic s)
        self.cube = None  # latest cube position [x, y, z] (m, frame base) from /embeval/act2answer/cube_pose
        self.cube_t = 0.0  # when it arrived (monotonic s)
        self.tcp = None  # latest TCP position [x, y, z]
        self.gripper = 1.0
        self.arm_reason = ""  # the first stop cause the arm reported in this episode
        self._confirmed = False
        self.index = -1
        self.phase = "wait"
        self.t_phase = time.monotonic()
        self.actions = 0
        self.finished = False
        self._future = None
        self.create_timer(0.05, self._tick)

    def _setup_act2answer(self, folder: str, units: list[str], distortion: str, level: int) -> None:
        """Episodes from an Act2Answer scene folder (one per unit, in the folder's order unless ``units``)."""
        from embeval.act2answer.scene import load_scene_set

        ss = load_scene_set(folder)
        chosen = [ss.unit(u) for u in units] if units else list(ss.units.values())
        if distortion not in ("", "none"):
            from embeval.distortion import registry

            registry.get(distortion).param_for(level)
        self.a2a = ss
        self.episodes = [{"item": u.unit, "instruction": u.instruction, "distortion": distortion or "none",
                          "level": level if distortion not in ("", "none") else 0} for u in chosen]
        self.steps = ss.spec.max_steps  # the step budget of the episode spec

    def _setup_execution(self, n_images: int, distortions: list[str], levels: list[int]) -> None:
        """The paper's Execution protocol: per reference image, its easiest task from the reference image, then
        from each distorted image (the non-``none`` entries of ``distortions``/``levels``)."""
        from embeval.sim.references import image_task

        variants = [(d, int(lv)) for d, lv in zip(distortions, levels) if d not in ("", "none")]
        self.episodes = []
        for k in range(n_images):
            scene, task = image_task(k, self.seed)
            block = {"image": k, "scene": scene.to_dict(), "task": task.to_dict(), "settle_s": 0.3}
            for d, lv in [("none", 0), *variants]:
                self.episodes.append({"item": scene.name, "instruction": task.instruction, "distortion": d, "level": lv,
                                      "execution": block})

    def _judged(self, ep: dict) -> bool:
        """Whether an episode ends with a success verdict (stop, settle, verdict) rather than at once."""
        return self.a2a is None and (
            "execution" in ep or self.success_from in ("arm", "sensor", "operator") or (self.success_from == "auto" and self.confirm))

    def _on_operator_verdict(self, request, response):
        self.operator_verdict = (bool(request.data), time.monotonic())
        waiting = self.phase == "verdict"
        response.success = waiting
        response.message = (f"recorded: {'success' if request.data else 'failure'} (operator)" if waiting
                            else f"not waiting for a verdict (conductor is {self.phase})")
        return response

    def _on_sensor_verdict(self, msg) -> None:
        self.sensor_verdict = (bool(msg.data), time.monotonic())

    def _verdict(self, settle_msg: str, waited: float) -> dict | None:
        """The episode's success by ``success_from`` (see module docstring), or None to keep waiting."""
        try:
            arm = json.loads(settle_msg or "{}")
        except json.JSONDecodeError:
            arm = {}
        src = self.success_from
        if src in ("auto", "arm") and arm.get("success") is not None:
            return {"success": bool(arm["success"]), "success_source": str(arm.get("success_source", "sim")),
                    "success_detail": str(arm.get("detail", ""))}

        def fresh(verdict) -> bool:  # given after this episode stopped
            return verdict is not None and verdict[1] >= self.t_stop

        if src in ("auto", "sensor") and fresh(self.sensor_verdict):
            return {"success": self.sensor_verdict[0], "success_source": "sensor", "success_detail": T.EXECUTION_SUCCESS}
        if (src == "operator" or (src == "auto" and self.confirm)) and fresh(self.operator_verdict):
            return {"success": self.operator_verdict[0], "success_source": "operator", "success_detail": T.CONDUCTOR_SUCCESS}
        if src == "operator" or (src == "auto" and self.confirm) or (src == "sensor" and waited < self.verdict_timeout):
            return None
        why = arm.get("detail") or f"success_from {src}: no verdict"
        return {"success": None, "success_source": "none", "success_detail": str(why)}

    def _a2a_block(self) -> dict:
        """What every node needs to know about the running Act2Answer unit (JSON-safe)."""
        from embeval.provenance import derive_seed

        u = self.a2a.unit(self.episodes[self.index]["item"])
        return {"item": u.item, "layout": u.layout, "correct_side": u.correct_side, "category": u.category,
                "scene": str(u.scene.resolve()), "spec": self.a2a.spec.to_dict(),
                "seed": int(derive_seed(self.seed, u.item, u.layout))}

    def _on_cube(self, msg) -> None:
        p = msg.pose.position
        self.cube, self.cube_t = [p.x, p.y, p.z], time.monotonic()
        if self.a2a is not None and msg.header.frame_id not in ("", "base"):
            self.get_logger().warning(f"cube pose in frame {msg.header.frame_id!r}, expected base", throttle_duration_sec=5.0)

    def _on_tcp(self, msg) -> None:
        p = msg.pose.position
        self.tcp = [p.x, p.y, p.z]

    def _on_joints(self, msg) -> None:
        pos = dict(zip(msg.name, msg.position))
        if "gripper_opening" not in pos:
            return
        g = float(pos["gripper_opening"])
        if self.a2a is not None and self.phase == "running":
            self._track(g)
        self.gripper = g

    def _on_safety(self, msg) -> None:
        if self.a2a is not None and self.phase == "running" and int(msg.data) != 1 and not self.end_reason:
            self.stopped = True  # the arm's own reason (/embeval/arm/status) replaces this when the episode ends
            self.end_reason = f"protective stop (UR safety mode {int(msg.data)})"

    def _on_arm_status(self, msg) -> None:
        for st in msg.status:
            level = st.level[0] if isinstance(st.level, (bytes, bytearray)) else int(st.level)  # a byte field in rclpy
            if level >= 2 and st.message and not self.arm_reason:  # the first cause, not the later refusals
                self.arm_reason = st.message

    def _on_next(self, request, response):
        self._confirmed = True
        response.success, response.message = True, {"operator": "next episode", "measure": "estimate kept"}.get(
            self.phase, f"conductor is {self.phase}")
        return response

    def _track(self, gripper: float) -> None:
        """Feed the termination rule after a state update (gripper 0..1, 1 = open)."""
        if self.end_reason:
            return
        if self.cube_source == "tcp":  # no cube sensing: a closed gripper carries the cube with the TCP
            if gripper_closed(gripper) and not gripper_closed(self.gripper) and self.tcp is not None:
                self.grasp_tcp_z = self.tcp[2]
            held = gripper_closed(gripper) and self.grasp_tcp_z is not None and self.tcp is not None
            cube_z = self.cube_z0 + max(0.0, self.tcp[2] - self.grasp_tcp_z) if held else self.cube_z0
            if not gripper_closed(gripper) and gripper_closed(self.gripper) and self.tcp is not None:
                self.release_xy = self.tcp[:2]
        else:
            cube_z = self.cube[2] if self.cube is not None else self.cube_z0
        if self.rule.update(cube_z, gripper):
            self.end_reason = "released"

    def _start_running(self) -> None:
        from embeval.act2answer.episode import Termination

        spec = self.a2a.spec
        self.end_reason, self.stopped, self.arm_reason = "", False, ""
        self.grasp_tcp_z, self.release_xy = None, None
        # a cube pose published since the scene loaded: simulated cell or a tracker on the real one
        self.cube_source = "tcp" if self.cube is None else "pose"
        self.cube_z0 = self.cube[2] if self.cube is not None else spec.cube_size / 2
        self.rule = Termination(spec, self.cube_z0)

    def _answer(self, settle_msg: str) -> dict:
        """Where the cube ended: the settled sim cube, else a pose the operator published after the episode,
        else a tracked pose, else the TCP at release."""
        try:
            cube = json.loads(settle_msg or "{}").get("cube")
        except json.JSONDecodeError:
            cube = None
        if cube is not None:
            return {"cube_xyz": cube, "cube_source": "sim"}
        if self.phase == "measure" and self.cube_source == "tcp" and self.cube is not None and self.cube_t > self.t_phase:
            return {"cube_xyz": self.cube, "cube_source": "measured"}
        if self.cube_source == "pose" and self.cube is not None:
            return {"cube_xyz": self.cube, "cube_source": "tracker"}
        xy = self.release_xy or (self.tcp[:2] if self.tcp is not None else list(self.a2a.spec.cube_xy))
        return {"cube_xyz": [*xy, None], "cube_source": "tcp"}

    def _missing_nodes(self, now: float) -> list[str]:
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

    def _event(self, **ev) -> None:
        self.event_pub.publish(String(data=json.dumps(ev)))

    def _on_action(self, msg) -> None:
        if self.phase == "running":
            self.actions += 1

    def _enter(self, phase: str) -> None:
        self.phase, self.t_phase = phase, time.monotonic()

    def _tick(self) -> None:
        now = time.monotonic()
        age = now - self.t_phase
        if self.phase == "wait":
            if age >= self.start_delay and not self._missing_nodes(now):
                self._next()
        elif self.phase == "operator":
            if self._confirmed:
                self._reset_arm()
        elif self.phase == "resetting":
            if self._future is None or self._future.done() or age > 10.0:
                ep = self.episodes[self.index]
                extra = {"act2answer": self._a2a_block()} if self.a2a is not None else {}
                if extra:
                    extra["seed"] = extra["act2answer"]["seed"]
                self._event(event="episode_start", index=self.index, subject=self.subject, **ep, **extra)
                self.cube = None  # only poses of the new scene count
                self._enter("settling")
        elif self.phase == "settling":
            if age >= self.settle:
                self.actions = 0
                if self.a2a is not None:
                    self._start_running()
                self.instr_pub.publish(String(data=self.episodes[self.index]["instruction"]))
                self._enter("running")
        elif self.phase == "running":
            if self.a2a is not None:
                if self.end_reason or self.actions >= self.steps or age >= self.timeout:
                    if not self.end_reason:
                        self.end_reason = "max_steps" if self.actions >= self.steps else "timeout"
                    self._event(event="episode_stop", index=self.index, reason=self.end_reason)  # the policy stops now
                    self._future = self.settle_client.call_async(Trigger.Request()) if self.settle_client.service_is_ready() else None
                    self._enter("answering")
            elif self.actions >= self.steps or age >= self.timeout:
                ep = self.episodes[self.index]
                if self._judged(ep):
                    self._event(event="episode_stop", index=self.index, reason="max_steps" if self.actions >= self.steps else "timeout")
                    self.t_stop, self._timed_out = time.monotonic(), self.actions < self.steps
                    self._future = self.settle_client.call_async(Trigger.Request()) if self.settle_client.service_is_ready() else None
                    self._enter("judging")
                else:
                    self._event(event="episode_end", index=self.index, actions=self.actions, timed_out=self.actions < self.steps,
                                **self._public(ep))
                    self._enter("ending")
        elif self.phase == "judging":  # the arm settles and judges from state (sim, mirror), or cannot
            if self._future is None or self._future.done() or age > 10.0:
                self._settle_msg = self._future.result().message if self._future is not None and self._future.done() else ""
                self._enter("verdict")
                self._prompt_verdict()
        elif self.phase == "verdict":  # the arm's verdict, a sensing node's, or the operator's
            verdict = self._verdict(self._settle_msg, age)
            if verdict is not None:
                self._event(event="episode_end", index=self.index, actions=self.actions, timed_out=self._timed_out,
                            **self._public(self.episodes[self.index]), **verdict)
                self.get_logger().info(f"episode {self.index + 1}/{len(self.episodes)} {self.episodes[self.index]['item']} "
                                       f"({self.episodes[self.index]['distortion']}): success {verdict['success']} "
                                       f"({verdict['success_source']})")
                self._enter("ending")
        elif self.phase == "answering":
            if self._future is None or self._future.done() or age > 10.0:
                msg = self._future.result().message if self._future is not None and self._future.done() else ""
                est = self._answer(msg)
                if self.confirm and est["cube_source"] == "tcp":  # no cube sensing: the operator may measure it
                    self.get_logger().info(
                        f"episode {self.episodes[self.index]['item']} ended ({self.end_reason}): publish the cube's measured "
                        f"position on {T.CUBE_POSE} (frame base), or accept the {est['cube_source']} estimate "
                        f"{[round(v, 3) for v in est['cube_xyz'][:2]]} with: ros2 service call {T.CONDUCTOR_NEXT} std_srvs/srv/Trigger")
                    self._confirmed, self._settle_msg = False, msg
                    self._enter("measure")
                    return
                self._finish(msg)
        elif self.phase == "measure":  # real cell: wait for a measured cube position or the operator's go
            if self._confirmed or self.cube_t > self.t_phase:
                self._finish(self._settle_msg)
        elif self.phase == "ending":
            if age >= 0.2:  # let the scorer see the last state
                self._next()

    @staticmethod
    def _public(ep: dict) -> dict:
        """An episode's fields for ``episode_end`` (the scene and task of an Execution episode went out at the start)."""
        out = {k: v for k, v in ep.items() if k != "execution"}
        if "execution" in ep:
            out["execution"] = {"image": ep["execution"]["image"], "task": ep["execution"]["task"]}
        return out

    def _prompt_verdict(self) -> None:
        """Tell the operator how to answer when the verdict is theirs to give."""
        if self.success_from == "operator" or (self.success_from == "auto" and self.confirm):
            try:
                arm = json.loads(self._settle_msg or "{}")
            except json.JSONDecodeError:
                arm = {}
            if self.success_from == "auto" and arm.get("success") is not None:
                return
            ep = self.episodes[self.index]
            self.get_logger().info(
                f"episode {ep['item']} ({ep['distortion']}) ended: did it succeed ({ep['instruction']!r})? Answer with "
                f"`embeval operator` (y/n), or: ros2 service call {T.CONDUCTOR_SUCCESS} std_srvs/srv/SetBool \"{{data: true}}\"")

    def _finish(self, settle_msg: str) -> None:
        """Announce the Act2Answer episode's end with the cube's final position and what ended it."""
        reason = self.arm_reason if self.stopped and self.arm_reason else self.end_reason
        ans = self._answer(settle_msg)
        kept = self.phase == "measure" and self._confirmed  # the operator accepted the TCP estimate
        source = A2A_SUCCESS_SOURCES.get(ans["cube_source"]) or ("operator" if kept else "none")
        ans.update(end_reason=reason, stopped=self.stopped, steps=self.actions, success_source=source)
        self._event(event="episode_end", index=self.index, actions=self.actions, timed_out=self.end_reason == "timeout",
                    **self.episodes[self.index], act2answer={**self._a2a_block(), **ans})
        self._enter("ending")

    def _next(self) -> None:
        self.index += 1
        if self.index >= len(self.episodes):
            if not self.finished:
                self._event(event="graph_done", episodes=len(self.episodes))
                self.get_logger().info(f"all {len(self.episodes)} episodes done")
            self.finished = True
            self._enter("done")
            return
        if self.confirm:
            self._confirmed = False
            where = ""
            if self.a2a is not None:
                u, spec = self.a2a.unit(self.episodes[self.index]["item"]), self.a2a.spec
                where = (f": scene {u.scene} (left card at {spec.left_card_xy}, right card at {spec.right_card_xy}, cube at "
                         f"{spec.cube_xy}, m in frame base)")
            self.get_logger().info(f"episode {self.index + 1}/{len(self.episodes)} {self.episodes[self.index]['item']}{where}; "
                                   f"set up the cell, then: ros2 service call {T.CONDUCTOR_NEXT} std_srvs/srv/Trigger")
            self._enter("operator")
            return
        self._reset_arm()

    def _reset_arm(self) -> None:
        self._future = self.reset_client.call_async(Trigger.Request()) if self.use_reset and self.reset_client.service_is_ready() else None
        self._enter("resetting")


def main(args=None) -> int:
    return run_node(ConductorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
