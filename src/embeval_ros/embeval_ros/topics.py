"""Topic names and their standard message types (realsense-ros and UR driver names where they exist)."""
from __future__ import annotations

IMAGE_RAW = "/camera/camera/color/image_raw"  # sensor_msgs/Image rgb8 (realsense-ros)
CAMERA_INFO = "/camera/camera/color/camera_info"  # sensor_msgs/CameraInfo (realsense-ros)
ALIGNED_DEPTH = "/camera/camera/aligned_depth_to_color/image_raw"  # sensor_msgs/Image 16UC1 mm, colour frame (realsense-ros)
ALIGNED_DEPTH_INFO = "/camera/camera/aligned_depth_to_color/camera_info"  # sensor_msgs/CameraInfo: the colour intrinsics
IMAGE_DISTORTED = "/embeval/image_distorted"  # sensor_msgs/Image, source header.stamp kept
IMAGE_QUALITY = "/embeval/image_quality"  # diagnostic_msgs/DiagnosticArray: psnr, distortion, level
QUALITY_GATE = "/embeval/quality_gate"  # diagnostic_msgs/DiagnosticArray: predicted score, threshold, passed, withheld
PREDICTED_DECISION = "/embeval/predicted_decision"  # std_msgs/Float32: the gate's predicted score of every frame
INSTRUCTION = "/embeval/instruction"  # std_msgs/String, transient local (latched)
ACTION = "/embeval/action"  # sensor_msgs/JointState named dx..gripper: the command the arm executes
ACTION_PROPOSED = "/embeval/action_proposed"  # same layout: every action the policy computed (dry run too)
POLICY_STATUS = "/embeval/policy/status"  # diagnostic_msgs/DiagnosticArray
JOINT_STATES = "/joint_states"  # sensor_msgs/JointState (UR driver)
TCP_POSE = "/tcp_pose_broadcaster/pose"  # geometry_msgs/PoseStamped, frame base (UR driver)
SAFETY_MODE = "/io_and_status_controller/safety_mode"  # std_msgs/UInt8 in UR numbering (driver: ur_dashboard_msgs/SafetyMode)
SPEED_SCALING = "/speed_scaling_state_broadcaster/speed_scaling"  # std_msgs/Float64 in [0, 1] (UR driver)
ARM_STATUS = "/embeval/arm/status"  # diagnostic_msgs/DiagnosticArray: last command result, stop reason
EVENTS = "/embeval/events"  # std_msgs/String JSON event records (episode_start, episode_end)
SCORES = "/embeval/scores"  # std_msgs/String JSON score records
ARM_RESET = "/embeval/arm/reset"  # std_srvs/Trigger: clear a protective stop and go home
ARM_STOP = "/embeval/arm/protective_stop"  # std_srvs/Trigger: latch a protective stop
ARM_SETTLE = "/embeval/arm/settle"  # std_srvs/Trigger: let a simulated cell settle; message = JSON {"cube": [x,y,z] | null}
SCENE = "/embeval/act2answer/scene"  # std_msgs/String, transient local: the scene YAML the sim arm has loaded
CUBE_POSE = "/embeval/act2answer/cube_pose"  # geometry_msgs/PoseStamped, frame base: the Act2Answer cube (sim or a tracker)
CONDUCTOR_NEXT = "/embeval/conductor/next"  # std_srvs/Trigger: the operator confirms the real cell is set up
CONDUCTOR_SUCCESS = "/embeval/conductor/success"  # std_srvs/SetBool: the operator's verdict on the episode (true = success)
EXECUTION_SUCCESS = "/embeval/execution/success"  # std_msgs/Bool: a sensing node's verdict on the task's success predicate



def camera_topic(name: str) -> str:
    """Topic of an extra simulated camera (``extra_cameras`` of the camera node), e.g. the wrist camera:
    ``/embeval/camera/wrist/image_raw`` (sensor_msgs/Image rgb8, the main frame's stamp)."""
    return f"/embeval/camera/{name}/image_raw"


#: topic -> ROS 2 type name (for the recorder and the docs)
TOPIC_TYPES: dict[str, str] = {
    IMAGE_RAW: "sensor_msgs/msg/Image",
    CAMERA_INFO: "sensor_msgs/msg/CameraInfo",
    IMAGE_DISTORTED: "sensor_msgs/msg/Image",
    IMAGE_QUALITY: "diagnostic_msgs/msg/DiagnosticArray",
    QUALITY_GATE: "diagnostic_msgs/msg/DiagnosticArray",
    PREDICTED_DECISION: "std_msgs/msg/Float32",
    INSTRUCTION: "std_msgs/msg/String",
    ACTION: "sensor_msgs/msg/JointState",
    ACTION_PROPOSED: "sensor_msgs/msg/JointState",
    POLICY_STATUS: "diagnostic_msgs/msg/DiagnosticArray",
    JOINT_STATES: "sensor_msgs/msg/JointState",
    TCP_POSE: "geometry_msgs/msg/PoseStamped",
    SAFETY_MODE: "std_msgs/msg/UInt8",
    SPEED_SCALING: "std_msgs/msg/Float64",
    ARM_STATUS: "diagnostic_msgs/msg/DiagnosticArray",
    EVENTS: "std_msgs/msg/String",
    SCORES: "std_msgs/msg/String",
    CUBE_POSE: "geometry_msgs/msg/PoseStamped",
    SCENE: "std_msgs/msg/String",
    EXECUTION_SUCCESS: "std_msgs/msg/Bool",
}


def msg_class(type_name: str):
    """``"sensor_msgs/msg/Image"`` -> the rclpy message class."""
    import importlib

    pkg, _, name = type_name.split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)
