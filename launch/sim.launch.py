"""The embeval graph in simulation (pybullet workcell): the same nodes as on the real UR5.

    ros2 launch embeval_ros sim.launch.py
    ros2 launch embeval_ros sim.launch.py record:=false policy_subject:=embedded

Without ros2 launch (this repository's venv): ``embeval graph --params config/embeval_sim.yaml``.
"""
import os

from ament_index_python.packages import get_package_share_directory
from embeval_ros.nodes import launch_nodes
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration

from launch import LaunchDescription

PKG = "embeval_ros"


def generate_launch_description():
    share = get_package_share_directory(PKG)
    args = [
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "embeval_sim.yaml"),
                              description="ROS 2 parameter file for the embeval nodes"),
        DeclareLaunchArgument("policy_subject", default_value="image_stats", description="policy adapter or subject YAML"),
        DeclareLaunchArgument("record", default_value="true", description="record the topics to an MCAP bag"),
        DeclareLaunchArgument("bag_dir", default_value="", description="bag folder (empty: runs/bags/embeval_<time>)"),
    ]
    params = LaunchConfiguration("params_file")
    # every graph node of embeval_ros.nodes.NODES, with these overrides; separate processes: the camera mirrors the
    # arm's TCP in the synthetic tabletop (the workcell lives in arm_node)
    nodes = launch_nodes(params, overrides={
        "embeval_camera": {"source": "synthetic"},
        "embeval_policy": {"subject": LaunchConfiguration("policy_subject")},
        "embeval_arm": {"backend": "sim"},
        "embeval_recorder": {"bag_dir": LaunchConfiguration("bag_dir")},
    }, conditions={"embeval_recorder": IfCondition(LaunchConfiguration("record"))})
    return LaunchDescription(args + nodes)
