"""Gripper conventions of common models, and conversion to and from embeval's (``[0, 1]``, 1 = open);
which camera image a one-camera policy reads (:func:`camera_image`).

Each convention is one :class:`GripperConvention` record on :data:`GRIPPERS` (an
:class:`embeval.registry.Registry`; installed packages add some through the ``embeval.gripper_conventions``
entry-point group). Add one with :func:`register_gripper`. Values are clipped into range after conversion;
thresholds are for binarising policies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from embeval.errors import ConfigError, InvalidInputError
from embeval.registry import Registry


@dataclass(frozen=True)
class GripperConvention:
    """A model's gripper value <-> embeval's (``[0, 1]``, 1 = open): both maps and the range in words."""

    name: str
    to_embeval: Callable[[float], float]
    from_embeval: Callable[[float], float]
    doc: str = ""


GRIPPERS: Registry[GripperConvention] = Registry(
    "gripper convention", group="embeval.gripper_conventions",
    hint="add one with embeval.subjects.conventions.register_gripper(name, to_embeval, from_embeval, doc)")


def register_gripper(name: str, to_embeval: Callable[[float], float], from_embeval: Callable[[float], float], doc: str) -> None:
    """Register convention ``name``: ``to_embeval(model value) -> [0, 1]`` and its inverse (replaces one of that name)."""
    if not callable(to_embeval) or not callable(from_embeval):
        raise ConfigError(f"gripper convention {name!r}: to_embeval and from_embeval must be functions")
    GRIPPERS.register(name, GripperConvention(name, to_embeval, from_embeval, doc), description=doc)


register_gripper("open1", lambda g: g, lambda g: g,
                 "[0, 1], 1 = open, 0 = closed (embeval and OpenVLA's raw predict_action output)")
register_gripper("close1", lambda g: 1.0 - g, lambda g: 1.0 - g, "[0, 1], 1 = closed (e.g. LeRobot datasets of closing force)")
register_gripper("signed_open_positive", lambda g: (g + 1.0) / 2.0, lambda g: 2.0 * g - 1.0, "[-1, 1], +1 = open, -1 = closed")
register_gripper("signed_close_positive", lambda g: (1.0 - g) / 2.0, lambda g: 1.0 - 2.0 * g,
                 "[-1, 1], +1 = closed, -1 = open (LIBERO / robosuite; OpenVLA's LIBERO deploy after invert_gripper_action)")


def _get(name: str) -> GripperConvention:
    conv = GRIPPERS.get(name, "field 'params.gripper'")
    if not isinstance(conv, GripperConvention):
        raise ConfigError(f"gripper convention {name!r} is a {type(conv).__name__}, not a GripperConvention")
    return conv


def check_gripper(name: str) -> str:
    _get(name)
    return name


def gripper_to_embeval(value: float, convention: str) -> float:
    """Model's gripper value -> embeval's [0, 1], 1 = open (clipped)."""
    return float(np.clip(_get(convention).to_embeval(float(value)), 0.0, 1.0))


def gripper_from_embeval(value: float, convention: str) -> float:
    """embeval's [0, 1], 1 = open -> the model's convention."""
    return float(_get(convention).from_embeval(float(np.clip(value, 0.0, 1.0))))


def camera_image(observation, camera: str | None, model: str) -> tuple[str, np.ndarray]:
    """``(name, RGB uint8 image)`` of the camera a one-camera ``model`` reads: ``camera`` (the adapter's
    ``params.camera``), else the observation's first image; errors name the parameter and the cameras there."""
    from embeval.action import check_image

    if not observation.images:
        raise InvalidInputError(f"the observation has no camera image; {model} needs one RGB image")
    name = camera or next(iter(observation.images))
    if name not in observation.images:
        raise ConfigError(f"field 'params.camera': camera {name!r} not in the observation (has {sorted(observation.images)})")
    return name, check_image(observation.images[name], f"images[{name!r}]")
