"""LeRobot: every VLA-style policy type LeRobot 0.6.1 ships. The ones that build offline (ACT,
Diffusion, and SmolVLA on a local tiny SmolVLM backbone folder) are built tiny from the library's config classes,
saved in LeRobot's ``pretrained_model/`` layout with their normalisation stats, loaded by path through the adapter
with a camera map, and run through one policy-decision unit and one Act2Answer episode with hidden states. The
others are built from hub files (a PaliGemma / SmolVLM / Florence / Qwen backbone or tokenizer): without them the
adapter refuses at load, before building anything, naming each repo to fetch (SmolVLA too, with its default
backbone name)."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lerobot")

from conftest import exercise_lerobot_subject  # noqa: E402

from embeval.errors import MissingWeightsError  # noqa: E402
from embeval.subjects import load_subject  # noqa: E402

#: LeRobot 0.6.1's VLA-style policy types (lerobot/policies/)
VLA_TYPES = ("act", "diffusion", "pi0", "pi05", "pi0_fast", "smolvla", "groot", "xvla", "wall_x", "eo1", "evo1",
             "vla_jepa", "molmoact2", "multi_task_dit", "fastwam", "lingbot_va")
#: built and run offline here (smolvla: on a local backbone folder; with its default hub backbone it is a hub type)
OFFLINE = ("act", "diffusion", "smolvla")
#: repos each hub type needs, as written in LeRobot 0.6.1's configs/processors (an independent copy of the table)
HUB_REPOS = {
    "pi0": ["google/paligemma-3b-pt-224"], "pi05": ["google/paligemma-3b-pt-224"],
    "pi0_fast": ["google/paligemma-3b-pt-224", "lerobot/fast-action-tokenizer"],
    "smolvla": ["HuggingFaceTB/SmolVLM2-500M-Video-Instruct"],
    "groot": ["nvidia/GR00T-N1.7-3B", "nvidia/Cosmos-Reason2-2B"], "xvla": ["facebook/bart-large"],
    "wall_x": ["x-square-robot/wall-oss-flow"],  # its default prediction_mode "diffusion" loads no FAST tokenizer
    "eo1": ["Qwen/Qwen2.5-VL-3B-Instruct"], "evo1": ["OpenGVLab/InternVL3-1B-hf"],
    "vla_jepa": ["Qwen/Qwen3-VL-2B-Instruct", "facebook/vjepa2-vitl-fpc64-256"],
    "molmoact2": ["allenai/MolmoAct2", "allenai/MolmoAct2-FAST-Tokenizer"],
    "multi_task_dit": ["openai/clip-vit-base-patch16"],
    "fastwam": ["Wan-AI/Wan2.2-TI2V-5B", "google/umt5-xxl", "Wan-AI/Wan2.2-TI2V-5B-Diffusers", "lerobot/fastwam_base"],
    "lingbot_va": ["robbyant/lingbot-va-base"],
}
CAMS = {"observation.images.top": "third_person", "observation.images.wrist": "wrist"}


def _features(state: int = 8, action: int = 7):
    from lerobot.configs.types import FeatureType, PolicyFeature

    return ({**{k: PolicyFeature(type=FeatureType.VISUAL, shape=(3, 48, 64)) for k in CAMS},
             "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state,))},
            {"action": PolicyFeature(type=FeatureType.ACTION, shape=(action,))})


def _stats(cfg):
    """Dataset stats of every kind the policy's normalisation reads (mean/std, min/max, quantiles)."""
    lim = torch.tensor([0.02, 0.02, 0.02, 0.1, 0.1, 0.1, 1.0])
    vec = lambda lo, hi: {"mean": (lo + hi) / 2, "std": (hi - lo) / 4, "min": lo, "max": hi,  # noqa: E731
                          "q01": lo, "q99": hi, "q10": lo / 2, "q90": hi / 2}
    img = {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25), "min": torch.zeros(3, 1, 1),
           "max": torch.ones(3, 1, 1), "q01": torch.zeros(3, 1, 1), "q99": torch.ones(3, 1, 1)}
    return {**{k: img for k in CAMS}, "observation.state": vec(-torch.ones(8), torch.ones(8)),
            "action": vec(torch.cat([-lim[:6], torch.zeros(1)]), lim)}


def smolvlm_backbone(d):
    """A tiny SmolVLM folder (tests/hf_families.py) whose tokenizer names SmolVLM2's special tokens as its
    tokenizer_config.json does (``fake_image_token`` ...: SmolVLA reads their ids), for SmolVLA's ``vlm_model_name``."""
    from hf_families import build_smolvlm

    d.mkdir(parents=True)
    build_smolvlm(d)
    conf = json.loads((d / "tokenizer_config.json").read_text())
    conf["extra_special_tokens"] = {"fake_image_token": "<fake_token_around_image>", "global_image_token": "<global-img>",
                                    "image_token": "<image>", "end_of_utterance_token": "<end_of_utterance>"}
    (d / "tokenizer_config.json").write_text(json.dumps(conf))
    return d


def _build(kind: str, folder):
    """A tiny policy of ``kind`` from lerobot's config classes (random weights, torch seed 0), saved with its
    processors in ``folder`` (the layout of lerobot-train's checkpoints/<step>/pretrained_model)."""
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    inputs, outputs = _features()
    if kind == "act":
        from lerobot.policies.act.configuration_act import ACTConfig

        cfg = ACTConfig(device="cpu", pretrained_backbone_weights=None, dim_model=16, n_heads=2, dim_feedforward=32,
                        n_encoder_layers=1, n_decoder_layers=1, use_vae=False, chunk_size=3, n_action_steps=3,
                        input_features=inputs, output_features=outputs)
    elif kind == "smolvla":
        from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig

        cfg = SmolVLAConfig(device="cpu", vlm_model_name=str(smolvlm_backbone(folder.parent / "smolvlm")),
                            load_vlm_weights=False, num_vlm_layers=2, chunk_size=4, n_action_steps=4, num_steps=2,
                            resize_imgs_with_padding=(56, 56), max_state_dim=8, max_action_dim=8,
                            input_features=inputs, output_features=outputs)
    else:
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

        cfg = DiffusionConfig(device="cpu", pretrained_backbone_weights=None, n_obs_steps=2, horizon=8, n_action_steps=4,
                              num_inference_steps=2, down_dims=(16, 32), diffusion_step_embed_dim=16, crop_shape=None,
                              spatial_softmax_num_keypoints=8, input_features=inputs, output_features=outputs)
    torch.manual_seed(0)
    policy = get_policy_class(kind)(cfg).eval()
    pre, post = make_pre_post_processors(cfg, dataset_stats=_stats(cfg))
    for obj in (policy, pre, post):
        obj.save_pretrained(folder)
    return cfg


def test_the_family_list_is_lerobots():
    import lerobot.policies  # noqa: F401  (registers the config choices)
    from lerobot.configs.policies import PreTrainedConfig

    from embeval.subjects.adapters.lerobot_policy import HUB_NEEDS

    shipped = set(PreTrainedConfig.get_known_choices())
    assert set(VLA_TYPES) <= shipped, set(VLA_TYPES) - shipped
    assert set(HUB_NEEDS) | set(OFFLINE) == set(VLA_TYPES) and set(HUB_REPOS) == set(HUB_NEEDS)


@pytest.mark.parametrize("kind", OFFLINE)
def test_offline_family_runs_decision_and_act2answer(kind, tmp_path):
    cfg = _build(kind, tmp_path / "pretrained_model")
    spec = {"kind": "policy", "adapter": "lerobot", "path": str(tmp_path / "pretrained_model"),
            "params": {"camera_map": CAMS, "state_key": ["tcp_pose", "gripper"], "seed": 0}}
    got = exercise_lerobot_subject(spec, tmp_path, a2a_steps=3)
    subject = got["subject"]
    assert subject.config.type == kind and subject.action_spec.chunk_size == cfg.n_action_steps
    assert subject.cfg.image_size == (48, 64) and subject.cfg.cameras == ("third_person", "wrist")
    # SmolVLA runs its text and expert layers part by part (attention projections, MLP), not as blocks: the blocks
    # that run whole are its vision encoder's; the expert's MLP is read when named
    layer = {"act": "model.encoder.layers.0", "diffusion": "diffusion.unet.mid_modules.0",
             "smolvla": "model.vlm_with_expert.vlm.model.vision_model.encoder.layers.0"}[kind]
    assert layer in got["hidden"]
    if kind == "smolvla":
        from embeval.action import Observation

        rng = np.random.default_rng(1)
        obs = Observation(images={c: rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for c in CAMS.values()},
                          instruction="pick", state={"tcp_pose": rng.normal(size=7), "gripper": np.ones(1)})
        mlp = "model.vlm_with_expert.lm_expert.layers.1.mlp"
        got_mlp = subject.hidden_states(obs, layers=[mlp])[mlp]
        assert got_mlp.shape == (1, subject.policy.model.vlm_with_expert.expert_hidden_size)
    acts = np.asarray(got["episode"].actions)
    assert acts.shape == (got["episode"].steps, 7) and np.all((acts[:, 6] >= 0) & (acts[:, 6] <= 1))
    # un-normalised by the saved stats: a translation step within the action's range (|dx| <= 0.02 m at 4 std / clip)
    assert np.abs(acts[:, :3]).max() < 0.1


@pytest.mark.parametrize("kind", sorted(HUB_REPOS))
def test_hub_family_without_its_hub_files_names_them(kind, tmp_path, monkeypatch):
    """Built from the library's config class and saved as a checkpoint folder; with an empty hub cache and
    HF_HUB_OFFLINE the adapter refuses at load (before building the model) naming every repo it needs."""
    import huggingface_hub.constants as hc
    import lerobot.policies  # noqa: F401
    from lerobot.configs.policies import PreTrainedConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    inputs, outputs = _features()
    folder = tmp_path / "pretrained_model"
    folder.mkdir()
    try:
        cfg = PreTrainedConfig.get_choice_class(kind)(device="cpu", input_features=inputs, output_features=outputs)
        cfg._save_pretrained(folder)
    except Exception:  # a config class that fetches hub files while it is built (eo1): the config.json a user has
        (folder / "config.json").write_text(json.dumps({"type": kind, "device": "cpu"}))
    (folder / "model.safetensors").write_bytes(b"")
    built = []
    from lerobot.policies import factory

    monkeypatch.setattr(factory, "get_policy_class", lambda name: built.append(name))
    with pytest.raises(MissingWeightsError) as err:
        load_subject({"kind": "policy", "adapter": "lerobot", "path": str(folder), "params": {"camera_map": CAMS}})
    msg = str(err.value)
    assert f"policy type {kind!r}" in msg and "\n" not in msg and not built
    for repo in HUB_REPOS[kind]:
        assert f"{repo} (" in msg and f"hf download {repo}" in msg


def test_docs_table_names_every_type_and_its_hub_files():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "subjects.md").read_text()
    table = doc[doc.index("#### LeRobot families, tested offline"):]
    table = table[:table.index("\n\n", table.index("| type |"))]
    for kind in VLA_TYPES:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{kind}` |"))
        assert all(f"`{repo}`" in row for repo in HUB_REPOS.get(kind, [])), kind
        assert (kind in OFFLINE) == ("| none" in row), kind


@pytest.mark.parametrize("value", [123, ["a"], None, "  "])
def test_hub_repo_field_that_is_not_a_name_is_one_config_error(value, tmp_path, monkeypatch):
    """The hub check reads config.json before LeRobot type-checks it: a repo field that is no string is named, not a
    TypeError from deep inside the path or hub code."""
    from embeval.errors import ConfigError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "config.json").write_text(json.dumps({"type": "smolvla", "vlm_model_name": value}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"'smolvla': its config names the SmolVLM config .* as .*fix that field"):
        load_subject({"kind": "policy", "adapter": "lerobot", "path": str(tmp_path)})
