"""The VLAs built on the two-card VLM (tiny-vla-a2a-frozen / -full): the card crop projects as pybullet
renders, seeded training is bit-identical, the frozen recipe leaves the VLM's weights untouched while
the full one moves them, the policy acts and exposes backbone vs action-expert hidden states."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from embeval.act2answer.choice_training import render_like
from embeval.act2answer.choice_vla_training import (
    ChoiceDemos,
    record_answer_demos,
    record_pickplace_demos,
    train_choice_vla,
)
from embeval.act2answer.generator import generate_items
from embeval.errors import ConfigError, InvalidInputError
from embeval.subjects.embedded.card_crop import PinholeCamera, card_corners, rectify_card
from embeval.subjects.embedded.choice import ChoiceVLMConfig
from embeval.subjects.embedded.choice_vla import ChoiceVLAConfig, ChoiceVLAPolicy, ChoiceVLARecipe
from embeval.subjects.embedded.training import TrainConfig

TINY_VLM = ChoiceVLMConfig(card_size=24, vision={"width": 4, "depth": 2, "pool": "both", "film": True}, backbone_dims=[16])
TINY = ChoiceVLAConfig(vlm=TINY_VLM.to_dict(), image_size=[120, 160], scene_size=[24, 32],
                       scene_vision={"width": 4, "depth": 2, "pool": "spatial_softmax", "film": True}, expert_dims=[16])


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_projection_matches_pybullet_matrices():
    """PinholeCamera.project == pybullet's computeViewMatrix + the cell's OpenGL projection (the renderer's own)."""
    import pybullet as p

    from embeval.sim.scene import default_cameras
    from embeval.sim.workcell import intrinsics_projection

    spec = default_cameras()[0].scaled(320, 240)
    cam = PinholeCamera.third_person()
    pts = np.vstack([card_corners((0.55, 0.15), 0.12), card_corners((0.55, -0.15), 0.12), [[0.42, 0.0, 0.02]]])
    view = np.asarray(p.computeViewMatrix(spec.position, spec.target, spec.up)).reshape(4, 4).T
    proj = np.asarray(intrinsics_projection(spec)).reshape(4, 4).T
    clip = (proj @ view @ np.c_[pts, np.ones(len(pts))].T).T
    ndc = clip[:, :2] / clip[:, 3:4]
    ref = np.c_[(ndc[:, 0] + 1) / 2 * 320, (1 - ndc[:, 1]) / 2 * 240]
    assert np.abs(cam.project(pts, 320, 240) - ref).max() < 1e-3  # pixels (pybullet builds its view matrix in float32)


def test_rectified_crop_shows_the_card_as_printed(tmp_path):
    from PIL import Image

    from embeval.act2answer.episode import sim_config
    from embeval.act2answer.scene import EpisodeSpec, build_scene
    from embeval.sim import SimEnv

    item = generate_items(tmp_path, ["spatial"], 1, seed=3)[0]  # ball above/below a bar: no symmetry
    spec = EpisodeSpec()
    scene, task = build_scene(item, "original", spec)
    with SimEnv(sim_config(320, 240)) as env:
        img = env.reset(0, task, scene).images["third_person"]
    crop = rectify_card(img, PinholeCamera.third_person(), spec.left_card_xy, spec.card_size, 48).astype(float).mean(-1)
    card = np.asarray(Image.open(item.left_image).convert("L").resize((48, 48), Image.BILINEAR), dtype=float)

    def corr(a, b):
        return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])

    # the crop is the card as printed (the renderer's lighting aside): it correlates with the card
    # far better than with any rotation or flip of it
    same = corr(crop, card)
    others = [corr(crop, np.rot90(card, k)) for k in (1, 2, 3)] + [corr(crop, card[::-1]), corr(crop, card[:, ::-1])]
    assert same > 0.65 and same > max(others) + 0.1, (same, others)  # measured 0.75 vs <= 0.60
    with pytest.raises(InvalidInputError, match="RGB"):
        rectify_card(img[..., 0], PinholeCamera.third_person(), spec.left_card_xy, spec.card_size, 48)


def test_render_like_augmentation_is_seeded():
    import torch

    x = torch.rand(3, 3, 24, 24)
    a = render_like(x, np.random.default_rng(1), min_px=8, p=1.0)
    b = render_like(x, np.random.default_rng(1), min_px=8, p=1.0)
    assert torch.equal(a, b) and a.shape == x.shape and float(a.min()) >= 0 and float(a.max()) <= 1
    assert not torch.equal(a, x)


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> ChoiceDemos:
    tmp = tmp_path_factory.mktemp("demos")
    items = generate_items(tmp, ["traffic"], 1, seed=5, stream="test-choice-vla")
    ans = record_answer_demos(items, TINY, seed=0)
    pp = record_pickplace_demos(1, TINY, seed=0, verbs=("Pick",))
    d = ChoiceDemos.concat([ans, pp])
    assert set(d.kind.tolist()) == {0, 1} and len(d.left) == 3  # both layouts of the item + one Pick
    assert d.left.shape[1:] == (24, 24, 3) and d.scene.shape[1:] == (24, 32, 3) and d.episode.max() == 2
    return d


@pytest.fixture(scope="module")
def vlm():
    from embeval.act2answer.choice_training import choice_arrays, train_choice_vlm

    data = choice_arrays(2, seed=1, card_size=24, categories=["traffic"])
    m, _ = train_choice_vlm(data, ChoiceVLMConfig.from_dict(TINY_VLM.to_dict()), TrainConfig(steps=2, batch_size=2), seed=0,
                            instructions=True)
    return m


def _train(demos, vlm, mode, seed=0):
    r = ChoiceVLARecipe(name=f"t-{mode}", mode=mode, seed=seed)
    answer = None
    if mode == "cotrain":
        from embeval.act2answer.choice_training import choice_arrays

        answer = choice_arrays(2, seed=0, card_size=24, categories=["traffic"])
    return train_choice_vla(demos, vlm, TINY, r, TrainConfig(steps=4, batch_size=8, log_every=2), answer_data=answer)[0]


@pytest.mark.parametrize("mode", ["frozen", "full", "cotrain"])
def test_training_twice_gives_identical_weights(demos, vlm, mode, tmp_path):
    a, b = _train(demos, vlm, mode), _train(demos, vlm, mode)
    c = _train(demos, vlm, mode, seed=1)
    for name, pol in (("a", a), ("b", b), ("c", c)):
        pol.save(tmp_path / name)
    assert _sha(tmp_path / "a" / "model.safetensors") == _sha(tmp_path / "b" / "model.safetensors")
    assert _sha(tmp_path / "a" / "model.safetensors") != _sha(tmp_path / "c" / "model.safetensors")
    vlm_state = vlm.net.state_dict()
    moved = [k for k, v in vlm_state.items() if not np.array_equal(a.net.state_dict()[k].numpy(), v.numpy())]
    if mode == "frozen":
        assert moved == []  # stop-gradient: the VLM parts are exactly the VLM's
    else:
        assert any(k.startswith("encoder.") for k in moved) and any(k.startswith("backbone.") for k in moved)


def test_policy_acts_roundtrips_and_names_its_layers(demos, vlm, tmp_path):
    from embeval.act2answer.episode import obs_cameras_for, obs_size_for
    from embeval.action import Action, Observation
    from embeval.subjects.embedded.zoo import load_vla

    pol = _train(demos, vlm, "full")
    pol.save(tmp_path / "p")
    back = load_vla(tmp_path / "p")
    assert isinstance(back, ChoiceVLAPolicy) and obs_size_for(back) == (160, 120) and obs_cameras_for(back) == ("third_person",)
    rng = np.random.default_rng(0)
    ob = Observation(images={"third_person": rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)}, instruction="",
                     state={"ee_pos": np.array([0.4, 0.0, 0.3]), "gripper": np.array([1.0]),
                            "tcp_pose": np.array([0.4, 0.0, 0.3, 1.0, 0.0, 0.0, 0.0])})
    for p in (pol, back):
        p.reset("put the cube on the traffic light that means go")
    a, b = pol.act(ob), back.act(ob)
    assert isinstance(a, Action) and np.array_equal(a.vector, b.vector) and a.vector[6] in (0.0, 1.0)
    hs = back.hidden_states(ob)
    assert {"backbone.0", "action_expert.0", "encoder.blocks.0"} <= set(hs)
    from embeval_analysis.probing.features import DEFAULT_LAYERS
    import re

    probed = [k for k in hs if re.fullmatch(DEFAULT_LAYERS, k)]
    assert sorted(probed) == ["action_expert.0", "backbone.0"]
    with pytest.raises(InvalidInputError, match="third_person"):
        back.act(Observation(images={"wrist": ob.images["third_person"]}, instruction="x", state=ob.state))


def test_recipe_and_cli_refuse_bad_options(tmp_path, capsys):
    from embeval_cli import main

    with pytest.raises(ConfigError, match="frozen"):
        ChoiceVLARecipe(mode="thawed")
    assert main(["train", "vla", "--recipe", "tiny-vla-a2a-frozen", "--out", str(tmp_path / "x"), "--episodes", "3"]) == 2
    assert "--episodes" in capsys.readouterr().err
    assert main(["train", "vla", "--out", str(tmp_path / "x"), "--eval-per-category", "3"]) == 2
    assert "eval-per-category" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_population_lists_the_choice_vlas_apart_from_vla():
    import json

    from embeval.subjects.embedded.population import A2A_VLA_RECIPES
    from embeval.subjects.embedded.zoo import POPULATION_FILE

    names = [r.name for r in A2A_VLA_RECIPES]
    assert names == ["tiny-vla-a2a-frozen", "tiny-vla-a2a-full"]
    pop = json.loads(POPULATION_FILE.read_text())
    assert not set(names) & set(pop["vla"])  # readers of "vla" (agreement, Pick/Place eval) never see them
