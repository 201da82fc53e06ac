"""Sim-to-real Act2Answer: the units of one scene folder in simulation (backend:=sim) and on the real arm (backend:=ur_rtde).

    embeval act2answer scenes --items runs/act2answer/suite/items.jsonl --out runs/act2answer/scenes
    ros2 launch embeval_ros act2answer_sim2real.launch.py backend:=sim
    ros2 launch embeval_ros act2answer_sim2real.launch.py backend:=ur_rtde robot_ip:=192.168.1.102 dds_localhost:=0
                                                                                   # dry run, operator confirms each unit
    ros2 service call /embeval/conductor/next std_srvs/srv/Trigger                  # cards and cube placed: go

In simulation the arm node loads each unit's scene and the camera node (a separate process) renders a
mirror of that cell that follows /joint_states and /embeval/act2answer/cube_pose. On the real cell the
camera is a RealSense, the conductor waits for the operator before each unit (operator_confirm) and the
policy only proposes actions until dry_run:=false. The parameters come from config/embeval_act2answer.yaml
(installed with the package; params_file:= another file). See docs/act2answer.md#sim-to-real.
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
    backend = LaunchConfiguration("backend")
    real = ["'", backend, "' == 'ur_rtde'"]
    args = [
        DeclareLaunchArgument("backend", default_value="sim", description="sim | ur_rtde | mock"),
        DeclareLaunchArgument("robot_ip", default_value="192.168.1.102", description="UR controller IP (ur_rtde)"),
        DeclareLaunchArgument("scenes", default_value="runs/act2answer/scenes",
                              description="scene folder from `embeval act2answer scenes` (units, scenes, episode spec)"),
        DeclareLaunchArgument("dry_run", default_value=PythonExpression(["'true' if ", *real, " else 'false'"]),
                              description="false: the policy commands the arm (default: true on the real arm)"),
        DeclareLaunchArgument("operator_confirm", default_value=PythonExpression(["'true' if ", *real, " else 'false'"]),
                              description="wait for /embeval/conductor/next before each unit (default: true on the real arm)"),
        DeclareLaunchArgument("wrist_topic", default_value=PythonExpression(
            ["'wrist=/embeval/camera/wrist/image_raw' if '", backend, "' == 'sim' else ''"]),
            description="policy camera_topics entry 'wrist=TOPIC' (sim: the camera node's wrist render; real cell: "
                        "empty unless a second camera node publishes a wrist camera, see docs/act2answer.md)"),
        DeclareLaunchArgument("camera_width", default_value=PythonExpression(["'640' if ", *real, " else '64'"]),
                              description="camera image width (px; RealSense modes on the real arm, the policy's input in sim)"),
        DeclareLaunchArgument("camera_height", default_value=PythonExpression(["'480' if ", *real, " else '48'"]),
                              description="camera image height (px)"),
        DeclareLaunchArgument("record", default_value="true", description="record the topics to an MCAP bag"),
        DeclareLaunchArgument("bag_dir", default_value="", description="bag folder (empty: runs/bags/embeval_<time>)"),
        DeclareLaunchArgument("dds_localhost", default_value="1", description="1: DDS on loopback only; 0: robot network"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "embeval_act2answer.yaml"),
                              description="ROS 2 parameter file (default: the package's config/embeval_act2answer.yaml)"),
    ]
    params = LaunchConfiguration("params_file")
    source = PythonExpression(["'realsense' if ", *real, " else 'sim' if '", backend, "' == 'sim' else 'synthetic'"])
    nodes = launch_nodes(params, overrides={  # every graph node of embeval_ros.nodes.NODES, with these overrides
        "embeval_camera": {"source": source, "width": LaunchConfiguration("camera_width"),
                           "height": LaunchConfiguration("camera_height")},
        "embeval_policy": {"dry_run": LaunchConfiguration("dry_run"),
                           "camera_topics": LaunchConfiguration("wrist_topic")},  # a string; the node splits at commas
        "embeval_arm": {"backend": backend, "robot_ip": LaunchConfiguration("robot_ip"),
                        "dry_run": LaunchConfiguration("dry_run")},  # dry run: reset does not move home
        "embeval_conductor": {"act2answer_scenes": LaunchConfiguration("scenes"),
                              "operator_confirm": LaunchConfiguration("operator_confirm")},
        "embeval_recorder": {"bag_dir": LaunchConfiguration("bag_dir")},
    }, conditions={"embeval_recorder": IfCondition(LaunchConfiguration("record"))}, output="screen")
    return LaunchDescription(args + [SetEnvironmentVariable("EMBEVAL_DDS_LOCALHOST", LaunchConfiguration("dds_localhost"))] + nodes)
