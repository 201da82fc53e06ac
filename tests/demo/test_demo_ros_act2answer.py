"""The demo's ros stage runs Act2Answer units with the checkpoint the act2answer stage ran, and fails (it
does not print a skip) when that stage's outputs are missing."""
import types

import pytest

from embeval.errors import MissingFileError


def test_ros_stage_fails_with_its_reason_without_the_act2answer_stage(tmp_path, monkeypatch):
    pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")
    from embeval_demo.ros import act2answer_sim2real

    ctx = types.SimpleNamespace(out_dir=tmp_path, quick=True, seed=0)
    with pytest.raises(MissingFileError, match="run `embeval demo --only act2answer` first"):
        act2answer_sim2real(ctx, tmp_path / "ros")


def test_the_checkpoint_is_the_one_the_act2answer_stage_ran(tmp_path, monkeypatch):
    from embeval.act2answer.scene import EpisodeSpec
    from embeval_demo import act2answer as demo

    ctx = types.SimpleNamespace(quick=True, seed=0)
    assert demo.finetune_folder(tmp_path, ctx, EpisodeSpec()) is None  # the quick recipe is trained, not shipped
    (tmp_path / "tiny-vla-a2a").mkdir()
    (tmp_path / "tiny-vla-a2a" / "config.json").write_text("{}")
    assert demo.finetune_folder(tmp_path, ctx, EpisodeSpec()) == tmp_path / "tiny-vla-a2a"  # the stage's own fine-tune
