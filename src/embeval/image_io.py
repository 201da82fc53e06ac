"""Image files on disk: the formats embeval reads and writes, and the one checked writer.

One home for the list of image extensions (read by ``camera.folder`` and ``distortion.batch``) and for
writing an RGB uint8 image (:func:`save_image`), so that every command that writes an image (``sim
render``, ``sim episodes --sheet``, ``distort grid``) refuses a folder or an unknown extension up front,
before any rendering, with the same one-line :class:`~embeval.errors.ConfigError`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from embeval.errors import ConfigError

#: the largest image side (pixels) embeval renders or accepts for a camera: covers real cameras (a D455 gives
#: 1280x800, 4K sensors 4096x2160) and keeps one software render under ~15 s and ~200 MB
MAX_IMAGE_SIDE = 4096

#: extensions (lower case) of image files embeval reads and writes (Pillow writes every one of them)
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


def check_image_path(path: str | Path, what: str = "output image") -> Path:
    """``path`` as a :class:`Path` when it names an image file that can be written: not an existing folder,
    and ending in one of :data:`IMAGE_EXTENSIONS` (any case). :class:`ConfigError` naming ``what`` otherwise."""
    p = Path(path)
    exts = ", ".join(IMAGE_EXTENSIONS)
    if p.is_dir():
        raise ConfigError(f"{what} {p} is a folder; give an image file name such as {p / 'image.png'} ({exts})")
    if p.suffix.lower() not in IMAGE_EXTENSIONS:
        ext = f"extension {p.suffix!r}" if p.suffix else "no extension"
        raise ConfigError(f"{what} {p} has {ext}; give a file name ending in one of {exts}")
    return p


def save_image(path: str | Path, img: np.ndarray, what: str = "output image") -> Path:
    """Write an RGB (or grey) uint8 image to ``path`` (format from the extension, see :func:`check_image_path`),
    creating missing parent folders; returns the path."""
    from PIL import Image

    p = check_image_path(path, what)
    p.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(p)
    return p
