"""Writes the old-stack checkpoints under this folder, once, with the 3.11 environment of LeRobot 0.4.4 and
transformers 4.57 (the stack embeval installed before Python 3.12):

    python tests/data/old_stack/make_fixtures.py   # run by that interpreter, PYTHONPATH=tests

- ``lerobot044_act/``: a LeRobot 0.4.4 ACT policy (random weights, torch seed 0) on a 7-dim state and a 4-dim
  environment state (no camera, so no ResNet backbone: a few hundred kB), with its pre/post processors, as
  ``policy.save_pretrained`` + ``make_pre_post_processors(...).save_pretrained`` write them. ``expected.json``
  holds the action it gives for a fixed observation under 0.4.4.
- ``transformers457_qwen2_5_vl/``: the tiny Qwen2.5-VL of tests/hf_families.py saved by transformers 4.57.
  ``expected.json`` holds its greedy answer tokens for a fixed image and prompt under 4.57.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


def act() -> None:
    import lerobot
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    out = HERE / "lerobot044_act"
    cfg = ACTConfig(device="cpu", pretrained_backbone_weights=None, dim_model=16, n_heads=2, dim_feedforward=32,
                    n_encoder_layers=1, n_decoder_layers=1, use_vae=False, chunk_size=1, n_action_steps=1,
                    input_features={"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(7,)),
                                    "observation.environment_state": PolicyFeature(type=FeatureType.ENV, shape=(4,))},
                    output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))})
    torch.manual_seed(0)
    policy = ACTPolicy(cfg).eval()
    stats = {"observation.state": {"mean": torch.zeros(7), "std": torch.ones(7)},
             "observation.environment_state": {"mean": torch.zeros(4), "std": torch.ones(4)},
             "action": {"mean": torch.zeros(7), "std": torch.full((7,), 0.05)}}
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    for x in (policy, pre, post):
        x.save_pretrained(out)
    state = np.linspace(-0.3, 0.3, 7, dtype=np.float32)
    env = np.array([0.1, -0.2, 0.3, 0.05], dtype=np.float32)
    batch = {"observation.state": torch.from_numpy(state)[None], "observation.environment_state": torch.from_numpy(env)[None],
             "task": ["pick up the cube"]}
    with torch.no_grad():
        action = post(policy.select_action(pre(batch)))
    (out / "expected.json").write_text(json.dumps({
        "lerobot": lerobot.__version__, "torch": torch.__version__, "state": state.tolist(),
        "environment_state": env.tolist(), "action": action[0].tolist()}, indent=1) + "\n")


def qwen() -> None:
    import transformers
    sys.path.insert(0, str(HERE.parents[1]))
    from hf_families import build_family

    out = HERE / "transformers457_qwen2_5_vl"
    model, proc = build_family("qwen2_5_vl", out)
    img = np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    from PIL import Image
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is on the table?"}]}]
    text = proc.apply_chat_template(msgs, add_generation_prompt=True)
    inputs = proc(text=[text], images=[Image.fromarray(img)], return_tensors="pt")
    with torch.no_grad():
        gen = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    new = gen[0, inputs["input_ids"].shape[1]:].tolist()
    (out / "expected.json").write_text(json.dumps({
        "transformers": transformers.__version__, "prompt": "What is on the table?", "image_seed": 0,
        "image_shape": [40, 50, 3], "tokens": new}, indent=1) + "\n")


if __name__ == "__main__":
    act()
    qwen()
