"""LIBERO-PRO's variant suites as a family beside embeval's axes (issue 30): pairing with the base task's seed, the
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


def test_family_study_refusals_are_one_line(monkeypatch):
    from embeval.sim.perturb import backends

    # an axis LIBERO does not apply is refused with backends.UNSUPPORTED's reason (whichever axes that lists today)
    monkeypatch.setitem(backends.UNSUPPORTED, "libero", {**backends.UNSUPPORTED["libero"], "distractors": "a reason"})
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
