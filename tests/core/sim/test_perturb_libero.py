"""Scene perturbations on LIBERO beyond the camera and light axes: initial_state (the Panda's joints in
the worker's MuJoCo model, read back in degrees), instruction (LIBERO's language reworded) and table/background
textures (the model's texture bytes, read back as RMS contrast in %) and distractors (the task's model built with
extra blocks and cans, read back on the table top), each seeded, monotone in its level and restored when
unperturbed. LIBERO has no scripted expert, so solvability is checked as "no new contact, joints in
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


#: libero_spatial:0's task objects and fixtures (LIBERO's names)
OBJECTS = ("akita_black_bowl_1", "akita_black_bowl_2", "cookies_1", "glazed_rim_porcelain_ramekin_1", "plate_1",
           "wooden_cabinet_1", "flat_stove_1")
TABLE_Z = 0.9  # m, libero_spatial's table top (LIBERO's table_offset)


def _poses(task):
    return {n: task.object_pose(n)[0] for n in OBJECTS}


def test_libero_distractors_rest_on_the_table_clear_of_the_task(libero):
    """The drawn blocks and cans stand at their drawn place and yaw on the table top, clear of every task object
    (footprint + 5 cm), while LIBERO's initial state still sets the task's objects and the arm exactly."""
    from embeval.sim.perturb.distractors import (
        BLOCK,
        CAN,
        COUNT,
        RADIUS,
        _segment_distance,
    )

    task, clean, _ = libero
    task.reset(0, settle_steps=0)
    poses0, n_state = _poses(task), task.get_state().size
    prev = []
    for level in (1, 3):
        obs, drew = _reset(task, f"distractors:{level}")
        p = drew["distractors"]
        lo, hi = COUNT.range(level)
        assert lo <= p["count"] == len(p["objects"]) == len(task.placed) <= hi
        assert p["objects"][:len(prev)] == prev  # a higher level adds to the lower one's
        prev = p["objects"]
        for o, (name, xyz) in zip(p["objects"], task.placed.items()):
            assert name.endswith(o["kind"])
            np.testing.assert_allclose(xyz[:2], o["xy"], atol=1e-4)
            np.testing.assert_allclose(xyz[2], TABLE_Z + (BLOCK[2] if o["kind"] == "block" else CAN[1]) / 2, atol=1e-4)
            for c in task.distractor_view.keep_clear:
                assert _segment_distance(o["xy"], c[:2], c[2:4]) >= c[4] + RADIUS - 1e-9
        assert len(task.distractor_view.keep_clear) >= len(OBJECTS) + 2  # the objects, the goal's path, the robot
        now = _poses(task)
        for n in OBJECTS:
            np.testing.assert_array_equal(now[n], poses0[n])
        np.testing.assert_array_equal(obs.state["joint_positions"], clean.state["joint_positions"])
        assert task.get_state().size == n_state + 13 * 2 * 7  # 7 (block, can) pairs' free joints after LIBERO's
        assert np.abs(obs.images["agentview"].astype(int) - clean.images["agentview"].astype(int)).sum() > 0
    task.perturb = Perturbations.parse("distractors:2")
    try:
        task.reset(0)  # LIBERO's 10 settle steps: they stay put, resting
    finally:
        task.perturb = None
    for o, xyz in zip(task.perturbation["distractors"]["objects"], task.placed.values()):
        np.testing.assert_allclose(xyz[:2], o["xy"], atol=2e-3)
        assert abs(xyz[2] - TABLE_Z - (BLOCK[2] if o["kind"] == "block" else CAN[1]) / 2) < 1e-3


def test_libero_distractors_seeded_and_restored(libero):
    task, clean, _ = libero
    obs, drew = _reset(task, "distractors:2")
    again, drew2 = _reset(task, "distractors:2")
    assert drew2 == drew
    np.testing.assert_array_equal(again.images["agentview"], obs.images["agentview"])  # same seed, same scene
    _, other = _reset(task, "distractors:2", seed=1)
    assert other["distractors"]["objects"] != drew["distractors"]["objects"]
    back = task.reset(0, settle_steps=0)  # LIBERO's own model again: the clean start bit for bit
    np.testing.assert_array_equal(back.images["agentview"], clean.images["agentview"])
    np.testing.assert_array_equal(back.state["joint_positions"], clean.state["joint_positions"])
    assert task.get_state().size == 92 and task.placed == {}


def test_libero_distractors_keep_libero_success_check(libero):
    """LIBERO's own goal check (bowl on the plate) still judges the task's objects among the distractors."""
    task, _, _ = libero
    task.perturb = Perturbations.parse("distractors:3")
    try:
        task.reset(0, settle_steps=0)
        assert not task.success
        state = task.get_state()
        plate, _, _ = task.object_pose("plate_1")
        _, _, i = task.object_pose("akita_black_bowl_1")
        state[i:i + 3] = plate + [0.0, 0.0, 0.02]
        task.set_state(state)
        hits = [task.step_libero([0, 0, 0, 0, 0, 0, -1]).success for _ in range(8)]
    finally:
        task.perturb = None
    assert any(hits)


def test_libero_distractors_refused_in_one_line_without_room(libero):
    task, _, _ = libero
    with pytest.raises(ConfigError, match=r"distractors:5: scene 'libero_spatial:0' has room for \d distractor") as e:
        _reset(task, "distractors:5")
    assert "\n" not in str(e.value)


def test_visible_rect_of_a_camera_looking_down():
    """A camera 1 m above the table looking straight down (45 deg vertical FOV, square image) sees +-0.414 m
    around its foot; with a 10 % margin +-0.373 m, on a 2 cm grid."""
    from embeval.sim.libero.worker import visible_rect

    table = {"x": [-1.0, 1.0], "y": [-0.6, 0.6], "z": 0.9}
    rect = visible_rect(table, [0.2, 0.0, 1.9], [1.0, 0.0, 0.0, 0.0], 45.0, 1.0)
    half = np.tan(np.radians(22.5)) * 0.9
    (x0, x1), (y0, y1) = rect
    assert x0 >= 0.2 - half and x1 <= 0.2 + half and y0 >= -half and y1 <= half
    assert x1 - x0 > 2 * half - 0.05 and y1 - y0 > 2 * half - 0.05
    assert visible_rect(table, [0.0, 0.0, 0.5], [1.0, 0.0, 0.0, 0.0], 45.0, 1.0) is None  # under the table top


def test_distractor_scene_view_keeps_the_goal_path_and_robot_clear():
    from embeval.sim.libero.episodes import TABLE_MARGIN, distractor_scene_view
    from embeval.sim.perturb.distractors import (
        CLEARANCE,
        PATH_CLEARANCE,
        ROBOT_CLEARANCE,
    )

    view = {"table": {"x": [-0.5, 0.5], "y": [-0.6, 0.6], "z": 0.9, "visible": [[-0.7, 0.2], [-0.3, 0.3]]},
            "objects": {"bowl_1": [0.0, 0.1, 0.06], "wooden_cabinet_1": [0.1, -0.3, 0.2]},
            "colors": {"bowl_1": [0.9, 0.05, 0.05], "wooden_cabinet_1": [0.02, 0.02, 0.02]}, "robot_base": [-0.66, 0.0]}
    v = distractor_scene_view("t", view, [["in", "bowl_1", "wooden_cabinet_1_top_region"], ["open", "bowl_1"]])
    assert v.table_area == ((-0.5 + TABLE_MARGIN, 0.2), (-0.3, 0.3))
    assert v.keep_clear == ((0.0, 0.1, 0.0, 0.1, 0.06 + CLEARANCE), (0.1, -0.3, 0.1, -0.3, 0.2 + CLEARANCE),
                            (0.0, 0.1, 0.1, -0.3, 0.06 + PATH_CLEARANCE), (-0.66, 0.0, -0.66, 0.0, ROBOT_CLEARANCE))
    assert v.colors == ("black", "red")
