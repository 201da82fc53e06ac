"""config/act2answer/sim_to_real.yaml only sets parameters the embeval_ros nodes declare, and its
conductor lists are consistent (checked on the node sources; rclpy is not needed)."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NODES = {"embeval_camera": "camera_node", "embeval_distortion": "distortion_node", "embeval_policy": "policy_node",
         "embeval_arm": "arm_node", "embeval_scorer": "scorer_node", "embeval_recorder": "recorder_node",
         "embeval_conductor": "conductor_node"}


def declared(module: str) -> set[str]:
    src = (ROOT / "src" / "embeval_ros" / "embeval_ros" / f"{module}.py").read_text()
    return set(re.findall(r"""self\.param\(\s*["']([a-z_0-9]+)["']""", src))


def test_sim_to_real_params_match_the_nodes():
    doc = yaml.safe_load((ROOT / "config" / "act2answer" / "sim_to_real.yaml").read_text())
    assert set(doc) <= set(NODES)
    for node, body in doc.items():
        params = set(body["ros__parameters"])
        unknown = params - declared(NODES[node])
        assert not unknown, f"{node}: parameters {unknown} are not declared by {NODES[node]}"
    c = doc["embeval_conductor"]["ros__parameters"]
    assert len(c["items"]) == len(c["instructions"]) == len(c["distortions"]) == len(c["levels"])
    assert (ROOT / doc["embeval_policy"]["ros__parameters"]["subject"]).is_file()


def test_exported_conductor_params_match_the_node(tmp_path):
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.scene import export_scenes

    items = generate_items(tmp_path / "s", ["time"], per_category=2)
    out = export_scenes(items, tmp_path / "sc")
    c = yaml.safe_load((out / "conductor.yaml").read_text())["embeval_conductor"]["ros__parameters"]
    assert set(c) <= declared("conductor_node")
    assert len(c["items"]) == 4 and c["items"][1] == "time-0000@swapped"
