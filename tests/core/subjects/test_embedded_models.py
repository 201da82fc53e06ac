"""Tiny VLA / VLM: training reduces the loss, save/load is exact, hidden states are named by part."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.action import Action, Observation
from embeval.errors import InvalidInputError, MissingWeightsError
from embeval.subjects.embedded.nets import VisionConfig, VLAConfig, VLMConfig
from embeval.subjects.embedded.synthetic import synthetic_demos, synthetic_vqa
from embeval.subjects.embedded.training import TrainConfig, train_vla, train_vlm
from embeval.subjects.protocols import VLM, Policy

SMALL_VLA = dict(cameras=["third_person"], image_size=32, aux_dim=0, vision=VisionConfig(width=8), backbone_dims=[64], expert_dims=[64])


@pytest.fixture(scope="module")
def trained_vla():
    data = synthetic_demos(n_episodes=12, steps=8, size=32, seed=0)
    pol, res = train_vla(data, VLAConfig(**SMALL_VLA), TrainConfig(steps=120, batch_size=32, log_every=20), seed=0)
    return data, pol, res


def _obs(data, i):
    return Observation({"third_person": data.images["third_person"][i]},
                       state={"tcp_pose": np.r_[data.state[i][:3], 0, 0, 0], "gripper": data.state[i][3:]})


def test_vla_training_reduces_loss(trained_vla):
    _, pol, res = trained_vla
    assert res.losses[-1] < 0.6 * res.losses[0], res.losses
    assert isinstance(pol, Policy) and pol.action_spec.frame == "base" and pol.action_spec.chunk_size == 1


def test_vla_learns_direction(trained_vla):
    """The synthetic expert moves toward the named square: the policy's xy step must point the same way."""
    data, pol, _ = trained_vla
    cos = []
    for i in range(0, len(data), 7):
        pol.reset(data.tasks[data.task_index[i]])
        a = pol.act(_obs(data, i)).vector[:2]
        e = data.action[i, :2]
        if np.linalg.norm(e) > 0.02:
            cos.append(a @ e / (np.linalg.norm(a) * np.linalg.norm(e) + 1e-9))
    assert np.mean(cos) > 0.5, np.mean(cos)


def test_vla_save_load_identical(trained_vla, tmp_path):
    from embeval.subjects.embedded.policy import TinyVLAPolicy

    data, pol, _ = trained_vla
    pol.save(tmp_path / "m")
    pol2 = TinyVLAPolicy.load(tmp_path / "m")
    for p in (pol, pol2):
        p.reset(data.tasks[0])
    for i in (0, 5, 17):
        a, b = pol.act(_obs(data, i)), pol2.act(_obs(data, i))
        assert isinstance(a, Action)
        np.testing.assert_array_equal(a.vector, b.vector)


def test_vla_hidden_states_named_by_part(trained_vla):
    data, pol, _ = trained_vla
    pol.reset(data.tasks[0])
    h = pol.hidden_states(_obs(data, 0))
    assert {"backbone.0", "action_expert.0", "encoders.third_person.blocks.0"} <= set(h)
    assert h["backbone.0"].shape == (1, 64) and h["action_expert.0"].dtype == np.float32
    h2 = pol.hidden_states(_obs(data, 40))
    assert not np.allclose(h["backbone.0"], h2["backbone.0"])  # depends on the input


def test_vla_input_errors(trained_vla):
    data, pol, _ = trained_vla
    pol.reset(data.tasks[0])
    with pytest.raises(InvalidInputError, match="camera"):
        pol.act(Observation({"wrist": data.images["third_person"][0]}, state={"tcp_pose": np.zeros(6), "gripper": 1.0}))
    with pytest.raises(InvalidInputError, match="tcp_pose"):
        pol.act(Observation({"third_person": data.images["third_person"][0]}, state={"gripper": 1.0}))


@pytest.mark.parametrize("mode", ["waypoint", "delta"])
def test_vla_training_is_seeded(mode):
    data = synthetic_demos(n_episodes=4, steps=4, size=32, seed=1)
    cfg = TrainConfig(steps=15, batch_size=8, log_every=5)
    a = train_vla(data, VLAConfig(**SMALL_VLA, action_mode=mode), cfg, seed=3)[0]
    b = train_vla(data, VLAConfig(**SMALL_VLA, action_mode=mode), cfg, seed=3)[0]
    assert a.net.output_dim == (10 if mode == "waypoint" else 7)
    for (k, va), (_, vb) in zip(a.net.state_dict().items(), b.net.state_dict().items()):
        assert np.array_equal(va.numpy(), vb.numpy()), k


def test_vlm_learns_side_and_roundtrips(tmp_path):
    from embeval.subjects.embedded.vlm import TinyVLM

    train, test = synthetic_vqa(256, 32, seed=0), synthetic_vqa(64, 32, seed=1)
    vlm, res = train_vlm(train, VLMConfig(image_size=32, vision=VisionConfig(width=8, pool="spatial_softmax")),
                         TrainConfig(steps=200, batch_size=32, log_every=50), seed=0)
    assert isinstance(vlm, VLM) and res.losses[-1] < res.losses[0]
    prompts = [test.prompts[i] for i in test.prompt_index]
    pred = vlm.predict_slots(list(test.images), prompts)
    acc = np.mean([p["side"] == test.slots["side"][y] for p, y in zip(pred, test.labels["side"])])
    assert acc > 0.75, acc  # held-out scenes: the answer depends on the image
    vlm.save(tmp_path / "vlm")
    vlm2 = TinyVLM.load(tmp_path / "vlm")
    answers = [vlm.generate([im], p) for im, p in zip(test.images[:8], prompts[:8])]
    assert answers == [vlm2.generate([im], p) for im, p in zip(test.images[:8], prompts[:8])]
    assert all(a.startswith("reach to the ") for a in answers)
    assert "backbone.0" in vlm2.hidden_states((test.images[0], prompts[0]))


def test_registry_adapter_and_missing_weights(trained_vla, tmp_path):
    from embeval.subjects import load_subject

    data, pol, _ = trained_vla
    pol.save(tmp_path / "m")
    sub = load_subject({"id": "mine", "kind": "policy", "adapter": "embedded", "path": str(tmp_path / "m")})
    assert sub.id == "mine"
    sub.reset(data.tasks[0])
    pol.reset(data.tasks[0])
    np.testing.assert_array_equal(sub.act(_obs(data, 3)).vector, pol.act(_obs(data, 3)).vector)
    with pytest.raises(MissingWeightsError, match="embeval train"):
        load_subject({"kind": "policy", "adapter": "embedded", "path": str(tmp_path / "nothing")})


def test_gripper_targets_close_within_tolerance():
    """Hand-computed relabelling: while descending, the label turns closed within 1.5 cm (xy) and
    1 cm (z) of the grasp pose; while lowering, open within the same box; elsewhere the expert's."""
    from embeval.datasets.demos import PHASES
    from embeval.subjects.embedded.training import DemoArrays, gripper_targets

    D, L, A = PHASES.index("descend"), PHASES.index("lower"), PHASES.index("above")
    wp = np.zeros((6, 6))
    wp[:, 2] = 0.02
    state = np.array([[0.010, 0, 0.025, 1], [0.020, 0, 0.025, 1], [0.0, 0, 0.035, 1],
                      [0.005, 0.005, 0.02, 0], [0.03, 0, 0.02, 0], [0.0, 0, 0.02, 1]], dtype=np.float32)
    action = np.zeros((6, 7))
    action[:, 6] = [1, 1, 1, 0, 0, 1]
    phase = np.array([D, D, D, L, L, A])
    data = DemoArrays({}, state, action, np.zeros(6, int), ["t"], np.zeros(6, int), waypoint=wp, phase=phase)
    assert list(gripper_targets(data, 0.015, 0.01)) == [0, 1, 1, 1, 0, 1]
    data.phase = None  # old datasets without phases: the expert's own command
    assert list(gripper_targets(data)) == [1, 1, 1, 0, 0, 1]


def test_sampling_weights_balance_phases():
    """Hand-computed: 6 frames of phase 0 and 2 of phase 1; balance 0.5 gives each phase-0 frame
    0.5/8 + 0.5/(2*6) and each phase-1 frame 0.5/8 + 0.5/(2*2)."""
    from embeval.subjects.embedded.training import sampling_weights

    w = sampling_weights(np.array([0, 0, 0, 0, 0, 0, 1, 1]), 0.5)
    np.testing.assert_allclose(w[:6], 0.5 / 8 + 0.5 / 12)
    np.testing.assert_allclose(w[6:], 0.5 / 8 + 0.5 / 4)
    assert abs(w.sum() - 1) < 1e-12 and w[6:].sum() == pytest.approx(0.5 * 2 / 8 + 0.5 / 2)
    assert sampling_weights(None, 0.5) is None and sampling_weights(np.zeros(3), 0.0) is None
