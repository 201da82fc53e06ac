"""Region-of-interest crops of table cards in a calibrated camera image (the choice VLA's preprocessing).

A card is a flat square on the table (centre ``(x, y)``, edge ``size`` metres, top face at height
``z``, frame ``base``). Its four corners are projected with the camera's pinhole model (look-at
extrinsics ``position``/``target``/``up`` in frame base, intrinsics ``fx``/``fy``/``cx``/``cy`` in
pixels at ``width`` x ``height``; the same :class:`~embeval.sim.scene.CameraSpec` numbers the
simulator renders with, or a real cell's calibration) and the quadrilateral is rectified to an
``out`` x ``out`` image with :func:`cv2.warpPerspective` (bilinear). Orientation: the card image's
top-left corner lies at (+x, +y) of the card (the far, robot-left corner), its top edge along -y
(:func:`embeval.sim.objects._textured_box_mesh`), so a rectified crop shows the card as printed.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from embeval.errors import InvalidInputError


@dataclass(frozen=True, kw_only=True)
class PinholeCamera:
    """A world-mounted pinhole camera (metres, frame base; pixels): the projection part of a
    :class:`~embeval.sim.scene.CameraSpec`. :meth:`third_person` is the workcell's fixed D455 at 640 x 480."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float | None = None  # default width / 2
    cy: float | None = None  # default height / 2
    position: tuple[float, float, float]
    target: tuple[float, float, float]
    up: tuple[float, float, float] = (0.0, 0.0, 1.0)

    @classmethod
    def of(cls, cam) -> PinholeCamera:
        """The pinhole part of a world-mounted :class:`~embeval.sim.scene.CameraSpec`."""
        if cam.mount != "world":
            raise InvalidInputError(f"card crops need a world-mounted camera, {cam.name!r} is mounted on the {cam.mount}")
        return cls(**{k: getattr(cam, k) for k in cls.__dataclass_fields__})

    @classmethod
    def third_person(cls) -> PinholeCamera:
        """The workcell's ``third_person`` camera (:func:`embeval.sim.scene.default_cameras`)."""
        from embeval.sim.scene import default_cameras

        return cls.of(next(c for c in default_cameras() if c.name == "third_person"))

    @classmethod
    def from_dict(cls, d: dict) -> PinholeCamera:
        from embeval.config import check_keys

        check_keys(d, list(cls.__dataclass_fields__), "pinhole camera")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def project(self, points: np.ndarray, width: int | None = None, height: int | None = None) -> np.ndarray:
        """(N, 3) points (frame base) -> (N, 2) pixel coordinates (u right, v down) in an image of
        ``width`` x ``height`` (default the calibrated size; intrinsics scale with it, same field of view)."""
        w, h = width or self.width, height or self.height
        sx, sy = w / self.width, h / self.height
        cx = (self.width / 2 if self.cx is None else self.cx) * sx
        cy = (self.height / 2 if self.cy is None else self.cy) * sy
        eye, tgt, up = (np.asarray(v, dtype=np.float64) for v in (self.position, self.target, self.up))
        f = tgt - eye
        f /= np.linalg.norm(f)
        r = np.cross(f, up)
        r /= np.linalg.norm(r)
        u = np.cross(r, f)
        d = np.asarray(points, dtype=np.float64).reshape(-1, 3) - eye
        xc, yc, zc = d @ r, d @ u, d @ f  # camera right, up, forward
        if np.any(zc <= 1e-6):
            raise InvalidInputError("a card corner lies behind the camera; check the camera calibration and card positions")
        return np.stack([cx + self.fx * sx * xc / zc, cy - self.fy * sy * yc / zc], axis=1)


def card_corners(center_xy: Sequence[float], size: float, z: float = 0.003) -> np.ndarray:
    """(4, 3) corners of a card's top face in image order: top-left, top-right, bottom-right, bottom-left."""
    x, y = float(center_xy[0]), float(center_xy[1])
    s = size / 2
    return np.array([[x + s, y + s, z], [x + s, y - s, z], [x - s, y - s, z], [x - s, y + s, z]])


def rectify_card(image: np.ndarray, camera: PinholeCamera, center_xy: Sequence[float], size: float, out: int,
                 z: float = 0.003) -> np.ndarray:
    """The card at ``center_xy`` rectified to an ``out`` x ``out`` uint8 RGB image (see the module docstring)."""
    import cv2

    img = np.ascontiguousarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise InvalidInputError(f"card crop needs an (H, W, 3) RGB image, got shape {img.shape}")
    h, w = img.shape[:2]
    src = camera.project(card_corners(center_xy, size, z), w, h).astype(np.float32)
    dst = np.array([[0, 0], [out, 0], [out, out], [0, out]], dtype=np.float32)
    m = cv2.getPerspectiveTransform(src, dst)
    return cv2.warpPerspective(img, m, (out, out), flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REPLICATE)
