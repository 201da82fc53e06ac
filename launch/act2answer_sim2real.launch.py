"""Sim-to-real Act2Answer: the same items in simulation (backend:=sim) and on the real arm (backend:=ur_rtde).

    ros2 launch embeval_ros act2answer_sim2real.launch.py backend:=sim
    ros2 launch embeval_ros act2answer_sim2real.launch.py backend:=ur_rtde robot_ip:=192.168.1.102 dry_run:=false
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import Node

PKG = "embeval_ros"


def generate_launch_description():
    share = get_package_share_directory(PKG)
    args = [
        DeclareLaunchArgument("backend", default_value="sim", description="sim | ur_rtde | mock"),
        DeclareLaunchArgument("robot_ip", default_value="192.168.1.102", description="UR controller IP (ur_rtde)"),
        DeclareLaunchArgument("dry_run", default_value="true", description="false: the policy commands the arm"),
        DeclareLaunchArgument("bag_dir", default_value="", description="bag folder (empty: runs/bags/embeval_<time>)"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "embeval_act2answer.yaml"),
                              description="ROS 2 parameter file for the embeval nodes"),
    ]
    params = LaunchConfiguration("params_file")
    backend = LaunchConfiguration("backend")
    source = PythonExpression(["'realsense' if '", backend, "' == 'ur_rtde' else 'synthetic'"])
    nodes = [
        Node(package=PKG, executable="camera_node", name="embeval_camera", parameters=[params, {"source": source}]),
        Node(package=PKG, executable="distortion_node", name="embeval_distortion", parameters=[params]),
        Node(package=PKG, executable="policy_node", name="embeval_policy",
             parameters=[params, {"dry_run": LaunchConfiguration("dry_run")}]),
        Node(package=PKG, executable="arm_node", name="embeval_arm",
             parameters=[params, {"backend": backend, "robot_ip": LaunchConfiguration("robot_ip")}]),
        Node(package=PKG, executable="scorer_node", name="embeval_scorer", parameters=[params]),
        Node(package=PKG, executable="conductor_node", name="embeval_conductor", parameters=[params]),
        Node(package=PKG, executable="recorder_node", name="embeval_recorder",
             parameters=[params, {"bag_dir": LaunchConfiguration("bag_dir")}]),
    ]
    return LaunchDescription(args + nodes)
