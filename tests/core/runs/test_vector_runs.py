"""Vectorised episodes in run specs: ``backend.num_envs`` for the ``sim-iqa`` evaluator.

A batch of one subject's units runs its episodes (one clean reference per episode seed, one distorted episode per
distorted unit) on ``num_envs`` environments in worker processes with one batched policy call per step; every
unit's outputs equal the ``num_envs: 1`` run's for deterministic policies (a scripted image-dependent policy, the
pybullet cell's scripted expert, the shipped tiny VLA through ``exact``), the spec hash does not change, bad values
are refused at ``--check`` in one line, and videos and the watchdog keep working.
"""
from __future__ import annotations

import multiprocessing
import time

import pytest
import yaml

from embeval.errors import ConfigError

_BASE = {"evaluator": "sim-iqa", "sim": {"backend": "pybullet", "env": "Pick", "width": 64, "height": 48, "max_steps": 5},
         "subjects": [{"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}}],
         "items": {"source": "synthetic", "count": 4}, "distortions": ["none", "darken", "white_noise"], "levels": [4],
         "params": {"keep_actions": True}, "backend": {"progress": False}}


def _spec(**backend):
    return {**_BASE, "backend": {**_BASE["backend"], **backend}}


def _run(spec_map: dict, run_dir, **over):
    """(run id, {unit key: outputs}) of a finished run; every unit done."""
    from embeval.runs import ResultsStore, parse_spec, run

    s = run(parse_spec({**spec_map, **over}, base_dir=run_dir.parent), run_dir)
    assert (s.done, s.failed) == (s.total, 0)
    with ResultsStore(run_dir / "results.sqlite") as st:
        return s.run_id, {(r["subject"], r["item"], r["distortion"], r["level"]): r["outputs"] for r in st.rows(s.run_id)}


def _no_workers_left() -> bool:
    deadline = time.monotonic() + 5.0
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not multiprocessing.active_children()


@pytest.fixture()
def pool_calls(monkeypatch):
    """Episodes of each VectorPool.run call, and whether its workers were kept from an earlier call."""
    from embeval.sim.vector import VectorPool

    calls: list[tuple[int, bool]] = []
    real = VectorPool.run

    def run(self, policy, units, *a, **kw):
        calls.append((len(units), self.running))
        yield from real(self, policy, units, *a, **kw)

    monkeypatch.setattr(VectorPool, "run", run)
    return calls


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    """The num_envs 1 run of _BASE (its hash, its outputs)."""
    return _run(_spec(), tmp_path_factory.mktemp("seq") / "run")


def test_num_envs_gives_the_sequential_units_and_hash(sequential, tmp_path, pool_calls):
    """4 seeds x (clean + 2 distortions) = 12 units: num_envs 2 runs batches of 8 and 4 units (the workers kept
    between them); num_envs 4 one batch of 12 units: 4 references + 8 distorted episodes, 4 at a time."""
    seq_id, seq = sequential
    assert len(seq) == 12 and all(len(o["distorted_actions"]) == o["distorted_steps"] > 0 for o in seq.values())
    assert {o["decision"] < 1.0 for k, o in seq.items() if k[2] != "none"} == {True}  # the distortions change actions
    for n in (2, 4):
        run_id, vec = _run(_spec(num_envs=n), tmp_path / f"n{n}")
        assert run_id == seq_id and vec == seq  # same run, every output identical (actions, TCP poses, scores)
    # num_envs 2: 8 units of seeds 0..2 (3 references + 5 distorted), then 4 units of seeds 2, 3 on the same
    # workers (seed 2's reference kept from the first batch: 1 + 3); num_envs 4: 4 references + 8 distorted at once
    assert pool_calls == [(8, False), (4, True), (12, False)]
    assert _no_workers_left()


def test_exact_and_the_expert_in_the_workers(tmp_path, pool_calls):
    """``exact`` (batch-1 copies per environment) gives the same units; the scripted expert reads the simulator, so it
    runs in the workers next to its environment."""
    spec = {**_BASE, "subjects": [{"id": "expert", "kind": "policy", "adapter": "sim_expert"}],
            "items": {"source": "synthetic", "count": 2}, "distortions": ["none", "darken"], "params": {}}
    seq_id, seq = _run(spec, tmp_path / "seq")
    vec_id, vec = _run({**spec, "backend": {"progress": False, "num_envs": 3, "exact": True}}, tmp_path / "vec")
    assert vec_id == seq_id and vec == seq and len(seq) == 4 and pool_calls == [(4, False)]
    assert {o["execution"] for o in seq.values()} == {100.0}  # the expert ignores the images
    assert _no_workers_left()


def test_tiny_vla_exact_equals_the_sequential_run(tmp_path):
    """The shipped tiny VLA through ``exact``: bit for bit; through its own batched forward: the same episodes to
    float rounding of the batch size."""
    import numpy as np

    spec = {**_BASE, "subjects": [{"id": "vla", "kind": "policy", "adapter": "embedded", "path": "tiny-vla"}],
            "sim": {**_BASE["sim"], "max_steps": 3}, "items": {"source": "synthetic", "count": 2},
            "distortions": ["none", "darken"]}
    _, seq = _run(spec, tmp_path / "seq")
    _, exact = _run({**spec, "backend": {"progress": False, "num_envs": 4, "exact": True}}, tmp_path / "exact")
    assert exact == seq
    _, fwd = _run({**spec, "backend": {"progress": False, "num_envs": 4}}, tmp_path / "fwd")
    for k, o in seq.items():
        assert np.allclose(fwd[k]["distorted_actions"], o["distorted_actions"], atol=1e-5)


def test_videos_from_the_workers_equal_the_sequential_ones(sequential, tmp_path):
    """record_video: failures with num_envs 3: the workers write the same files, captioned with the unit's scores."""
    from embeval.recording.video import EpisodeVideoWriter

    captions: list[str] = []
    _, seq_out = _run({**_spec(), "record_video": "all", "video_dir": None}, tmp_path / "seqv")
    _, vec_out = _run({**_spec(num_envs=3), "record_video": "all"}, tmp_path / "vecv")
    assert vec_out == seq_out == sequential[1]
    seq_files = sorted(p.name for p in (tmp_path / "seqv" / "videos").iterdir())
    vec_files = sorted(p.name for p in (tmp_path / "vecv" / "videos").iterdir())
    assert vec_files == seq_files and len(seq_files) == 12
    for name in seq_files:  # same frames: same episode, same caption (it is drawn on the last frames)
        a = (tmp_path / "seqv" / "videos" / name).read_bytes()
        b = (tmp_path / "vecv" / "videos" / name).read_bytes()
        assert len(a) > 1000 and a == b, name
    del captions, EpisodeVideoWriter


def test_watchdog_stops_the_workers_and_reruns_the_units_one_by_one(tmp_path, monkeypatch):
    """A batch past ``unit_timeout_s x units`` (here: the policy hangs in its first batched call) is abandoned: its
    environment workers are stopped, which ends the hung call, and its units run again one at a time in process,
    each under the watchdog."""
    import threading

    from embeval.subjects import protocols

    seen, wake = [], threading.Event()
    real = protocols.batched

    class Hangs:
        def __init__(self, policy):
            self.inner = real(policy)
            self.id, self.action_spec = self.inner.id, self.inner.action_spec

        def reset_slots(self, slots, instructions):
            self.inner.reset_slots(slots, instructions)

        def act_slots(self, slots, observations):
            seen.append(len(multiprocessing.active_children()))  # the workers are up, waiting for these actions
            wake.wait(30)
            return self.inner.act_slots(slots, observations)

        def end_slots(self, slots):
            self.inner.end_slots(slots)

    monkeypatch.setattr(protocols, "batched", Hangs)
    spec = {**_spec(num_envs=2, unit_timeout_s=2.0), "items": {"source": "synthetic", "count": 1}}
    _, out = _run(spec, tmp_path / "wd")
    assert seen == [2] and _no_workers_left()  # stopped by the watchdog while the call still hangs
    wake.set()
    _, seq = _run({**spec, "backend": {"progress": False}}, tmp_path / "seq")
    assert out == seq and len(out) == 3
    assert seen == [2] and _no_workers_left()  # the woken call's workers are gone: it ends with an error


def test_ray_workers_run_vectorised_batches(tmp_path, monkeypatch):
    """On the Ray backend each actor runs its batches as vectorised episodes (the spy plugin logs the actor's pid);
    the units equal the local sequential run's."""
    import os
    from pathlib import Path

    from embeval.sim.vector import VectorPool

    ray = pytest.importorskip("ray")
    monkeypatch.setattr(VectorPool, "run", VectorPool.run)  # the plugin wraps it in this process too: restored after
    plugins = Path(__file__).resolve().parents[2] / "ray_plugins"
    log = tmp_path / "pool_runs.txt"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("EMBEVAL_TEST_VECTOR_LOG", str(log))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.syspath_prepend(str(plugins))
    spec = {**_spec(), "items": {"source": "synthetic", "count": 2}, "plugins": ["embeval_test_vector_spy"]}
    _, seq = _run(spec, tmp_path / "seq")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        _, out = _run({**spec, "backend": {"progress": False, "name": "ray", "num_workers": 1, "num_envs": 2}},
                      tmp_path / "ray")
    finally:
        ray.shutdown()
    calls = [line.split() for line in log.read_text().splitlines()]
    assert out == seq and len(seq) == 6
    assert [c[1:] for c in calls] == [["6", "0"]] and int(calls[0][0]) != os.getpid()  # 2 references + 4 distorted


@pytest.mark.parametrize("backend, message", [
    ({"num_envs": 0}, "spec.backend.num_envs: must lie in 1..64, got 0 (environments stepped together)"),
    ({"num_envs": 65}, "spec.backend.num_envs: must lie in 1..64, got 65"),
    ({"num_envs": "4"}, "spec.backend.num_envs: must be an integer in 1..64, got '4' (environments stepped together)"),
    ({"num_envs": True}, "spec.backend.num_envs: must be an integer in 1..64, got True"),
    ({"exact": True}, "spec.backend.exact: applies to vectorised episodes only; set spec.backend.num_envs to 2..64"),
    ({"exact": "yes", "num_envs": 2}, "spec.backend.exact: must be true or false"),
])
def test_bad_values_are_refused_at_check_in_one_line(tmp_path, capsys, backend, message):
    from embeval_cli import main

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec(**backend)))
    assert main(["run", str(path), "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_num_envs_is_refused_for_an_evaluator_without_episodes_and_the_hash_is_unchanged():
    from embeval.runs import parse_spec, plan_run

    spec = {"evaluator": "synthetic", "items": {"source": "synthetic", "count": 1}}
    with pytest.raises(ConfigError, match=r"^spec.backend.num_envs: evaluator 'synthetic' runs no vectorised episodes; "
                                          r"remove num_envs"):
        plan_run(parse_spec({**spec, "backend": {"num_envs": 2}}))
    assert parse_spec(_spec(num_envs=8, exact=True)).hash == parse_spec(_spec()).hash
    with pytest.raises(ConfigError, match="spec.backend.exact: the model actor answers every environment itself"):
        plan_run(parse_spec(_spec(name="ray", num_envs=2, exact=True, model_actor=True)))


def test_units_per_call():
    from embeval.runs.evaluators.policy_decision import PolicyDecisionEvaluator
    from embeval.runs.evaluators.sim_iqa import SimIQAEvaluator
    from embeval.runs.execute import UNITS_PER_ENV, units_per_call
    from embeval.runs.spec import BackendSpec

    sim, pd = SimIQAEvaluator(), PolicyDecisionEvaluator()
    assert units_per_call(sim, BackendSpec()) == 1 and units_per_call(sim, BackendSpec(batch_size=8)) == 1
    assert units_per_call(sim, BackendSpec(num_envs=4)) == UNITS_PER_ENV * 4 == 16
    assert units_per_call(sim, BackendSpec(num_envs=4, batch_size=100)) == 100
    assert units_per_call(pd, BackendSpec(batch_size=8)) == 8


# ------------------------------------------------------------------ embeval iqa build: closed-loop Execution runs
@pytest.fixture(scope="module")
def iqa_db(tmp_path_factory):
    """A small simulated IQA database (2 references x darken, white_noise at level 5; a scripted VLA), no
    Execution yet."""
    from embeval_analysis.iqa.database import BuildConfig, build_database

    out = tmp_path_factory.mktemp("iqa_vec")
    subjects = [{"id": "stats-b", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}}]
    cfg = BuildConfig(source="sim", source_params={"n": 2, "size": [64, 48]}, distortions=["darken", "white_noise"],
                      levels=[5], subjects=subjects, execution_images=0)
    build_database(cfg, out, log=None)
    return out


def test_iqa_build_execution_runs_vectorised_equal_the_sequential_ones(iqa_db, tmp_path, pool_calls):
    """``execution_scores(num_envs=3)``: one call with the 2 references beside the 3 distorted runs (with videos:
    references first, then the distorted runs on the same workers, each video captioned as in the sequential build)."""
    import pandas as pd

    from embeval.recording.video import EpisodeRecorder
    from embeval_analysis.iqa.database import execution_scores

    def build(num_envs: int, videos=None, **kw):
        execution_scores(iqa_db, 3, seed=1, log=None, max_steps=6, num_envs=num_envs, videos=videos, **kw)
        return pd.read_csv(iqa_db / "execution.csv"), pd.read_csv(iqa_db / "scores.csv")

    seq_rows, seq_scores = build(1)
    assert len(seq_rows) == 3 and seq_rows["distorted_steps"].gt(0).all() and pool_calls == []
    vec_rows, vec_scores = build(3)
    pd.testing.assert_frame_equal(vec_rows, seq_rows)
    pd.testing.assert_frame_equal(vec_scores, seq_scores)
    assert pool_calls == [(5, False)]  # 2 references + 3 distorted runs
    pool_calls.clear()
    rec_seq, rec_vec = EpisodeRecorder("all", tmp_path / "seq"), EpisodeRecorder("all", tmp_path / "vec")
    build(1, rec_seq)
    rows, _ = build(2, rec_vec, exact=True)
    pd.testing.assert_frame_equal(rows, seq_rows)
    assert pool_calls == [(2, False), (3, True)] and rec_vec.count == rec_seq.count == 3
    names = sorted(p.name for p in rec_seq.written)
    assert names == sorted(p.name for p in rec_vec.written) and len(names) == 3
    for name in names:
        assert (tmp_path / "seq" / name).read_bytes() == (tmp_path / "vec" / name).read_bytes(), name
    assert _no_workers_left()


def test_iqa_build_num_envs_is_checked(iqa_db, tmp_path, capsys):
    from embeval_cli import main
    from embeval_analysis.iqa.database import execution_scores

    with pytest.raises(SystemExit) as exc:
        main(["iqa", "build", "--out", str(tmp_path / "db"), "--num-envs", "0"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--num-envs: must lie in 1..64, got 0 (environments stepped together; 1 = one at a time)" in err
    assert main(["iqa", "build", "--out", str(tmp_path / "db"), "--num-envs", "2"]) == 2  # before building anything
    err = capsys.readouterr().err.strip()
    assert "--num-envs 2 vectorises the closed-loop Execution runs, and this build runs none" in err and "\n" not in err
    assert not (tmp_path / "db").exists()
    with pytest.raises(ConfigError, match=r"^--num-envs 2: vectorises the closed-loop Execution runs only"):
        execution_scores(iqa_db, 1, log=None, protocol="all_tasks_one_action", num_envs=2)
    with pytest.raises(ConfigError, match=r"^--num-envs: must lie in 1\.\.64"):
        execution_scores(iqa_db, 1, log=None, num_envs=65)
