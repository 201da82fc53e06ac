"""Scene perturbations on ManiSkill beyond the camera and light axes: initial_state (the Panda's joints,
read back in degrees), instruction (the observation's words), table/background textures (the SAPIEN render
materials, read back as the texture's RMS contrast in %) and distractors (actors placed on the table, read back),
each seeded, monotone in its level, restored when unperturbed, and the task still solved by the scripted expert."""
from __future__ import annotations

import numpy as np
import pytest
from perturb_surface_checks import RenderedSpread, check_texture

from embeval.errors import ConfigError
from embeval.sim.perturb import Perturbations
from embeval.sim.perturb.initial_state import OFFSET
from embeval.sim.perturb.instruction import WORDS, keeps_task, words

pytest.importorskip("mani_skill")


@pytest.fixture(scope="module")
def ms():
    from embeval.sim.maniskill.env import ManiSkillConfig, ManiSkillEnv

    env = ManiSkillEnv(ManiSkillConfig("PickCube-v1", width=64, height=64))
    env.perturb = None
    clean = env.reset(0)
    yield env, clean
    env.close()


def _reset(env, words_, seed=0, **kw):
    env.perturb = Perturbations.parse(words_)
    try:
        return env.reset(seed, **kw), dict(env.perturbation)
    finally:
        env.perturb = None




def test_maniskill_initial_state_offsets_the_joints_by_the_drawn_degrees(ms):
    env, clean = ms
    q0 = clean.state["joint_positions"]
    z0 = clean.state["tcp_pose"][2]
    prev = np.zeros(7)
    for level in (1, 2, 3, 4, 5):
        obs, drew = _reset(env, f"initial_state:{level}")
        p = drew["initial_state"]
        off = np.asarray(p["offsets_deg"])
        assert "sign_patterns" not in p and p["level"] == level
        lo, hi = OFFSET.range(level)
        assert np.all((np.abs(off) >= lo) & (np.abs(off) <= hi))
        # the joints read back from SAPIEN moved by exactly the recorded offsets (deg), ManiSkill's own start kept
        np.testing.assert_allclose(np.degrees(obs.state["joint_positions"] - q0), off, atol=2e-3)
        assert np.all(np.abs(off) > prev)  # one seed: every joint's offset grows with the level
        prev = np.abs(off)
        assert obs.state["tcp_pose"][2] >= min(z0, p["min_tcp_z"]) - 1e-6
        assert not np.array_equal(obs.images["base_camera"], clean.images["base_camera"])  # the arm is seen moved
    again, drew2 = _reset(env, "initial_state:5")
    np.testing.assert_array_equal(again.state["joint_positions"], obs.state["joint_positions"])  # same seed, same state
    assert drew2 == drew
    _, other = _reset(env, "initial_state:5", seed=1)
    assert other["initial_state"]["offsets_deg"] != drew["initial_state"]["offsets_deg"]
    back = env.reset(0)
    np.testing.assert_array_equal(back.state["joint_positions"], q0)  # unperturbed: ManiSkill's own start
    assert env.perturbation == {}


def test_maniskill_initial_state_refuses_when_no_pattern_fits(ms, monkeypatch):
    """A draw whose every sign pattern leaves the joint limits is refused in one line; the arm is left as it was."""
    from embeval.sim.maniskill import env as ms_env

    env, clean = ms
    real = ms_env._MS_APPLY["initial_state"]
    monkeypatch.setitem(ms_env._MS_APPLY, "initial_state",
                        lambda e, c, li, p, s: real(e, c, li, {**p, "magnitudes_deg": [400.0] * 7}, s))
    with pytest.raises(ConfigError, match=r"initial_state:2: no seeded joint offset .*use a lower level") as e:
        _reset(env, "initial_state:2")
    assert "\n" not in str(e.value)
    np.testing.assert_allclose(env.observe().state["joint_positions"], clean.state["joint_positions"], atol=1e-6)


@pytest.mark.parametrize("words_,drawn", [
    ("initial_state:5", lambda p: max(abs(v) for v in p["initial_state"]["offsets_deg"]) >= 10),
    ("distractors:5", lambda p: p["distractors"]["count"] >= 6),
])
def test_maniskill_expert_solves_pickcube_under_state_axes(ms, words_, drawn):
    """The scripted expert (privileged state) still solves PickCube at level 5 of each start-state axis."""
    env, _ = ms
    env.perturb = Perturbations.parse(words_)
    try:
        for seed in (0, 1):
            obs = env.reset(seed)
            assert drawn(env.perturbation)
            expert = env.expert()
            while not env.done:
                obs = env.step(expert.act(obs)).observation
            assert env.success(), f"{words_} seed {seed}: {env.reason}"
    finally:
        env.perturb = None


def test_maniskill_instruction_rewords_what_the_policy_reads(ms):
    env, clean = ms
    original = clean.instruction
    for level in (1, 3, 5):
        obs, drew = _reset(env, f"instruction:{level}")
        lo, hi = WORDS.range(level)
        assert obs.instruction == drew["instruction"]["instruction"] != original
        assert lo <= len(words(obs.instruction)) - len(words(original)) == drew["instruction"]["words_added"] <= hi
        assert keeps_task(obs.instruction, original)
        np.testing.assert_array_equal(obs.images["base_camera"], clean.images["base_camera"])  # the world is unchanged
        np.testing.assert_array_equal(obs.state["joint_positions"], clean.state["joint_positions"])
    obs, drew = _reset(env, "instruction:2", instruction="push the cube to the left")
    assert "push the cube to the left" in obs.instruction.lower()
    assert env.reset(0).instruction == original


@pytest.mark.parametrize("axis,surface", [("table_texture", "table"), ("background_texture", "background")])
def test_maniskill_textures_have_the_drawn_contrast_and_restore(ms, axis, surface):
    env, clean = ms
    spread = RenderedSpread(clean.images["base_camera"])
    for level in (1, 3, 5):
        obs, drew = _reset(env, f"{axis}:{level}")
        p = drew[axis]
        mats = env._scene_base["materials"][surface]
        assert mats, f"PickCube has a textured {surface}"
        for m, _tex, _color in mats:  # the texture SAPIEN renders: the drawn contrast around the surface's mean colour
            check_texture(np.asarray(m.base_color_texture.download()), p)
            assert list(m.base_color) == [1.0, 1.0, 1.0, 1.0]
        spread.add(obs.images["base_camera"], p["contrast_pct"])
        np.testing.assert_array_equal(obs.state["joint_positions"], clean.state["joint_positions"])  # image axis only
    spread.check_grows()
    again, _ = _reset(env, f"{axis}:5")
    np.testing.assert_array_equal(again.images["base_camera"], obs.images["base_camera"])  # same seed, same image
    np.testing.assert_array_equal(env.reset(0).images["base_camera"], clean.images["base_camera"])  # restored exactly


def test_maniskill_every_axis_composes(ms):
    """All of ManiSkill's axes at once: each is applied as alone (joint offsets, texture contrast, instruction)."""
    env, clean = ms
    obs, drew = _reset(env, "camera_pose:2,light_intensity:2,table_texture:3,initial_state:3,instruction:3,distractors:2")
    tex = [np.asarray(m.base_color_texture.download()) for m, _t, _c in env._scene_base["materials"]["table"]]
    alone, drew_alone = _reset(env, "initial_state:3")
    assert drew["initial_state"] == drew_alone["initial_state"]
    np.testing.assert_array_equal(obs.state["joint_positions"], alone.state["joint_positions"])
    assert obs.instruction == drew["instruction"]["instruction"]
    assert set(drew) == {"camera_pose", "light_intensity", "table_texture", "initial_state", "instruction", "distractors"}
    for t in tex:
        check_texture(t, drew["table_texture"])
    np.testing.assert_array_equal(env.reset(0).images["base_camera"], clean.images["base_camera"])


def test_maniskill_distractors_placed_clear_of_the_task_and_removed(ms):
    """distractors: the level's count of blocks and cans on the table top at the recorded places (world frame, the
    table at z = 0), in the recorded colours (none of the task's), clear of the cube, the goal and the cube's path;
    one seed keeps its objects as the level rises; an unperturbed reset parks them all (the clean image again)."""
    from embeval.sim.maniskill.env import _render_shapes
    from embeval.sim.maniskill.runtime import _np
    from embeval.sim.perturb.distractors import COUNT, RADIUS, _segment_distance
    from embeval.sim.scene import COLORS

    env, clean = ms
    prev = []
    for level in (1, 3, 5):
        obs, drew = _reset(env, f"distractors:{level}")
        objs = drew["distractors"]["objects"]
        lo, hi = COUNT.range(level)
        assert lo <= len(objs) == drew["distractors"]["count"] <= hi
        assert objs[:len(prev)] == prev  # a higher level adds to the lower one's
        prev = objs
        view = env._distractor_view()
        assert "red" in view["colors"]  # PickCube's cube
        for d, (block, can) in zip(objs, env._distractors):
            actor = block if d["kind"] == "block" else can
            xyz = _np(actor.pose.p).reshape(-1)
            np.testing.assert_allclose(xyz[:2], d["xy"], atol=1e-6)
            assert 0 < xyz[2] < 0.03  # standing on the table top
            assert d["color"] not in view["colors"]
            assert list(_render_shapes(actor)[0].material.base_color) == pytest.approx(list(COLORS[d["color"]]))
            for ax, ay, bx, by, r in view["keep_clear"]:
                assert _segment_distance(d["xy"], (ax, ay), (bx, by)) >= r + RADIUS - 1e-4  # xy kept to 0.1 mm
        assert not np.array_equal(obs.images["base_camera"], clean.images["base_camera"])
        np.testing.assert_array_equal(obs.state["joint_positions"], clean.state["joint_positions"])
    again, _ = _reset(env, "distractors:5")
    np.testing.assert_array_equal(again.images["base_camera"], obs.images["base_camera"])  # same seed, same scene
    back = env.reset(0)
    np.testing.assert_array_equal(back.images["base_camera"], clean.images["base_camera"])
    assert all(np.linalg.norm(_np(a.pose.p).reshape(-1)[:2]) > 5 for pair in env._distractors for a in pair)


def test_maniskill_implements_every_axis():
    from embeval.sim.perturb import AXES
    from embeval.sim.perturb.backends import check, supported

    assert set(supported("maniskill")) == set(AXES.names())
    assert check(Perturbations.parse(",".join(f"{a}:1" for a in AXES.names())), "maniskill") is not None


def test_maniskill_episode_outcome_records_what_was_drawn(ms):
    """An episode's outcome carries the perturbation its reset drew (as LIBERO's does), so a run's records say which
    scene each episode saw."""
    from embeval.sim.maniskill.backend import ManiSkillEpisodes

    env, _ = ms
    episodes = object.__new__(ManiSkillEpisodes)  # the module's env, not a second build
    episodes.env = env
    env.perturb = Perturbations.parse(["camera_pose:2", "initial_state:1"])
    try:
        env.reset(3)
        extra = episodes.outcome(0).extra
    finally:
        env.perturb = None
    assert set(extra["perturbation"]) == {"camera_pose", "initial_state"} and extra["perturbation"] == env.perturbation
    env.reset(3)
    assert episodes.outcome(0).extra["perturbation"] == {}
