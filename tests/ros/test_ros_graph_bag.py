"""`embeval graph` and its bag: the end summary counts what `bag info` counts; a graph that stops on a
configuration error before it runs leaves no empty bag folder behind."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from embeval_cli import main

CONFIG = Path(__file__).resolve().parents[2] / "config"
pytestmark = pytest.mark.ros


def test_config_error_leaves_no_empty_bag(tmp_path, capsys, monkeypatch):
    pytest.importorskip("rclpy")
    monkeypatch.chdir(tmp_path)  # the default bag folder runs/bags/embeval_<time> and scene folder are relative
    assert main(["graph", "--params", str(CONFIG / "embeval_act2answer.yaml")]) == 2  # no runs/act2answer/scenes
    err = capsys.readouterr().err
    assert "not an Act2Answer scene folder" in err and "Traceback" not in err
    assert not list((tmp_path / "runs" / "bags").glob("*"))
    bag = tmp_path / "named_bag"
    assert main(["graph", "--params", str(CONFIG / "embeval_act2answer.yaml"),
                 "--set", f"embeval_recorder.bag_dir={bag}"]) == 2
    assert not bag.exists()


def test_summary_message_count_is_bag_info(tmp_path, capsys):
    pytest.importorskip("rclpy")
    from embeval.recording import bag_info, read_bag

    bag = tmp_path / "try1"
    assert main(["graph", "--params", str(CONFIG / "embeval_sim.yaml"), "--duration", "2",
                 "--set", f"embeval_recorder.bag_dir={bag}"]) == 0
    out = capsys.readouterr().out
    (n,) = [int(x) for x in re.findall(rf"^bag: {re.escape(str(bag))} \((\d+) messages\)$", out, re.MULTILINE)]
    assert n > 0
    assert n == bag_info(bag)["message_count"] == sum(1 for _ in read_bag(bag))
