"""Decoding the media of benchmark items: images (paths, bytes, Hugging Face ``{"bytes": ...}`` structs, PIL
images or arrays) to RGB uint8 ``(H, W, 3)``, and frames sampled from a video. Used by :mod:`.pool` (item images)
and the scorers (point masks stored as images)."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from embeval.errors import InvalidInputError, MissingFileError
from embeval.image_io import check_decoded_pixels


def load_image(im: Any, what: str = "image") -> np.ndarray:
    """Decode a path, bytes, ``{"bytes": ...}`` struct, PIL image or array into RGB uint8 (H, W, 3)."""
    from PIL import Image

    if isinstance(im, np.ndarray):
        arr = im
    else:
        if isinstance(im, dict):
            im = im.get("bytes") or im.get("path")
        try:
            if isinstance(im, (bytes, bytearray)):
                pil = Image.open(io.BytesIO(im))
            elif isinstance(im, (str, Path)):
                if not Path(im).is_file():
                    raise MissingFileError(f"{what}: file {im} does not exist; fix the path in the pool file "
                                           "(relative paths resolve against the pool file's folder)")
                pil = Image.open(im)
            elif hasattr(im, "convert"):
                pil = im
            else:
                raise InvalidInputError(f"{what}: cannot read an image from {type(im).__name__}")
            arr = np.asarray(check_decoded_pixels(pil, what).convert("RGB"))
        except OSError as exc:
            if isinstance(exc, MissingFileError):
                raise
            raise InvalidInputError(f"{what}: not a readable image ({exc}); re-encode it as PNG or JPEG") from None
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise InvalidInputError(f"{what}: expected an RGB image, got shape {arr.shape}")
    return np.ascontiguousarray(arr[:, :, :3].astype(np.uint8))


def load_video_frames(path: str | Path, n: int = 4) -> list[np.ndarray]:
    """``n`` frames sampled uniformly over the video (OpenCV), RGB uint8."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    try:
        total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        if not cap.isOpened() or total <= 0:
            raise InvalidInputError(f"video {path}: cannot be decoded by OpenCV; re-encode it as MP4 (H.264) or MJPG AVI")
        frames = []
        for idx in np.linspace(0, total - 1, min(n, total)).round().astype(int):
            cap.set(cv2.CAP_PROP_POS_FRAMES, int(idx))
            ok, bgr = cap.read()
            if ok:
                frames.append(np.ascontiguousarray(bgr[:, :, ::-1]))
        if not frames:
            raise InvalidInputError(f"video {path}: no frame could be read")
        return frames
    finally:
        cap.release()
