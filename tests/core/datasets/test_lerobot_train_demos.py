"""Demonstrations from `embeval train demos` -> LeRobot's own `lerobot-train` (ACT, quantile
normalisation) -> evaluated by embeval from the checkpoint folder LeRobot wrote, no file edited by hand.
Also: the demos' stats carry LeRobot 0.6.1's full set (q01..q99, per episode too) and no privileged field is a
policy input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("lerobot")

from conftest import exercise_lerobot_subject  # noqa: E402

from embeval_cli import main  # noqa: E402

#: lerobot-train for a few steps on the CPU, offline, tiny ACT (11 M parameters, almost all its ResNet-18)
TRAIN_ARGS = ["--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false",
              "--policy.pretrained_backbone_weights=null", "--policy.dim_model=32", "--policy.n_heads=2",
              "--policy.dim_feedforward=64", "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1",
              "--policy.chunk_size=5", "--policy.n_action_steps=5",
              '--policy.normalization_mapping={"VISUAL": "MEAN_STD", "STATE": "QUANTILES", "ACTION": "QUANTILES"}',
              "--steps=2", "--batch_size=2", "--num_workers=0", "--save_freq=2", "--env_eval_freq=0", "--log_freq=1",
              "--wandb.enable=false"]


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot_demos") / "demos"
    assert main(["train", "demos", "--episodes", "2", "--noise", "0", "--out", str(root)]) == 0
    return root


def test_demos_command_points_at_the_recipe(tmp_path, capsys):
    assert main(["train", "demos", "--episodes", "1", "--noise", "0", "--out", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert f"--dataset.root={(tmp_path / 'd').resolve()}" in out and "state_key: [tcp_pose, gripper]" in out


def test_demos_carry_lerobots_stats_and_no_privileged_input(demos):
    from lerobot.datasets.compute_stats import DEFAULT_QUANTILES
    from lerobot.utils.feature_utils import dataset_to_policy_features

    from embeval.datasets import read_lerobot

    info = json.loads((demos / "meta" / "info.json").read_text())
    inputs = dataset_to_policy_features(info["features"])  # what lerobot-train makes policy features of
    assert sorted(inputs) == ["action", "observation.images.third_person", "observation.images.wrist", "observation.state"]
    assert "privileged.task_geometry" in info["features"]
    assert json.loads((demos / "meta" / "embeval.json").read_text())["state_keys"] == ["tcp_pose", "gripper"]
    stats = json.loads((demos / "meta" / "stats.json").read_text())
    want = {"min", "max", "mean", "std", "count"} | {f"q{int(q * 100):02d}" for q in DEFAULT_QUANTILES}
    assert all(set(s) == want for s in stats.values()), {k: sorted(s) for k, s in stats.items()}
    d = read_lerobot(demos)
    a = d.frames["action"].astype(np.float64)
    n = len(a)
    for q, name in ((0.01, "q01"), (0.5, "q50"), (0.99, "q99")):  # smallest value whose empirical CDF reaches q
        np.testing.assert_array_equal(stats["action"][name], np.sort(a, axis=0)[int(np.ceil(q * n)) - 1])
    im = d.frames["observation.images.wrist"].reshape(-1, 3)
    med = np.sort(im, axis=0)[int(np.ceil(0.5 * len(im))) - 1] / 255.0
    np.testing.assert_allclose(np.ravel(stats["observation.images.wrist"]["q50"]), med)
    assert stats["observation.images.wrist"]["count"] == [n]  # frames, as lerobot counts images
    # per episode, as lerobot keeps them: its dataset tools aggregate these (delete_episodes -> new stats.json)
    from lerobot.datasets.dataset_tools import delete_episodes
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/demos", root=demos)
    kept = delete_episodes(ds, [0], output_dir=demos.parent / "one", repo_id="local/one")
    ep1 = a[d.episode_index == 1]
    np.testing.assert_allclose(kept.meta.stats["action"]["mean"], ep1.mean(0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(kept.meta.stats["action"]["q99"], np.sort(ep1, axis=0)[int(np.ceil(0.99 * len(ep1))) - 1])


def test_lerobot_train_checkpoint_runs_in_embeval(demos, tmp_path, capsys):
    out = tmp_path / "train"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_LEROBOT_HOME": str(tmp_path / "hf"),
           "WANDB_MODE": "disabled"}
    exe = Path(sys.executable).with_name("lerobot-train")
    proc = subprocess.run([str(exe), "--dataset.repo_id=local/demos", f"--dataset.root={demos}", f"--output_dir={out}",
                           *TRAIN_ARGS], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = out / "checkpoints" / "last" / "pretrained_model"
    cfg = json.loads((ckpt / "config.json").read_text())
    assert "observation.environment_state" not in cfg["input_features"]
    assert cfg["normalization_mapping"]["ACTION"] == "QUANTILES"
    # the spec of docs/subjects.md's recipe, pointing at the folder lerobot-train wrote
    spec = tmp_path / "act_demos.yaml"
    spec.write_text(f"""kind: policy
adapter: lerobot
path: {ckpt}
params:
  camera_map: {{observation.images.third_person: third_person, observation.images.wrist: wrist}}
  state_key: [tcp_pose, gripper]
""")
    import warnings

    from embeval.act2answer.generator import generate_items

    generate_items(tmp_path / "suite", ["shape"], per_category=1, seed=3)
    (tmp_path / "episode.yaml").write_text("max_steps: 3\n")
    with warnings.catch_warnings():  # images come at the training size (the cell renders at cfg.image_size): no resize
        warnings.filterwarnings("error", message=".*px images, policy input")
        got = exercise_lerobot_subject({"kind": "policy", "adapter": "lerobot", "path": str(ckpt), "params": {
            "camera_map": {"observation.images.third_person": "third_person", "observation.images.wrist": "wrist"},
            "state_key": ["tcp_pose", "gripper"]}}, tmp_path, a2a_steps=0)
        assert got["subject"].cfg.image_size == (96, 128) and got["subject"].cfg.cameras == ("third_person", "wrist")
        assert any(k.startswith("model.encoder.layers.0") for k in got["hidden"])
        # the recipe's last command, as a user runs it
        capsys.readouterr()
        assert main(["act2answer", "run", "--items", str(tmp_path / "suite" / "items.jsonl"), "--policy", str(spec),
                     "--episode", str(tmp_path / "episode.yaml"), "--limit", "1", "--out", str(tmp_path / "a2a")]) == 0
    rows = [json.loads(x) for x in (tmp_path / "a2a" / "episodes_act_demos.jsonl").read_text().splitlines()]
    assert [r["layout"] for r in rows] == ["original", "swapped"] and all(1 <= r["steps"] <= 3 for r in rows)
