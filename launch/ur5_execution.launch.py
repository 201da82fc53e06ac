"""Execution scoring on a real UR5 (or mock hardware): camera -> distortion -> policy -> arm -> scorer (+ recorder).

    ros2 launch embeval_ros ur5_execution.launch.py robot_ip:=192.168.1.102 ur_type:=ur5
    ros2 launch embeval_ros ur5_execution.launch.py use_mock_hardware:=true        # no robot needed
    ros2 launch embeval_ros ur5_execution.launch.py robot_ip:=... dry_run:=false    # really move (after checking!)

The policy stays in dry run (proposed actions only) unless dry_run:=false. Parameters come from
config/embeval_ur5.yaml (params_file:=...); the arguments below override them.
"""
from embeval_ros.nodes import graph_launch
from launch.substitutions import LaunchConfiguration, PythonExpression


def generate_launch_description():
    mock = LaunchConfiguration("use_mock_hardware")
    backend = PythonExpression(["'mock' if '", mock, "' == 'true' else '", LaunchConfiguration("backend"), "'"])
    source = PythonExpression(["'synthetic' if '", mock, "' == 'true' else '", LaunchConfiguration("camera_source"), "'"])
    return graph_launch("embeval_ur5.yaml", {
        "ur_type": ("ur5", "UR model (ur3, ur5, ur5e, ur10, ...): D-H preset"),
        "use_mock_hardware": ("false", "true: mock arm, synthetic camera"),
        "backend": ("ur_rtde", "arm backend: ur_rtde | sim | mock"),
        "camera_source": ("realsense", "sim | synthetic | realsense | folder | bag"),
        "dry_run": ("true", "false: the policy commands the arm"),
    }, overrides={  # every graph node of embeval_ros.nodes.NODES, with these overrides
        "embeval_camera": {"source": source},
        "embeval_policy": {"dry_run": LaunchConfiguration("dry_run")},
        "embeval_arm": {"backend": backend, "ur_type": LaunchConfiguration("ur_type"),
                        "dry_run": LaunchConfiguration("dry_run")},
    }, shared=("robot_ip", "record", "bag_dir", "dds_localhost"), output="screen")
