"""`embeval graph` / `embeval bag` command plumbing and parameter-file parsing (no graph is started)."""
from __future__ import annotations

import pytest

from embeval.cli import main
from embeval.errors import ConfigError, MissingFileError


def test_graph_overrides_parse_yaml_values():
    from embeval.cli.graph import apply_overrides

    p = apply_overrides({"embeval_policy": {"dry_run": True}},
                        ["embeval_policy.dry_run=false", "embeval_arm.workspace_lower=[0.1, -0.2, 0.0]", "embeval_camera.rate_hz=15"])
    assert p == {"embeval_policy": {"dry_run": False}, "embeval_arm": {"workspace_lower": [0.1, -0.2, 0.0]},
                 "embeval_camera": {"rate_hz": 15}}
    with pytest.raises(ConfigError, match="NODE.PARAM=VALUE"):
        apply_overrides({}, ["dry_run=false"])


def test_load_params_merges_wildcard_and_rejects_unknown_nodes(tmp_path):
    from embeval_ros.graph import load_params

    f = tmp_path / "p.yaml"
    f.write_text("/**:\n  ros__parameters: {seed: 7}\nembeval_distortion:\n  ros__parameters: {level: 2, seed: 1}\n"
                 "/embeval_camera:\n  ros__parameters: {}\n")
    assert load_params(f) == {"embeval_distortion": {"seed": 1, "level": 2}, "embeval_camera": {"seed": 7}}
    f.write_text("embeval_lidar:\n  ros__parameters: {}\n")
    with pytest.raises(ConfigError, match="unknown node"):
        load_params(f)
    f.write_text("embeval_camera: {rate_hz: 3}\n")
    with pytest.raises(ConfigError, match="ros__parameters"):
        load_params(f)
    with pytest.raises(MissingFileError):
        load_params(tmp_path / "none.yaml")


def test_distortion_schedule_parsing():
    pytest.importorskip("rclpy")
    from embeval_ros.distortion_node import parse_schedule

    assert parse_schedule(["gaussian_blur:3:5.0", "none:0:2"]) == [("gaussian_blur", 3, 5.0), ("none", 0, 2.0)]
    with pytest.raises(ConfigError, match="type:level:seconds"):
        parse_schedule(["gaussian_blur:3"])


def test_bag_commands(tmp_path, capsys):
    from embeval.recording import BagRecorder, typestore

    bag = tmp_path / "b"
    with BagRecorder(bag, segment_s=0.1) as rec:
        rec.add_topic("/embeval/events", "std_msgs/msg/String")
        for i in range(5):
            rec.write_msg("/embeval/events", typestore().types["std_msgs/msg/String"](data=str(i)), 10**9 + i * 60_000_000)
    assert main(["bag", "info", str(bag)]) == 0
    out = capsys.readouterr().out
    assert "5 messages" in out and "/embeval/events" in out and "std_msgs/msg/String" in out
    (bag / ".open_9").mkdir()
    assert main(["bag", "recover", str(bag)]) == 0
    assert ".open_9" in capsys.readouterr().out and not (bag / ".open_9").exists()
    assert main(["bag", "info", str(tmp_path / "missing")]) == 2  # a user error, not a traceback
