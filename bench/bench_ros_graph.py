"""ROS 2 graph latency: camera (synthetic 640x480 @ 30 Hz) -> distortion -> policy -> arm (mock), recorded.

Per stage: processing latency p50/p99 (callback entry -> publish; the policy's model time is excluded
and reported on its own row). The distortion node runs as pass-through, so the graph's own cost is
measured; the image-processing time of a distortion at 640x480 is timed on its own row.
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
#: seconds of the measured run (full, --quick), of discovery and warm-up before it, of draining after it
RUN_S, QUICK_RUN_S, WARMUP_S, DRAIN_S = 120.0, 10.0, 3.0, 2.0


def _params(bag_dir: str) -> dict:
    return {
        "embeval_camera": {"source": "synthetic", "rate_hz": 30.0, "width": 640, "height": 480},
        # pass-through: the graph's own cost; the distortion's image processing is timed separately below
        "embeval_distortion": {"distortion": "none", "publish_quality": True},
        "embeval_policy": {"subject": "scripted", "dry_run": False, "rate_hz": 0.0, "max_image_age_s": 1.0},
        "embeval_arm": {"backend": "mock", "max_command_age_s": 5.0, "state_rate_hz": 30.0},
        "embeval_recorder": {"bag_dir": bag_dir, "segment_s": 1.0,
                             "topics": ["/camera/camera/color/image_raw", "/embeval/image_distorted", "/embeval/action",
                                        "/joint_states", "/embeval/events"]},
        "embeval_conductor": {"items": ["bench"], "instructions": ["hold still"], "distortions": ["none"], "levels": [0],
                              "steps_per_episode": 10**9, "episode_timeout_s": 10**6, "start_delay_s": 0.5, "reset_arm": False},
    }


def _pct(x, q) -> float:
    x = np.asarray(x, dtype=np.float64) * 1e3
    return float(np.percentile(x, q)) if x.size else float("nan")


def _distortion_compute_row(name: str = "brighten", level: int = 3, n: int = 30) -> dict:
    """Image-processing time of one distortion on a 640x480 frame (what a distorting node adds per frame), in a
    stream's steady state: per-colour maps (brighten, darken, ...) first run their direct path and then build their
    exact colour table once (:data:`embeval.distortion._util.COLOR_TABLE_AFTER_PIXELS`); those first frames are
    timed apart (``warmup_s``), as ``bench_distortion`` does."""
    import time

    from embeval.camera.sim import SyntheticSource
    from embeval.distortion import DISTORTIONS, _util, distort

    w, h = 640, 480
    img = SyntheticSource(w, h).render()
    warm = 1 + (int(_util.COLOR_TABLE_AFTER_PIXELS // (w * h)) + 1 if hasattr(DISTORTIONS[name].fn, "direct") else 0)
    t0 = time.perf_counter()
    for i in range(warm):
        distort(img, name, level, seed=i)
    warmup = time.perf_counter() - t0
    t = []
    for i in range(n):
        t0 = time.perf_counter()
        distort(img, name, level, seed=warm + i)
        t.append(time.perf_counter() - t0)
    _util.clear_color_tables()
    return {"stage": f"distortion compute ({name} L{level}, {w}x{h}, steady state after {warm} frames; not in the graph run)",
            "messages": n, "p50_ms": _pct(t, 50), "p99_ms": _pct(t, 99), "warmup_s": warmup}


def run(quick: bool) -> list[dict]:
    from embeval_ros.graph import Graph  # Graph.__enter__ sets the localhost DDS defaults

    duration = QUICK_RUN_S if quick else RUN_S
    with tempfile.TemporaryDirectory() as tmp:
        with Graph(_params(str(Path(tmp) / "bag"))) as g:
            g.spin(WARMUP_S)  # discovery and warm-up: latencies excluded; drops count over the whole run
            for n in g.nodes.values():
                n.log.latency_s.clear()
            for attr in ("transport_s", "compute_s"):
                getattr(g.nodes["embeval_distortion"], attr).clear()
            g.nodes["embeval_arm"].command_age_s.clear()
            g.nodes["embeval_policy"].model_s.clear()
            g.spin(duration)
            g.nodes["embeval_camera"].timer.cancel()  # stop the source, let the pipeline drain
            g.spin(DRAIN_S)
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
                rows.append({"stage": stage, "messages": len(lat), "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99),
                             "dropped": 0 if upstream is None else upstream - received,
                             "meets_20ms": bool(_pct(lat, 99) <= TARGET_P99_MS)})
            expected = cam.log.published + dis.log.published + pol.log.published
            recorded = sum(rec.counts.get(t, 0) for t in ("/camera/camera/color/image_raw", "/embeval/image_distorted",
                                                          "/embeval/action"))
            rows.append({"stage": "recorder", "messages": len(rec.log.latency_s), "p50_ms": _pct(rec.log.latency_s, 50),
                         "p99_ms": _pct(rec.log.latency_s, 99), "dropped": expected - recorded,
                         "meets_20ms": bool(_pct(rec.log.latency_s, 99) <= TARGET_P99_MS)})
            rows.append({"stage": "recorder writer queue (max backlog, messages)", "messages": rec.max_backlog})
            rows.append(_distortion_compute_row())
            rows.append({"stage": "policy model time (excluded)", "messages": len(pol.model_s),
                         "p50_ms": _pct(pol.model_s, 50), "p99_ms": _pct(pol.model_s, 99)})
            rows.append({"stage": "baseline: image transport hop", "messages": len(dis.transport_s),
                         "p50_ms": _pct(dis.transport_s, 50), "p99_ms": _pct(dis.transport_s, 99)})
            rows.append({"stage": "end to end: capture -> arm", "messages": len(arm.command_age_s),
                         "p50_ms": _pct(arm.command_age_s, 50), "p99_ms": _pct(arm.command_age_s, 99)})
            stage_p50 = sum(r["p50_ms"] for r in rows[:4])
            rows.append({"stage": "ratio: stage work / transport (p50)", "p50_ms": stage_p50 / max(rows[8]["p50_ms"], 1e-9)})  # transport row
            rows.append({"stage": "rate achieved (Hz)", "messages": len(cam.log.latency_s),
                         "p50_ms": len(cam.log.latency_s) / duration})
    return rows
