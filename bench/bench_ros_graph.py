"""ROS 2 graph latency: camera (synthetic 640x480 @ 30 Hz) -> distortion -> policy -> arm (mock), recorded.

Per stage: processing latency p50/p99 (callback entry -> publish; the policy's model time and the
distortion's image-processing time are excluded and reported on their own rows)
and dropped messages (published upstream - received downstream). Baselines measured in the same
run: the DDS transport of one image hop (camera publish -> distortion callback) and the end-to-end
age of a command (image capture -> arm callback). Target: p99 <= 20 ms per stage, no drops.
2 minutes at full size; ``quick``: 10 s.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

TARGET_P99_MS = 20.0


def _params(bag_dir: str) -> dict:
    return {
        "embeval_camera": {"source": "synthetic", "rate_hz": 30.0, "width": 640, "height": 480},
        "embeval_distortion": {"distortion": "brighten", "level": 3, "publish_quality": True},
        "embeval_policy": {"subject": "scripted", "dry_run": False, "rate_hz": 0.0, "max_image_age_s": 1.0},
        "embeval_arm": {"backend": "mock", "max_command_age_s": 5.0, "state_rate_hz": 30.0},
        "embeval_recorder": {"bag_dir": bag_dir, "segment_s": 1.0,
                             "topics": ["/camera/camera/color/image_raw", "/embeval/image_distorted", "/embeval/action",
                                        "/joint_states", "/embeval/events"]},
        "embeval_conductor": {"items": ["bench"], "instructions": ["hold still"], "distortions": ["brighten"], "levels": [3],
                              "steps_per_episode": 10**9, "episode_timeout_s": 10**6, "start_delay_s": 0.5, "reset_arm": False},
    }


def _pct(x, q) -> float:
    x = np.asarray(x, dtype=np.float64) * 1e3
    return float(np.percentile(x, q)) if x.size else float("nan")


def run(quick: bool) -> list[dict]:
    import embeval  # noqa: F401
    from embeval_ros.graph import Graph

    duration = 10.0 if quick else 120.0
    with tempfile.TemporaryDirectory() as tmp:
        with Graph(_params(str(Path(tmp) / "bag"))) as g:
            g.spin(3.0)  # discovery and warm-up, excluded
            for n in g.nodes.values():
                n.log.latency_s.clear()
                n.log.received = n.log.published = 0
            for attr in ("transport_s", "compute_s"):
                getattr(g.nodes["embeval_distortion"], attr).clear()
            rec0 = dict(g.nodes["embeval_recorder"].counts)
            g.nodes["embeval_arm"].command_age_s.clear()
            g.spin(duration)
            g.nodes["embeval_camera"].timer.cancel()  # stop the source, let the pipeline drain
            g.spin(2.0)
            N = g.nodes
            cam, dis, pol, arm, rec = (N[k] for k in ("embeval_camera", "embeval_distortion", "embeval_policy",
                                                       "embeval_arm", "embeval_recorder"))
            rows = []
            hops = [("camera", cam, None, cam.log.published),
                    ("distortion", dis, cam.log.published, dis.log.received),
                    ("policy", pol, dis.log.published, pol.log.received),
                    ("arm", arm, pol.log.published, arm.log.received)]
            for stage, node, upstream, received in hops:
                lat = node.log.latency_s
                rows.append({"stage": stage, "messages": received, "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99),
                             "dropped": 0 if upstream is None else upstream - received,
                             "meets_20ms": bool(_pct(lat, 99) <= TARGET_P99_MS)})
            expected = cam.log.published + dis.log.published + pol.log.published
            recorded = sum(rec.counts.get(t, 0) - rec0.get(t, 0) for t in ("/camera/camera/color/image_raw", "/embeval/image_distorted",
                                                          "/embeval/action"))
            rows.append({"stage": "recorder", "messages": rec.log.received, "p50_ms": _pct(rec.log.latency_s, 50),
                         "p99_ms": _pct(rec.log.latency_s, 99), "dropped": expected - recorded,
                         "meets_20ms": bool(_pct(rec.log.latency_s, 99) <= TARGET_P99_MS)})
            rows.append({"stage": "distortion compute (brighten L3, excluded)", "messages": len(dis.compute_s),
                         "p50_ms": _pct(dis.compute_s, 50), "p99_ms": _pct(dis.compute_s, 99)})
            rows.append({"stage": "policy model time (excluded)", "messages": len(pol.model_s),
                         "p50_ms": _pct(pol.model_s[-len(pol.log.latency_s):], 50), "p99_ms": _pct(pol.model_s, 99)})
            rows.append({"stage": "baseline: image transport hop", "messages": len(dis.transport_s),
                         "p50_ms": _pct(dis.transport_s, 50), "p99_ms": _pct(dis.transport_s, 99)})
            rows.append({"stage": "end to end: capture -> arm", "messages": len(arm.command_age_s),
                         "p50_ms": _pct(arm.command_age_s, 50), "p99_ms": _pct(arm.command_age_s, 99)})
            stage_p50 = sum(r["p50_ms"] for r in rows[:4])
            rows.append({"stage": "ratio: stage work / transport (p50)", "p50_ms": stage_p50 / max(rows[7]["p50_ms"], 1e-9)})
            rows.append({"stage": "rate achieved (Hz)", "messages": cam.log.published,
                         "p50_ms": cam.log.published / duration})
    return rows
