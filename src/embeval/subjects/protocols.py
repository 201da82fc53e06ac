"""The small protocols every subject (model) implements. Nothing in the core knows
which model it is talking to: real models enter through adapters.

Conventions (DESIGN section 4):
- images: RGB uint8 numpy arrays, shape (H, W, 3);
- 7-DoF action: ``[dx, dy, dz, droll, dpitch, dyaw, gripper]``; translation in metres,
  rotation deltas in radians (roll-pitch-yaw, extrinsic x-y-z, i.e. ``R = Rz(yaw) Ry(pitch) Rx(roll)``),
  expressed in the frame named by the policy's :class:`ActionSpec`; gripper in [0, 1], 1 = open
  (OpenVLA's convention). Adapters convert from and to each model's own convention.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from embeval.errors import InvalidInputError


@dataclass(frozen=True)
class ActionSpec:
    """What a policy's numbers mean."""

    frame: str = "base"  # frame of the deltas: "base" (UR controller frame) or "tool0"
    translation_units: str = "m"
    rotation: str = "rpy_xyz_extrinsic_delta"  # see module docstring
    gripper_open_is_one: bool = True  # polarity as emitted by the model, before conversion
    chunk_size: int = 1  # actions returned per act() call (action chunking)
    absolute: bool = False  # True: actions are absolute TCP poses, not deltas


@dataclass(frozen=True)
class Action:
    """One 7-DoF action in embeval's convention (see module docstring)."""

    vector: np.ndarray  # shape (7,), float64

    def __post_init__(self):
        v = np.asarray(self.vector, dtype=np.float64).reshape(-1)
        if v.shape != (7,):
            raise InvalidInputError(f"action must have 7 numbers [dx,dy,dz,droll,dpitch,dyaw,gripper], got shape {v.shape}")
        if not np.all(np.isfinite(v)):
            raise InvalidInputError(f"action contains NaN or inf: {v.tolist()}; the policy output is invalid")
        if not 0.0 <= v[6] <= 1.0:
            raise InvalidInputError(f"gripper must lie in [0, 1] (1 = open), got {v[6]}")
        object.__setattr__(self, "vector", v)

    @property
    def translation(self) -> np.ndarray:
        return self.vector[:3]

    @property
    def rotation(self) -> np.ndarray:
        return self.vector[3:6]

    @property
    def gripper(self) -> float:
        return float(self.vector[6])

    @classmethod
    def hold(cls, gripper: float = 1.0) -> "Action":
        """The safe hold action: no motion, gripper unchanged at ``gripper``."""
        return cls(np.array([0, 0, 0, 0, 0, 0, gripper], dtype=np.float64))


@dataclass
class Observation:
    """What a policy sees at one step."""

    images: Mapping[str, np.ndarray]  # camera name -> RGB uint8 (H, W, 3), e.g. "third_person", "wrist"
    instruction: str = ""
    state: Mapping[str, np.ndarray] = field(default_factory=dict)  # e.g. "joint_positions" (6,), "tcp_pose" (7,) xyz+quat xyzw
    timestamp: float = 0.0  # seconds


@runtime_checkable
class VLM(Protocol):
    """A vision-language model: images + prompt -> text."""

    id: str

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str: ...


@runtime_checkable
class Policy(Protocol):
    """A vision-language-action policy."""

    id: str
    action_spec: ActionSpec

    def reset(self, instruction: str) -> None: ...

    def act(self, observation: Observation) -> Action: ...


@runtime_checkable
class LLM(Protocol):
    """A text model with chat and choice."""

    id: str

    def chat(self, messages: Sequence[Mapping[str, str]], json_schema: Mapping | None = None, **gen: Any) -> str: ...

    def choose(self, prompt: str, options: Sequence[str]) -> str: ...


def check_image(img: Any, name: str = "image") -> np.ndarray:
    """Validate an RGB uint8 (H, W, 3) image; raise :class:`InvalidInputError` naming the fix."""
    if not isinstance(img, np.ndarray):
        raise InvalidInputError(f"{name} must be a numpy array, got {type(img).__name__}")
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise InvalidInputError(
            f"{name} must be RGB uint8 with shape (H, W, 3), got dtype {img.dtype} shape {img.shape}; "
            "convert with numpy: img.astype(np.uint8) / drop the alpha channel"
        )
    return img
