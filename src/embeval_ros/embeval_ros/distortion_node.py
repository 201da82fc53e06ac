"""distortion node: distort every camera image with a configured type/level (or a schedule) and republish.

The output keeps the source ``header`` (stamp and frame). A live image-quality score (PSNR of the
distorted against the source image, dB) goes to /embeval/image_quality. Episode events
(``{"event": "episode_start", "distortion": ..., "level": ...}`` on /embeval/events) switch the
distortion, so a conductor can run the reference and the distorted episodes of an item.

Frame ``n`` (counted from the node's first image, pass-through frames included) is distorted by
:class:`embeval.distortion.FrameDistorter` with ``stream = input_topic``, i.e. seeded with
``frame_seed(seed, input_topic, n, type, level)``: ``embeval distort bag BAG OUT --topic
<input_topic> --type T --level L --seed S`` on a bag of the same camera frames gives identical images.
An ``episode_start`` event that carries the episode ``seed`` (the conductor's Act2Answer episodes)
switches to the episode rule, :class:`embeval.distortion.EpisodeFrames`: frame n counted from that
event is seeded ``frame_seed(episode seed, camera, n, type, level)``, so the in-process Act2Answer
runner sees the same noise on the same frame of camera ``camera`` (parameter, default third_person).

Quality gate (parameter ``quality_gate``: a predictor folder; off when empty): every output frame is
scored by :class:`embeval.iqa.gate.QualityGate` (a no-reference predictor of the Decision score);
the score goes to /embeval/predicted_decision and /embeval/quality_gate, and a frame scoring below
the threshold is not published on ``output_topic`` (the policy's input): the policy keeps its last
frame and holds once that is older than its ``max_image_age_s``. ``quality_gate_withhold: false`` is a
shadow mode: every frame is scored and published, none withheld (to calibrate on a new camera).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import Image
from std_msgs.msg import Float32, String

from embeval.distortion import EpisodeFrames
from embeval.distortion.measures import psnr as psnr_db
from embeval.errors import ConfigError, EmbevalError, MissingFileError
from embeval_ros import topics as T
from embeval_ros.base import EmbevalNode
from embeval_ros.conversions import image_to_msg, msg_to_image, stamp_to_ns
from embeval_ros.diagnostics import diag
from embeval_ros.node_spec import RosNode
from embeval_ros.runtime import qos_reliable, run_node

NODE = RosNode("embeval_distortion", "DistortionNode", start=20,
               description="distorts each camera frame (type, level) and reports its quality; optional quality gate")


def parse_schedule(items: list[str]) -> list[tuple[str, int, float]]:
    """``["gaussian_blur:3:5.0", "none:0:2"]`` -> [(type, level, seconds)], cycled in order."""
    out = []
    for it in items:
        parts = it.split(":")
        if len(parts) != 3:
            raise ConfigError(f"schedule entry {it!r} must be 'type:level:seconds', e.g. 'gaussian_blur:3:5.0'")
        out.append((parts[0], int(parts[1]), float(parts[2])))
    return out


def gate_threshold(value) -> float | None:
    """The ``quality_gate_threshold`` parameter: a number, or NaN / empty / "nan" for gate.json's threshold."""
    if isinstance(value, str):
        value = value.strip()
        if value.lower() in ("", "nan", "none"):
            return None
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"quality_gate_threshold must be a number (or empty for the one in gate.json), got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"quality_gate_threshold must be a number (or empty for the one in gate.json), got {value!r}")
    return None if math.isnan(value) else float(value)


def load_gate(path: str, threshold=float("nan")):
    """The node's :class:`~embeval.iqa.gate.QualityGate` from a predictor folder; errors name the parameter and
    the command that writes the missing file."""
    from embeval.iqa.gate import QualityGate

    thr = gate_threshold(threshold)
    p = Path(path).expanduser()
    how = (f"save one with `embeval iqa bench --db DB --save-predictor {p}` (or `make demo`), calibrate its threshold with "
           f"`embeval iqa gate --predictor {p} --rate 0.2 FRAMES.png`, or set quality_gate:='' to run without the gate")
    if not p.is_dir():
        raise MissingFileError(f"quality_gate: no predictor folder {p}; {how}")
    try:
        return QualityGate.load(p, thr)
    except EmbevalError as exc:
        raise type(exc)(f"quality_gate {p}: {exc}") from exc


class DistortionNode(EmbevalNode):
    def __init__(self, **kw):
        super().__init__(NODE.name, **kw)
        self.distortion = self.param("distortion", "none", "distortion type from the registry (`embeval distort list`); none: pass through")
        self.level = int(self.param("level", 1, "distortion level 1 (mild) .. 5 (severe)"))
        sched = self.param("schedule", [""], "cycle of 'type:level:seconds' entries (overrides distortion/level while set)")
        self.seed = int(self.param("seed", 0, "base seed; frame n uses frame_seed(seed, input_topic, n, type, level), "
                                              "as `embeval distort bag --seed`"))
        self.quality = bool(self.param("publish_quality", True, "publish PSNR (dB) against the source image"))
        in_topic = self.param("input_topic", T.IMAGE_RAW, "source image topic (also the seed stream name)")
        self.camera = str(self.param("camera", "third_person", "camera name of input_topic: the seed stream of episodes "
                                                              "started with a seed (as the in-process Act2Answer runner)"))
        out_topic = self.param("output_topic", T.IMAGE_DISTORTED, "distorted image topic")
        gate_dir = str(self.param("quality_gate", "", "quality gate: predictor folder (`embeval iqa bench --save-predictor`, "
                                                      "threshold in its gate.json from `embeval iqa gate --rate`); frames "
                                                      "predicted below the threshold are not published; empty: off"))
        gate_thr = self.param("quality_gate_threshold", float("nan"), "withhold frames whose predicted score is below this "
                                                                      "(NaN or empty: the threshold in <quality_gate>/gate.json)",
                              checked=False)  # gate_threshold() reads its spellings
        self.schedule = parse_schedule([s for s in sched if s])
        self.gate_withhold = bool(self.param("quality_gate_withhold", True, "false: shadow mode, score and publish every "
                                                                              "frame but withhold none"))
        self._withheld = 0
        self._check(self.distortion, self.level)
        for name, lvl, _ in self.schedule:
            self._check(name, lvl)
        self.gate = load_gate(gate_dir, gate_thr) if gate_dir.strip() else None
        self.stream = self.resolve_topic_name(in_topic)  # the name a bag records, remaps and namespace applied
        # the frames since start: the whole stream as one episode (seed, stream = input topic); an episode_start
        # event that carries a seed starts an Act2Answer episode's own (seed = episode seed, stream = camera)
        self.frames = EpisodeFrames(self.stream, self.seed)
        self._t0 = time.monotonic()
        self.count = 0
        self.transport_s: list[float] = []
        self.compute_s: list[float] = []  # distort() + PSNR + gate seconds per frame (excluded from the stage latency)
        self.pub = self.create_publisher(Image, out_topic, qos_reliable())
        self.qpub = self.create_publisher(DiagnosticArray, T.IMAGE_QUALITY, qos_reliable())
        if self.gate is not None:
            self.gate_pub = self.create_publisher(DiagnosticArray, T.QUALITY_GATE, qos_reliable())
            self.score_pub = self.create_publisher(Float32, T.PREDICTED_DECISION, qos_reliable())
            verb = "are withheld from" if self.gate_withhold else "would be withheld (shadow mode) from"
            self.get_logger().info(f"quality gate {self.gate.predictor.name} from {gate_dir}: frames predicted below "
                                   f"{self.gate.threshold:.4f} {verb} {self.resolve_topic_name(out_topic)}")
        self.create_subscription(Image, in_topic, self._on_image, qos_reliable())
        self.create_subscription(String, T.EVENTS, self._on_event, qos_reliable(50))

    @staticmethod
    def _check(name: str, level: int) -> None:
        if name in ("", "none"):
            return
        from embeval.distortion import registry

        registry.get(name).param_for(int(level))  # ConfigError naming the choices

    def current(self) -> tuple[str, int]:
        if not self.schedule:
            return self.distortion, self.level
        period = sum(s for _, _, s in self.schedule)
        t = (time.monotonic() - self._t0) % period
        for name, lvl, secs in self.schedule:
            if t < secs:
                return name, lvl
            t -= secs
        return self.schedule[-1][:2]

    def _on_event(self, msg: String) -> None:
        try:
            ev = json.loads(msg.data)
        except json.JSONDecodeError:
            return
        if ev.get("event") == "episode_start" and "distortion" in ev:
            level = int(ev.get("level", 0) or 0)
            self._check(ev["distortion"], level)  # a distortion with level 0 fails here, not at the next frame
            self.distortion, self.level, self.schedule = ev["distortion"], level, []
            seed = ev.get("seed")
            if isinstance(seed, int) and not isinstance(seed, bool):
                self.frames = EpisodeFrames(self.camera, seed)
            elif self.frames.camera != self.stream:  # back to the stream's numbering after an Act2Answer episode
                self.frames = EpisodeFrames(self.stream, self.seed)
                self.frames.index = self.count

    def _on_image(self, msg: Image) -> None:
        t_in = time.perf_counter()
        self.log.received += 1
        self.transport_s.append(time.time_ns() / 1e9 - stamp_to_ns(msg.header.stamp) / 1e9)  # camera -> here
        name, level = self.current()
        compute = 0.0
        out = None
        if name in ("", "none"):
            out_msg, psnr = msg, float("inf")
            self.frames(None, name, level)  # counted: frame n is the n-th camera frame
        else:
            src = msg_to_image(msg)
            t_c = time.perf_counter()
            out = self.frames(src, name, level)
            psnr = psnr_db(src, out) if self.quality else float("nan")
            compute = time.perf_counter() - t_c
            out_msg = image_to_msg(out, stamp_to_ns(msg.header.stamp), msg.header.frame_id)
            out_msg.header = msg.header
        passed = True
        if self.gate is not None:
            t_c = time.perf_counter()
            passed = self._gate(out if out is not None else msg_to_image(msg), msg)
            compute += time.perf_counter() - t_c
        if passed:
            self.pub.publish(out_msg)
        self.count += 1
        self.compute_s.append(compute)
        if passed:
            self.log.latency_s.append(time.perf_counter() - t_in - compute)  # graph work, image-processing time excluded
            self.log.published += 1
        if self.quality:
            self.qpub.publish(diag("image_quality", "ok", f"{name}:{level}",
                                   {"psnr_db": f"{psnr:.3f}", "distortion": name, "level": level, "frame": self.count},
                                   stamp_to_ns(msg.header.stamp)))

    def _gate(self, image: np.ndarray, msg: Image) -> bool:
        """Score one output frame, publish the score and the decision; True when the frame may go to the policy."""
        d = self.gate.check(image)
        keep = d.passed or not self.gate_withhold
        self._withheld += int(not keep)
        self.score_pub.publish(Float32(data=d.score))
        g = self.gate
        message = "pass" if d.passed else "withheld" if not keep else "below threshold (shadow mode: published)"
        self.gate_pub.publish(diag("quality_gate", "ok" if d.passed else "warn", message,
                                   {"score": f"{d.score:.4f}", "threshold": f"{d.threshold:.4f}", "passed": d.passed,
                                    "frame": self.count + 1, "seen": g.seen, "withheld": self._withheld,
                                    "below_threshold": g.withheld, "withheld_rate": f"{self._withheld / g.seen:.4f}",
                                    "shadow": not self.gate_withhold, "predictor": g.predictor.name},
                                   stamp_to_ns(msg.header.stamp)))
        return keep

    @property
    def withheld(self) -> int:
        """Frames the quality gate kept from the policy (0 when the gate is off or in shadow mode)."""
        return self._withheld


def main(args=None) -> int:
    return run_node(DistortionNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
