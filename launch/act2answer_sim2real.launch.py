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
from embeval_ros.nodes import graph_launch
from launch.substitutions import LaunchConfiguration, PythonExpression


def generate_launch_description():
    backend = LaunchConfiguration("backend")
    real = ["'", backend, "' == 'ur_rtde'"]

    def on_real(yes: str, no: str) -> PythonExpression:
        return PythonExpression([f"'{yes}' if ", *real, f" else '{no}'"])

    source = PythonExpression(["'realsense' if ", *real, " else 'sim' if '", backend, "' == 'sim' else 'synthetic'"])
    return graph_launch("embeval_act2answer.yaml", {
        "backend": ("sim", "sim | ur_rtde | mock"),
        "scenes": ("runs/act2answer/scenes", "scene folder from `embeval act2answer scenes` (units, scenes, episode spec)"),
        "dry_run": (on_real("true", "false"), "false: the policy commands the arm (default: true on the real arm)"),
        "operator_confirm": (on_real("true", "false"),
                             "wait for /embeval/conductor/next before each unit (default: true on the real arm)"),
        "wrist_topic": (PythonExpression(["'wrist=/embeval/camera/wrist/image_raw' if '", backend, "' == 'sim' else ''"]),
                        ("policy camera_topics entry 'wrist=TOPIC' (sim: the camera node's wrist render; real cell: "
                         "empty unless a second camera node publishes a wrist camera, see docs/act2answer.md)")),
        "camera_width": (on_real("640", "64"), "camera image width (px; RealSense modes on the real arm, the policy's input in sim)"),
        "camera_height": (on_real("480", "48"), "camera image height (px)"),
    }, overrides={  # every graph node of embeval_ros.nodes.NODES, with these overrides
        "embeval_camera": {"source": source, "width": LaunchConfiguration("camera_width"),
                           "height": LaunchConfiguration("camera_height")},
        "embeval_policy": {"dry_run": LaunchConfiguration("dry_run"),
                           "camera_topics": LaunchConfiguration("wrist_topic")},  # a string; the node splits at commas
        "embeval_arm": {"backend": backend, "dry_run": LaunchConfiguration("dry_run")},  # dry run: reset does not move home
        "embeval_conductor": {"act2answer_scenes": LaunchConfiguration("scenes"),
                              "operator_confirm": LaunchConfiguration("operator_confirm")},
    }, shared=("robot_ip", "record", "bag_dir", "dds_localhost"), output="screen")
