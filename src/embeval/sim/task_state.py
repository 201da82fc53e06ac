"""Measured world state that task success predicates read (object poses, articulation joints, the gripper),
from the sim or the real cell. Frame base == world; the table top is z = 0; metres, quaternions xyzw."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ObjectState:
    """Measured state of one object (frame base)."""

    position: np.ndarray  # (3,) centre of the base body, m
    orientation: np.ndarray  # (4,) quaternion xyzw
    bottom_z: float  # lowest point above the table (approx. centre z - height/2), m
    joint: float | None = None  # articulation joint (m or rad), None for rigid objects
    joint_min: float | None = None  # smallest joint value seen during the episode (button presses)
    joint_max: float | None = None


@dataclass
class WorldState:
    """What success predicates read."""

    objects: dict[str, ObjectState]
    tcp_pose: np.ndarray  # (6,) [x,y,z,rx,ry,rz]
    gripper: float  # 1 = open
    grasped: str | None = None  # name of the object held, if any
    ever_grasped: frozenset[str] = frozenset()
    stopped: bool = False
