"""Hardware-in-the-loop regression: mock hardware by default, the real UR5 + RealSense with use_mock_hardware:=false.

    ros2 launch embeval_ros hil_regression.launch.py                                   # mock tier, no hardware
    ros2 launch embeval_ros hil_regression.launch.py use_mock_hardware:=false robot_ip:=192.168.1.102
"""
from embeval_ros.nodes import graph_launch
from launch.substitutions import LaunchConfiguration, PythonExpression


def generate_launch_description():
    mock = LaunchConfiguration("use_mock_hardware")
    return graph_launch("embeval_hil.yaml", {
        "use_mock_hardware": ("true", "false: real UR5 over ur_rtde + RealSense"),
    }, overrides={  # every graph node of embeval_ros.nodes.NODES, with these overrides
        "embeval_camera": {"source": PythonExpression(["'synthetic' if '", mock, "' == 'true' else 'realsense'"])},
        "embeval_arm": {"backend": PythonExpression(["'mock' if '", mock, "' == 'true' else 'ur_rtde'"])},
    }, shared=("robot_ip", "bag_dir"))
