"""docs/ros.md "Record a cell once, evaluate against the recording": its commands, run. No camera here, so
`embeval camera record` must say so in one line; the recording is then made by a librealsense software device at
the path the docs use, and the iqa build and graph commands run against it (shortened: two references, one
distortion, a scripted subject; two steps per episode)."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("pyrealsense2", reason="pyrealsense2 is not installed: run scripts/install.sh")
pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed: run scripts/install.sh")
pytestmark = pytest.mark.ros

from realsense_software import SoftwareCamera  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _commands() -> list[list[str]]:
    text = (ROOT / "docs" / "ros.md").read_text()
    sec = text.split("### Record a cell once, evaluate against the recording", 1)[1].split("\n### ", 1)[0]
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", sec, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line:
                cmds.append(shlex.split(line))
    return cmds


def _run(argv: list[str], cwd: Path, timeout: float = 240):
    assert argv[0] == "embeval"
    return subprocess.run([sys.executable, "-m", "embeval_cli", *argv[1:]], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_the_record_and_evaluate_commands_of_docs_ros(tmp_path):
    cmds = _commands()
    assert [c[:3] for c in cmds] == [["embeval", "camera", "record"], ["embeval", "iqa", "build"], ["embeval", "graph", "--params"]]
    (tmp_path / "config").symlink_to(ROOT / "config")
    from embeval.camera.realsense import realsense_devices

    if realsense_devices():
        pytest.skip("a RealSense is connected: the docs' record command would record it")
    r = _run(cmds[0], tmp_path, 60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no RealSense connected" in r.stderr, r.stderr
    rec = tmp_path / cmds[0][cmds[0].index("--out") + 1]
    rec.parent.mkdir(parents=True, exist_ok=True)
    SoftwareCamera().write(rec, 24)  # what the camera would have recorded

    subj = tmp_path / "p.yaml"
    subj.write_text(yaml.safe_dump({"kind": "policy", "adapter": "image_stats", "params": {"scale": 0.1}}))
    build = [a if a != "20" else "2" for a in cmds[1]] + ["--distortions", "darken", "--levels", "3", "--subjects",
                                                          str(subj), "--no-progress"]
    r = _run(build, tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    db = tmp_path / cmds[1][cmds[1].index("--out") + 1]
    scores = (db / "scores.csv").read_text().splitlines()
    assert len(scores) == 1 + 2 and all("rs_cell_f" in row for row in scores[1:])

    r = _run(cmds[2] + ["--set", "embeval_conductor.steps_per_episode=2", "--set",
                        f"embeval_scorer.store={tmp_path / 'results.sqlite'}"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("hil-0 ")]
    assert [row[1] for row in rows] == ["none", "motion_blur"], r.stdout  # both episodes scored on the recording
    assert "playing RealSense recording" in r.stdout + r.stderr
