"""Vectorised episodes with continuous batching: N environments in worker processes, ONE batched
policy call per step, an environment takes the next unit as soon as its episode ends.

Act2Answer on the pybullet cell: the records of ``run_items_vector(num_envs=N)`` equal the sequential run's record by
record (the scripted expert, which runs in the workers; the shipped tiny-vla-a2a-frozen through its batch-1 path
with ``exact``; through its batched forward the scores are equal and the actions agree to float rounding).
The engine itself (:mod:`embeval.sim.vector`) on a counting task without a simulator: one call per step with
every waiting environment, a finished slot restarted at once, actions reaching the right episode, errors naming
their unit after the records before it, a dead worker named, workers stopped when the caller stops.
"""
from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np
import pytest

from embeval.act2answer.episode import BackendExpert, run_items
from embeval.act2answer.generator import generate_items
from embeval.act2answer.scene import EpisodeSpec
from embeval.act2answer.vector import records_equal, run_items_vector
from embeval.action import Action, Observation
from embeval.errors import (
    ConfigError,
    EmbevalError,
    InvalidInputError,
    MissingFileError,
)
from embeval.sim.vector import MAX_ENVS, VectorProfile, check_num_envs, run_vectorised


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The environments' workers take the cores: the policy runs on one torch thread (as the CLI sets it)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    return generate_items(tmp_path_factory.mktemp("vec_a2a"), ["color", "shape"], per_category=1, seed=0)


def _no_workers_left() -> bool:
    deadline = time.monotonic() + 5.0
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not multiprocessing.active_children()


# ----------------------------------------------------------------------------------------- Act2Answer, pybullet
def test_expert_records_equal_the_sequential_run(items):
    """The privileged expert reads the simulator: it runs in the workers; every record is the sequential one."""
    spec = EpisodeSpec(max_steps=30)
    seq = list(run_items(BackendExpert(spec), items, spec, seed=3))
    prof = VectorProfile()
    vec = list(run_items_vector(BackendExpert(spec), items, spec, seed=3, num_envs=3, profile=prof))
    assert len(seq) == 4 and [r.zone for r in seq] == ["correct"] * 4
    assert [r.to_dict() for r in vec] == [r.to_dict() for r in seq]  # same order, seeds, actions, cube positions
    assert prof.episodes == 4 and prof.workers == 2 and prof.steps == 0  # no policy calls in this process
    assert vec[0].subject == "expert-answer" and len(vec[0].actions) == vec[0].steps > 0


def test_tiny_vla_records_equal_the_sequential_run(items):
    """tiny-vla-a2a-frozen: ``exact`` (its batch-1 path per environment) gives every record bit for bit; its own
    batched forward (one pass per step) gives the same scores, actions within float rounding."""
    from embeval.act2answer.subjects import embedded_policy

    policy = embedded_policy("tiny-vla-a2a-frozen")
    seq = list(run_items(policy, items, seed=1))
    prof = VectorProfile()
    exact = list(run_items_vector(policy, items, seed=1, num_envs=4, exact=True))
    assert records_equal(exact, seq)
    fwd = list(run_items_vector(policy, items, seed=1, num_envs=4, profile=prof))
    key = ("item", "layout", "seed", "instruction", "subject", "zone", "choice", "success", "steps", "end_reason")
    assert [[getattr(r, k) for k in key] for r in fwd] == [[getattr(r, k) for k in key] for r in seq]
    assert sum(r.success for r in seq) >= 3  # the choice VLA answers these colour/shape items
    for a, b in zip(fwd, seq):
        assert np.abs(np.array(a.actions) - np.array(b.actions)).max() <= 1e-4
        assert np.abs(np.array(a.cube_xy) - np.array(b.cube_xy)).max() <= 1e-3
    # one call per step for all four environments: the batch is full until the last episodes run out
    assert prof.actions == sum(r.steps for r in seq) and prof.steps < prof.actions / 3
    assert prof.actions / prof.steps > 3.0
    assert prof.model_s > 0 and prof.sim_cpu_s > 0 and prof.render_cpu_s > 0 and prof.transport_s > 0


def test_num_envs_is_checked(items):
    for bad in (0, 65, -1, True, 2.0, "3", None):
        with pytest.raises(ConfigError, match=r"num_envs: must (lie|be an integer) in 1\.\.64"):
            check_num_envs(bad)
        with pytest.raises(ConfigError, match=r"1\.\.64"):
            next(run_items_vector(BackendExpert(), items, num_envs=bad))
    assert check_num_envs(MAX_ENVS) == 64 and check_num_envs(1) == 1


def test_a_missing_card_image_is_named_as_in_the_sequential_run(tmp_path):
    its = generate_items(tmp_path, ["color"], per_category=3, seed=0)
    from pathlib import Path

    Path(its[1].images_in("original")[0]).unlink()
    spec = EpisodeSpec(max_steps=30)
    with pytest.raises(MissingFileError) as seq:
        list(run_items(BackendExpert(spec), its, spec))
    got = []
    with pytest.raises(MissingFileError) as vec:
        got.extend(run_items_vector(BackendExpert(spec), its, spec, num_envs=3))
    assert str(vec.value) == str(seq.value) and f"item {its[1].id!r}" in str(vec.value)
    assert [r.item for r in got] == [its[0].id] * 2  # the records before the failing unit came out first
    assert _no_workers_left()


def test_a_jpeg_card_is_converted_before_the_workers_start(tmp_path):
    """An item's two layouts run at once on two workers; its JPEG card's loadable PNG copy is written first, here."""
    from dataclasses import replace

    from PIL import Image

    from embeval.act2answer.vector import convert_textures_first

    its = generate_items(tmp_path, ["color"], per_category=1, seed=0)
    jpg = tmp_path / "left.jpg"
    Image.open(its[0].left_image).convert("RGB").save(jpg, quality=95)
    its = [replace(its[0], left_image=str(jpg))]
    assert convert_textures_first(its) == 1 and convert_textures_first(generate_items(tmp_path / "b", ["shape"], 1)) == 0
    spec = EpisodeSpec(max_steps=30)
    seq = list(run_items(BackendExpert(spec), its, spec))
    vec = list(run_items_vector(BackendExpert(spec), its, spec, num_envs=2))
    assert records_equal(vec, seq) and [r.zone for r in vec] == ["correct", "correct"]


# ----------------------------------------------------------------------------------------- the engine, no simulator
class CountingTask:
    """A task without a simulator: unit ``(name, length)`` asks ``length`` actions; observation k of an episode
    carries k in its state; the record lists the actions received. Name ``boom``: raises; ``die``: the worker exits."""

    def make_env(self):
        return {"episodes": 0}

    def local_policy(self, env):
        return None

    def run(self, env, policy, unit):
        name, length = unit
        if name == "boom":
            raise InvalidInputError(f"unit {name}: broken on purpose")
        if name == "die":
            os._exit(3)
        env["episodes"] += 1
        policy.reset(f"go {name}")
        got = []
        for k in range(length):
            a = policy.act(Observation(images={}, instruction=name, state={"k": np.array([float(k)])}))
            got.append(a.vector.tolist())
        return {"unit": name, "actions": got, "pid": os.getpid()}

    def close(self, env):
        pass

    def describe(self, unit):
        return f"unit {unit[0]!r}"


class RecordingPolicy:
    """A BatchedPolicy that answers slot s at step k of its episode with [s, k, ...] and logs every call."""

    id = "recorder"
    action_spec = None

    def __init__(self):
        self.calls: list[list[int]] = []
        self.resets: list[tuple[int, str]] = []
        self.ended: list[int] = []
        self.open: set[int] = set()

    def reset_slots(self, slots, instructions):
        self.resets += list(zip(slots, instructions))
        self.open |= set(slots)

    def act_slots(self, slots, observations):
        assert set(slots) <= self.open
        self.calls.append(list(slots))
        return [Action(np.array([s, ob.state["k"][0], 0, 0, 0, 0, 1.0]) / np.array([100, 100, 1, 1, 1, 1, 1]))
                for s, ob in zip(slots, observations)]

    def end_slots(self, slots):
        self.ended += list(slots)
        self.open -= set(slots)


def test_one_call_per_step_and_a_finished_slot_takes_the_next_unit_at_once():
    units = [("a", 3), ("b", 1), ("c", 2), ("d", 2), ("e", 1)]
    pol = RecordingPolicy()
    prof = VectorProfile()
    out = list(run_vectorised(pol, units, CountingTask(), num_envs=2, profile=prof))
    assert [i for i, _ in out] == [0, 1, 2, 3, 4] and [r["unit"] for _, r in out] == list("abcde")
    # slot 0 runs a (3 steps); slot 1 runs b (1), then c (2) at once; then d and e share the last steps
    assert [len(c) for c in pol.calls] == [2, 2, 2, 2, 1]
    assert prof.steps == 5 and prof.actions == sum(n for _, n in units) == 9
    for _, rec in out:  # every action reached its own episode, step by step
        ks = [round(a[1] * 100) for a in rec["actions"]]
        assert ks == list(range(len(rec["actions"])))
        assert len({round(a[0] * 100) for a in rec["actions"]}) == 1  # one slot per episode
    assert sorted(i for _, i in pol.resets) == sorted(f"go {u}" for u, _ in units)
    assert sorted(pol.ended) == sorted(s for s, _ in pol.resets) and not pol.open
    assert len({r["pid"] for _, r in out}) == 2  # two worker processes, neither is this one
    assert os.getpid() not in {r["pid"] for _, r in out}
    assert _no_workers_left()


def test_forkserver_and_one_worker_for_many_environments():
    units = [(str(i), 1 + i % 3) for i in range(7)]
    pol = RecordingPolicy()
    out = list(run_vectorised(pol, units, CountingTask(), num_envs=4, workers=1, start_method="forkserver"))
    assert [r["unit"] for _, r in out] == [u for u, _ in units]
    assert len({r["pid"] for _, r in out}) == 1 and max(len(c) for c in pol.calls) == 4
    for bad in (0, -1, 65, 1.5, True):
        with pytest.raises(ConfigError, match=r"workers must be a whole number in 1\.\.64"):
            list(run_vectorised(pol, units, CountingTask(), num_envs=2, workers=bad))
    with pytest.raises(ConfigError, match="start_method must be one of spawn, forkserver, fork"):
        list(run_vectorised(pol, units, CountingTask(), num_envs=2, start_method="threads"))


def test_two_alternating_halves():
    """groups=2: the policy answers one half of the environments while the workers step the other; each half keeps
    its slots (every worker holds slots of both), the records are those of groups=1."""
    units = [(str(i), 1 + (i * 7) % 4) for i in range(10)]
    pol = RecordingPolicy()
    out = list(run_vectorised(pol, units, CountingTask(), num_envs=4, groups=2))
    halves = [{0, 1}, {2, 3}]  # 2 workers: slots 0, 2 on worker 0 and 1, 3 on worker 1; halves by slot // 2
    assert all(set(c) <= halves[0] or set(c) <= halves[1] for c in pol.calls)
    assert max(len(c) for c in pol.calls) == 2 and {len(c) for c in pol.calls} <= {1, 2}
    ref = list(run_vectorised(RecordingPolicy(), units, CountingTask(), num_envs=4))
    assert [r["unit"] for _, r in out] == [r["unit"] for _, r in ref] == [u for u, _ in units]
    assert [len(r["actions"]) for _, r in out] == [n for _, n in units]
    with pytest.raises(ConfigError, match="groups must be 1 .* or 2"):
        list(run_vectorised(pol, units, CountingTask(), num_envs=2, groups=3))


def test_an_error_in_a_unit_comes_after_the_records_before_it():
    units = [("a", 4), ("b", 1), ("boom", 1), ("c", 1), ("d", 5)]
    got = []
    with pytest.raises(InvalidInputError, match="unit boom: broken on purpose"):
        for i, rec in run_vectorised(RecordingPolicy(), units, CountingTask(), num_envs=2):
            got.append(rec["unit"])
    assert got == ["a", "b"]
    assert _no_workers_left()


def test_a_dead_worker_is_named_in_one_line():
    with pytest.raises(EmbevalError) as err:
        list(run_vectorised(RecordingPolicy(), [("a", 2), ("die", 1)], CountingTask(), num_envs=2))
    msg = str(err.value)
    assert "\n" not in msg and "exited (code 3) while running unit 'die'" in msg and "--num-envs 1" in msg
    assert _no_workers_left()


def test_a_policy_error_names_the_step_and_stopping_early_stops_the_workers():
    class Bad(RecordingPolicy):
        def act_slots(self, slots, observations):
            raise InvalidInputError("recorder needs camera 'wrist'")

    with pytest.raises(InvalidInputError, match=r"needs camera 'wrist' \(a step of unit 'a', unit 'b'\)"):
        list(run_vectorised(Bad(), [("a", 2), ("b", 2)], CountingTask(), num_envs=2))
    assert _no_workers_left()
    gen = run_vectorised(RecordingPolicy(), [(str(i), 3) for i in range(20)], CountingTask(), num_envs=3)
    assert next(gen)[0] == 0
    assert multiprocessing.active_children()
    gen.close()  # the caller stops (a break, Ctrl-C): the workers stop too
    assert _no_workers_left()


def test_an_unpicklable_task_is_one_line():
    class Local(CountingTask):  # defined in a function: spawn cannot import it
        pass

    with pytest.raises(ConfigError, match="cannot start environment worker 0 .*must pickle"):
        list(run_vectorised(RecordingPolicy(), [("a", 1), ("b", 1)], Local(), num_envs=2))
    assert _no_workers_left()


# ----------------------------------------------------------------------------------------- the command
def test_cli_num_envs_writes_the_same_episodes(tmp_path, capsys):
    import yaml

    from embeval_cli import main

    suite = tmp_path / "suite"
    assert main(["act2answer", "items", "generate", "--out", str(suite), "--categories", "color", "--per-category", "3"]) == 0
    pol = tmp_path / "drift.yaml"  # a scripted policy moving the arm, so the records carry real motion
    pol.write_text(yaml.safe_dump({"id": "drift", "kind": "policy", "adapter": "scripted",
                                   "params": {"vector": [0.01, 0.01, -0.01, 0, 0, 0, 1]}}))
    ep = tmp_path / "ep.yaml"
    ep.write_text(yaml.safe_dump({"episode": {"max_steps": 3}}))
    base = ["act2answer", "run", "--items", str(suite / "items.jsonl"), "--policy", str(pol), "--episode", str(ep)]
    assert main(base + ["--out", str(tmp_path / "one")]) == 0
    assert main(base + ["--out", str(tmp_path / "three"), "--num-envs", "3"]) == 0
    out = capsys.readouterr().out
    assert "drift: 6 episodes -> " in out and "episodes/s, 3 environments)" in out
    one = (tmp_path / "one" / "episodes_drift.jsonl").read_text()
    assert one == (tmp_path / "three" / "episodes_drift.jsonl").read_text() and len(one.splitlines()) == 6
    for bad, why in (("0", "must lie in 1..64"), ("65", "must lie in 1..64"), ("two", "must be an integer in 1..64")):
        with pytest.raises(SystemExit) as ex:  # argparse: usage and one error line, exit 2
            main(base + ["--out", str(tmp_path / "bad"), "--num-envs", bad])
        assert ex.value.code == 2
        err = capsys.readouterr().err
        line = [ln for ln in err.splitlines() if "error:" in ln]
        assert len(line) == 1 and "--num-envs" in line[0] and why in line[0] and "Traceback" not in err
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_maniskill_episodes_equal_the_sequential_run(tmp_path):
    """ManiSkill3 (SAPIEN on the CPU, ~10 s to build an environment): two environments in one worker (each its own
    thread), the calling process's policy asked once per step for both; records equal the sequential run's."""
    pytest.importorskip("mani_skill")
    from embeval.subjects.scripted import ConstantPolicy

    its = generate_items(tmp_path, ["color"], per_category=1, seed=0)
    spec = EpisodeSpec(max_steps=3)
    drift = ConstantPolicy(vector=(0.01, 0.0, -0.01, 0, 0, 0, 1))
    seq = list(run_items(drift, its, spec, backend="maniskill"))
    prof = VectorProfile()
    vec = list(run_items_vector(drift, its, spec, backend="maniskill", num_envs=2, workers=1, profile=prof))
    assert records_equal(vec, seq) and [r.steps for r in vec] == [3, 3]
    assert prof.workers == 1 and prof.steps == 3 and prof.actions == 6


def test_ctrl_c_stops_the_run_and_its_workers(tmp_path):
    """A real SIGINT to `embeval act2answer run --num-envs 3` mid-run: exit 130 within seconds, no worker left."""
    import signal
    import subprocess
    import sys

    import psutil
    import yaml

    from embeval_cli import main

    suite = tmp_path / "suite"
    assert main(["act2answer", "items", "generate", "--out", str(suite), "--categories", "color", "--per-category", "30"]) == 0
    pol = tmp_path / "hold.yaml"
    pol.write_text(yaml.safe_dump({"id": "hold", "kind": "policy", "adapter": "scripted",
                                   "params": {"vector": [0, 0, 0, 0, 0, 0, 1]}}))
    cmd = [sys.executable, "-m", "embeval_cli", "act2answer", "run", "--items", str(suite / "items.jsonl"),
           "--policy", str(pol), "--num-envs", "3", "--out", str(tmp_path / "res")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509 - a shell's & ignores it
    try:
        me = psutil.Process(proc.pid)
        deadline = time.monotonic() + 120
        workers = []
        while time.monotonic() < deadline and len(workers) < 2:  # the two environment workers are up
            workers = [c for c in me.children() if "spawn_main" in " ".join(c.cmdline())]
            time.sleep(0.2)
        assert len(workers) == 2, me.children()
        time.sleep(1.5)  # episodes running
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    psutil.wait_procs(workers, timeout=10)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
