"""Act2Answer episodes in the simulated cell: the expert as control ceiling, a fixed-side policy
as pure position bias, termination rules recorded, determinism."""
import pytest

from embeval.act2answer.aggregate import category_rates, swap_stats
from embeval.act2answer.episode import run_episode, run_items, sim_config
from embeval.act2answer.generator import generate_items
from embeval.act2answer.reference_policies import ExpertPolicy
from embeval.act2answer.scene import EpisodeSpec


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from embeval.sim import SimEnv

    items = generate_items(tmp_path_factory.mktemp("a2a"), ["color", "emotion"], per_category=1, seed=0)
    env = SimEnv(sim_config(64, 48))
    yield items, env
    env.close()


def test_expert_answers_and_fixed_side_is_position_bias(setup):
    items, env = setup
    spec = EpisodeSpec(max_steps=30)
    oracle = list(run_items(ExpertPolicy(env, "answer", spec), items, spec, env=env, keep_actions=False))
    assert [r.zone for r in oracle] == ["correct"] * 4
    assert all(r.end_reason == "released" and r.termination == "release_after_lift" for r in oracle)
    assert {r.layout for r in oracle} == {"original", "swapped"}
    assert [r.correct_side for r in oracle[:2]] == [items[0].correct_side, "right" if items[0].correct_side == "left" else "left"]
    left = list(run_items(ExpertPolicy(env, "left", spec), items, spec, env=env))
    assert [r.choice for r in left] == ["left"] * 4
    assert category_rates(left)[-1].rate == pytest.approx(0.5)
    ss = swap_stats(left)
    assert ss.position_bias == 1.0 and ss.consistency == 0.0
    assert all(len(r.actions) == r.steps and len(r.actions[0]) == 7 for r in left)


def test_termination_rules_and_determinism(setup):
    items, env = setup
    from embeval.subjects.scripted import ConstantPolicy

    hold = ConstantPolicy(vector=(0, 0, 0, 0, 0, 0, 1))
    spec = EpisodeSpec(max_steps=5)
    r = run_episode(env, hold, items[0], "original", spec, seed=1)
    assert (r.zone, r.end_reason, r.steps, r.stopped) == ("out_of_bounds", "max_steps", 5, False)
    # driving down into the table trips the protective stop (the e-stop ends the episode)
    down = ConstantPolicy(vector=(0, 0, -0.05, 0, 0, 0, 1))
    r = run_episode(env, down, items[0], "original", EpisodeSpec(max_steps=20), seed=1)
    assert r.stopped and r.steps < 20 and r.end_reason not in ("max_steps", "released")
    a = run_episode(env, ExpertPolicy(env, "right"), items[1], "swapped", EpisodeSpec(max_steps=30), seed=4)
    b = run_episode(env, ExpertPolicy(env, "right"), items[1], "swapped", EpisodeSpec(max_steps=30), seed=4)
    assert a.to_dict() == b.to_dict() and a.choice == "right"
