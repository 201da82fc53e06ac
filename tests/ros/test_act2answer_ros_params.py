"""config/embeval_act2answer.yaml (the sim-to-real parameters, the act2answer_sim2real launch's default) only sets
parameters the embeval_ros nodes declare, and it runs Act2Answer units from a scene folder (checked on the node
sources; rclpy is not needed)."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
NODES = {"embeval_camera": "camera_node", "embeval_distortion": "distortion_node", "embeval_policy": "policy_node",
         "embeval_arm": "arm_node", "embeval_scorer": "scorer_node", "embeval_recorder": "recorder_node",
         "embeval_conductor": "conductor_node"}


def declared(module: str) -> set[str]:
    src = (ROOT / "src" / "embeval_ros" / "embeval_ros" / f"{module}.py").read_text()
    return set(re.findall(r"""\bparam\(\s*["']([a-z_0-9]+)["']""", src))


def test_sim_to_real_params_match_the_nodes():
    doc = yaml.safe_load((ROOT / "config" / "embeval_act2answer.yaml").read_text())
    assert set(doc) <= set(NODES)
    for node, body in doc.items():
        params = set(body["ros__parameters"])
        unknown = params - declared(NODES[node])
        assert not unknown, f"{node}: parameters {unknown} are not declared by {NODES[node]}"
    c = doc["embeval_conductor"]["ros__parameters"]
    assert c["act2answer_scenes"] and "items" not in c  # the units come from the scene folder
    assert c["control_hz"] == doc["embeval_policy"]["ros__parameters"]["rate_hz"]  # the intent metrics' step rate
    assert doc["embeval_arm"]["ros__parameters"]["backend"] == "sim" and doc["embeval_camera"]["ros__parameters"]["source"] == "sim"
    # a registry adapter name, not a path: the installed file works from any working directory
    assert doc["embeval_policy"]["ros__parameters"]["subject"] == "embedded"


def test_exported_scene_folder_loads_for_the_conductor(tmp_path):
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import export_scenes, load_scene_set

    items = generate_items(tmp_path / "s", ["time"], per_category=2)
    out = export_scenes(items, tmp_path / "sc")
    c = yaml.safe_load((out / "conductor.yaml").read_text())["embeval_conductor"]["ros__parameters"]
    assert set(c) <= declared("conductor_node")
    assert len(c["items"]) == 4 and c["items"][1] == "time-0000@swapped"
    ss = load_scene_set(out)
    assert list(ss.units) == c["items"]
    u = ss.unit("time-0000@swapped")
    assert (u.item, u.layout, u.instruction) == ("time-0000", "swapped", c["instructions"][1])
    assert u.correct_side != ss.unit("time-0000@original").correct_side and u.scene.is_file()
    assert ss.spec.max_steps == c["steps_per_episode"] == 80  # the reference protocol's episode length
    import pytest

    from embeval.errors import ConfigError, MissingFileError

    with pytest.raises(ConfigError, match="not in the scene folder"):
        ss.unit("time-0009@original")
    with pytest.raises(MissingFileError, match="embeval act2answer scenes"):
        load_scene_set(tmp_path / "s")
