"""LIBERO-PRO's variant suites as a family beside embeval's axes: pairing with the base task's seed, the
family column, refusals; one real LIBERO run (shared by its tests) where .venv-libero is installed."""
from __future__ import annotations

import json

import numpy as np
import pytest

from embeval.action import Action, Observation
from embeval.errors import ConfigError
from embeval.scoring.execution import ExecutionOutcome
from embeval.sim.libero import libero_python
from embeval.sim.libero.pro import FAMILY, PAIRED_VARIANTS, FamilyStudy, score_family

needs_libero = pytest.mark.skipif(not libero_python().is_file(),
                                  reason=f"LIBERO's interpreter {libero_python()} is missing: run scripts/install_libero.sh")


class FakeLibero:
    """An episode env standing in for one LIBERO task: the variant ``swap`` fails on odd seeds and ends 3 cm off;
    the first image's brightness is the seed (so the policy's first action depends on it)."""

    def __init__(self, spec):
        self.spec, self.cameras, self.instruction = spec, ("agentview",), "put the bowl on the plate"
        suite, _, tid = spec.env.partition(":")
        self.suite, self.tid = suite, int(tid)
        self.env = type("Inner", (), {"perturb": None, "perturbation": {}, "info": {"task": f"task_{tid}"}})()
        self.n, self.closed = 0, False
        OPENED.append(spec.env)

    def reset(self, seed, distortion=None):
        from embeval.errors import NotApplicableError

        axes = [p.axis for p in (self.env.perturb or ())]
        if self.suite == "libero_object" and "table_texture" in axes:  # a floor scene, as LIBERO-Object's
            raise NotApplicableError("perturb table_texture: this LIBERO scene has no textured table surface to retexture")
        self.seed, self.n = seed, 0
        self.first = Observation({"agentview": np.full((4, 4, 3), seed * 10 + ("swap" in self.suite) * 50, np.uint8)},
                           self.instruction)
        return self.first

    def step(self, action):
        from types import SimpleNamespace

        self.n += 1
        return SimpleNamespace(observation=self.first)

    @property
    def done(self):
        return self.n >= 2

    def outcome(self, n_actions):
        bad = self.suite.endswith("_swap") and self.seed % 2 == 1
        return ExecutionOutcome(final_tcp_pose=(0.03 if bad else 0.0, 0, 0, 0, 0, 0), success=not bad, stopped=False,
                                n_actions=n_actions)

    def close(self):
        self.closed = True


OPENED: list[str] = []


class Bright:
    """Moves along x by the first image's mean brightness / 1000 m."""

    id = "bright"

    def reset(self, instruction):
        pass

    def act(self, obs):
        return Action(np.array([obs.images["agentview"].mean() / 1000, 0, 0, 0, 0, 0, 1.0]))


def test_variants_pair_with_the_base_task_of_the_same_id_and_seed():
    OPENED.clear()
    study = FamilyStudy("libero_goal", (3,), (0, 1, 2, 3), variants=("swap", "lan"))
    rows = score_family(study, {"bright": Bright()}, make_env=FakeLibero)
    assert OPENED == ["libero_goal:3", "libero_goal_swap:3", "libero_goal_lan:3"]  # one worker at a time, base first
    swap = [r for r in rows if r["axis"] == "libero_goal_swap"]
    assert [(r["family"], r["kind"], r["level"], r["seed"], r["task"]) for r in swap] == \
        [(FAMILY, "suite", 0, s, "libero_goal:3") for s in range(4)]
    assert [r["success"] for r in swap] == [True, False, True, False] and all(r["reference_success"] for r in swap)
    assert [r["execution"] for r in swap] == pytest.approx([100.0, 97.0, 100.0, 97.0])  # 100 - 3 cm off
    assert all(r["decision"] < 1.0 for r in swap)  # another first image, another first action
    lan = [r for r in rows if r["axis"] == "libero_goal_lan"]
    assert all(r["decision"] == 1.0 and r["execution"] == 100.0 for r in lan)  # same images: same actions
    assert lan[0]["perturbation"] == {"variant": "lan", "suite": "libero_goal_lan", "task": "task_3",
                                      "base_task": "task_3"}

    from embeval_analysis.perturb import sensitivity, sensitivity_markdown

    sens = {r.axis: r for r in sensitivity(rows)}
    assert sens["libero_goal_swap"].success_change == -0.5 and sens["libero_goal_swap"].family == FAMILY
    md = sensitivity_markdown(list(sens.values()))
    assert "| bright | LIBERO-PRO | suite | libero_goal_swap | - | 4 |" in md


def test_an_axis_a_scene_cannot_take_is_skipped_and_said():
    """A table texture on a floor scene: those cells are not scored, the rest of the study is, and the skip is
    reported (task, axis, level, seed, reason); without a ``skipped`` list it stops the study as before."""
    from embeval.errors import NotApplicableError
    from embeval.sim.perturb.score import skipped_lines

    study = FamilyStudy("libero_object", (0,), (0, 1), variants=("swap",), axes=("table_texture", "light_intensity"),
                        levels=(3, 5))
    skipped, seen = [], []
    rows = score_family(study, {"bright": Bright()}, make_env=FakeLibero, progress=seen.append, skipped=skipped)
    assert [(r["axis"], r["level"], r["seed"]) for r in rows if r["family"] == "embeval"] == [
        ("light_intensity", 3, 0), ("light_intensity", 5, 0), ("light_intensity", 3, 1), ("light_intensity", 5, 1)]
    assert [r["axis"] for r in rows if r["family"] == FAMILY] == ["libero_object_swap"] * 2
    assert [(s["subject"], s["task"], s["axis"], s["level"], s["seed"]) for s in skipped] == [
        ("bright", "libero_object:0", "table_texture", lv, sd) for sd in (0, 1) for lv in (3, 5)]
    assert len(seen) == study.episodes  # a skipped cell still moves the progress bar
    assert skipped_lines(skipped) == [
        f"table_texture:{lv} on libero_object:0: not scored in 2 episode(s): perturb table_texture: this LIBERO scene "
        "has no textured table surface to retexture" for lv in (3, 5)]
    with pytest.raises(NotApplicableError, match="no textured table surface"):
        score_family(study, {"bright": Bright()}, make_env=FakeLibero)


def test_family_study_refusals_are_one_line():
    from dataclasses import replace

    from embeval.sim.backend import SIM_BACKENDS, get_sim_backend

    # an axis LIBERO does not apply is refused with its backend record's reason (whichever axes that lists today)
    rec = get_sim_backend("libero")
    SIM_BACKENDS.register_record(replace(rec, perturb_unsupported={**rec.perturb_unsupported, "distractors": "a reason"}))
    try:
        for kwargs, msg in [(dict(suite="libero_90"), "not a base suite LIBERO-PRO varies"),
                            (dict(variants=("object_ood",)), "do not map one to one"),
                            (dict(variants=("nope",)), "choose from swap, object, lan, env, task, temp"),
                            (dict(variants=(), axes=("distractors",)), "not implemented on libero: a reason"),
                            (dict(variants=(), axes=()), "nothing to score")]:
            args = dict(suite="libero_goal", task_ids=(0,), seeds=(0,), **{k: v for k, v in kwargs.items() if k != "suite"})
            args["suite"] = kwargs.get("suite", "libero_goal")
            with pytest.raises(ConfigError, match=msg) as e:
                FamilyStudy(**args)
            assert "\n" not in str(e.value)
    finally:
        SIM_BACKENDS.register_record(rec)
    assert set(PAIRED_VARIANTS) == {"swap", "object", "lan", "env", "task", "temp"}


def test_cli_libero_refusals(capsys):
    from embeval_cli import main

    for argv, msg in [(["--task", "libero_goal"], "SUITE:TASK_ID"),
                      (["--task", "libero_goal:3-1"], "--task SUITE:IDS"),
                      (["--task", "libero_goal:0", "--subjects", "expert"], "no scripted expert"),
                      (["--task", "libero_goal:0", "--distortions", "jpeg"], "pybullet-only")]:
        assert main(["perturb", "score", "--backend", "libero", *argv]) == 2
        assert msg in capsys.readouterr().err
    assert main(["perturb", "score", "--variants", "swap"]) == 2
    assert "belong to --backend libero" in capsys.readouterr().err


# --------------------------------------------------------------------------- LIBERO itself (one shared run)
@pytest.fixture(scope="module")
def libero_run(tmp_path_factory):
    """One CLI run: libero_goal:0, initial state 0, light_intensity:5 and the swap and lan variants, 3 steps each,
    the policy holding still (three LIBERO workers, built one after the other)."""
    from embeval_cli import main

    out = tmp_path_factory.mktemp("libero_pro")
    rc = main(["perturb", "score", "--backend", "libero", "--task", "libero_goal:0", "--seeds", "0",
               "--axes", "light_intensity", "--levels", "5", "--variants", "swap", "lan", "--max-steps", "3",
               "--width", "32", "--height", "32", "--out", str(out / "o"), "--json", str(out / "rows.json")])
    return rc, out


@needs_libero
def test_libero_family_rows_beside_the_axes(libero_run, capsys):
    rc, out = libero_run
    assert rc == 0
    rows = json.loads((out / "rows.json").read_text())
    assert [(r["family"], r["axis"], r["level"]) for r in rows] == [
        ("embeval", "light_intensity", 5), (FAMILY, "libero_goal_swap", 0), (FAMILY, "libero_goal_lan", 0)]
    light = rows[0]
    assert light["perturbation"]["light_intensity"]["level"] == 5 and light["subject"] == "hold"
    for r in rows:  # holding still: the same first action everywhere, no success in 3 steps
        assert r["decision"] == pytest.approx(1.0) and r["success"] is False and r["reference_success"] is False
    assert rows[1]["perturbation"]["task"] == rows[1]["perturbation"]["base_task"]  # the same task at id 0
    md = (out / "o" / "sensitivity.md").read_text()
    assert "| family | kind | axis | level |" in md and "| LIBERO-PRO | suite | libero_goal_swap | - | 1 |" in md


@needs_libero
def test_libero_floor_scene_skips_the_table_texture_and_goes_on(tmp_path, capsys):
    """LIBERO-Object's scenes stand on a floor, with no table to retexture: the table_texture cells are reported as
    not scored, the worker takes the next episodes, and light_intensity and the variant are scored."""
    from embeval_cli import main

    out = tmp_path / "o"
    rc = main(["perturb", "score", "--backend", "libero", "--task", "libero_object:0", "--seeds", "0-1",
               "--axes", "table_texture", "light_intensity", "--levels", "5", "--variants", "swap", "--max-steps", "3",
               "--width", "32", "--height", "32", "--out", str(out), "--json", str(tmp_path / "rows.json")])
    text = capsys.readouterr().out
    assert rc == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert sorted((r["axis"], r["seed"]) for r in rows) == [
        ("libero_object_swap", 0), ("libero_object_swap", 1), ("light_intensity", 0), ("light_intensity", 1)]
    assert "- table_texture:5 on libero_object:0: not scored in 2 episode(s): perturb table_texture: scene " \
           "'libero_object:0' has no table surface to retexture" in text
    skipped = json.loads((out / "not_applicable.json").read_text())
    assert [(s["axis"], s["level"], s["seed"], s["task"]) for s in skipped] == [
        ("table_texture", 5, 0, "libero_object:0"), ("table_texture", 5, 1, "libero_object:0")]


def test_worker_not_applicable_reply_is_its_own_error(tmp_path):
    """The worker's ``kind: not_applicable`` reply (a scene that cannot take a perturbation) reaches the caller as
    NotApplicableError, which a study skips; ``kind: config`` stays a plain ConfigError, which stops it."""
    import sys

    from embeval.errors import NotApplicableError
    from embeval.sim.libero.client import LiberoWorker

    fake = tmp_path / "fake_worker.py"  # speaks the worker's framing; refuses by the op's name
    fake.write_text(
        "import sys\n"
        "from embeval.sim.libero.worker import read_frame, write_frame\n"
        "out, inp = sys.stdout.buffer, sys.stdin.buffer\n"
        "write_frame(out, {'ok': True, 'ready': True})\n"
        "while True:\n"
        "    try:\n"
        "        req, _ = read_frame(inp)\n"
        "    except EOFError:\n"
        "        break\n"
        "    kind = {'reset': 'not_applicable', 'make': 'config'}.get(req['op'])\n"
        "    write_frame(out, {'ok': False, 'kind': kind, 'error': 'refused ' + req['op']} if kind else {'ok': True})\n"
        "    if req['op'] == 'close':\n"
        "        break\n")
    py = tmp_path / "python"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {fake}\n")  # LiberoWorker runs `python WORKER`; WORKER is ignored
    py.chmod(0o755)
    w = LiberoWorker(python=py)
    try:
        with pytest.raises(NotApplicableError, match="refused reset"):
            w.call("reset", init_index=0)
        with pytest.raises(ConfigError, match="refused make") as e:
            w.call("make", suite="x")
        assert not isinstance(e.value, NotApplicableError)
        assert w.call("ping")[0] == {}  # the worker goes on after both
    finally:
        w.close()
