"""Scene perturbations on LIBERO beyond the camera and light axes (issue 30): initial_state (the Panda's joints in
the worker's MuJoCo model, read back in degrees), instruction (LIBERO's language reworded) and table/background
textures (the model's texture bytes, read back as RMS contrast in %), each seeded, monotone in its level and
restored when unperturbed. LIBERO has no scripted expert, so solvability is checked as "no new contact, joints in
range, TCP above the table", not by a solved episode."""
from __future__ import annotations

import numpy as np
import pytest
from perturb_surface_checks import RenderedSpread, check_texture, contrast_pct

from embeval.errors import ConfigError
from embeval.sim.perturb import Perturbations
from embeval.sim.perturb.initial_state import OFFSET
from embeval.sim.perturb.instruction import WORDS, keeps_task, words


@pytest.fixture(scope="module")
def libero():
    from embeval.sim.libero import libero_python

    if not libero_python().is_file():
        pytest.skip("LIBERO is not installed (.venv-libero): run scripts/install_libero.sh")
    from embeval.sim.libero.episodes import LiberoTask

    task = LiberoTask("libero_spatial:0", 64, 64, cameras=("agentview",), max_steps=0, render_mode="fast",
                      hard_reset=False)  # soft resets: the worker restores what it changed itself
    task.perturb = None
    clean = task.reset(0, settle_steps=0)
    yield task, clean, task.scene_params()
    task.close()


def _reset(task, words_, seed=0):
    task.perturb = Perturbations.parse(words_)
    try:
        return task.reset(seed, settle_steps=0), dict(task.perturbation)
    finally:
        task.perturb = None




def test_libero_initial_state_offsets_the_joints_by_the_drawn_degrees(libero):
    task, clean, _ = libero
    q0 = clean.state["joint_positions"]
    prev = np.zeros(7)
    for level in (1, 3, 5):
        obs, drew = _reset(task, f"initial_state:{level}")
        p = drew["initial_state"]
        off = np.asarray(p["offsets_deg"])
        assert "sign_patterns" not in p and len(off) == 7
        lo, hi = OFFSET.range(level)
        assert np.all((np.abs(off) >= lo) & (np.abs(off) <= hi))
        # robosuite's robot0_joint_pos after LIBERO's initial state: moved by exactly the recorded offsets (deg)
        np.testing.assert_allclose(np.degrees(obs.state["joint_positions"] - q0), off, atol=1e-6)
        assert np.all(np.abs(off) > prev)
        prev = np.abs(off)
        assert not np.array_equal(obs.images["agentview"], clean.images["agentview"])
    again, drew2 = _reset(task, "initial_state:5")
    np.testing.assert_array_equal(again.state["joint_positions"], obs.state["joint_positions"])  # same seed, same state
    assert drew2 == drew
    _, other = _reset(task, "initial_state:5", seed=1)
    assert other["initial_state"]["offsets_deg"] != drew["initial_state"]["offsets_deg"]
    back = task.reset(0, settle_steps=0)
    np.testing.assert_array_equal(back.state["joint_positions"], q0)
    np.testing.assert_array_equal(back.images["agentview"], clean.images["agentview"])


def test_libero_initial_state_holds_through_the_settle_steps(libero):
    """LIBERO's 10 "do nothing" steps after the offset: the offset posture is the controller's rest posture, so the
    arm holds it (joints within 0.1 deg, hand within 1 mm) instead of drifting back."""
    task, clean, _ = libero
    task.perturb = Perturbations.parse("initial_state:4")
    try:
        at_once = task.reset(0, settle_steps=0)
        settled = task.reset(0)
    finally:
        task.perturb = None
    np.testing.assert_allclose(np.degrees(settled.state["joint_positions"] - at_once.state["joint_positions"]), 0, atol=0.1)
    assert np.linalg.norm(settled.state["tcp_pose"][:3] - at_once.state["tcp_pose"][:3]) < 1e-3
    assert np.linalg.norm(settled.state["tcp_pose"][:3] - clean.state["tcp_pose"][:3]) > 0.05  # the hand starts elsewhere


def test_libero_instruction_rewords_libero_language(libero):
    task, clean, _ = libero
    original = task.info["instruction"]
    assert clean.instruction == original
    for level in (1, 3, 5):
        obs, drew = _reset(task, f"instruction:{level}")
        lo, hi = WORDS.range(level)
        assert obs.instruction == task.instruction == drew["instruction"]["instruction"] != original
        assert lo <= len(words(obs.instruction)) - len(words(original)) <= hi
        assert keeps_task(obs.instruction, original)
        np.testing.assert_array_equal(obs.images["agentview"], clean.images["agentview"])
    assert task.reset(0, settle_steps=0).instruction == original


@pytest.mark.parametrize("axis,surface", [("table_texture", "table"), ("background_texture", "background")])
def test_libero_textures_have_the_drawn_contrast_and_restore(libero, axis, surface):
    task, clean, base = libero
    keys = sorted(k for k in base if k.startswith(f"tex_{surface}_"))
    assert keys, f"libero_spatial:0 has a textured {surface}"
    spread = RenderedSpread(clean.images["agentview"])
    for level in (1, 3, 5):
        obs, drew = _reset(task, f"{axis}:{level}")
        p = drew[axis]
        np.testing.assert_allclose(p["mean_rgb"], task.info["surfaces"][surface])
        now = task.scene_params()
        for k in keys:  # the model's texture bytes: the drawn contrast (%) around the surface's mean colour
            check_texture(now[k], p)
        others = [k for k in base if k.startswith("tex_") and k not in keys]
        for k in others:
            np.testing.assert_array_equal(now[k], base[k])  # the other surface is untouched
        spread.add(obs.images["agentview"], p["contrast_pct"])
        np.testing.assert_array_equal(obs.state["joint_positions"], clean.state["joint_positions"])
    spread.check_grows()
    again, _ = _reset(task, f"{axis}:5")
    np.testing.assert_array_equal(again.images["agentview"], obs.images["agentview"])
    back = task.reset(0, settle_steps=0)
    np.testing.assert_array_equal(back.images["agentview"], clean.images["agentview"])  # restored exactly
    for k in keys:
        np.testing.assert_array_equal(task.scene_params()[k], base[k])


def test_libero_axes_compose(libero):
    task, clean, _ = libero
    obs, drew = _reset(task, "camera_pose:2,light_intensity:2,table_texture:2,initial_state:2,instruction:2")
    assert set(drew) == {"camera_pose", "light_intensity", "table_texture", "initial_state", "instruction"}
    np.testing.assert_allclose(np.degrees(obs.state["joint_positions"] - clean.state["joint_positions"]),
                               drew["initial_state"]["offsets_deg"], atol=1e-6)
    assert obs.instruction == drew["instruction"]["instruction"]
    assert contrast_pct(task.scene_params()["tex_table_0"]) == pytest.approx(drew["table_texture"]["contrast_pct"], abs=1.0)
    back = task.reset(0, settle_steps=0)
    np.testing.assert_array_equal(back.images["agentview"], clean.images["agentview"])


def test_libero_distractors_refused_in_one_line():
    from embeval.sim.perturb.backends import check

    with pytest.raises(ConfigError, match="distractors:3: not implemented on libero: .*MJCF") as e:
        check(Perturbations.parse("distractors:3"), "libero")
    assert "\n" not in str(e.value)
