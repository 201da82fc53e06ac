"""LeRobot adapter: an ACT policy with random weights built on the CPU, saved with its
normalisation processors, reloaded through a YAML spec, acting on an embeval Observation."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lerobot")

from conftest import tiny_act_checkpoint  # noqa: E402

from embeval.action import Action, Observation  # noqa: E402
from embeval.errors import ConfigError, InvalidInputError, MissingWeightsError  # noqa: E402
from embeval.subjects import load_subject  # noqa: E402

ACTION_STD = 0.1


@pytest.fixture(scope="module")
def act_checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("act")
    return (d, *tiny_act_checkpoint(d, state=6, action=8, action_std=ACTION_STD, encoder_layers=2, chunk=4))


def _obs(seed=0):
    rng = np.random.default_rng(seed)
    return Observation(images={"third_person": rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)},
                       instruction="pick up the cube", state={"joint_positions": rng.normal(size=6)})


def _spec(d, **params):
    base = {"action_indices": [0, 1, 2, 3, 4, 5, 7], "gripper": "signed_open_positive"}
    return {"kind": "policy", "adapter": "lerobot", "path": str(d), "params": {**base, **params}}


def test_reloaded_act_matches_original(act_checkpoint):
    from embeval.subjects.adapters.lerobot_policy import image_to_tensor

    d, policy, pre, post = act_checkpoint
    subject = load_subject(_spec(d))
    assert subject.action_spec.chunk_size == 4
    subject.reset("pick up the cube")
    obs = _obs(0)
    got = subject.act(obs)
    assert isinstance(got, Action)
    # independent path: the original in-memory policy, its own processors, the same image conversion
    batch = {"observation.images.top": image_to_tensor(obs.images["third_person"], (3, 32, 32)),
             "observation.state": torch.tensor(obs.state["joint_positions"], dtype=torch.float32), "task": "x"}
    policy.reset()
    with torch.no_grad():
        raw = post(policy.select_action(pre(batch))).numpy().reshape(-1)
    want = raw[[0, 1, 2, 3, 4, 5, 7]].astype(np.float64)
    want[6] = np.clip((want[6] + 1) / 2, 0, 1)
    np.testing.assert_allclose(got.vector, want, rtol=1e-5, atol=1e-6)
    # un-normalised by the saved statistics: actions are on the scale of ACTION_STD, not of N(0, 1)
    assert 0.005 < np.abs(got.vector[:6]).max() < 10 * ACTION_STD


def test_image_changes_action_and_scale(act_checkpoint):
    d = act_checkpoint[0]
    a = load_subject(_spec(d))
    b = load_subject(_spec(d, action_scale=0.5))
    a.reset("x"), b.reset("x")
    va, vb = a.act(_obs(1)).vector, b.act(_obs(1)).vector
    np.testing.assert_allclose(vb[:6], 0.5 * va[:6], rtol=1e-5, atol=1e-7)
    a.reset("x")
    assert not np.allclose(a.act(_obs(2)).vector[:6], va[:6])


def test_hidden_states_of_act(act_checkpoint):
    subject = load_subject(_spec(act_checkpoint[0]))
    layers = subject.hidden_layers()
    assert "model.encoder.layers.0" in layers and "model.decoder.layers.0" in layers
    hs = subject.hidden_states(_obs(0))
    assert hs["model.encoder.layers.1"].shape == (1, 32)  # (batch, dim_model), mean over tokens
    hs2 = subject.hidden_states(_obs(3))
    assert not np.allclose(hs["model.encoder.layers.1"], hs2["model.encoder.layers.1"])
    raw = subject.hidden_states(_obs(0), layers=["model.encoder.layers.1"], pool="none")
    assert raw["model.encoder.layers.1"].ndim == 3


def test_failures(act_checkpoint, tmp_path):
    d = act_checkpoint[0]
    with pytest.raises(MissingWeightsError, match="does not exist"):
        load_subject(_spec(tmp_path / "missing"))
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text((d / "config.json").read_text())
    with pytest.raises(MissingWeightsError, match="no weights"):
        load_subject(_spec(tmp_path / "cfg"))
    with pytest.raises(ConfigError, match="action_indices"):
        load_subject(_spec(d, action_indices=[0, 1, 2]))
    subject = load_subject(_spec(d))
    subject.reset("x")
    no_state = Observation(images={"c": np.zeros((8, 8, 3), np.uint8)}, instruction="x")
    with pytest.raises(InvalidInputError, match="state_key"):
        subject.act(no_state)
    subject.policy.select_action = lambda batch: torch.full((1, 8), float("nan"))
    with pytest.raises(InvalidInputError, match="NaN"):
        subject.act(_obs(0))


def test_diffusion_policy_roundtrip(tmp_path):
    """A second policy family through the same adapter: Diffusion Policy (min-max normalised actions)."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    from lerobot.policies.factory import make_pre_post_processors

    cfg = DiffusionConfig(
        device="cpu", pretrained_backbone_weights=None, n_obs_steps=2, horizon=8, n_action_steps=4, num_inference_steps=2,
        down_dims=(16, 32), diffusion_step_embed_dim=16, crop_shape=None, spatial_softmax_num_keypoints=8,
        use_group_norm=True,  # LeRobot < 0.5 default (0.5+: False, batch norm, which a batch of 1 cannot train)
        input_features={"observation.images.top": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 32, 32)),
                        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(6,))},
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))},
    )
    torch.manual_seed(0)
    policy = DiffusionPolicy(cfg).eval()
    lim = torch.tensor([0.02, 0.02, 0.02, 0.1, 0.1, 0.1, 1.0])
    stats = {"observation.images.top": {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)},
             "observation.state": {"min": -torch.ones(6), "max": torch.ones(6)},
             "action": {"min": torch.cat([-lim[:6], torch.zeros(1)]), "max": lim}}
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    for obj in (policy, pre, post):
        obj.save_pretrained(tmp_path)
    subject = load_subject({"kind": "policy", "adapter": "lerobot", "path": str(tmp_path), "params": {"seed": 0}})
    assert subject.action_spec.chunk_size == 4
    subject.reset("x")
    a = subject.act(_obs(0))
    # un-normalised into the min-max box of the saved statistics (the sampler clips to [-1, 1])
    assert np.all(np.abs(a.vector[:6]) <= lim[:6].numpy() + 1e-6) and 0.0 <= a.gripper <= 1.0
    hs = subject.hidden_states(_obs(0), layers=["diffusion.unet.mid_modules.0"])
    assert hs["diffusion.unet.mid_modules.0"].shape == (1, 32)  # (B, C, T) pooled over T


def test_two_arm_policy_acts_with_the_arm_of_larger_motion(tmp_path):
    """arms: 2 on a 14-dim ACT output: each step takes the arm that moves most, unless action_indices is given."""
    tiny_act_checkpoint(tmp_path, state=6, action=14, action_std=1.0, dim_model=16)
    spec = {"kind": "policy", "adapter": "lerobot", "path": str(tmp_path), "params": {"arms": 2}}
    left, right = [0.01, 0, 0, 0, 0, 0, 1.0], [0, 0.04, 0.03, 0, 0, 0.1, 0.0]
    subject = load_subject(spec)
    for out, want in ((left + right, right), (right + left, right), (left + left, left)):  # tie: the first arm
        subject.policy.select_action = lambda batch, out=out: torch.tensor([out])
        subject.reset("x")
        np.testing.assert_allclose(subject.act(_obs(0)).vector, want, atol=1e-6)
    fixed = load_subject({**spec, "params": {"arms": 2, "action_indices": [7, 8, 9, 10, 11, 12, 13]}})
    fixed.policy.select_action = lambda batch: torch.tensor([right + left])
    fixed.reset("x")
    np.testing.assert_allclose(fixed.act(_obs(0)).vector, left, atol=1e-6)
    with pytest.raises(ConfigError, match="arms"):
        load_subject({**spec, "params": {"arms": 3}})


# --------------------------------------------------------------------------- batched episodes
def _run_schedule(subject, schedule, refs):
    """Play ``schedule`` (per step: slots to (re)start with an instruction, slots to end first, slots to act) on
    ``subject``'s batched calls and on one batch-1 policy per episode (``refs()`` makes one); the largest
    difference between a slot's action and its batch-1 twin's."""
    twins, worst, t = {}, 0.0, 0
    for starts, ends, acting in schedule:
        subject.end_slots(ends)
        if starts:
            subject.reset_slots(list(starts), list(starts.values()))
            for slot, instruction in starts.items():
                twins[slot] = refs()
                twins[slot].reset(instruction)
        obs = [_obs(100 * t + i) for i, _ in enumerate(acting)]
        got = subject.act_slots(acting, obs)
        for slot, ob, a in zip(acting, obs, got):
            worst = max(worst, float(np.abs(a.vector - twins[slot].act(ob).vector).max()))
        t += 1
    return worst


# slot 0 from step 0 (chunk refills at steps 0, 4, 8), "b" from step 2, 0 restarted at step 5 (its queue dropped),
# "c" from step 5 to 7 (ended at 8 with actions still queued), slot 3 from step 8: slots 0 and "c" refill together
SCHEDULE = [({0: "pick"}, [], [0]), ({}, [], [0]), ({"b": "push"}, [], [0, "b"]), ({}, [], [0, "b"]),
            ({}, [], ["b", 0]), ({0: "place", "c": "pick"}, [], [0, "b", "c"]), ({}, [], [0, "b", "c"]),
            ({}, [], [0, "b", "c"]), ({3: "lift"}, ["c"], [3, 0, "b"]), ({}, [], [0, 3])]


def test_act_slots_keep_their_own_chunk_queues(act_checkpoint):
    """ACT (chunk 4): every slot keeps its own action queue in the adapter, slots start, restart and end at
    different steps, the slots due for a new chunk share one predict_action_chunk call, and each slot's actions
    equal a batch-1 policy's for the same episode within 1e-5."""
    from embeval.subjects.protocols import batched

    d = act_checkpoint[0]
    subject = load_subject(_spec(d))
    assert batched(subject) is subject and subject.chunk_batched
    sizes = []
    predict = subject.policy.predict_action_chunk
    subject.policy.predict_action_chunk = lambda batch: sizes.append(batch["observation.state"].shape[0]) or predict(batch)
    shared = load_subject(_spec(d))  # batch-1 twins: copies of one loaded policy (own queues, shared weights)
    assert _run_schedule(subject, SCHEDULE, shared.fork) < 1e-5
    # refills: step 0 {0}, 2 {b}, 4 {0}, 5 {0, c} (restart + new), 6 {b}, 8 {3}, 9 {0} (its steps 5-8 used)
    assert sizes == [1, 1, 1, 2, 1, 1, 1]
    assert len(subject.policy._action_queue) == 0  # the batch-1 queue is untouched
    subject.reset_slots([0], ["pick"])
    with pytest.raises(InvalidInputError, match="slot 'c' has no episode"):
        subject.act_slots([0, "c"], [_obs(0), _obs(1)])
    with pytest.raises(InvalidInputError, match="2 slots for 1 observations"):
        subject.act_slots([0, "b"], [_obs(0)])


def test_act_slots_with_temporal_ensembling_use_one_copy_per_slot(act_checkpoint, tmp_path):
    """ACT with temporal ensembling keeps a running average per episode: the adapter gives each slot its own
    copy (shared weights), and each slot's actions equal a batch-1 policy's exactly."""
    import json
    import shutil

    d = shutil.copytree(act_checkpoint[0], tmp_path / "ensembled")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "temporal_ensemble_coeff": 0.01, "n_action_steps": 1}))
    subject = load_subject(_spec(d))
    assert not subject.chunk_batched
    assert _run_schedule(subject, SCHEDULE, load_subject(_spec(d)).fork) == 0.0
    assert subject._loop.copies == 3  # at most three episodes ran at once; ended slots' copies are reused


# --------------------------------------------------------------------------- spec checks, state, image sizes
def test_state_from_named_entries_in_declared_order(act_checkpoint, tmp_path):
    """state_key [a, b]: the entries concatenated in that order; a wrong total names each entry's size and the fix;
    pad_state pads with a warning that says what it padded."""
    tiny_act_checkpoint(tmp_path, state=8, action=7, action_std=0.1)
    spec = {"kind": "policy", "adapter": "lerobot", "path": str(tmp_path), "params": {"state_key": ["tcp_pose", "gripper"]}}
    subject = load_subject(spec)
    st = {"tcp_pose": np.arange(7.0), "gripper": np.array([1.0]), "joint_positions": np.full(6, 9.0)}
    obs = Observation(images={"third_person": np.zeros((32, 32, 3), np.uint8)}, state=st)
    np.testing.assert_array_equal(subject.batch(obs)["observation.state"].numpy(), [0, 1, 2, 3, 4, 5, 6, 1])
    swapped = load_subject(spec, state_key=["gripper", "tcp_pose"])
    np.testing.assert_array_equal(swapped.batch(obs)["observation.state"].numpy(), [1, 0, 1, 2, 3, 4, 5, 6])
    with pytest.raises(InvalidInputError, match=r"joint_positions \(6\) = 6 values, the policy expects 8.*tcp_pose, gripper"):
        load_subject(spec, state_key="joint_positions").batch(obs)
    padded = load_subject(spec, state_key="joint_positions", pad_state=True)
    with pytest.warns(UserWarning, match="zero-padded with 2 zeros to the policy's 8"):
        np.testing.assert_array_equal(padded.batch(obs)["observation.state"].numpy(), [9] * 6 + [0, 0])


def test_spec_params_are_checked_at_load(act_checkpoint):
    d = act_checkpoint[0]
    for params, field in (({"camera_map": {"observation.images.wrist": "wrist"}}, "camera_map.*observation.images.top"),
                          ({"camera_map": ["top"]}, "params.camera_map"), ({"state_key": []}, "params.state_key"),
                          ({"state_key": ["a", "a"]}, "params.state_key"), ({"pad_state": "yes"}, "params.pad_state"),
                          ({"frame": "world"}, "params.frame.*base, tool0"), ({"action_scale": [1, 2]}, "params.action_scale"),
                          ({"action_scale": float("nan")}, "params.action_scale|NaN"), ({"seed": -1}, "params.seed"),
                          ({"gripper": "halfopen"}, "gripper"), ({"action_indices": [0, 1, 2, 3, 4, 5, 6.5]}, "action_indices")):
        with pytest.raises(ConfigError, match=field):
            load_subject(_spec(d, **params))


def test_environment_state_policy_is_refused_unless_opted_in(tmp_path):
    """A policy trained with observation.environment_state (LeRobot adds it whenever the dataset has it) is refused
    at load with the fix; env_state_key feeds it from named observation state entries."""
    tiny_act_checkpoint(tmp_path, state=6, action=7, action_std=0.1, env=3)
    spec = {"kind": "policy", "adapter": "lerobot", "path": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"environment_state \(3 values\).*embeval train demos.*params.env_state_key"):
        load_subject(spec)
    subject = load_subject(spec, env_state_key="object_xyz")
    obs = _obs(0)
    obs.state["object_xyz"] = np.array([0.4, 0.1, 0.02])
    np.testing.assert_allclose(subject.batch(obs)["observation.environment_state"].numpy(), [0.4, 0.1, 0.02])
    subject.reset("x")
    assert isinstance(subject.act(obs), Action)


def test_image_of_another_size_or_aspect_is_warned_about_once(act_checkpoint):
    subject = load_subject(_spec(act_checkpoint[0]))  # trained on 32x32
    state = {"joint_positions": np.zeros(6)}
    with pytest.warns(UserWarning) as rec:
        for _ in range(2):
            subject.batch(Observation(images={"third_person": np.zeros((64, 64, 3), np.uint8)}, state=state))
            subject.batch(Observation(images={"third_person": np.zeros((48, 64, 3), np.uint8)}, state=state))
    msgs = [str(w.message) for w in rec if "px images" in str(w.message)]
    assert len(msgs) == 2  # once per size
    assert "64x64 px images, policy input 'observation.images.top' was trained on 32x32" in msgs[0] and "same aspect" in msgs[0]
    assert "another aspect ratio (1.333 vs 1.000)" in msgs[1] and "stretched" in msgs[1]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        subject.batch(Observation(images={"third_person": np.zeros((32, 32, 3), np.uint8)}, state=state))
