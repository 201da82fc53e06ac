"""Checkpoints saved by the stack embeval installed before Python 3.12 load on today's and give the numbers they
gave there: a LeRobot 0.4.4 ACT folder (policy + processors) and a transformers 4.57 Qwen2.5-VL folder, both
made once by tests/data/old_stack/make_fixtures.py under that stack, with the outputs it recorded beside them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from embeval.action import Action, Observation  # noqa: E402
from embeval.subjects import load_subject  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "old_stack"


@pytest.fixture
def act_folder(tmp_path):
    dst = tmp_path / "lerobot044_act"
    shutil.copytree(DATA / "lerobot044_act", dst)
    return dst


def test_lerobot_044_act_checkpoint_gives_its_044_action(act_folder):
    pytest.importorskip("lerobot")
    import lerobot
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    want = json.loads((act_folder / "expected.json").read_text())
    assert want["lerobot"] == "0.4.4" and lerobot.__version__ != "0.4.4"
    policy = ACTPolicy.from_pretrained(str(act_folder)).eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(act_folder))
    batch = {"observation.state": torch.tensor([want["state"]]),
             "observation.environment_state": torch.tensor([want["environment_state"]]), "task": ["pick up the cube"]}
    with torch.no_grad():
        got = post(policy.select_action(pre(batch)))[0].numpy()
    np.testing.assert_allclose(got, want["action"], rtol=0, atol=1e-6)


def test_lerobot_044_act_checkpoint_runs_through_the_adapter(act_folder):
    pytest.importorskip("lerobot")
    want = json.loads((act_folder / "expected.json").read_text())
    subject = load_subject({"kind": "policy", "adapter": "lerobot", "path": str(act_folder),
                            "params": {"state_key": "tcp_pose", "env_state_key": "object", "seed": 0}})
    obs = Observation(images={}, instruction="pick up the cube",
                      state={"tcp_pose": np.array(want["state"]), "object": np.array(want["environment_state"])})
    b = subject.batch(obs)
    np.testing.assert_allclose(b["observation.state"].numpy().ravel(), want["state"], atol=1e-7)
    subject.reset("pick up the cube")
    act = subject.act(obs)
    assert isinstance(act, Action) and np.all(np.isfinite(act.vector))


def test_transformers_457_qwen2_5_vl_loads_whole_and_continues_its_457_prompt():
    """Every weight loads (none missing or unexpected) and, from the prompt ids 4.57 made, greedy decoding gives
    4.57's first three answer tokens (the fourth is a near-tie of random weights and differs). The tokenizer
    itself does NOT tokenize the same under 5.x (this synthetic tiny vocabulary; see docs/stack.md)."""
    pytest.importorskip("transformers")
    from PIL import Image
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    d = DATA / "transformers457_qwen2_5_vl"
    want = json.loads((d / "expected.json").read_text())
    assert want["transformers"].startswith("4.")
    model, info = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(d), output_loading_info=True)
    assert not any(info.values()), info
    proc = AutoProcessor.from_pretrained(str(d))
    img = np.random.default_rng(want["image_seed"]).integers(0, 256, tuple(want["image_shape"]), dtype=np.uint8)
    pix = proc(text=["<|image_pad|>"], images=[Image.fromarray(img)], return_tensors="pt")
    ids = torch.tensor([want["input_ids"]])
    with torch.no_grad():
        out = model.eval().generate(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pix["pixel_values"],
                                    image_grid_thw=pix["image_grid_thw"], max_new_tokens=4, do_sample=False)
    assert out[0, ids.shape[1]:].tolist()[:3] == want["tokens"][:3]
    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(d), "params": {"max_new_tokens": 4}})
    assert isinstance(vlm.generate([img], want["prompt"]), str)
