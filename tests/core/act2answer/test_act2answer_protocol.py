"""The Act2Answer reference protocol in the UR5 cell: the cube starts in the gripper, the gripper is held
closed for the first steps, both success rules and the intent metrics are in every record; the earlier
table start and disc rule stay as named options."""
import math

import pytest

from embeval.act2answer.episode import run_episode, sim_config
from embeval.act2answer.generator import generate_items
from embeval.act2answer.protocol import IntentTracker, answer, held_action
from embeval.act2answer.reference_policies import ExpertPolicy, ScriptedPlacer
from embeval.act2answer.scene import EpisodeSpec
from embeval.errors import ConfigError


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from embeval.sim import SimEnv

    items = generate_items(tmp_path_factory.mktemp("a2a"), ["color"], per_category=1, seed=0)
    env = SimEnv(sim_config(64, 48))
    yield items[0], env
    env.close()


def test_defaults_are_the_reference_numbers():
    s = EpisodeSpec()
    assert (s.start, s.rule, s.max_steps, s.hold_steps, s.board_margin) == ("grasped", "board", 80, 25, 0.08)
    with pytest.raises(ConfigError, match="start must be one of"):
        EpisodeSpec(start="floor")
    with pytest.raises(ConfigError, match="hold_steps must be a whole number"):
        EpisodeSpec(hold_steps=-1)
    with pytest.raises(ConfigError, match="grown extents .* overlap"):  # 7 cm cards 15 cm apart with the 8 cm margin
        EpisodeSpec(left_card_xy=(0.36, 0.105), right_card_xy=(0.36, -0.045), card_size=0.07, eps=0.05)


def test_board_and_disc_rules_differ_where_they_should():
    s = EpisodeSpec()  # cards (0.55, +-0.15), 12 cm; board reach 0.06 + 0.08 = 0.14 m per axis, disc 0.08 m
    corner = (0.55 + 0.13, 0.15 + 0.13, 0.02)  # inside the grown square, 18 cm from the centre
    a = answer(corner, s, "left")
    assert (a.zone, a.success_board, a.success_disc, a.is_answered) == ("correct", 1.0, 0.0, True)
    assert math.isclose(a.distance_correct, math.hypot(0.13, 0.13), abs_tol=1e-9)
    assert answer(corner, EpisodeSpec(rule="disc"), "left").zone == "out_of_bounds"
    assert answer((0.55, 0.15 + 0.13, 0.02), s, "right").zone == "incorrect"
    held_above = (0.45, 0.0, 0.30)  # where the cube waits in the gripper: on neither card
    assert not answer(held_above, s, "left").is_answered
    sunk = (0.55, 0.15, -0.05)  # below the card's top (fell off the table): not on it
    assert answer(sunk, s, "left").success_board == 0.0 and answer(sunk, s, "left").success_disc == 1.0


def test_hold_forces_the_gripper_closed_only_in_the_first_steps():
    s = EpisodeSpec()
    assert held_action([0.01, 0, 0, 0, 0, 0, 1.0], 24, s) == [0.01, 0, 0, 0, 0, 0, 0.0]
    assert held_action([0.01, 0, 0, 0, 0, 0, 1.0], 25, s) is None
    assert held_action([0.01, 0, 0, 0, 0, 0, 0.0], 3, s) is None  # already closed: the policy's own
    assert held_action([0, 0, 0, 0, 0, 0, 1.0], 0, EpisodeSpec(start="table")) is None


def test_intent_tracker_counts_steps_over_the_target():
    s = EpisodeSpec()
    t = IntentTracker(s, "right", control_hz=10)
    path = [(0.45, 0.0, 0.3)] + [(0.55, -0.15, 0.1)] * 30 + [(0.55, -0.15, 0.1)]
    for k, p in enumerate(path):
        t.update(p, holding=k < len(path) - 1)
    m = t.metrics()
    assert m["tcp_first_enter_target_t"] == 2 and m["tcp_first_enter_wrong_t"] is None and m["tcp_first_choice_correct"]
    assert m["tcp_dwell_target_steps"] == 31 and m["tcp_dwell_target_consec_max"] == 31 and m["tcp_dwell_target_3s"]
    assert m["tcp_min_dist_target_xy"] == 0.0 and m["tcp_closer_to_target_than_wrong"]
    assert m["release_near_target"] and m["released"] and m["tcp_correct_side_frac"] == pytest.approx(31 / 32, abs=1e-4)
    assert m["tcp_net_progress"] == pytest.approx(math.hypot(0.1, 0.15), abs=1e-4)


def test_zero_actions_keep_the_cube_in_the_gripper(setup):
    from embeval.subjects.scripted import ConstantPolicy

    item, env = setup
    r = run_episode(env, ConstantPolicy(vector=(0,) * 7), item, "original", EpisodeSpec(), seed=1, keep_actions=False)
    assert env.cell.grasp is not None and env.cell.grasp.body.name == "cube"  # still held after 80 steps
    assert (r.start, r.steps, r.end_reason, r.rule) == ("grasped", 80, "max_steps", "board")
    assert (r.success, r.success_board, r.success_disc, r.is_answered, r.zone) == (0.0, 0.0, 0.0, False, "out_of_bounds")
    assert r.intent["released"] is False and r.intent["tcp_dwell_target_steps"] == 0
    d = r.to_dict()
    assert {"start", "is_answered", "success_board", "success_disc", "success", "intent"} <= set(d)


def test_an_open_gripper_is_held_closed_for_the_hold_steps(setup):
    from embeval.subjects.scripted import ConstantPolicy

    item, env = setup
    r = run_episode(env, ConstantPolicy(vector=(0, 0, 0, 0, 0, 0, 1)), item, "original", EpisodeSpec(), seed=1)
    assert r.end_reason == "released" and r.steps == 26  # opened at the first step after the 25 held ones
    assert all(a[6] == 1.0 for a in r.actions)  # the record keeps the policy's own actions


@pytest.mark.parametrize("policy", ["placer", "expert"])
def test_scripted_carry_to_the_correct_card_succeeds_under_both_rules(setup, policy):
    item, env = setup
    spec = EpisodeSpec()
    for layout in ("original", "swapped"):
        side = item.correct_side_in(layout)
        pol = ScriptedPlacer(side, spec) if policy == "placer" else ExpertPolicy(env, "answer", spec)
        r = run_episode(env, pol, item, layout, spec, seed=2, keep_actions=False)
        assert (r.choice, r.success_board, r.success_disc, r.is_answered) == (side, 1.0, 1.0, True), r
        assert r.intent["release_near_target"] and r.intent["tcp_first_choice_correct"]
        wrong = "right" if side == "left" else "left"
        w = run_episode(env, ScriptedPlacer(wrong, spec), item, layout, spec, seed=2, keep_actions=False)
        assert (w.zone, w.success_board, w.success_disc, w.is_answered) == ("incorrect", 0.0, 0.0, True)


def test_table_start_and_disc_rule_stay_as_options(setup):
    item, env = setup
    spec = EpisodeSpec(start="table", rule="disc", max_steps=30)
    side = item.correct_side
    r = run_episode(env, ScriptedPlacer(side, spec), item, "original", spec, seed=3)
    assert (r.start, r.rule, r.zone, r.success, r.success_board) == ("table", "disc", "correct", 1.0, 1.0)
    grips = [a[6] for a in r.actions]
    assert grips[0] == 1.0 and 0.0 in grips and r.steps < 25  # the pick comes first, no hold
