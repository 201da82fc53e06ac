"""One reference image of an Embodied-IQA database (:class:`IQAReference`) and the rule every source applies to
its task instructions; the record the sources of :mod:`embeval_analysis.iqa.sources` (and the LIBERO source) yield."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embeval.errors import ConfigError

#: default robot state (tcp_pose: x y z [m] + quaternion xyzw, frame base; gripper 1 = open)
DEFAULT_STATE = {"tcp_pose": [0.5, 0.0, 0.33, 1.0, 0.0, 0.0, 0.0], "gripper": [1.0]}


@dataclass
class IQAReference:
    """One reference image of the database."""

    ref_id: str
    image: np.ndarray = field(repr=False)  # RGB uint8 (H, W, 3)
    tasks: list[str]
    scene_id: str  # images of one scene never go to different splits
    view: str = "third_person"  # "first_person" (wrist) | "third_person" | "unknown"
    source: str = "simulated"  # "simulated" | "real"
    state: dict[str, list[float]] = field(default_factory=lambda: {k: list(v) for k, v in DEFAULT_STATE.items()})
    sim_seed: int | None = None  # simulated references: the scene seed (embeval.sim.references.reference_scene)
    outcome: dict[str, Any] | None = None  # recorded sources: the run's episode and its Execution score
    sim: dict[str, Any] | None = None  # other simulators: {"backend": "maniskill", "env": ..., "seed": ...}


def _tasks5(tasks: list[str], where: str) -> list[str]:
    if not tasks or not all(isinstance(t, str) and t.strip() for t in tasks):
        raise ConfigError(f"{where}: tasks must be a non-empty list of instructions (strings)")
    return [tasks[i % len(tasks)] for i in range(5)] if len(tasks) < 5 else list(tasks[:5])
