"""Execution scoring on a real UR5 (or mock hardware): camera -> distortion -> policy -> arm -> scorer (+ recorder).

    ros2 launch embeval_ros ur5_execution.launch.py robot_ip:=192.168.1.102 ur_type:=ur5
    ros2 launch embeval_ros ur5_execution.launch.py use_mock_hardware:=true        # no robot needed
    ros2 launch embeval_ros ur5_execution.launch.py robot_ip:=... dry_run:=false    # really move (after checking!)

The policy stays in dry run (proposed actions only) unless dry_run:=false. Parameters come from
config/embeval_ur5.yaml (params_file:=...); the arguments below override them.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import Node

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
    nodes = [
        Node(package=PKG, executable="camera_node", name="embeval_camera", output="screen",
             parameters=[params, {"source": source}]),
        Node(package=PKG, executable="distortion_node", name="embeval_distortion", output="screen", parameters=[params]),
        Node(package=PKG, executable="policy_node", name="embeval_policy", output="screen",
             parameters=[params, {"dry_run": LaunchConfiguration("dry_run")}]),
        Node(package=PKG, executable="arm_node", name="embeval_arm", output="screen",
             parameters=[params, {"backend": backend, "robot_ip": LaunchConfiguration("robot_ip"),
                                  "ur_type": LaunchConfiguration("ur_type"), "dry_run": LaunchConfiguration("dry_run")}]),
        Node(package=PKG, executable="scorer_node", name="embeval_scorer", output="screen", parameters=[params]),
        Node(package=PKG, executable="conductor_node", name="embeval_conductor", output="screen", parameters=[params]),
        Node(package=PKG, executable="recorder_node", name="embeval_recorder", output="screen",
             parameters=[params, {"bag_dir": LaunchConfiguration("bag_dir")}], condition=IfCondition(LaunchConfiguration("record"))),
    ]
    return LaunchDescription(args + [SetEnvironmentVariable("EMBEVAL_DDS_LOCALHOST", LaunchConfiguration("dds_localhost"))] + nodes)
