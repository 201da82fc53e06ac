"""`embeval graph` / `embeval bag` command plumbing and parameter-file parsing (no graph is started)."""
from __future__ import annotations

from pathlib import Path

import pytest

from embeval_cli import main
from embeval.errors import ConfigError, MissingFileError


def test_graph_overrides_parse_yaml_values():
    from embeval_cli.graph import apply_overrides

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


def test_act2answer_scenes_prints_the_next_command(tmp_path, capsys, monkeypatch):
    from embeval.act2answer.generator import generate_items

    generate_items(tmp_path / "suite", ["color"], per_category=1, seed=0)
    monkeypatch.chdir(tmp_path)
    assert main(["act2answer", "scenes", "--items", "suite/items.jsonl", "--out", "my scenes"]) == 0
    out = capsys.readouterr().out
    import os
    import re
    import shlex

    params = Path(__file__).resolve().parents[2] / "config" / "embeval_act2answer.yaml"
    m = re.search(r"embeval graph --params (\S+|'[^']+') --set embeval_conductor.act2answer_scenes='my scenes'\n", out)
    assert m and os.path.samefile(shlex.split(m.group(1))[0], params), out  # the repository's file, from this folder
    assert "ros2 launch embeval_ros act2answer_sim2real.launch.py backend:=sim scenes:='my scenes'" in out
    assert main(["act2answer", "scenes", "--items", "suite/items.jsonl", "--out", "runs/act2answer/scenes"]) == 0
    out = capsys.readouterr().out  # the parameter file's own folder: nothing to override
    m = re.search(r"  embeval graph --params (\S+|'[^']+')\n", out)
    assert m and os.path.samefile(shlex.split(m.group(1))[0], params) and "backend:=sim      #" in out, out


def test_graph_prints_one_line_per_act2answer_unit(tmp_path):
    from embeval_cli.graph import act2answer_lines

    recs = [{"item": "color-0000", "layout": "original", "zone": "correct", "choice": "right", "end_reason": "released",
             "steps": 18, "cube_source": "sim"},
            {"item": "color-0000", "layout": "swapped", "zone": "out_of_bounds", "choice": None, "end_reason": "max_steps",
             "steps": 24, "cube_source": "sim"}]
    lines = act2answer_lines(recs, str(tmp_path / "ep.jsonl"))
    assert lines[1].split() == ["color-0000@original", "correct", "right", "released", "18", "sim"]
    assert lines[2].split() == ["color-0000@swapped", "out_of_bounds", "-", "max_steps", "24", "sim"]
    assert lines[3] == f"episodes: 2 appended to {tmp_path / 'ep.jsonl'}  (embeval act2answer report {tmp_path / 'ep.jsonl'})"
    assert "episodes_jsonl" in act2answer_lines(recs)[-1]


@pytest.mark.ros
def test_graph_with_the_act2answer_params_reports_units(tmp_path, capsys):
    """`embeval graph --params config/embeval_act2answer.yaml` (a scripted policy, one unit): the unit's line and the JSONL."""
    pytest.importorskip("rclpy")
    import json
    from pathlib import Path

    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import export_scenes

    items = generate_items(tmp_path / "suite", ["color"], per_category=1, seed=0)
    scenes = export_scenes(items, tmp_path / "scenes")
    unit = f"{items[0].id}@original"
    params = Path(__file__).resolve().parents[2] / "config" / "embeval_act2answer.yaml"
    args = ["graph", "--params", str(params), "--nodes", "embeval_camera", "embeval_distortion", "embeval_policy", "embeval_arm",
            "embeval_scorer", "embeval_conductor",
            "--set", f"embeval_conductor.act2answer_scenes={scenes}", "--set", f"embeval_conductor.act2answer_items=[{unit}]",
            "--set", "embeval_conductor.settle_s=0.5",
            "--set", "embeval_policy.subject=embeval.act2answer.reference_policies:ScriptedPlacer",
            "--set", f"embeval_scorer.store={tmp_path / 'a.sqlite'}", "--set", f"embeval_scorer.episodes_jsonl={tmp_path / 'ep.jsonl'}"]
    assert main(args) == 0
    out = capsys.readouterr().out
    (rec,) = [json.loads(line) for line in (tmp_path / "ep.jsonl").read_text().splitlines()]
    zone = "correct" if items[0].correct_side_in("original") == "left" else "incorrect"
    assert rec["zone"] == zone and rec["end_reason"] == "released"
    line = next(x for x in out.splitlines() if x.startswith(unit))
    assert line.split() == [unit, zone, "left", "released", str(rec["steps"]), "sim"]
    assert f"episodes: 1 appended to {tmp_path / 'ep.jsonl'}" in out
