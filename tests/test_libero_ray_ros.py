"""LIBERO on the Ray backend (the same episode records as the local backend) and in the ROS graph (the ``libero``
arm backend and camera source: the camera shows LIBERO's agent view, the arm steps LIBERO through the libero_osc
convention, the episode ends on LIBERO's own success check). LIBERO runs in .venv-libero (skipped without it)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from embeval.sim.libero import libero_python

pytestmark = pytest.mark.skipif(not libero_python().is_file(),
                                reason=f"LIBERO's interpreter {libero_python()} is missing: run scripts/install_libero.sh")
TASK = "libero_spatial:0"


# ---- Ray ---------------------------------------------------------------------------------------------------------
def test_ray_gives_the_same_libero_episodes_as_local(tmp_path):
    ray = pytest.importorskip("ray")
    from embeval.runs.runner import run
    from embeval.runs.store import ResultsStore

    spec = {"name": "libero-ray", "evaluator": "sim-iqa",
            "sim": {"backend": "libero", "env": TASK, "width": 32, "height": 32, "max_steps": 3,
                    "options": {"render_mode": "fast", "hard_reset": False}},
            "subjects": [{"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}}],
            "items": {"source": "synthetic", "count": 1}, "distortions": ["none", "darken"], "levels": [5],
            "backend": {"num_workers": 1, "progress": False}}
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        remote = run(p, tmp_path / "ray", backend="ray")
    finally:
        ray.shutdown()
    local = run(p, tmp_path / "local", backend="local")
    assert local.run_id == remote.run_id and (local.done, remote.done, local.failed, remote.failed) == (2, 2, 0, 0)
    with ResultsStore(tmp_path / "local" / "results.sqlite") as a, ResultsStore(tmp_path / "ray" / "results.sqlite") as b:
        res_local, res_ray = a.results(local.run_id), b.results(remote.run_id)
        workers = {r["worker"] for r in b.rows(remote.run_id, "done")}
    assert res_local == res_ray and len(res_local) == 2  # every number of both episode records
    assert all(w.startswith("ray:") for w in workers)
    dark = next(v for k, v in res_ray.items() if k[2] == "darken")
    assert dark["reference_steps"] == dark["distorted_steps"] == 3 and dark["decision"] < 1.0
    assert np.isfinite(dark["execution"]) and 0.0 < dark["distance_cm"]  # a darker image moves the hand elsewhere
