"""LeRobot-format demonstrations: our writer's output is read back by lerobot's own LeRobotDataset."""
from __future__ import annotations

import json

import numpy as np
import pytest

from embeval.datasets import Feature, LeRobotWriter, read_lerobot, validate_layout
from embeval.errors import ConfigError, InvalidInputError, MissingFileError

FEATURES = {
    "observation.images.third_person": Feature("image", (24, 32, 3), ["height", "width", "channels"]),
    "observation.state": Feature("float32", (4,), ["x", "y", "z", "gripper"]),
    "action": Feature("float32", (7,), ["dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"]),
}


def _write(root, n_eps=3, length=5, seed=0):
    rng = np.random.default_rng(seed)
    w = LeRobotWriter(root, fps=10, features=FEATURES)
    eps = []
    for e in range(n_eps):
        ep = {"observation.images.third_person": rng.integers(0, 256, (length + e, 24, 32, 3), dtype=np.uint8),
              "observation.state": rng.random((length + e, 4)).astype(np.float32),
              "action": rng.random((length + e, 7)).astype(np.float32)}
        w.add_episode(ep, task=f"pick up the {['red', 'blue'][e % 2]} cube", extra={"seed": e})
        eps.append(ep)
    w.finalize()
    return eps


def test_roundtrip_own_reader(tmp_path):
    eps = _write(tmp_path / "ds")
    d = read_lerobot(tmp_path / "ds")
    assert d.tasks == ["pick up the red cube", "pick up the blue cube"]
    assert d.info["total_frames"] == 5 + 6 + 7 and d.info["total_episodes"] == 3
    np.testing.assert_array_equal(d.frames["observation.images.third_person"][5:11], eps[1]["observation.images.third_person"])
    np.testing.assert_allclose(d.frames["action"][11:], eps[2]["action"])
    assert list(d.task_index[:5]) == [0] * 5 and list(d.task_index[5:11]) == [1] * 6
    assert [json.loads(r["embeval/seed"]) for r in d.episodes] == [0, 1, 2]


def test_lerobot_reads_our_dataset(tmp_path):
    """Independent check: lerobot's LeRobotDataset (v3.0 reader) loads the folder offline."""
    pytest.importorskip("lerobot")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    eps = _write(tmp_path / "ds")
    ds = LeRobotDataset("local/embeval-test", root=tmp_path / "ds")
    assert len(ds) == 18 and ds.num_episodes == 3 and ds.fps == 10
    item = ds[5 + 2]  # episode 1, frame 2
    assert int(item["episode_index"]) == 1 and int(item["frame_index"]) == 2
    assert item["task"] == "pick up the blue cube"
    img = item["observation.images.third_person"].numpy()  # (3, H, W) float in [0, 1]
    np.testing.assert_allclose(img.transpose(1, 2, 0) * 255, eps[1]["observation.images.third_person"][2], atol=0.51)
    np.testing.assert_allclose(item["action"].numpy(), eps[1]["action"][2], rtol=1e-6)
    assert ds.meta.stats["action"]["mean"].shape == (7,)


def test_layout_errors(tmp_path):
    with pytest.raises(MissingFileError):
        validate_layout(tmp_path)
    _write(tmp_path / "ds")
    info = json.loads((tmp_path / "ds/meta/info.json").read_text())
    info["total_frames"] += 1
    (tmp_path / "ds/meta/info.json").write_text(json.dumps(info))
    with pytest.raises(InvalidInputError, match="frames"):
        validate_layout(tmp_path / "ds")
    with pytest.raises(ConfigError, match="already holds"):
        LeRobotWriter(tmp_path / "ds", fps=10, features=FEATURES)
    w = LeRobotWriter(tmp_path / "other", fps=10, features=FEATURES)
    with pytest.raises(InvalidInputError, match="shape"):
        w.add_episode({"observation.images.third_person": np.zeros((2, 8, 8, 3), np.uint8),
                       "observation.state": np.zeros((2, 4)), "action": np.zeros((2, 7))}, task="t")
