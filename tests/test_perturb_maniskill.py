"""Scene perturbations on ManiSkill beyond the camera and light axes (issue 30): initial_state (the Panda's joints,
read back in degrees), instruction (the observation's words) and table/background textures (the SAPIEN render
materials, read back as the texture's RMS contrast in %), each seeded, monotone in its level, restored when
unperturbed, and the task still solved by the scripted expert."""
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


def test_maniskill_expert_solves_pickcube_under_initial_state_5(ms):
    env, _ = ms
    env.perturb = Perturbations.parse("initial_state:5")
    try:
        for seed in (0, 1):
            obs = env.reset(seed)
            assert max(abs(v) for v in env.perturbation["initial_state"]["offsets_deg"]) >= 10
            expert = env.expert()
            while not env.done:
                obs = env.step(expert.act(obs)).observation
            assert env.success(), f"seed {seed}: {env.reason}"
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
    obs, drew = _reset(env, "camera_pose:2,light_intensity:2,table_texture:3,initial_state:3,instruction:3")
    tex = [np.asarray(m.base_color_texture.download()) for m, _t, _c in env._scene_base["materials"]["table"]]
    alone, drew_alone = _reset(env, "initial_state:3")
    assert drew["initial_state"] == drew_alone["initial_state"]
    np.testing.assert_array_equal(obs.state["joint_positions"], alone.state["joint_positions"])
    assert obs.instruction == drew["instruction"]["instruction"]
    assert set(drew) == {"camera_pose", "light_intensity", "table_texture", "initial_state", "instruction"}
    for t in tex:
        check_texture(t, drew["table_texture"])
    np.testing.assert_array_equal(env.reset(0).images["base_camera"], clean.images["base_camera"])


def test_maniskill_distractors_refused_in_one_line():
    from embeval.sim.perturb.backends import check

    with pytest.raises(ConfigError, match="distractors:1: not implemented on maniskill: .*reconfigure") as e:
        check(Perturbations.parse("distractors:1"), "maniskill")
    assert "\n" not in str(e.value)
