"""Input conventions shared by training and inference of the embedded models (one place, so
the two can never drift apart)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from embeval.action import check_image
from embeval.errors import InvalidInputError
from embeval.resize import resize


def image_hw(size) -> tuple[int, int]:
    """A model's input size: ``int`` (square) or ``[height, width]``."""
    return (int(size), int(size)) if np.isscalar(size) else (int(size[0]), int(size[1]))


def resize_image(img: np.ndarray, size) -> np.ndarray:
    """RGB uint8 (H, W, 3) -> RGB uint8 (h, w, 3) for ``size`` (see :func:`image_hw`); area
    interpolation when the height shrinks, else bilinear (:func:`embeval.resize.resize`, ``cv2_area_linear``),
    no crop (the aspect ratio may change)."""
    img = check_image(img)
    return resize(img, *image_hw(size), "cv2_area_linear")


def state_vector(state: Mapping[str, np.ndarray], keys: list[str]) -> np.ndarray:
    """Proprioception used by the policy, float32.

    ``ee_pos``: TCP position (3,) in metres, frame ``base`` (first 3 numbers of ``tcp_pose``);
    ``gripper``: opening (1,) in [0, 1], 1 = open.
    """
    parts = []
    for key in keys:
        if key == "ee_pos":
            if "tcp_pose" in state:
                v = np.asarray(state["tcp_pose"], dtype=np.float32).reshape(-1)[:3]
            elif "ee_pos" in state:
                v = np.asarray(state["ee_pos"], dtype=np.float32).reshape(-1)[:3]
            else:
                raise InvalidInputError("observation.state needs 'tcp_pose' (x, y, z, ...) for the embedded policy")
        elif key == "gripper":
            if "gripper" not in state:
                raise InvalidInputError("observation.state needs 'gripper' (opening in [0, 1], 1 = open)")
            v = np.asarray(state["gripper"], dtype=np.float32).reshape(-1)[:1]
        else:
            v = np.asarray(state[key], dtype=np.float32).reshape(-1)
        parts.append(v)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
