"""Message <-> numpy conversions without cv_bridge (standard messages only).

Conventions: images are RGB uint8 (H, W, 3) numpy arrays, ``rgb8`` on topics; stamps are
``builtin_interfaces/Time``; quaternions on topics are xyzw; the 7-DoF action travels as a
``sensor_msgs/JointState`` whose names are :data:`ACTION_NAMES` (one atomic, stamped message).
"""
from __future__ import annotations

import numpy as np

from embeval.camera.base import image_from_msg
from embeval.kinematics import JOINT_NAMES

#: the 7-DoF action layout on /embeval/action (:mod:`embeval.action`)
ACTION_NAMES: tuple[str, ...] = ("dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper")


def stamp_to_ns(stamp) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def ns_to_stamp(ns: int, stamp=None):
    from builtin_interfaces.msg import Time

    stamp = stamp if stamp is not None else Time()
    stamp.sec, stamp.nanosec = divmod(int(ns), 1_000_000_000)
    return stamp


def image_to_msg(img: np.ndarray, stamp_ns: int, frame_id: str = "camera_color_optical_frame"):
    """RGB uint8 (H, W, 3) -> ``sensor_msgs/Image`` (rgb8, row-major, no padding)."""
    from sensor_msgs.msg import Image

    img = np.ascontiguousarray(img, dtype=np.uint8)
    if img.ndim != 3 or img.shape[2] != 3:
        from embeval.errors import InvalidInputError

        raise InvalidInputError(f"image must be RGB uint8 (H, W, 3), got {img.shape}")
    msg = Image()
    ns_to_stamp(stamp_ns, msg.header.stamp)
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(img.shape[0]), int(img.shape[1])
    msg.encoding = "rgb8"
    msg.is_bigendian = 0
    msg.step = 3 * msg.width
    msg.data = img.tobytes()
    return msg


def msg_to_image(msg) -> np.ndarray:
    """``sensor_msgs/Image`` (rgb8 | bgr8 | mono8 | rgba8 | bgra8, any row padding) -> RGB uint8 (H, W, 3)."""
    return image_from_msg(msg)


def depth_to_msg(depth: np.ndarray, depth_scale: float, stamp_ns: int, frame_id: str = "camera_color_optical_frame"):
    """Depth (uint16 (H, W) in units of ``depth_scale`` metres) -> ``sensor_msgs/Image`` 16UC1 in millimetres
    (realsense-ros's aligned depth; 0 = no depth)."""
    from sensor_msgs.msg import Image

    d = np.asarray(depth)
    if d.ndim != 2:
        from embeval.errors import InvalidInputError

        raise InvalidInputError(f"depth must be (H, W), got {d.shape}")
    if abs(depth_scale - 0.001) > 1e-9:
        d = np.clip(np.rint(d.astype(np.float64) * (depth_scale * 1000.0)), 0, 65535)
    d = np.ascontiguousarray(d, dtype="<u2")
    msg = Image()
    ns_to_stamp(stamp_ns, msg.header.stamp)
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(d.shape[0]), int(d.shape[1])
    msg.encoding, msg.is_bigendian, msg.step = "16UC1", 0, 2 * msg.width
    msg.data = d.tobytes()
    return msg


def camera_info_msg(width: int, height: int, fx: float, fy: float, cx: float, cy: float, stamp_ns: int,
                    frame_id: str = "camera_color_optical_frame"):
    """A pinhole ``sensor_msgs/CameraInfo`` (plumb_bob, zero distortion)."""
    from sensor_msgs.msg import CameraInfo

    m = CameraInfo()
    ns_to_stamp(stamp_ns, m.header.stamp)
    m.header.frame_id = frame_id
    m.width, m.height = int(width), int(height)
    m.distortion_model = "plumb_bob"
    m.d = [0.0] * 5
    m.k = [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]
    m.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    m.p = [fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return m


def action_to_msg(vector, stamp_ns: int, frame_id: str = "base"):
    """7-DoF action ``[dx,dy,dz,droll,dpitch,dyaw,gripper]`` -> ``sensor_msgs/JointState`` (names :data:`ACTION_NAMES`)."""
    from sensor_msgs.msg import JointState

    m = JointState()
    ns_to_stamp(stamp_ns, m.header.stamp)
    m.header.frame_id = frame_id
    m.name = list(ACTION_NAMES)
    m.position = [float(x) for x in np.asarray(vector, dtype=np.float64).reshape(-1)]
    return m


def msg_to_action(msg) -> np.ndarray:
    """Inverse of :func:`action_to_msg`; values are matched by name, so order on the wire is free."""
    from embeval.errors import InvalidInputError

    pos = dict(zip(msg.name, msg.position))
    missing = [n for n in ACTION_NAMES if n not in pos]
    if missing:
        raise InvalidInputError(f"action message lacks {missing}; expected names {list(ACTION_NAMES)}")
    return np.array([pos[n] for n in ACTION_NAMES], dtype=np.float64)


def joint_state_msg(q, stamp_ns: int, velocities=None, gripper: float | None = None, names=None):
    """UR joint positions (rad, :data:`JOINT_NAMES` order; another arm's: its ``names``) -> ``sensor_msgs/JointState``
    as the UR driver publishes."""
    from sensor_msgs.msg import JointState

    m = JointState()
    ns_to_stamp(stamp_ns, m.header.stamp)
    m.name = list(names or JOINT_NAMES)
    m.position = [float(x) for x in q]
    if velocities is not None:
        m.velocity = [float(x) for x in velocities]
    if gripper is not None:
        m.name.append("gripper_opening")
        m.position.append(float(gripper))
        if velocities is not None:
            m.velocity.append(0.0)
    return m


def pose_msg(pose6, stamp_ns: int, frame_id: str = "base"):
    """``[x,y,z,rx,ry,rz]`` (m, rotation vector) -> ``geometry_msgs/PoseStamped`` (quaternion xyzw)."""
    from geometry_msgs.msg import PoseStamped

    from embeval.action import pose6_to_pose7

    p = np.asarray(pose6, dtype=np.float64)
    q = pose6_to_pose7(p)[3:]
    m = PoseStamped()
    ns_to_stamp(stamp_ns, m.header.stamp)
    m.header.frame_id = frame_id
    m.pose.position.x, m.pose.position.y, m.pose.position.z = (float(v) for v in p[:3])
    m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z, m.pose.orientation.w = (float(v) for v in q)
    return m


def msg_to_pose6(msg) -> np.ndarray:
    """Inverse of :func:`pose_msg` (accepts PoseStamped or Pose)."""
    from embeval.rotations import quat_to_rotvec

    pose = getattr(msg, "pose", msg)
    o = pose.orientation
    rv = quat_to_rotvec([o.x, o.y, o.z, o.w])
    return np.array([pose.position.x, pose.position.y, pose.position.z, *rv], dtype=np.float64)


def episode_start_block(msg, key: str) -> dict | None:
    """The ``key`` block (``act2answer`` or ``execution``: its ``scene`` and more) of an ``episode_start``
    event on /embeval/events (``std_msgs/String`` JSON), or None for any other event or episode."""
    import json

    try:
        ev = json.loads(msg.data)
    except json.JSONDecodeError:
        return None
    block = ev.get(key) if isinstance(ev, dict) and ev.get("event") == "episode_start" else None
    return block if isinstance(block, dict) and block.get("scene") else None


def act2answer_start(msg) -> dict | None:
    """The ``act2answer`` block (scene path, spec, unit) of an ``episode_start`` event, or None."""
    return episode_start_block(msg, "act2answer")
