"""The Ray backend's model-actor split on a two-node Ray cluster on this machine (ray.cluster_utils.Cluster).

One policy model actor loads the policy once and answers the episodes of two environment workers, one on
each node; the results equal the local backend's. One cluster for the module (start-up costs ~20 s here)."""
from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from embeval.errors import ConfigError
from embeval.runs.runner import run
from embeval.runs.spec import parse_spec
from embeval.runs.store import ResultsStore

ray = pytest.importorskip("ray")

PLUGINS = Path(__file__).resolve().parents[2] / "ray_plugins"  # embeval_test_counting_policy: a policy that logs its loads
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "node_ip_address": "127.0.0.1"}


@pytest.fixture(scope="module")
def cluster():
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
    # the plugin module for the Ray workers (they inherit the nodes' environment) and this process
    mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])))
    mp.syspath_prepend(str(PLUGINS))
    # connect to 127.0.0.1 as given: Ray otherwise swaps a loopback address for the machine's outward IP,
    # where this cluster does not listen
    mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    c = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        c.add_node(**NODE)
        ray.init(address=c.address, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        mp.undo()


def _spec(tmp_path, **backend):
    return {
        "name": "model-actor", "evaluator": "policy-decision", "plugins": ["embeval_test_counting_policy"],
        "subjects": [{"id": "counted", "kind": "policy", "adapter": "counting_image_stats",
                      "params": {"scale": 0.2, "log": str(tmp_path / "loads.log")}}],
        "items": {"source": "synthetic", "count": 3, "params": {"size": [32, 24]}},
        "distortions": ["none", "gaussian_blur", "white_noise"], "levels": [1, 4], "seeds": [0],
        "params": {"tasks": ["pick up the cube", "push the box left"]},
        "backend": {"num_workers": 2, "model_actor": True, "num_cpus_per_model": 0, "model_max_wait_ms": 20,
                    "unit_timeout_s": 60, "progress": False, **backend},
    }


def _write(tmp_path, spec) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    return p


def _loads(tmp_path) -> list[int]:
    f = tmp_path / "loads.log"
    return [int(x) for x in f.read_text().split()] if f.exists() else []


def test_model_actor_serves_env_workers_on_both_nodes_and_matches_local(cluster, tmp_path, caplog):
    p = _write(tmp_path, _spec(tmp_path))
    local = run(p, tmp_path / "local", backend="local")
    assert _loads(tmp_path) == [os.getpid()]
    with caplog.at_level(logging.INFO, logger="embeval.runs"):
        remote = run(p, tmp_path / "ray", backend="ray")
    assert local.run_id == remote.run_id and local.total == remote.total == local.done == remote.done > 8
    with ResultsStore(tmp_path / "local" / "results.sqlite") as a, ResultsStore(tmp_path / "ray" / "results.sqlite") as b:
        ra, rb = a.results(local.run_id), b.results(remote.run_id)
        workers = {r["worker"] for r in b.rows(remote.run_id, "done")}
    # a batch-1-exact policy (one copy per slot): every output, actions included, equals the local run's
    assert ra == rb
    assert {k: v["decision"] for k, v in ra.items()} == {k: v["decision"] for k, v in rb.items()}
    # the environment workers ran on both nodes (ray:<host>:<node id>:<pid>), without the model
    nodes = {w.split(":")[2] for w in workers}
    assert all(w.startswith("ray:") for w in workers)
    assert nodes == {n["NodeID"][:12] for n in ray.nodes() if n["Alive"]} and len(nodes) == 2
    # the model was loaded once for the Ray run, in neither the driver nor an environment worker
    loads = _loads(tmp_path)[1:]
    assert len(loads) == 1 and loads[0] != os.getpid()
    assert loads[0] not in {int(w.rsplit(":", 1)[1]) for w in workers}
    # every request went to it (the load, reset + act per task, image and unit, each worker's end of its slot at close),
    # several of them in one model call
    (served, calls), = [tuple(map(int, re.search(r"(\d+) requests in (\d+) model calls", m).groups()))
                        for m in caplog.messages if "model actor of subject 'counted'" in m]
    assert served == 1 + 2 * 2 * 2 * remote.done + len(workers) and calls < served  # tasks x images x (reset, act)


def test_a_model_that_cannot_load_fails_its_units_with_the_reason(cluster, tmp_path):
    spec = _spec(tmp_path)
    spec["subjects"][0]["params"]["log"] = str(tmp_path / "no-such-dir" / "loads.log")
    s = run(_write(tmp_path, spec), tmp_path / "run", backend="ray")
    assert s.failed == s.total and s.done == 0
    with ResultsStore(tmp_path / "run" / "results.sqlite") as st:
        errors = {r["error"] for r in st.rows(s.run_id, "failed")}
    (error,) = errors
    assert error.startswith("subject 'counted' setup failed: FileNotFoundError") and "no-such-dir" in error


def _policy_and_actor(max_batch: int):
    from embeval.runs.backends.model_actor import ModelActor

    spec = parse_spec({"evaluator": "policy-decision", "items": {"source": "synthetic", "count": 1},
                       "subjects": [{"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.3}}]})
    return spec, ModelActor(spec, spec.subjects[0], max_batch=max_batch, max_wait_s=2.0)


def test_model_actor_answers_concurrent_episodes_in_one_batched_call_exactly():
    """In-process (no Ray): 4 concurrent episodes -> one reset call and one act call; each action equals a
    batch-1 copy's; a bad observation fails its own episode only."""
    import asyncio

    import numpy as np

    from embeval.action import Observation
    from embeval.errors import InvalidInputError
    from embeval.subjects.scripted import ImageStatsPolicy

    spec, actor = _policy_and_actor(max_batch=4)
    rng = np.random.default_rng(0)
    obs = [Observation(images={"cam": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)}) for _ in range(3)]
    obs.append(Observation(images={}))  # no image: ImageStatsPolicy refuses it

    async def main():
        assert (await actor.load())["id"] == "stats"
        await asyncio.gather(*(actor.call("reset", ("w0", 0, k), f"task {k}") for k in range(4)))
        return await asyncio.gather(*(actor.call("act", ("w0", 0, k), o) for k, o in enumerate(obs)),
                                    return_exceptions=True)

    try:
        acts = asyncio.run(main())
        st = actor.stats()
    finally:
        actor.queue.shutdown()
    ref = ImageStatsPolicy(scale=0.3)
    for a, o in zip(acts[:3], obs):
        ref.reset("x")
        assert np.array_equal(a.vector, ref.act(o).vector)
    assert isinstance(acts[3], InvalidInputError)
    # queue calls: the load, ONE for the 4 resets, ONE for the 4 acts (the failing act_slots is retried slot by
    # slot inside that call); requests: 1 + 4 + 4
    assert (st["loads"], st["batches"], st["served"], st["largest_batch"], st["open_slots"]) == (1, 3, 9, 4, 4)


def test_a_dead_model_actor_fails_its_running_units_and_is_restarted_once(cluster, tmp_path):
    spec = _spec(tmp_path)
    spec["subjects"][0]["params"]["crash_marker"] = str(tmp_path / "crashed")
    p = _write(tmp_path, spec)
    s = run(p, tmp_path / "run", backend="ray")
    assert (tmp_path / "crashed").exists() and len(_loads(tmp_path)) == 2  # loaded, died, loaded again
    assert s.failed >= 1 and s.done == s.total - s.failed and s.done > 0
    with ResultsStore(tmp_path / "run" / "results.sqlite") as st:
        errors = [r["error"] for r in st.rows(s.run_id, "failed")]
    assert all("model actor of subject 'counted'" in e and "died" in e for e in errors), errors
    again = run(p, tmp_path / "run", backend="ray")  # the failed units run on resume
    assert (again.done, again.failed) == (s.failed, 0)


def test_a_model_actor_needing_gpus_no_node_has_is_refused_in_one_line(cluster, tmp_path):
    p = _write(tmp_path, _spec(tmp_path, num_gpus_per_model=1))
    with pytest.raises(ConfigError, match=r"^backend.num_gpus_per_model: the model actor needs 1 GPU\(s\) on one node "
                                          r"but the Ray cluster's largest node has 0; lower it") as e:
        run(p, tmp_path / "run", backend="ray")
    assert "\n" not in str(e.value) and not _loads(tmp_path)


@pytest.mark.parametrize("backend, match", [
    ({"num_gpus_per_model": 1}, r"backend.num_gpus_per_model: applies to the model actor only; set "
                                r"spec.backend.model_actor: true"),
    ({"model_actor": True, "num_gpus_per_model": 2000}, r"spec.backend.num_gpus_per_model"),
    ({"model_actor": True, "num_gpus_per_model": -1}, r"spec.backend.num_gpus_per_model"),
    ({"model_actor": "yes"}, r"spec.backend.model_actor"),
    ({"model_actor": True, "model_max_batch": 0}, r"spec.backend.model_max_batch"),
    ({"model_actor": True, "model_max_wait_ms": 1e9}, r"spec.backend.model_max_wait_ms"),
])
def test_model_actor_fields_are_checked(backend, match):
    with pytest.raises(ConfigError, match=match):
        parse_spec({"evaluator": "synthetic", "items": {"source": "synthetic", "count": 1}, "backend": backend})


def test_model_actor_fields_parse():
    b = parse_spec({"evaluator": "synthetic", "items": {"source": "synthetic", "count": 1},
                    "backend": {"name": "ray", "model_actor": True, "num_gpus_per_model": 1, "num_cpus_per_model": 2,
                                "model_max_batch": 32, "model_max_wait_ms": 2}}).backend
    assert (b.model_actor, b.num_gpus_per_model, b.num_cpus_per_model, b.model_max_batch, b.model_max_wait_ms) == \
        (True, 1.0, 2.0, 32, 2.0)
    assert sys.modules.get("ray") is not None  # (imported by this module; parsing itself starts nothing)


def test_a_local_ray_instance_gets_the_model_actor_cpus_and_no_invented_gpus(monkeypatch):
    from embeval.runs.backends import ray_backend

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    b = parse_spec({"evaluator": "synthetic", "items": {"source": "synthetic", "count": 1},
                    "backend": {"name": "ray", "num_workers": 3, "num_cpus_per_worker": 1.5, "model_actor": True,
                                "num_gpus_per_model": 1, "num_cpus_per_model": 2}}).backend
    assert ray_backend.ensure_ray(b) is True
    (kw,) = calls
    assert kw["num_cpus"] == 7 and "num_gpus" not in kw and "resources" not in kw  # ceil(3 x 1.5 + 2); GPUs detected
    assert kw["_node_ip_address"] == "127.0.0.1" and kw["include_dashboard"] is False
