"""The embeval graph in simulation (pybullet workcell): the same nodes as on the real UR5.

    ros2 launch embeval_ros sim.launch.py
    ros2 launch embeval_ros sim.launch.py record:=false policy_subject:=embedded

Without ros2 launch (this repository's venv): ``embeval graph --params config/embeval_sim.yaml``.
"""
from embeval_ros.nodes import graph_launch
from launch.substitutions import LaunchConfiguration


def generate_launch_description():
    # every graph node of embeval_ros.nodes.NODES, with these overrides; separate processes: the camera mirrors the
    # arm's TCP in the synthetic tabletop (the workcell lives in arm_node)
    return graph_launch("embeval_sim.yaml", {
        "policy_subject": ("image_stats", "policy adapter or subject YAML"),
    }, overrides={
        "embeval_camera": {"source": "synthetic"},
        "embeval_policy": {"subject": LaunchConfiguration("policy_subject")},
        "embeval_arm": {"backend": "sim"},
    }, shared=("record", "bag_dir"))
