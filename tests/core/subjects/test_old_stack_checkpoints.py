"""Checkpoints saved by the previous stack (Python 3.11, LeRobot 0.4.4, transformers 4.57.6) on today's: the small
fixtures in tests/data/old_stack were made once there (MADE_WITH.json) with the outputs that stack gave. A LeRobot
0.4.4 ACT checkpoint loads through ``adapter: lerobot`` and gives the same actions; a transformers 4.57 Qwen2.5-VL
folder whose tokenizer the new release would rebuild differently is refused naming the one-line edit, after which
it gives the same tokens and logits."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lerobot")

from embeval.errors import ConfigError  # noqa: E402
from embeval.subjects import load_subject  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data" / "old_stack"


def test_fixtures_were_made_on_the_old_stack():
    made = json.loads((DATA / "MADE_WITH.json").read_text())
    assert made["python"].startswith("3.11.") and made["lerobot"] == "0.4.4" and made["transformers"] == "4.57.6"
    cfg = json.loads((DATA / "lerobot_0.4.4_act" / "config.json").read_text())
    assert cfg["type"] == "act" and "pretrained_revision" not in cfg  # the field LeRobot >= 0.5 writes


def test_lerobot_0_4_4_checkpoint_gives_the_same_actions():
    """The policy and processors the adapter loads against the chunk LeRobot 0.4.4 computed for the same inputs."""
    want = np.load(DATA / "lerobot_0.4.4_act_expected.npz")
    policy = load_subject({"kind": "policy", "adapter": "lerobot", "path": str(DATA / "lerobot_0.4.4_act"),
                           "params": {"state_key": ["joints"], "env_state_key": ["objects"], "seed": 0,
                                      "action_scale": 1.0}})
    batch = policy.pre({"observation.environment_state": torch.tensor(want["env_state"]),
                        "observation.state": torch.tensor(want["state"]), "task": ["pick"]})
    with torch.no_grad():
        got = policy.post(policy.policy.predict_action_chunk(batch)).numpy()
    assert got.shape == want["actions"].shape == (1, 3, 7)
    np.testing.assert_allclose(got, want["actions"], atol=1e-6)


def test_transformers_4_57_folder_is_refused_then_loads_after_the_named_edit(tmp_path):
    from PIL import Image

    src = DATA / "transformers_4.57_qwen2_5_vl"
    with pytest.raises(ConfigError, match=r'tokenizer.json holds a WordLevel tokenizer.*"tokenizer_class": '
                                          r'"PreTrainedTokenizerFast" in its tokenizer_config.json') as err:
        load_subject({"kind": "vlm", "adapter": "hf", "path": str(src)})
    assert "\n" not in str(err.value)
    d = tmp_path / "qwen"
    shutil.copytree(src, d)
    conf = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**conf, "tokenizer_class": "PreTrainedTokenizerFast"}))
    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(d)})
    want = np.load(DATA / "transformers_4.57_qwen2_5_vl_expected.npz")
    assert vlm.prompt_text(1, "which picture") == str(want["text"])
    inputs = vlm.processor(text=[str(want["text"])], images=[Image.fromarray(want["image"])], return_tensors="pt")
    assert inputs["input_ids"].tolist() == want["input_ids"].tolist()
    with torch.no_grad():
        logits = vlm.model(**inputs).logits[0, -1].numpy()
        tokens = vlm.model.generate(**inputs, max_new_tokens=4, do_sample=False)[0, inputs["input_ids"].shape[1]:]
    np.testing.assert_allclose(logits, want["logits"], atol=1e-4)
    assert tokens.tolist() == want["tokens"].tolist()
