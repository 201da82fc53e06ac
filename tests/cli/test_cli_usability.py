"""What a new user trips over: every mistake ends in one line that names the problem and the fix, exit code 2
(1 where part of the work was done), no traceback, and no result already computed is lost."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from embeval_cli import main

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("embeval: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_an_os_error_is_one_line_naming_the_path(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    rc, _, err = _run(capsys, "kinematics", "urdf", "--model", "ur5", "-o", str(blocker / "ur5.urdf"))
    assert rc == 2
    line = _one_error_line(err)
    assert str(blocker) in line and "folder" in line


def test_output_folders_are_created(tmp_path, capsys):
    out = tmp_path / "new" / "deeper" / "ur5e.urdf"
    rc, _, _ = _run(capsys, "kinematics", "urdf", "--model", "ur5e", "-o", str(out))
    assert rc == 0 and out.read_text().startswith("<?xml")


def test_output_piped_into_head_ends_quietly():
    """The reader of a pipe went away (`embeval ... | head`): no BrokenPipeError traceback."""
    p = subprocess.Popen([sys.executable, "-m", "embeval_cli", "distort", "list"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # closed before the command writes anything: its first print hits a broken pipe
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_bag_commands_say_what_is_wrong_with_the_folder(tmp_path, capsys):
    rc, _, err = _run(capsys, "bag", "info", str(tmp_path / "nope"))
    assert rc == 2 and "does not exist" in _one_error_line(err)
    (tmp_path / "img.png").write_bytes(b"x")
    rc, _, err = _run(capsys, "bag", "info", str(tmp_path))
    assert rc == 2 and "not a rosbag2 folder" in _one_error_line(err)
    # recovering a folder with no segments refuses instead of writing an empty metadata.yaml into it
    rc, _, err = _run(capsys, "bag", "recover", str(tmp_path))
    assert rc == 2 and "no MCAP segments" in _one_error_line(err)
    assert not (tmp_path / "metadata.yaml").exists()
    (tmp_path / "seg_0.mcap").write_bytes(b"")
    rc, _, err = _run(capsys, "bag", "info", str(tmp_path))
    assert rc == 2 and f"embeval bag recover {tmp_path}" in _one_error_line(err)
    rc, _, err = _run(capsys, "distort", "bag", str(tmp_path / "nope"), str(tmp_path / "out"), "--type", "jpeg",
                      "--level", "3")
    assert rc == 2 and "does not exist" in _one_error_line(err)


def _images(folder: Path, n: int = 2) -> None:
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(folder / f"img{i}.png")


def test_distort_apply_skips_a_corrupt_image_and_keeps_the_rest(tmp_path, capsys):
    src, out = tmp_path / "in", tmp_path / "out"
    _images(src)
    (src / "broken.png").write_bytes(b"not a png")
    rc, _, err = _run(capsys, "distort", "apply", "--in", str(src), "--out", str(out), "--type", "jpeg", "--level", "2")
    assert rc == 1
    assert "broken.png" in err and "Traceback" not in err
    assert sorted(p.name for p in (out / "jpeg" / "L2").iterdir()) == ["img0.png", "img1.png"]
    # a resumed run neither redoes the images nor lists them twice in the manifest
    (src / "broken.png").unlink()
    rc, _, _ = _run(capsys, "distort", "apply", "--in", str(src), "--out", str(out), "--type", "jpeg", "--level", "2")
    assert rc == 0
    assert len((out / "manifest.jsonl").read_text().splitlines()) == 2


def test_distort_apply_points_at_the_subfolder_that_holds_the_images(tmp_path, capsys):
    _images(tmp_path / "refs")  # e.g. `embeval sim references --out refs/` puts them in refs/images
    (tmp_path / "refs").rename(tmp_path / "images")
    (tmp_path / "top").mkdir()
    (tmp_path / "images").rename(tmp_path / "top" / "images")
    rc, _, err = _run(capsys, "distort", "apply", "--in", str(tmp_path / "top"), "--out", str(tmp_path / "o"),
                      "--type", "jpeg", "--level", "1")
    assert rc == 2 and f"images are in {tmp_path / 'top' / 'images'}" in _one_error_line(err)


def test_subjects_check_rejects_a_corrupt_image_before_loading(tmp_path, capsys):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"garbage")
    rc, out, err = _run(capsys, "subjects", "check", str(ROOT / "config/subjects/image_stats_policy.yaml"),
                        "--image", str(bad))
    assert rc == 2
    assert "cannot read image" in _one_error_line(err) and "loaded" not in out


def test_graph_parameter_mistakes_are_named(tmp_path, capsys):
    from embeval_ros.graph import load_params

    from embeval_cli.graph import apply_overrides
    from embeval.errors import ConfigError

    bad = tmp_path / "bad.yaml"
    bad.write_text("embeval_arm:\n  ros__parameters: {backend: [mock\n")
    with pytest.raises(ConfigError, match=r"not valid YAML \(line \d+"):
        load_params(bad)
    with pytest.raises(ConfigError, match="did you mean 'embeval_policy'"):
        apply_overrides({}, ["embeval_polcy.subject=x"])
    common: dict = {}
    params = load_params({"/**": {"ros__parameters": {"use_sim_time": False}},
                          "embeval_distortion": {"ros__parameters": {"level": 2}}}, common)
    assert common == {"use_sim_time": False} and params["embeval_distortion"] == {"use_sim_time": False, "level": 2}


def test_graph_rejects_a_parameter_the_node_does_not_declare(capsys):
    rc, _, err = _run(capsys, "graph", "--params", str(ROOT / "config/embeval_hil.yaml"), "--nodes", "embeval_distortion",
                      "--set", "embeval_distortion.levle=3", "--duration", "0.1")
    assert rc == 2
    line = _one_error_line(err)
    assert "no parameter 'levle'" in line and "did you mean 'level'" in line


def test_every_command_has_a_description_and_an_example():
    import argparse

    from embeval_cli import build_parser

    missing = []

    def walk(parser, path):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            for name, sp in subs[0].choices.items():
                walk(sp, [*path, name])
            return
        text = f"{parser.description or ''}\n{parser.epilog or ''}"
        undocumented = [a.dest for a in parser._actions if not a.help and not isinstance(a, argparse._HelpAction)]
        if not parser.description or "embeval " not in text or undocumented:
            missing.append((" ".join(path), undocumented))

    walk(build_parser(), ["embeval"])
    assert not missing, missing


@pytest.mark.parametrize("argv", [
    ["graph", "--params", "{bad}"],
    ["sim", "render", "--scene", "{bad}"],
    ["kinematics", "fk", "0", "0", "0", "0", "0", "0", "--params", "{bad}"],
    ["subjects", "check", "{bad}"],
    ["run", "{bad}", "--check"],
    ["a2eval", "curate", "--config", "{bad}"],
])
def test_malformed_yaml_is_one_line_with_its_position(tmp_path, capsys, argv):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a:\n  b: [1, 2\n")
    rc, _, err = _run(capsys, *[a.replace("{bad}", str(bad)) for a in argv])
    assert rc == 2
    line = _one_error_line(err)
    assert "not valid YAML (line 3, column 1" in line and len(err.strip().splitlines()) == 1, err


def test_counts_and_sizes_must_be_positive(capsys):
    for argv, why in ((["sim", "render", "--width", "0"], "argument --width: must lie in 1..4096, got 0 (pixels per side)"),
                      (["sim", "expert", "--episodes", "0"], "must be >= 1, got 0"),
                      (["sim", "references", "--n", "x"], "must be an integer >= 1, got 'x'")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert why in err, err


def test_servers_answer_malformed_requests_with_400_and_a_reason():
    import httpx

    from embeval.serving import openai_server, openvla_server
    from embeval.serving.runner import serve_in_thread
    from embeval.subjects.scripted import ImageStatsPolicy, ScriptedLLM

    with serve_in_thread(openai_server.create_app(ScriptedLLM(id="s"))) as srv:
        url = srv.url + "/v1/chat/completions"
        for body in ({"messages": "hi"}, {"messages": [{"role": "user", "content": 3}]}, ["not", "an", "object"]):
            r = httpx.post(url, json=body)
            assert r.status_code == 400, (body, r.text)
            assert "messages" in r.text or "content" in r.text or "object" in r.text
        ok = httpx.post(url, json={"messages": [{"role": "user", "content": None}, {"role": "user", "content": "hi"}]})
        assert ok.status_code == 200
    with serve_in_thread(openvla_server.create_app(ImageStatsPolicy())) as srv:
        r = httpx.post(srv.url + "/act", json={"instruction": "x"})
        assert r.status_code == 400 and "misses 'image' (or 'full_image'" in r.json()["error"]["message"]


def test_a_raising_callback_is_reported_once_and_its_node_keeps_spinning(monkeypatch, capsys):
    from embeval_ros.graph import Graph

    from embeval_ros import camera_node

    ticks = []

    def broken_tick(self):
        ticks.append(1)
        raise RuntimeError("sensor unplugged")

    monkeypatch.setattr(camera_node.CameraNode, "_tick", broken_tick)
    params = {"embeval_camera": {"source": "synthetic", "rate_hz": 50.0, "width": 32, "height": 24}}
    with Graph(params) as g:
        g.wait_for(lambda g: len(ticks) >= 3, 10, "three ticks of the camera timer")
    err = capsys.readouterr().err
    assert err.count("raised RuntimeError: sensor unplugged; the node keeps running") == 1, err
    assert "Traceback" not in err
    assert len(ticks) >= 3  # the timer kept firing after the first error


def test_policy_node_feeds_a_multi_camera_policy_and_its_proprioception():
    """The tiny VLA reads third_person + wrist and the gripper state: the policy node gives the one image under
    the policy's own camera names (or `image_keys`) and fills the gripper/joints from /joint_states."""
    from embeval_ros.conversions import image_to_msg
    from embeval_ros.graph import Graph
    from sensor_msgs.msg import JointState

    from embeval.kinematics import JOINT_NAMES
    from embeval.subjects.scripted import ImageStatsPolicy

    class TwoCameras(ImageStatsPolicy):
        cfg = type("Cfg", (), {"cameras": ["third_person", "wrist"]})()

    img = np.zeros((24, 32, 3), np.uint8)
    with Graph({"embeval_policy": {}}, shared={"policy": TwoCameras()}) as g:
        node = g.nodes["embeval_policy"]
        assert node.image_keys == ["third_person", "wrist"]
        node._on_image(image_to_msg(img, 0, "camera"))
        assert set(node.stepper.images) == {"third_person", "wrist"}
        js = JointState(name=[*JOINT_NAMES, "gripper_opening"], position=[0.1, -1.2, 1.5, -1.9, -1.6, 0.0, 0.8])
        node._on_joints(js)
        assert node.stepper.state["gripper"].tolist() == [0.8]
        assert node.stepper.state["joint_positions"].tolist() == [0.1, -1.2, 1.5, -1.9, -1.6, 0.0]
    with Graph({"embeval_policy": {"image_keys": ["front"]}}, shared={"policy": TwoCameras()}) as g:
        assert g.nodes["embeval_policy"].image_keys == ["front"]
