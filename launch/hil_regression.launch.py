"""Hardware-in-the-loop regression: mock hardware by default, the real UR5 + RealSense with use_mock_hardware:=false.

    ros2 launch embeval_ros hil_regression.launch.py                                   # mock tier, no hardware
    ros2 launch embeval_ros hil_regression.launch.py use_mock_hardware:=false robot_ip:=192.168.1.102
"""
import os

from ament_index_python.packages import get_package_share_directory
from embeval_ros.nodes import launch_nodes
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PythonExpression

from launch import LaunchDescription

PKG = "embeval_ros"


def generate_launch_description():
    share = get_package_share_directory(PKG)
    args = [
        DeclareLaunchArgument("use_mock_hardware", default_value="true", description="false: real UR5 over ur_rtde + RealSense"),
        DeclareLaunchArgument("robot_ip", default_value="192.168.1.102", description="UR controller IP"),
        DeclareLaunchArgument("bag_dir", default_value="", description="bag folder (empty: runs/bags/embeval_<time>)"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "embeval_hil.yaml"),
                              description="ROS 2 parameter file for the embeval nodes"),
    ]
    params = LaunchConfiguration("params_file")
    mock = LaunchConfiguration("use_mock_hardware")
    backend = PythonExpression(["'mock' if '", mock, "' == 'true' else 'ur_rtde'"])
    source = PythonExpression(["'synthetic' if '", mock, "' == 'true' else 'realsense'"])
    nodes = launch_nodes(params, overrides={  # every graph node of embeval_ros.nodes.NODES, with these overrides
        "embeval_camera": {"source": source},
        "embeval_arm": {"backend": backend, "robot_ip": LaunchConfiguration("robot_ip")},
        "embeval_recorder": {"bag_dir": LaunchConfiguration("bag_dir")},
    })
    return LaunchDescription(args + nodes)
