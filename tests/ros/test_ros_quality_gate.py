"""The live quality gate in the distortion node: every output frame is scored by a saved no-reference
predictor (embeval.iqa.gate.QualityGate); scores are published for all frames, frames below the
threshold never reach the policy's input topic, and the node counts them.

The predictor is a small feature SVR (colour moments, embeval.iqa.predictor.FeatureSVRPredictor)
fitted in the test on clean vs heavily distorted synthetic frames; its threshold is calibrated with
the user's command, ``embeval iqa gate --rate``.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from embeval_cli import main
from embeval.distortion import FrameDistorter
from embeval.distortion.samples import synthetic_tabletop

rclpy = pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")

pytestmark = pytest.mark.ros

W, H, SEED = 64, 48, 5
HEAVY = [("darken", 5), ("overexposure", 5)]  # what the gate must withhold


def _clean(n: int, first: int) -> list[np.ndarray]:
    return [synthetic_tabletop(W, H, seed=first + i) for i in range(n)]


@pytest.fixture(scope="module")
def predictor_dir(tmp_path_factory):
    """A fitted colour-SVR Decision predictor with gate.json calibrated by `embeval iqa gate --rate 0.5`."""
    from PIL import Image

    from embeval.iqa.predictor import FeatureSVRPredictor

    root = tmp_path_factory.mktemp("gate")
    clean = _clean(8, 0)
    bad = [FrameDistorter(n, lvl, 0, stream="train")(clean[i], i) for n, lvl in HEAVY + [("color_saturation_hsv", 5)]
           for i in range(0, 8, 2)]
    pred = FeatureSVRPredictor(("colour",), target="decision", name="colour-svr")
    pred.fit_features(pred.features(clean + bad), np.r_[np.full(len(clean), 5.0), np.zeros(len(bad))])
    path = pred.save(root / "predictor")
    calib = []  # held-out frames: 4 clean, 4 heavily distorted
    for i, im in enumerate(_clean(4, 50) + [FrameDistorter("darken", 5, 1, stream="calib")(f, i) for i, f in
                                           enumerate(_clean(4, 60))]):
        f = root / f"calib_{i}.png"
        Image.fromarray(im).save(f)
        calib.append(str(f))
    assert main(["iqa", "gate", "--predictor", str(path), "--rate", "0.5", *calib]) == 0
    return path


class _Node:
    """A DistortionNode in its own context; what it publishes is captured instead of sent."""

    def __init__(self, **params):
        from embeval_ros.distortion_node import DistortionNode
        from rclpy.context import Context
        from rclpy.parameter import Parameter

        self.ctx = Context()
        rclpy.init(context=self.ctx)
        try:
            self.node = DistortionNode(parameter_overrides=[Parameter(k, value=v) for k, v in params.items()],
                                       context=self.ctx)
        except BaseException:
            rclpy.shutdown(context=self.ctx)
            raise
        self.images: list = []
        self.scores: list = []
        self.diags: list = []
        self.node.pub.publish = self.images.append
        if self.node.gate is not None:
            self.node.score_pub.publish = self.scores.append
            self.node.gate_pub.publish = self.diags.append

    def feed(self, frame: np.ndarray, i: int) -> None:
        from embeval_ros.conversions import image_to_msg

        self.node._on_image(image_to_msg(frame, (i + 1) * 1_000_000_000, "cam"))

    def event(self, distortion: str, level: int) -> None:
        from std_msgs.msg import String

        self.node._on_event(String(data=json.dumps({"event": "episode_start", "distortion": distortion, "level": level})))

    def close(self) -> None:
        self.node.destroy_node()
        rclpy.shutdown(context=self.ctx)


def _run_stream(first: int, **params) -> _Node:
    """A node with ``params`` fed 2 clean then 2 darkened (level 5) frames; closed, its captures kept."""
    frames = _clean(2, first) + [FrameDistorter("darken", 5, 2, stream="t")(f, i) for i, f in enumerate(_clean(2, first + 10))]
    n = _Node(**params)
    try:
        for i, f in enumerate(frames):
            n.feed(f, i)
    finally:
        n.close()
    return n


def test_gate_passes_clean_frames_and_withholds_heavily_distorted_ones(predictor_dir):
    from embeval_ros.conversions import msg_to_image
    from embeval_ros.diagnostics import diag_values

    from embeval.iqa.predictor import load_predictor

    thr = json.loads((predictor_dir / "gate.json").read_text())["threshold"]
    frames = _clean(9, 100)
    n = _Node(quality_gate=str(predictor_dir), seed=SEED, publish_quality=False)
    try:
        assert n.node.gate.threshold == pytest.approx(thr)  # the calibrated one from gate.json
        for i in range(3):
            n.feed(frames[i], i)
        for k, (name, level) in enumerate(HEAVY):  # each heavy distortion for 3 frames, switched by episode events
            n.event(name, level)
            for i in range(3 + 3 * k, 6 + 3 * k):
                n.feed(frames[i], i)
        stream, node = n.node.stream, n.node
    finally:
        n.close()
    # independently: the saved predictor on the frames the node must have produced (same per-frame seeds)
    pred = load_predictor(predictor_dir)
    expected = [frames[i] for i in range(3)] + [FrameDistorter(name, level, SEED, stream=stream)(frames[i], i)
                                                for k, (name, level) in enumerate(HEAVY) for i in range(3 + 3 * k, 6 + 3 * k)]
    want = pred.predict(expected)
    # scores for all 9 frames, on both topics, equal to the offline prediction
    got = np.array([m.data for m in n.scores])
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5, atol=1e-5)
    vals = [diag_values(d) for d in n.diags]
    assert len(vals) == 9
    np.testing.assert_allclose([float(v["score"]) for v in vals], want, atol=1e-4)
    assert all(float(v["threshold"]) == pytest.approx(thr, abs=1e-4) for v in vals)
    # clean frames pass and are republished unchanged; heavy ones are withheld
    assert (want[:3] >= thr).all() and (want[3:] < thr).all(), (want, thr)
    assert [v["passed"] for v in vals] == ["True"] * 3 + ["False"] * 6
    assert [d.status[0].level for d in n.diags] == [b"\x00"] * 3 + [b"\x01"] * 6
    assert len(n.images) == 3
    for i, m in enumerate(n.images):
        np.testing.assert_array_equal(msg_to_image(m), frames[i])
    # the withheld count: in the status and on the node
    assert [int(v["withheld"]) for v in vals] == [0, 0, 0, 1, 2, 3, 4, 5, 6]
    assert [int(v["below_threshold"]) for v in vals] == [0, 0, 0, 1, 2, 3, 4, 5, 6]
    assert [int(v["seen"]) for v in vals] == list(range(1, 10))
    assert float(vals[-1]["withheld_rate"]) == pytest.approx(6 / 9, abs=1e-4)
    assert node.withheld == 6 and node.log.received == 9 and node.log.published == 3 and node.count == 9
    assert vals[-1]["predictor"] == "colour-svr->decision"


@pytest.mark.parametrize("threshold,published", [(-1e9, 4), (1e9, 0), ("", 2), (float("nan"), 2), ("-1e9", 4)])
def test_threshold_parameter_overrides_gate_json(predictor_dir, threshold, published):
    n = _run_stream(200, quality_gate=str(predictor_dir), quality_gate_threshold=threshold)
    assert len(n.images) == published and len(n.scores) == 4
    assert n.node.withheld == 4 - published


def test_shadow_mode_scores_but_withholds_nothing(predictor_dir):
    from embeval_ros.diagnostics import diag_values

    n = _run_stream(220, quality_gate=str(predictor_dir), quality_gate_withhold=False)
    vals = [diag_values(d) for d in n.diags]
    assert len(n.images) == 4 and len(n.scores) == 4 and n.node.withheld == 0
    assert [v["passed"] for v in vals] == ["True", "True", "False", "False"]
    assert [int(v["below_threshold"]) for v in vals] == [0, 0, 1, 2] and all(v["withheld"] == "0" for v in vals)
    assert n.diags[-1].status[0].message.startswith("below threshold (shadow mode")


def test_gate_is_off_by_default():
    frame = _clean(1, 300)[0]
    n = _Node()
    try:
        n.feed(frame, 0)
        assert n.node.gate is None and n.node.withheld == 0 and len(n.images) == 1
        assert not n.node.get_publishers_info_by_topic("/embeval/predicted_decision")
    finally:
        n.close()


@pytest.mark.parametrize("config", ["embeval_sim.yaml", "embeval_ur5.yaml"])
def test_shipped_configs_leave_the_gate_off_and_take_a_predictor(config, predictor_dir):
    from pathlib import Path

    from embeval_ros.graph import load_params

    params = load_params(Path(__file__).resolve().parents[2] / "config" / config)["embeval_distortion"]
    assert params["quality_gate"] == "" and np.isnan(params["quality_gate_threshold"])
    n = _Node(**params)
    n.close()
    assert n.node.gate is None
    n = _Node(**{**params, "quality_gate": str(predictor_dir)})  # `embeval graph --set embeval_distortion.quality_gate=DIR`
    n.close()
    assert n.node.gate.threshold == pytest.approx(json.loads((predictor_dir / "gate.json").read_text())["threshold"])


def test_start_up_errors_name_the_fix(tmp_path, predictor_dir):
    from embeval.errors import ConfigError, MissingFileError, MissingWeightsError

    with pytest.raises(MissingFileError, match=r"no predictor folder .*embeval iqa gate --predictor"):
        _Node(quality_gate=str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingWeightsError, match=r"quality_gate .*empty.*predictor.json"):
        _Node(quality_gate=str(tmp_path / "empty"), quality_gate_threshold=1.0)
    bare = tmp_path / "bare"  # a predictor without a calibrated threshold
    bare.mkdir()
    for f in ("predictor.json", "model.npz"):
        (bare / f).write_bytes((predictor_dir / f).read_bytes())
    with pytest.raises(ConfigError, match=r"gate.json.*embeval iqa gate"):
        _Node(quality_gate=str(bare))
    n = _Node(quality_gate=str(bare), quality_gate_threshold=1.0)  # an explicit threshold needs no gate.json
    n.close()
    with pytest.raises(ConfigError, match="quality_gate_threshold must be a number"):
        _Node(quality_gate=str(predictor_dir), quality_gate_threshold="high")


def test_gate_over_dds(predictor_dir):
    """Through real topics: a probe publishes 3 clean and 3 darkened frames; it receives 6 scores,
    6 gate statuses and only the 3 clean frames."""
    from diagnostic_msgs.msg import DiagnosticArray
    from embeval_ros.conversions import image_to_msg, msg_to_image
    from embeval_ros.diagnostics import diag_values
    from embeval_ros.distortion_node import DistortionNode
    from embeval_ros.runtime import qos_reliable
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import Image
    from std_msgs.msg import Float32

    from embeval_ros import topics as T

    tag = f"qg{os.getpid()}"
    src, dst = f"/{tag}/image_raw", f"/{tag}/image_gated"
    clean = _clean(3, 400)
    frames = clean + [FrameDistorter("darken", 5, 4, stream="dds")(f, i) for i, f in enumerate(_clean(3, 410))]
    ctx = Context()
    rclpy.init(context=ctx)  # ROS_DOMAIN_ID: this test's own (conftest allocator)
    ex = SingleThreadedExecutor(context=ctx)
    got: dict[str, list] = {"img": [], "score": [], "diag": []}
    try:
        node = DistortionNode(parameter_overrides=[Parameter("quality_gate", value=str(predictor_dir)),
                                                   Parameter("input_topic", value=src), Parameter("output_topic", value=dst),
                                                   Parameter("publish_quality", value=False)], context=ctx)
        probe = rclpy.create_node(f"{tag}_probe", context=ctx)
        pub = probe.create_publisher(Image, src, qos_reliable())
        probe.create_subscription(Image, dst, got["img"].append, qos_reliable())
        probe.create_subscription(Float32, T.PREDICTED_DECISION, got["score"].append, qos_reliable())
        probe.create_subscription(DiagnosticArray, T.QUALITY_GATE, got["diag"].append, qos_reliable())
        ex.add_node(node)
        ex.add_node(probe)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not (pub.get_subscription_count() and node.pub.get_subscription_count()
                                                   and node.score_pub.get_subscription_count()
                                                   and node.gate_pub.get_subscription_count()):
            ex.spin_once(timeout_sec=0.05)
        for i, f in enumerate(frames):
            pub.publish(image_to_msg(f, (i + 1) * 1_000_000_000, "cam"))
        while time.monotonic() < deadline and (len(got["score"]) < 6 or len(got["diag"]) < 6 or len(got["img"]) < 3):
            ex.spin_once(timeout_sec=0.05)
        ex.spin_once(timeout_sec=0.2)  # nothing more arrives
        withheld = node.withheld
    finally:
        ex.shutdown()
        rclpy.shutdown(context=ctx)
    assert len(got["score"]) == 6 and len(got["diag"]) == 6
    thr = node.gate.threshold
    assert all(m.data >= thr for m in got["score"][:3]) and all(m.data < thr for m in got["score"][3:])
    assert [diag_values(d)["passed"] for d in got["diag"]] == ["True"] * 3 + ["False"] * 3
    assert len(got["img"]) == 3 and withheld == 3
    for m, f in zip(got["img"], clean):
        np.testing.assert_array_equal(msg_to_image(m), f)
