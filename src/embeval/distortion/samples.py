"""Sample images for tests, demos and benchmarks, all offline: scikit-image photographs and a
synthetic robot tabletop scene (a stand-in until a simulator render is available)."""
from __future__ import annotations

import cv2
import numpy as np

from embeval.resize import resize

#: photographs shipped with scikit-image (RGB, no download)
PHOTOS: tuple[str, ...] = ("astronaut", "chelsea", "coffee", "rocket")


def photo(name: str, size: tuple[int, int] | None = (640, 480)) -> np.ndarray:
    """A scikit-image photograph as RGB uint8, resized (area/cubic) to ``size`` = (width, height) if given."""
    from skimage import data

    from embeval.errors import ConfigError

    if name not in PHOTOS:
        raise ConfigError(f"unknown sample photo {name!r}; choose from {', '.join(PHOTOS)}")
    img = np.ascontiguousarray(getattr(data, name)()[..., :3])
    if size is not None:
        img = resize(img, size[1], size[0], "cv2_area_cubic")
    return img


def synthetic_tabletop(width: int = 640, height: int = 480, seed: int = 0) -> np.ndarray:
    """A rendered-looking robot tabletop seen from a third-person camera: a wood-grain table in
    perspective, a wall, a few shaded boxes, cylinders and a plate with soft shadows, light
    vignetting and mild sensor noise. Deterministic in ``seed``. RGB uint8 (height, width, 3)."""
    rng = np.random.default_rng(seed)
    h, w = height, width
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    horizon = int(h * rng.uniform(0.25, 0.35))
    # wall: smooth vertical gradient
    wall_col = rng.uniform(150, 210, 3).astype(np.float32)
    img = wall_col * (0.85 + 0.15 * (yy / h))[..., None]
    # table: wood grain in perspective (grain lines converge towards the horizon)
    depth = np.clip((yy - horizon) / max(h - horizon, 1), 1e-3, 1.0)
    u = (xx - w / 2) / (depth * w)
    grain = np.sin(40 * u + 3 * np.sin(5 * u + rng.uniform(0, 6))) * 0.5 + 0.5
    wood = np.array([150, 105, 70], np.float32) * (0.8 + 0.25 * grain[..., None]) * (0.75 + 0.25 * depth[..., None])
    table = yy >= horizon
    img = np.where(table[..., None], wood, img)
    img[horizon:horizon + 3] *= 0.6  # table edge
    shadows = np.ones((h, w), np.float32)
    objects = []
    for i in range(int(rng.integers(4, 7))):
        cy = int(rng.uniform(horizon + 0.2 * (h - horizon), h * 0.92))
        scale = 0.35 + 0.65 * (cy - horizon) / (h - horizon)
        cx = int(rng.uniform(0.1 * w, 0.9 * w))
        size = int(rng.uniform(0.05, 0.1) * w * scale) + 4
        col = rng.uniform(30, 240, 3)
        kind = ("box", "cylinder", "plate")[i % 3]
        objects.append((cy, cx, size, col, kind))
        cv2.ellipse(shadows, (cx + size // 3, cy + size // 6), (int(size * 1.1), size // 3), 0, 0, 360, 0.55, -1)
    shadows = cv2.GaussianBlur(shadows, (0, 0), 6)
    img[table] *= shadows[table][:, None]
    canvas = np.clip(img, 0, 255).astype(np.uint8)
    for cy, cx, size, col, kind in sorted(objects, key=lambda o: o[0]):
        dark = tuple(float(c) * 0.6 for c in col)
        light = tuple(min(255.0, float(c) * 1.15) for c in col)
        if kind == "box":
            top = np.array([[cx - size, cy - size], [cx + size, cy - size], [cx + size + size // 2, cy - size - size // 2],
                            [cx - size // 2, cy - size - size // 2]], np.int32)
            side = np.array([[cx + size, cy - size], [cx + size + size // 2, cy - size - size // 2],
                             [cx + size + size // 2, cy + size // 2], [cx + size, cy + size]], np.int32)
            cv2.rectangle(canvas, (cx - size, cy - size), (cx + size, cy + size), tuple(col.tolist()), -1, cv2.LINE_AA)
            cv2.fillConvexPoly(canvas, top, light, cv2.LINE_AA)
            cv2.fillConvexPoly(canvas, side, dark, cv2.LINE_AA)
        elif kind == "cylinder":
            rx, ry = size // 2 + 2, size // 5 + 1
            cv2.rectangle(canvas, (cx - rx, cy - 2 * size), (cx + rx, cy), tuple(col.tolist()), -1, cv2.LINE_AA)
            cv2.rectangle(canvas, (cx + rx // 3, cy - 2 * size), (cx + rx, cy), dark, -1, cv2.LINE_AA)
            cv2.ellipse(canvas, (cx, cy), (rx, ry), 0, 0, 180, dark, -1, cv2.LINE_AA)
            cv2.ellipse(canvas, (cx, cy - 2 * size), (rx, ry), 0, 0, 360, light, -1, cv2.LINE_AA)
        else:
            cv2.ellipse(canvas, (cx, cy), (int(size * 1.3), size // 2), 0, 0, 360, (235, 235, 230), -1, cv2.LINE_AA)
            cv2.ellipse(canvas, (cx, cy), (int(size * 0.9), size // 3), 0, 0, 360, (205, 205, 200), -1, cv2.LINE_AA)
    out = canvas.astype(np.float32)
    vignette = 1.0 - 0.25 * (((xx - w / 2) / (w / 2)) ** 2 + ((yy - h / 2) / (h / 2)) ** 2) / 2
    out = cv2.GaussianBlur(out * vignette[..., None], (0, 0), 0.7)
    out += rng.normal(0, 1.5, out.shape).astype(np.float32)
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)
