"""Control of the VLM -> VLA recipes: the gated control pathway (no direct instruction input, the answer
features read only while the gripper is closed: reaching cannot depend on the question, carrying does; the frozen
recipe's VLM parts stay the VLM's) and the control diagnosis (how off-card episodes end)."""
from __future__ import annotations

import numpy as np
import pytest

from test_choice_vla import TINY, demos, vlm  # noqa: F401  (the tiny VLA config and its module fixtures)

from embeval.act2answer.choice_vla_training import train_choice_vla
from embeval.errors import ConfigError
from embeval.subjects.embedded.choice_vla import ChoiceVLAConfig, ChoiceVLARecipe
from embeval.subjects.embedded.training import TrainConfig


def test_the_shipped_recipes_commit_and_the_old_ones_trainable(tmp_path, capsys):
    from embeval.subjects.embedded.population import A2A_VLA_RECIPES, a2a_vla_names, a2a_vla_recipe
    from embeval_cli import main

    commit = {"control_text": False, "answer_gate": True, "answer_commit": True}
    for name, mode in (("tiny-vla-a2a-frozen", "frozen"), ("tiny-vla-a2a-full", "full")):
        r = a2a_vla_recipe(name)
        gated = a2a_vla_recipe(name + "-gated")
        old = a2a_vla_recipe(name + "-ungated")
        assert r.mode == mode and r.arch == commit and gated.arch == {"control_text": False, "answer_gate": True}
        assert old.arch == {} and r.teacher_side is (mode == "frozen") and not gated.teacher_side
        table = a2a_vla_recipe(name + "-table")
        assert r.start == "grasped" and {v.start for v in (gated, old, table)} == {"table"}  # measured on the table start
        assert {**vars(r), "name": "", "start": ""} == {**vars(table), "name": "", "start": ""}
        # the same data, knowledge path and training otherwise: only the control pathway (and the start) differs
        for v in (gated, old):
            assert ({**vars(r), "name": "", "arch": {}, "teacher_side": False, "start": ""}
                    == {**vars(v), "name": "", "arch": {}, "start": ""})
        assert name in [x.name for x in A2A_VLA_RECIPES]  # population members, shipped
        for v in (gated, old):
            assert v.name in a2a_vla_names() and v.name not in [x.name for x in A2A_VLA_RECIPES]
    # the committed carry without teacher forcing stays trainable as the record of why the frozen one needs it
    nt = a2a_vla_recipe("tiny-vla-a2a-frozen-commit")
    assert nt.arch == commit and not nt.teacher_side and nt.mode == "frozen" and nt.start == "table"
    # the shipped checkpoints are the committed recipes' (their config and their recorded recipe say so)
    from embeval.subjects.embedded.zoo import load_vla

    for name in ("tiny-vla-a2a-frozen", "tiny-vla-a2a-full"):
        pol = load_vla(name)
        assert pol.cfg.control_text is False and pol.cfg.answer_gate is True and pol.cfg.answer_commit is True
        rec = pol.meta["recipe"]
        assert rec["name"] == name and rec["arch"] == commit and rec["teacher_side"] is (name.endswith("frozen"))
    # the CLI takes them as choice-VLA recipes (refusing a Pick/Place option before any work)
    assert main(["train", "vla", "--recipe", "tiny-vla-a2a-full-ungated", "--out", str(tmp_path / "x"), "--episodes", "3"]) == 2
    assert "--episodes" in capsys.readouterr().err and not (tmp_path / "x").exists()
    with pytest.raises(ConfigError, match="gripper"):
        ChoiceVLAConfig(state_keys=["gripper", "ee_pos"], answer_gate=True)
    for bad in ("yes", 1, None):  # a switch from a checkpoint's config.json is never guessed
        with pytest.raises(ConfigError, match=f"choice VLA config answer_commit: must be true or false, got {bad!r}"):
            ChoiceVLAConfig.from_dict({"answer_commit": bad})


def _state(pol) -> dict:
    return {k: v.numpy().copy() for k, v in pol.net.state_dict().items()}


def _obs(gripper: float):
    from embeval.action import Observation

    rng = np.random.default_rng(0)
    return Observation(images={"third_person": rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)}, instruction="",
                       state={"tcp_pose": np.array([0.4, 0.0, 0.3, 1.0, 0.0, 0.0, 0.0]), "gripper": np.array([gripper])})


@pytest.mark.parametrize("mode", ["frozen", "full"])
def test_gated_control_ignores_the_question_until_the_cube_is_held(demos, vlm, mode, tmp_path):
    from dataclasses import replace

    from embeval.subjects.embedded.zoo import load_vla

    tc = TrainConfig(steps=4, batch_size=8, log_every=2)
    gated = train_choice_vla(demos, vlm, replace(TINY, control_text=False, answer_gate=True), ChoiceVLARecipe(name="g", mode=mode), tc)[0]
    st = _state(gated)
    assert not any(k.startswith("encoders.third_person") and ".film" in k for k in st)  # no FiLM on the scene
    plain = _state(train_choice_vla(demos, vlm, TINY, ChoiceVLARecipe(name="p", mode=mode), tc)[0])
    assert any(k.startswith("encoders.third_person") and ".film" in k for k in plain)
    # the expert's input lacks the projected instruction (the width of the VLM's text projection)
    width = vlm.net.state_dict()["text_proj.0.weight"].shape[0]
    assert st["action_expert.0.0.weight"].shape[1] == plain["action_expert.0.0.weight"].shape[1] - width
    if mode == "frozen":  # the knowledge path is the VLM's
        assert all(np.array_equal(st[k], v.numpy()) for k, v in vlm.net.state_dict().items())
    gated.save(tmp_path / "g")
    back = load_vla(tmp_path / "g")
    assert back.cfg.control_text is False and back.cfg.answer_gate is True
    texts = ("put the cube on the traffic light that means go", "put the cube on the clock showing 9 o'clock")

    def acts(gripper):
        out = []
        for text in texts:
            back.reset(text)
            out.append(back.act(_obs(gripper)).vector)
        return out

    open_, held = acts(1.0), acts(0.47)  # 0.47: the opening with the cube in the fingers
    np.testing.assert_array_equal(open_[0], open_[1])  # reaching: the question plays no part
    assert not np.array_equal(held[0], held[1])  # carrying: the answer features decide

    # probing reads the action expert as during the carry, whatever the observation's gripper says
    def expert_states(gripper, text):
        back.reset(text)
        return back.hidden_states(_obs(gripper), layers=["action_expert.0"])["action_expert.0"]

    np.testing.assert_array_equal(expert_states(1.0, texts[0]), expert_states(0.0, texts[0]))
    assert not np.array_equal(expert_states(1.0, texts[0]), expert_states(1.0, texts[1]))  # the answer is there
    plain_pol = train_choice_vla(demos, vlm, TINY, ChoiceVLARecipe(name="p", mode=mode), tc)[0]
    plain_pol.reset(texts[0])
    h_open = plain_pol.hidden_states(_obs(1.0), layers=["action_expert.0"])["action_expert.0"]
    plain_pol.reset(texts[0])
    assert not np.array_equal(h_open, plain_pol.hidden_states(_obs(0.0), layers=["action_expert.0"])["action_expert.0"])


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

    spec = EpisodeSpec(max_steps=3, settle_s=0.0, start="table")  # a missed grasp needs the table start
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
    assert s["time"]["success"] == 0.0 and s["time"]["on_card_success"] is None and s["time"]["off_never_lifted"] == 2
    assert s["time"]["off_card"] == 1.0 and s["time"]["end_reasons"] == {"max_steps": 2} and s["time"]["never_lifted"] == 1.0
    assert s["all"]["passed_over_card"] == 0.0 and s["all"]["mean_abs_offset"] == pytest.approx(np.hypot(0.13, 0.15), abs=0.01)


def test_committed_carry_reads_the_heads_decision_and_trains_straight_through(demos, vlm):  # noqa: F811
    """``answer_commit``: the expert reads the VLM head's left/right one-hot, so answer features that the head
    resolves to the same card give the same actions; the action loss still reaches the head (straight-through)."""
    import torch
    from dataclasses import replace

    from embeval.subjects.embedded.choice_vla import build_net
    from embeval.subjects.embedded.population import a2a_vla_recipe

    r = a2a_vla_recipe("tiny-vla-a2a-full")
    assert r.arch == {"control_text": False, "answer_gate": True, "answer_commit": True} and r.mode == "full"
    cfg = replace(TINY, vlm=vlm.cfg.to_dict(), control_text=False, answer_gate=True, answer_commit=True)
    net = build_net(cfg)
    plain = build_net(replace(cfg, answer_commit=False))
    width = vlm.cfg.backbone_dims[-1]
    assert net.action_expert[0][0].weight.shape[1] == plain.action_expert[0][0].weight.shape[1] - width + 2
    torch.manual_seed(0)
    h, w = cfg.scene_size
    scene, state = torch.rand(2, 3, h, w), torch.tensor([[0.5, 0.0, 0.2, 0.0]] * 2)  # gripper closed: carrying
    t = torch.zeros(2, vlm.cfg.text_width)
    p = torch.randn(2, width)
    with torch.no_grad():
        side = net.head(p).argmax(-1)
        base = net.expert(p, scene, t, state)
        # a nudge that leaves the head's decision alone leaves the actions alone
        nudged = p + 1e-3 * torch.randn(2, width)
        assert torch.equal(net.head(nudged).argmax(-1), side)
        torch.testing.assert_close(net.expert(nudged, scene, t, state), base, rtol=0, atol=0)
        # answer features the head reads as the other card change the carry
        flip = p - 50.0 * (net.head.weight[side] - net.head.weight[1 - side])
        assert torch.equal(net.head(flip).argmax(-1), 1 - side)
        assert not torch.allclose(net.expert(flip, scene, t, state), base)
    # straight-through: the action loss has a gradient on the head and the backbone
    p_train = net.prefix(torch.rand(2, 3, *[vlm.cfg.card_size] * 2), torch.rand(2, 3, *[vlm.cfg.card_size] * 2),
                         net.text_proj(torch.randn(2, vlm.cfg.text_dim)))
    net.expert(p_train, scene, t, state).pow(2).sum().backward()
    assert net.head.weight.grad is not None and net.head.weight.grad.abs().sum() > 0
    assert net.backbone[0][0].weight.grad.abs().sum() > 0


def test_teacher_forcing_feeds_the_demonstrated_card_to_the_committed_expert(demos, vlm):  # noqa: F811
    """``teacher_side``: in training the committed expert reads the card each demonstration carries to (read from
    its last frame), not the head's decision; episodes without cards (pick/place) keep the head's."""
    import torch
    from dataclasses import replace

    from embeval.act2answer.choice_vla_training import ChoiceDemos
    from embeval.errors import InvalidInputError
    from embeval.subjects.embedded.choice_vla import build_net

    # the demonstrated card from the episodes' last frames (metres, frame base), -1 without cards
    cards = [[0.55, 0.15], [0.55, -0.15]]
    ends = {0: [0.55, 0.148], 1: [0.549, -0.151], 2: [0.40, 0.02], 3: [0.56, 0.14]}
    st = np.array([[0.40, 0.0, 0.3, 1.0], ends[0] + [0.1, 0.0], [0.45, 0.1, 0.3, 1.0], ends[1] + [0.1, 0.0],
                   ends[2] + [0.1, 1.0], [0.5, 0.0, 0.2, 0.0], ends[3] + [0.1, 0.0]], dtype=np.float32)
    ep = np.array([0, 0, 1, 1, 2, 3, 3])
    z = np.zeros((4, 8, 8, 3), np.uint8)
    d = ChoiceDemos(z, z, np.zeros(4, int), ["t"], np.array([0, 2, 1, 0]), np.zeros((7, 4, 4, 3), np.uint8), st,
                    np.zeros((7, 7), np.float32), ep)
    assert d.demonstrated_side(cards, 0.06).tolist() == [0, 1, -1, 0]
    d.state[-1, :2] = [0.55, 0.0]  # a card demonstration ending between the cards is refused, not guessed
    with pytest.raises(InvalidInputError, match=r"1 card demonstrations end 0.150 m or more from both card centres \(episode 3"):
        d.demonstrated_side(cards, 0.06)
    d.state[-1, :2] = [np.nan, 0.15]  # a corrupt cache: refused too, never read as a side
    with pytest.raises(InvalidInputError, match=r"1 card demonstrations end nan m"):
        d.demonstrated_side(cards, 0.06)
    d.state[-1, :2] = ends[3]
    d.episode = np.array([0, 0, 1, 1, 2, 2, 2])  # episode 3 lost its frames
    with pytest.raises(InvalidInputError, match="has no frames"):
        d.demonstrated_side(cards, 0.06)
    # the expert: a given side replaces the head's decision; -1 keeps it
    cfg = replace(TINY, vlm=vlm.cfg.to_dict(), control_text=False, answer_gate=True, answer_commit=True)
    net = build_net(cfg)
    torch.manual_seed(0)
    h, w = cfg.scene_size
    scene, state = torch.rand(2, 3, h, w), torch.tensor([[0.5, 0.0, 0.2, 0.0]] * 2)
    t = torch.zeros(2, vlm.cfg.text_width)
    p = torch.randn(2, vlm.cfg.backbone_dims[-1])
    with torch.no_grad():
        head = net.head(p).argmax(-1)
        flip = p - 50.0 * (net.head.weight[head] - net.head.weight[1 - head])
        torch.testing.assert_close(net.expert(p, scene, t, state, side=torch.tensor([-1, -1])), net.expert(p, scene, t, state))
        torch.testing.assert_close(net.expert(p, scene, t, state, side=1 - head), net.expert(flip, scene, t, state))
        mixed = net.expert(p, scene, t, state, side=torch.stack([1 - head[0], torch.tensor(-1)]))
        torch.testing.assert_close(mixed[0], net.expert(flip, scene, t, state)[0])
        torch.testing.assert_close(mixed[1], net.expert(p, scene, t, state)[1])
    # the recipe: only a committed expert can be teacher-forced; the switch is a boolean
    with pytest.raises(ConfigError, match="teacher_side .* only an answer_commit expert reads"):
        ChoiceVLARecipe("x", mode="frozen", teacher_side=True, arch={"answer_gate": True})
    with pytest.raises(ConfigError, match="teacher_side: must be true or false, got 'yes'"):
        ChoiceVLARecipe("x", mode="frozen", teacher_side="yes", arch={"answer_commit": True})


def test_teacher_forced_training_reads_the_demonstrations_sides(demos, vlm, monkeypatch):  # noqa: F811
    """``train_choice_vla`` with ``teacher_side`` hands the expert each frame's demonstrated card."""
    from embeval.subjects.embedded import choice_vla

    seen = []
    real = choice_vla.build_net

    def spy(cfg):
        net = real(cfg)
        expert = net.expert

        def wrapped(p, scene, t, state, side=None):
            seen.append((state.clone(), None if side is None else side.clone()))
            return expert(p, scene, t, state, side=side)
        net.expert = wrapped
        return net
    monkeypatch.setattr(choice_vla, "build_net", spy)
    from dataclasses import replace

    cfg = replace(TINY, control_text=False, answer_gate=True, answer_commit=True)
    r = ChoiceVLARecipe("x", mode="frozen", teacher_side=True, arch={"answer_commit": True}, eval_per_category=0)
    train_choice_vla(demos, vlm, cfg, r, TrainConfig(steps=2, batch_size=8, threads=1))
    sides = demos.demonstrated_side(cfg.card_xy, cfg.card_size / 2)
    assert len(seen) == 2 and (sides >= 0).any() and (sides == -1).any()
    unique = 0
    for state, side in seen:  # each frame (found by its state row, where that row is one episode's) gets its card
        assert side is not None
        for row, got in zip(state.numpy(), side.tolist()):
            want = {int(sides[demos.episode[f]]) for f in np.nonzero((demos.state == row).all(1))[0]}
            assert got in want
            unique += len(want) == 1 and got == want.pop()
    assert unique >= 8
