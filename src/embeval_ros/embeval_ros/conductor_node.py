"""conductor node: run a list of episodes through the graph (reference and distorted runs of items).

For each episode: reset the arm (/embeval/arm/reset), announce ``episode_start`` on /embeval/events
(item, distortion, level: the distortion node switches), wait ``settle_s``, publish the
instruction (latched), count the policy's actions, and after ``steps_per_episode`` actions or
``episode_timeout_s`` announce ``episode_end``. Episodes are parallel lists: ``items[i]``,
``instructions[i]``, ``distortions[i]``, ``levels[i]`` (distortion ``none`` marks the reference run).
"""
from __future__ import annotations

import json
import time

from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from embeval.errors import ConfigError
from embeval_ros import topics as T
from embeval_ros.base import EmbevalNode
from embeval_ros.runtime import qos_latched, qos_reliable, run_node


class ConductorNode(EmbevalNode):
    def __init__(self, **kw):
        super().__init__("embeval_conductor", **kw)
        items = list(self.param("items", ["item-0", "item-0"], "item id of each episode"))
        instr = list(self.param("instructions", ["pick up the red cube"] * 2, "instruction of each episode"))
        dists = list(self.param("distortions", ["none", "gaussian_blur"], "distortion of each episode (none: reference)"))
        levels = list(self.param("levels", [0, 3], "distortion level of each episode (0 for none)"))
        if not (len(items) == len(instr) == len(dists) == len(levels)):
            raise ConfigError(f"items ({len(items)}), instructions ({len(instr)}), distortions ({len(dists)}) and levels "
                              f"({len(levels)}) must have the same length: one entry per episode")
        self.episodes = [{"item": a, "instruction": b, "distortion": c, "level": int(d)} for a, b, c, d in zip(items, instr, dists, levels)]
        from embeval.distortion import registry

        for ep in self.episodes:  # fail at start-up, not when the distortion node meets the episode
            if ep["distortion"] not in ("", "none"):
                try:
                    registry.get(ep["distortion"]).param_for(ep["level"])
                except ConfigError as exc:
                    raise ConfigError(f"episode {ep}: {exc}") from None
        self.steps = int(self.param("steps_per_episode", 5, "actions per episode"))
        self.timeout = float(self.param("episode_timeout_s", 30.0, "end an episode after this long even without actions (s)"))
        self.settle = float(self.param("settle_s", 0.5, "wait between episode_start and the instruction (s)"))
        self.subject = self.param("subject_id", "", "subject id written into the episode records")
        self.use_reset = bool(self.param("reset_arm", True, "call /embeval/arm/reset before each episode"))
        self.start_delay = float(self.param("start_delay_s", 1.0, "wait for the graph to connect before the first episode (s)"))
        self.event_pub = self.create_publisher(String, T.EVENTS, qos_reliable(50))
        self.instr_pub = self.create_publisher(String, T.INSTRUCTION, qos_latched())
        self.create_subscription(JointState, T.ACTION_PROPOSED, self._on_action, qos_reliable(50))
        self.reset_client = self.create_client(Trigger, T.ARM_RESET)
        self.index = -1
        self.phase = "wait"
        self.t_phase = time.monotonic()
        self.actions = 0
        self.finished = False
        self._future = None
        self.create_timer(0.05, self._tick)

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
            if age >= self.start_delay:
                self._next()
        elif self.phase == "resetting":
            if self._future is None or self._future.done() or age > 10.0:
                ep = self.episodes[self.index]
                self._event(event="episode_start", index=self.index, subject=self.subject, **ep)
                self._enter("settling")
        elif self.phase == "settling":
            if age >= self.settle:
                self.actions = 0
                self.instr_pub.publish(String(data=self.episodes[self.index]["instruction"]))
                self._enter("running")
        elif self.phase == "running":
            if self.actions >= self.steps or age >= self.timeout:
                self._event(event="episode_end", index=self.index, actions=self.actions, timed_out=self.actions < self.steps,
                            **self.episodes[self.index])
                self._enter("ending")
        elif self.phase == "ending":
            if age >= 0.2:  # let the scorer see the last state
                self._next()

    def _next(self) -> None:
        self.index += 1
        if self.index >= len(self.episodes):
            if not self.finished:
                self._event(event="graph_done", episodes=len(self.episodes))
                self.get_logger().info(f"all {len(self.episodes)} episodes done")
            self.finished = True
            self._enter("done")
            return
        self._future = self.reset_client.call_async(Trigger.Request()) if self.use_reset and self.reset_client.service_is_ready() else None
        self._enter("resetting")


def main(args=None) -> int:
    return run_node(ConductorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
