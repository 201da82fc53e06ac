"""Execution scoring on a real UR5 (or mock hardware): camera -> distortion -> policy -> arm -> scorer (+ recorder).

    ros2 launch embeval_ros ur5_execution.launch.py robot_ip:=192.168.1.102 ur_type:=ur5
    ros2 launch embeval_ros ur5_execution.launch.py use_mock_hardware:=true        # no robot needed
    ros2 launch embeval_ros ur5_execution.launch.py robot_ip:=... dry_run:=false    # really move (after checking!)

The policy stays in dry run (proposed actions only) unless dry_run:=false. Parameters come from
config/embeval_ur5.yaml (params_file:=...); the arguments below override them.
"""
import os

from ament_index_python.packages import get_package_share_directory
from embeval_ros.nodes import launch_nodes
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PythonExpression

from launch import LaunchDescription

PKG = "embeval_ros"


def generate_launch_description():
    share = get_package_share_directory(PKG)
    args = [
        DeclareLaunchArgument("ur_type", default_value="ur5", description="UR model (ur3, ur5, ur5e, ur10, ...): D-H preset"),
        DeclareLaunchArgument("robot_ip", default_value="192.168.1.102", description="UR controller IP"),
        DeclareLaunchArgument("use_mock_hardware", default_value="false", description="true: mock arm, synthetic camera"),
        DeclareLaunchArgument("backend", default_value="ur_rtde", description="arm backend: ur_rtde | sim | mock"),
        DeclareLaunchArgument("camera_source", default_value="realsense", description="sim | synthetic | realsense | folder | bag"),
        DeclareLaunchArgument("dry_run", default_value="true", description="false: the policy commands the arm"),
        DeclareLaunchArgument("record", default_value="true", description="record the topics to an MCAP bag"),
        DeclareLaunchArgument("bag_dir", default_value="", description="bag folder (empty: runs/bags/embeval_<time>)"),
        DeclareLaunchArgument("dds_localhost", default_value="1", description="1: DDS on loopback only; 0: robot network"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "embeval_ur5.yaml"),
                              description="ROS 2 parameter file for the embeval nodes"),
    ]
    params = LaunchConfiguration("params_file")
    mock = LaunchConfiguration("use_mock_hardware")
    backend = PythonExpression(["'mock' if '", mock, "' == 'true' else '", LaunchConfiguration("backend"), "'"])
    source = PythonExpression(["'synthetic' if '", mock, "' == 'true' else '", LaunchConfiguration("camera_source"), "'"])
    nodes = launch_nodes(params, overrides={  # every graph node of embeval_ros.nodes.NODES, with these overrides
        "embeval_camera": {"source": source},
        "embeval_policy": {"dry_run": LaunchConfiguration("dry_run")},
        "embeval_arm": {"backend": backend, "robot_ip": LaunchConfiguration("robot_ip"),
                        "ur_type": LaunchConfiguration("ur_type"), "dry_run": LaunchConfiguration("dry_run")},
        "embeval_recorder": {"bag_dir": LaunchConfiguration("bag_dir")},
    }, conditions={"embeval_recorder": IfCondition(LaunchConfiguration("record"))}, output="screen")
    return LaunchDescription(args + [SetEnvironmentVariable("EMBEVAL_DDS_LOCALHOST", LaunchConfiguration("dds_localhost"))] + nodes)
