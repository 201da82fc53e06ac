"""scorer node: turn episodes into Decision/Execution score records (results store + /embeval/scores).

It listens to the conductor's episode events (JSON on /embeval/events), the commanded or proposed
actions, the TCP pose and the safety mode. At ``episode_end`` the episode is filed with
:class:`embeval.control.EpisodeBook`; as soon as an item's reference episode (distortion none)
exists each distorted episode is scored and the record is published as JSON and written to the
results store (SQLite, :class:`embeval.runs.store.ResultsStore`) when ``store`` is set. Cognition
records (VLM answers) arrive as ``{"event": "cognition", ...}`` events and are stored as they are.

An ``episode_end`` carries the task's ``success`` flag and its ``success_source`` (sim, mirror, sensor,
operator; none or absent: unknown): a success scores Execution 100, otherwise ``100 - cm`` (0 after a stop);
the record's scores say which (``execution_success``, ``execution_success_source``).

Act2Answer episodes (events with an ``act2answer`` block, see the conductor) become the same
:class:`embeval.act2answer.episode.Act2AnswerRecord` records the in-process runner writes: the cube's
final position classified by :func:`embeval.act2answer.zones.classify` (zone, choice, soft success),
the termination rule and what ended the episode, the raw actions, plus ``cube_source``. They go to
/embeval/scores, to the store (unit item ``<item>@<layout>``, like the ``act2answer`` evaluator, so
``embeval export STORE --parquet`` then ``embeval act2answer report`` aggregates them) and, with
``episodes_jsonl`` set, to a JSONL file that ``embeval act2answer report`` reads directly.
"""
from __future__ import annotations

import json
import time

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import JointState
from std_msgs.msg import String, UInt8

from embeval_ros import topics as T
from embeval_ros.base import EmbevalNode
from embeval_ros.conversions import msg_to_action, msg_to_pose6
from embeval_ros.node_spec import RosNode
from embeval_ros.runtime import qos_reliable, run_node

ACTION_GRACE_S = 2.0  # s after episode_end to wait for actions the conductor counted but this node has not yet had

NODE = RosNode("embeval_scorer", "ScorerNode", start=50, description="scores each episode against its reference run")


class ScorerNode(EmbevalNode):
    def __init__(self, **kw):
        super().__init__(NODE.name, **kw)
        from embeval.control import EpisodeBook

        self.store_path = self.param("store", "", "results store (SQLite) path; empty: publish only")
        self.run_id = self.param("run_id", "ros-graph", "run id of the records in the store")
        self.jsonl = self.param("episodes_jsonl", "", "Act2Answer: also append each episode record to this JSONL file")
        use_proposed = bool(self.param("score_proposed", True, "score /embeval/action_proposed (works in dry run) instead of /embeval/action"))
        self.book = EpisodeBook()
        self.episode = None
        self.tcp = None
        self.safety_mode = 1
        self.pub = self.create_publisher(String, T.SCORES, qos_reliable(50))
        self.create_subscription(String, T.EVENTS, self._on_event, qos_reliable(50))
        self.create_subscription(JointState, T.ACTION_PROPOSED if use_proposed else T.ACTION, self._on_action, qos_reliable(50))
        self.create_subscription(PoseStamped, T.TCP_POSE, lambda m: setattr(self, "tcp", msg_to_pose6(m).tolist()), qos_reliable())
        self.create_subscription(UInt8, T.SAFETY_MODE, self._on_safety, qos_reliable())
        self.create_subscription(DiagnosticArray, T.POLICY_STATUS, self._on_policy_status, qos_reliable())
        self.policy_id = ""  # the policy node's subject id: the record's subject when the conductor names none
        self.a2a_records: list[dict] = []
        self.at_stop: int | None = None  # actions received when episode_stop came (used when episode_end has no count)
        # an ended episode whose last actions are still in flight: actions and events are separate topics, so the
        # conductor's last counted action can reach this node after episode_stop or even after episode_end
        self.pending: tuple | None = None  # (episode, episode_end event, actions expected, deadline on time.monotonic())
        self.create_timer(0.05, self._flush_late)
        self.stored = 0

    def _on_policy_status(self, msg: DiagnosticArray) -> None:
        for st in msg.status:
            for kv in st.values:
                if kv.key == "subject" and kv.value not in ("", "?"):
                    self.policy_id = kv.value

    def _on_safety(self, msg: UInt8) -> None:
        self.safety_mode = int(msg.data)
        if self.episode is not None and self.safety_mode != 1:
            self.episode.stopped = True
            self.episode.stop_reason = self.episode.stop_reason or f"UR safety mode {self.safety_mode}"

    def _on_action(self, msg: JointState) -> None:
        if self.pending is not None:
            ep, _ev, want, _t = self.pending
            ep.actions.append(msg_to_action(msg).tolist())
            if len(ep.actions) >= want:
                self._finish_pending()
        elif self.episode is not None:
            self.episode.actions.append(msg_to_action(msg).tolist())

    def _flush_late(self) -> None:
        if self.pending is not None and time.monotonic() >= self.pending[3]:
            ep, _ev, want, _t = self.pending
            self.get_logger().warning(f"episode {ep.item}: {len(ep.actions)} of the conductor's {want} actions arrived "
                                      f"within {ACTION_GRACE_S:g} s of episode_end; filed with those")
            self._finish_pending()

    def _finish_pending(self) -> None:
        ep, ev, want, _t = self.pending
        self.pending = None
        del ep.actions[want:]
        t_in = time.perf_counter()
        if isinstance(ev.get("act2answer"), dict):
            self._emit_act2answer(ep, ev)
        else:
            self._emit_episode(ep, ev)
        self.log.add(t_in)

    def _on_event(self, msg: String) -> None:
        from embeval.scoring.record import EpisodeRecord

        try:
            ev = json.loads(msg.data)
        except json.JSONDecodeError:
            self.get_logger().warning(f"ignoring a non-JSON event: {msg.data[:80]!r}")
            return
        kind = ev.get("event")
        if kind == "episode_stop" and self.episode is not None:
            self.at_stop = len(self.episode.actions)
        if kind == "episode_start":
            if self.pending is not None:  # a new episode: the last one's missing actions are not coming
                self.pending = (*self.pending[:3], 0.0)
                self._flush_late()
            self.at_stop = None
            self.episode = EpisodeRecord(item=str(ev.get("item", "item")), distortion=str(ev.get("distortion", "none")),
                                         level=int(ev.get("level", 0) or 0), instruction=str(ev.get("instruction", "")),
                                         subject=str(ev.get("subject", "")), seed=int(ev.get("seed", 0)))
        elif kind == "episode_end" and self.episode is not None:
            ep, self.episode = self.episode, None
            ep.final_tcp = self.tcp  # the pose at the end, not when a late action arrives
            # the episode's actions are the first the conductor counted (same topic, same order); without a count,
            # those received before episode_stop
            want = ev.get("actions")
            want = want if isinstance(want, int) and not isinstance(want, bool) and want >= 0 else self.at_stop
            want = len(ep.actions) if want is None else want
            self.pending = (ep, ev, want, time.monotonic() + ACTION_GRACE_S)
            if len(ep.actions) >= want:
                self._finish_pending()
        elif kind == "cognition":
            self._emit(ev)

    def _emit_episode(self, ep, ev: dict) -> None:
        """File a Decision/Execution episode with the book; emit the records it completes."""
        if ev.get("success") is not None:  # the task's success predicate, and who judged it
            ep.success = bool(ev["success"])
        ep.success_source = str(ev.get("success_source", "") or "")
        if ev.get("stopped"):
            ep.stopped, ep.stop_reason = True, str(ev.get("stop_reason", "stopped"))
        for rec in self.book.finish(ep):
            self._emit(rec)

    def _emit_act2answer(self, ep, ev: dict) -> None:
        """File an Act2Answer episode: zone of the cube's final position, in the in-process runner's schema."""
        from embeval.act2answer.episode import episode_result
        from embeval.act2answer.protocol import intent_from_dict
        from embeval.act2answer.scene import EpisodeSpec

        a = ev["act2answer"]
        spec = EpisodeSpec.from_dict(a["spec"])
        subject = ep.subject or self.policy_id
        r = episode_result(a["item"], a["category"], a["layout"], a["correct_side"], spec,
                           a["cube_xyz"][:3] if len(a["cube_xyz"]) > 2 and a["cube_xyz"][2] is not None else a["cube_xyz"][:2],
                           end_reason=str(a["end_reason"]), stopped=bool(a["stopped"]), steps=int(a["steps"]),
                           subject=subject, instruction=ep.instruction, seed=int(a.get("seed", ep.seed)),
                           actions=[[round(float(v), 6) for v in act] for act in ep.actions],
                           intent=intent_from_dict(a.get("intent")))
        rec = {**r.to_dict(), "cube_source": a["cube_source"], "success_source": a.get("success_source", "none"),
               "distortion": ep.distortion, "level": ep.level}
        self.a2a_records.append(rec)
        self.get_logger().info(f"{r.item}@{r.layout}: {r.zone} (choice {r.choice}, cube at {list(r.cube_xy)} from "
                               f"{a['cube_source']}, {r.end_reason} after {r.steps} steps)")
        self.pub.publish(String(data=json.dumps(rec, default=float)))
        if self.jsonl:
            from pathlib import Path

            path = Path(self.jsonl)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as f:
                f.write(json.dumps(rec, sort_keys=True) + "\n")
        if self.store_path:
            self._store(rec, item=f"{r.item}@{r.layout}", evaluator="act2answer")

    def _emit(self, rec: dict) -> None:
        self.pub.publish(String(data=json.dumps(rec, default=float)))
        if self.store_path:
            self._store(rec)

    def _store(self, rec: dict, item: str | None = None, evaluator: str = "ros_graph") -> None:
        from embeval.provenance import code_version, stable_hash
        from embeval.runs.store import ResultsStore
        from embeval.runs.units import Unit, UnitResult

        unit = Unit(subject=rec.get("subject", ""), item=item or rec.get("item", ""), distortion=rec.get("distortion", "none"),
                    level=int(rec.get("level", 0)), seed=int(rec.get("seed", 0)))
        now = time.time()
        spec = {"kind": "ros_graph", "run_id": self.run_id}
        # one short connection per record: callbacks run on any executor thread (sqlite objects are per-thread)
        with ResultsStore(self.store_path) as store:
            if self.run_id not in store.run_ids():
                store.register_run(self.run_id, stable_hash(spec), evaluator, self.run_id, spec,
                                   base_dir="", code_version=code_version(), units=[])
            store.record(self.run_id, unit, UnitResult("done", outputs=rec, started=now, finished=now),
                         spec_hash=stable_hash(spec), code_version=code_version(), unit_seed=unit.seed)
        self.stored += 1


def main(args=None) -> int:
    return run_node(ScorerNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
