"""Issue 31, control of the VLM -> VLA recipes: the instruction noise on the control pathway (perturbs only
card-cell rows, bounded, seeded; the frozen recipe's VLM parts stay the VLM's, the prefix reads the clean
instruction) and the control diagnosis (how off-card episodes end)."""
from __future__ import annotations

import numpy as np
import pytest

from test_choice_vla import TINY, demos, vlm  # noqa: F401  (the tiny VLA config and its module fixtures)

from embeval.act2answer.choice_vla_training import control_text_noise, train_choice_vla
from embeval.errors import ConfigError
from embeval.subjects.embedded.choice_vla import ChoiceVLARecipe
from embeval.subjects.embedded.training import TrainConfig


def _unit_rows(n: int, d: int = 384, seed: int = 0) -> np.ndarray:
    e = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def test_noise_perturbs_only_card_cell_rows_within_its_bound():
    emb = _unit_rows(400)
    card = np.arange(400) % 2 == 0  # odd rows: Pick/Place frames, never perturbed
    out = control_text_noise(emb, card, 1.5, 1.0, np.random.default_rng(3))
    assert out.shape == emb.shape and out.dtype == emb.dtype
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(out[~card], emb[~card])
    cos = np.sum(out[card] * emb[card], axis=1)
    # norm r ~ U(0, 1.5) along a random orthogonal direction: cosine 1 / sqrt(1 + r^2) >= 1 / sqrt(1 + 1.5^2) = 0.555,
    # mean of 1 / sqrt(1 + r^2) over U(0, 1.5) = asinh(1.5) / 1.5 = 0.796
    assert cos.min() >= 0.5547 and cos.max() < 1.0 and cos.mean() == pytest.approx(np.arcsinh(1.5) / 1.5, abs=0.02)
    again = control_text_noise(emb, card, 1.5, 1.0, np.random.default_rng(3))
    np.testing.assert_array_equal(out, again)  # seeded
    assert control_text_noise(emb, card, 0.0, 1.0, np.random.default_rng(3)) is emb  # off: nothing drawn, nothing changed


def test_noise_probability_sets_the_share_of_perturbed_rows():
    emb = _unit_rows(4000, d=32)
    out = control_text_noise(emb, np.ones(4000, bool), 1.0, 0.25, np.random.default_rng(0))
    changed = np.any(out != emb, axis=1).mean()
    assert 0.22 < changed < 0.28


def test_recipe_refuses_bad_noise_and_the_registry_knows_the_variants(tmp_path, capsys):
    from embeval.subjects.embedded.population import A2A_VLA_RECIPES, a2a_vla_names, a2a_vla_recipe
    from embeval_cli import main

    with pytest.raises(ConfigError, match="control_text_noise"):
        ChoiceVLARecipe(control_text_noise=-0.1)
    with pytest.raises(ConfigError, match="control_text_p"):
        ChoiceVLARecipe(control_text_p=1.5)
    for name, mode in (("tiny-vla-a2a-frozen-textnoise", "frozen"), ("tiny-vla-a2a-full-textnoise", "full")):
        r = a2a_vla_recipe(name)
        base = a2a_vla_recipe(name.removesuffix("-textnoise"))
        assert r.mode == mode and r.control_text_noise == 1.5 and base.control_text_noise == 0.0
        # the same data and training otherwise: only the control pathway's input noise differs
        assert {**vars(r), "name": "", "control_text_noise": 0.0} == {**vars(base), "name": ""}
        assert name in a2a_vla_names() and name not in [x.name for x in A2A_VLA_RECIPES]  # not a population member
    # the CLI takes them as choice-VLA recipes (refusing a Pick/Place option before any work)
    assert main(["train", "vla", "--recipe", "tiny-vla-a2a-full-textnoise", "--out", str(tmp_path / "x"),
                 "--episodes", "3"]) == 2
    assert "--episodes" in capsys.readouterr().err and not (tmp_path / "x").exists()


def _state(pol) -> dict:
    return {k: v.numpy().copy() for k, v in pol.net.state_dict().items()}


@pytest.mark.parametrize("mode", ["frozen", "full"])
def test_noise_changes_the_control_training_only(demos, vlm, mode):
    tc = TrainConfig(steps=4, batch_size=8, log_every=2)
    clean = _state(train_choice_vla(demos, vlm, TINY, ChoiceVLARecipe(name="c", mode=mode), tc)[0])
    noisy = [_state(train_choice_vla(demos, vlm, TINY, ChoiceVLARecipe(name="n", mode=mode, control_text_noise=1.5), tc)[0])
             for _ in range(2)]
    assert all(np.array_equal(noisy[0][k], noisy[1][k]) for k in clean)  # deterministic for a seed
    moved = [k for k in clean if not np.array_equal(clean[k], noisy[0][k])]
    assert any(k.startswith("action_expert.") for k in moved)
    vlm_state = vlm.net.state_dict()
    if mode == "frozen":  # the knowledge path is the VLM's, noise or not
        assert all(np.array_equal(noisy[0][k], v.numpy()) for k, v in vlm_state.items())


def test_diagnosis_reports_a_grasp_that_never_happens(tmp_path):
    from embeval.act2answer.control_diagnosis import control_summary, diagnose_control
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.action import Action, ActionSpec

    class Idle:  # holds still with the gripper open: the cube stays at its start
        id, action_spec = "idle", ActionSpec(frame="base")

        def reset(self, instruction):
            pass

        def act(self, obs):
            return Action(np.array([0, 0, 0, 0, 0, 0, 1.0]))

    spec = EpisodeSpec(max_steps=3, settle_s=0.0)
    items = generate_items(tmp_path, ["time"], 1, seed=2, stream="test-a2a-control")
    tr = diagnose_control(Idle(), items, spec)
    assert [t.layout for t in tr] == ["original", "swapped"]
    for t in tr:
        assert t.zone == "out_of_bounds" and t.end_reason == "max_steps" and t.steps == 3 and not t.lifted
        assert t.first_close == -1 and len(t.tcp_path) == 4 and t.closest_carried == {"left": np.inf, "right": np.inf}
        # the cube rests at its start (0.42, 0): 0.13 m short of the cards' row, 0.15 m from either centre
        assert t.offset_xy[0] == pytest.approx(-0.13, abs=0.005) and abs(t.offset_xy[1]) == pytest.approx(0.15, abs=0.005)
        assert t.tcp_to_cube > 0.1  # the TCP never came down to the cube
    s = control_summary(tr, spec.eps)
    assert s["time"]["off_card"] == 1.0 and s["time"]["end_reasons"] == {"max_steps": 2} and s["time"]["never_lifted"] == 1.0
    assert s["all"]["passed_over_card"] == 0.0 and s["all"]["mean_abs_offset"] == pytest.approx(np.hypot(0.13, 0.15), abs=0.01)
