"""Done-when: the same spec on the Ray backend (local instance, 2 workers) gives the same results
as the local backend. One Ray session for the module (start-up costs seconds)."""
from __future__ import annotations

import os

import pytest
import yaml

from embeval.runs.runner import run
from embeval.runs.store import ResultsStore

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_session():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


def _store(run_dir):
    return ResultsStore(run_dir / "results.sqlite")


def _compare(spec_file, tmp_path, **kw):
    local = run(spec_file, tmp_path / "local", backend="local", **kw)
    remote = run(spec_file, tmp_path / "ray", backend="ray", **kw)
    with _store(tmp_path / "local") as a, _store(tmp_path / "ray") as b:
        assert a.results(local.run_id) == b.results(remote.run_id)
        fa = {(r["subject"], r["item"]) for r in a.rows(local.run_id, "failed")}
        fb = {(r["subject"], r["item"]) for r in b.rows(remote.run_id, "failed")}
        workers = {r["worker"] for r in b.rows(remote.run_id, "done")}
    return local, remote, fa, fb, workers


def test_ray_gives_the_same_results_as_local(ray_session, tmp_path):
    spec = {
        "name": "ray-eq", "evaluator": "synthetic",
        "subjects": [{"id": "a", "kind": "synthetic"}, {"id": "b", "kind": "synthetic", "params": {"offset": 0.7}}],
        "items": {"source": "synthetic", "count": 40}, "levels": [0, 1], "seeds": [0, 1],
        "params": {"work_ms": 1, "fail_items": ["item00004"], "hang_items": ["item00007"], "hang_s": 0.8},
        "backend": {"num_workers": 2, "batch_size": 4, "unit_timeout_s": 0.3, "progress": False},
    }
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    local, remote, fa, fb, workers = _compare(p, tmp_path)
    assert local.run_id == remote.run_id and local.total == remote.total == 320
    assert local.done == remote.done == 320 - 2 * 2 * 4
    # failing and hung units are recorded as failed (with the reason) on both backends
    assert fa == fb == {("a", "item00004"), ("b", "item00004"), ("a", "item00007"), ("b", "item00007")}
    with _store(tmp_path / "ray") as b:
        errors = {r["item"]: r["error"] for r in b.rows(remote.run_id, "failed")}
    assert "timeout" in errors["item00007"] and "synthetic failure" in errors["item00004"]
    assert all(w.startswith("ray:") for w in workers) and len(workers) >= 2  # really ran in two Ray actors


def test_ray_distortion_quality_matches_local(ray_session, tmp_path):
    spec = {
        "evaluator": "distortion-quality", "items": {"source": "synthetic", "count": 2, "params": {"size": [40, 32]}},
        "distortions": ["white_noise", "gaussian_blur"], "levels": [1, 4], "seeds": [0],
        "backend": {"num_workers": 2, "progress": False},
    }
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    local, remote, fa, fb, _ = _compare(p, tmp_path)
    assert local.done == remote.done == 8 and not fa and not fb


def test_ray_worker_loss_is_recorded_and_the_run_goes_on(ray_session, tmp_path):
    spec = {
        "evaluator": "synthetic", "subjects": [{"id": "a", "kind": "synthetic"}],
        "items": {"source": "synthetic", "count": 12}, "params": {"crash_items": ["item00003"]},
        "backend": {"name": "ray", "num_workers": 2, "progress": False},
    }
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    s = run(p, tmp_path / "run")
    # the crashing unit fails; batches queued behind it go to a new actor. The unit the worker
    # finished just before dying may fail too (its reply can die with the process): never lost,
    # it is recorded as failed and the resume below runs it again.
    assert s.total == 12 and 1 <= s.failed <= 2 and s.done == 12 - s.failed
    with _store(tmp_path / "run") as st:
        failed = st.rows(s.run_id, "failed")
    assert "item00003" in {r["item"] for r in failed} and all("ray worker died" in r["error"] for r in failed)
    again = run(p, tmp_path / "run")
    assert (again.skipped + again.done, again.failed) == (11, 1)


def test_ray_driver_watchdog_kills_a_worker_hung_with_the_gil_held(ray_session, tmp_path, monkeypatch):
    from embeval.runs.backends import ray_backend

    monkeypatch.setattr(ray_backend, "DRIVER_GRACE_S", 1.0)
    monkeypatch.setattr(ray_backend, "SETUP_GRACE_S", 60.0)
    spec = {
        "evaluator": "synthetic", "subjects": [{"id": "a", "kind": "synthetic"}],
        "items": {"source": "synthetic", "count": 6},
        "params": {"hang_items": ["item00002"], "hang_s": 60, "hang_holds_gil": True},
        "backend": {"name": "ray", "num_workers": 2, "unit_timeout_s": 0.3, "progress": False},
    }
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    s = run(p, tmp_path / "run")
    assert (s.total, s.done, s.failed) == (6, 5, 1)
    with _store(tmp_path / "run") as st:
        (row,) = st.rows(s.run_id, "failed")
    assert row["item"] == "item00002" and "did not answer" in row["error"] and "killed" in row["error"]


def test_ray_refuses_workers_no_node_can_host(ray_session, tmp_path):
    from embeval.errors import ConfigError

    spec = {"evaluator": "synthetic", "items": {"source": "synthetic", "count": 2},
            "backend": {"name": "ray", "num_gpus_per_worker": 1, "progress": False}}
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match="backend.num_gpus_per_worker: each worker needs 1 GPU"):
        run(p, tmp_path / "run")
