"""Act2Answer sim-to-real through the ROS 2 graph, simulated side: 2 items x 2 layouts.

The conductor runs the units of an ``embeval act2answer scenes`` folder; the sim arm loads each
scene (cards, cube), the camera renders that same cell, the policy (the open-loop ScriptedPlacer,
deterministic whatever the timing) carries the cube to the left card, the conductor ends each
episode by the release-after-lift rule and the scorer classifies the settled cube. The records
must equal the in-process runner's (zone, choice, termination, steps) and aggregate with
``embeval act2answer report``.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")
pytestmark = pytest.mark.ros

POLICY = "embeval.act2answer.reference_policies:ScriptedPlacer"


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import export_scenes

    d = tmp_path_factory.mktemp("a2a_ros")
    items = generate_items(d / "suite", ["color", "time"], per_category=1, seed=0)
    return items, export_scenes(items, d / "scenes")


def _params(tmp_path, scenes_dir, side="left"):
    from embeval_ros.graph import load_params

    return load_params({
        "embeval_camera": {"ros__parameters": {"source": "sim", "rate_hz": 10.0, "width": 64, "height": 48,
                                               "extra_cameras": ["wrist"]}},
        "embeval_distortion": {"ros__parameters": {"distortion": "none"}},
        "embeval_policy": {"ros__parameters": {"subject": POLICY, "subject_params": json.dumps({"side": side}),
                                               "camera_topics": ["wrist=/embeval/camera/wrist/image_raw"],
                                               "dry_run": False, "rate_hz": 20.0, "max_steps": 80, "max_image_age_s": 3.0,
                                               "sync_to_arm": True}},
        "embeval_arm": {"ros__parameters": {"backend": "sim", "max_command_age_s": 10.0, "tcp_speed": 0.25,
                                            "state_rate_hz": 20.0}},
        "embeval_scorer": {"ros__parameters": {"store": str(tmp_path / "a2a.sqlite"), "run_id": "a2a-sim2real",
                                               "episodes_jsonl": str(tmp_path / "episodes_ros.jsonl")}},
        "embeval_conductor": {"ros__parameters": {"act2answer_scenes": str(scenes_dir), "episode_timeout_s": 30.0,
                                                  "settle_s": 0.5, "start_delay_s": 0.5}},
    })


def _check_step_synchronous(bag) -> None:
    """sync_to_arm: within an episode each command's image was captured after the arm reported the previous command
    (the ``done_ns`` its status carries: the recorder's receive time lags it on a loaded machine)."""
    from embeval.recording import read_bag

    done_ns, last, checked = {}, None, 0
    for m in read_bag(bag):
        if m.topic == "/embeval/events" and json.loads(m.msg.data)["event"] == "episode_start":
            last = None
        elif m.topic == "/embeval/arm/status":
            values = {kv.key: kv.value for kv in m.msg.status[0].values}
            done_ns[m.msg.header.stamp.sec * 10**9 + m.msg.header.stamp.nanosec] = int(values["done_ns"])
        elif m.topic == "/embeval/action":
            stamp = m.msg.header.stamp.sec * 10**9 + m.msg.header.stamp.nanosec
            if last is not None and last in done_ns:
                assert stamp > done_ns[last], "a command acted on an image older than the previous move"
                checked += 1
            last = stamp
    assert checked >= 60  # 4 episodes x (20 steps - 1)


def test_act2answer_episodes_through_the_graph_match_in_process(tmp_path, scenes, capsys):
    from embeval_ros.graph import Graph

    from embeval.act2answer.episode import read_results, run_items
    from embeval.act2answer.reference_policies import ScriptedPlacer
    from embeval_cli import main as cli
    from embeval.runs.store import ResultsStore

    items, scenes_dir = scenes
    params = _params(tmp_path, scenes_dir)
    params["embeval_recorder"] = {"bag_dir": str(tmp_path / "bag"), "segment_s": 1.0,
                                  "topics": ["/embeval/action", "/embeval/arm/status", "/embeval/events"]}
    with Graph(params) as g:
        g.spin(80, until=lambda g: g.nodes["embeval_conductor"].finished)
        assert g.nodes["embeval_conductor"].finished, "the conductor did not finish its 4 Act2Answer episodes"
        g.wait_for(lambda g: len(g.nodes["embeval_scorer"].a2a_records) == 4, 10, "the scorer's four Act2Answer records")
        ros = list(g.nodes["embeval_scorer"].a2a_records)
    _check_step_synchronous(tmp_path / "bag")
    local = [r.to_dict() for r in run_items(ScriptedPlacer("left"), items)]
    assert [(r["item"], r["layout"]) for r in ros] == [(r["item"], r["layout"]) for r in local] == [
        (items[0].id, "original"), (items[0].id, "swapped"), (items[1].id, "original"), (items[1].id, "swapped")]
    # the left card is correct in exactly one layout of each item: both zones occur
    assert sorted(r["zone"] for r in ros) == ["correct", "correct", "incorrect", "incorrect"]
    for a, b in zip(ros, local):
        for key in ("zone", "choice", "correct_side", "category", "success", "termination", "end_reason", "steps",
                    "stopped", "seed", "instruction"):
            assert a[key] == b[key], (key, a, b)
        assert a["cube_source"] == "sim" and a["subject"] == "scripted-placer-left"
        assert a["cube_xy"] == pytest.approx(b["cube_xy"], abs=0.01)  # same cube position within 1 cm
        assert a["actions"] == b["actions"]
        # the intent metrics from the TCP the arm published (the conductor's) against the in-process runner's
        ia, ib = a["intent"], b["intent"]
        for key in ("tcp_first_choice_correct", "tcp_closer_to_target_than_wrong", "released", "release_near_target"):
            assert ia[key] == ib[key], (key, ia, ib)
        for key in ("tcp_first_enter_target_t", "tcp_first_enter_wrong_t"):
            assert (ia[key] is None) == (ib[key] is None) and abs((ia[key] or 0) - (ib[key] or 0)) <= 1, (key, ia, ib)
        assert ia["tcp_min_dist_target_xy"] == pytest.approx(ib["tcp_min_dist_target_xy"], abs=0.01)
    # the store holds the runs evaluator's schema; export + report aggregate it, as does the JSONL
    with ResultsStore(tmp_path / "a2a.sqlite") as store:
        rows = store.rows("a2a-sim2real")
    assert sorted(r["item"] for r in rows) == sorted(f"{r['item']}@{r['layout']}" for r in local)
    assert len(read_results(tmp_path / "episodes_ros.jsonl")) == 4
    assert cli(["export", str(tmp_path / "a2a.sqlite"), "--parquet", str(tmp_path / "a2a.parquet")]) == 0
    capsys.readouterr()
    assert cli(["act2answer", "report", str(tmp_path / "a2a.parquet"), "--csv", str(tmp_path / "t.csv")]) == 0
    out = capsys.readouterr().out
    assert "scripted-placer-left: swap pairs 2, consistency 0.000, same side 1.000, position bias +1.000" in out
    import pandas as pd

    table = pd.read_csv(tmp_path / "t.csv").set_index("category")
    assert table.loc["all", "rate"] == pytest.approx(0.5) and table.loc["all", "subject"] == "scripted-placer-left"


def test_camera_in_another_process_mirrors_the_arms_cell(tmp_path, scenes):
    """Without the shared workcell (ros2 launch: one process per node) the camera renders a mirror of the
    arm's Act2Answer scene that follows /joint_states and the cube pose: pixel-equal to the arm's own render."""
    import numpy as np
    from embeval_ros.graph import Graph

    from embeval.sim.arm_backend import SimArmBackend

    items, scenes_dir = scenes
    params = _params(tmp_path, scenes_dir, side="right")
    params["embeval_conductor"]["act2answer_items"] = [f"{items[1].id}@swapped"]
    arm = SimArmBackend()  # shared without a renderer: the camera node cannot see it
    try:
        with Graph(params, shared={"arm": arm}) as g:
            g.spin(40, until=lambda g: g.nodes["embeval_conductor"].finished)
            assert g.nodes["embeval_conductor"].finished
            cam = g.nodes["embeval_camera"]

            def mirrored(view):
                return np.abs(arm.render(view, 64, 48).astype(int) - cam.mirror.render(view, 64, 48).astype(int)).mean()

            # the mirror takes the last joint state and cube pose
            g.wait_for(lambda g: cam.mirror is not None and cam.mirror.scene_path.endswith(f"{items[1].id}@swapped.yaml")
                       and all(mirrored(v) < 0.5 for v in ("third_person", "wrist")), 10,
                       "the camera's mirror to show the arm's cell (mean pixel difference < 0.5)")
            # the wrist camera reached the policy on its own topic (not a copy of the third-person frame)
            seen = g.nodes["embeval_policy"].stepper.images
            assert np.abs(seen["wrist"].astype(int) - arm.render("wrist", 64, 48).astype(int)).mean() < 0.5
            assert np.abs(seen["third_person"].astype(int) - seen["wrist"].astype(int)).mean() > 5
            (rec,) = g.nodes["embeval_scorer"].a2a_records
        assert (rec["layout"], rec["choice"], rec["end_reason"]) == ("swapped", "right", "released")
        assert rec["zone"] == ("correct" if items[1].correct_side_in("swapped") == "right" else "incorrect")
    finally:
        arm.close()


def test_one_process_per_node_like_ros2_launch(tmp_path, scenes):
    """The nodes as separate processes from one parameter file (what ros2 launch starts): events, the settle
    service and the camera's mirror work across processes and give the in-process runner's zones."""
    import os
    import sys

    import yaml
    from embeval_ros.processes import NodeProcesses

    from embeval.act2answer.episode import read_results, run_items
    from embeval.act2answer.reference_policies import ScriptedPlacer

    items, scenes_dir = scenes
    params = {name: {"ros__parameters": p} for name, p in _params(tmp_path, scenes_dir).items()}
    params["embeval_conductor"]["ros__parameters"].update(act2answer_items=[f"{items[0].id}@original", f"{items[0].id}@swapped"],
                                                          wait_for_nodes=["embeval_arm", "embeval_policy", "embeval_scorer"])
    params["embeval_scorer"]["ros__parameters"]["store"] = ""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    jsonl = tmp_path / "episodes_ros.jsonl"
    with NodeProcesses(tmp_path) as procs:
        for m in ("arm_node", "camera_node", "distortion_node", "policy_node", "scorer_node", "conductor_node"):
            procs.start(m, [sys.executable, "-m", f"embeval_ros.{m}", "--ros-args", "--params-file", str(tmp_path / "params.yaml")],
                        env=dict(os.environ))
        procs.wait_until(lambda: jsonl.exists() and len(jsonl.read_text().splitlines()) >= 2, timeout_s=75)
    ros = read_results(jsonl)
    local = [r.to_dict() for r in run_items(ScriptedPlacer("left"), items[:1])]
    assert [(r["layout"], r["zone"], r["choice"], r["end_reason"], r["steps"], r["cube_source"]) for r in ros] == [
        (r["layout"], r["zone"], r["choice"], r["end_reason"], r["steps"], "sim") for r in local]
    for a, b in zip(ros, local):
        assert a["cube_xy"] == pytest.approx(b["cube_xy"], abs=0.01)
