"""Images from a folder (png/jpg/bmp/tif/webp), in sorted file-name order, optionally looping and resized."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from embeval.camera.base import Frame, Intrinsics
from embeval.errors import InvalidInputError, MissingFileError
from embeval.image_io import IMAGE_EXTENSIONS as EXTENSIONS, check_decoded_pixels, strict_decoding  # the image formats embeval reads (one home)


class FolderSource:
    """Read every image in ``path`` in sorted order; ``loop`` restarts at the end; ``size=(w, h)`` resizes.

    Intrinsics are computed from ``vfov_deg`` (the folder carries no calibration).
    """

    name = "folder"

    def __init__(self, path: str | Path, loop: bool = True, size: tuple[int, int] | None = None, vfov_deg: float = 58.0):
        self.path = Path(path).expanduser()
        if not self.path.is_dir():
            raise MissingFileError(f"image folder {self.path} does not exist; pass a folder of .png/.jpg images (folder:=...)")
        self.files = sorted(p for p in self.path.iterdir() if p.suffix.lower() in EXTENSIONS)
        if not self.files:
            raise MissingFileError(f"no images ({', '.join(EXTENSIONS)}) in {self.path}")
        self.loop, self.size = loop, (tuple(int(v) for v in size) if size else None)
        first = self._load(self.files[0])
        self.intrinsics = Intrinsics.from_fov(first.shape[1], first.shape[0], vfov_deg)
        self._i = 0

    def _load(self, f: Path) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        try:
            with strict_decoding(), Image.open(f) as im:
                im = check_decoded_pixels(im, f"image {f}").convert("RGB")
                if self.size:
                    im = im.resize(self.size, Image.BILINEAR)
                return np.asarray(im, dtype=np.uint8)
        except (UnidentifiedImageError, OSError) as exc:
            raise InvalidInputError(f"cannot read image {f}: {exc}; remove or replace the file") from None

    def read(self) -> Frame | None:
        if self._i >= len(self.files):
            if not self.loop:
                return None
            self._i = 0
        f = self.files[self._i % len(self.files)]
        self._i += 1  # a bad file raises once; the next read moves on to the next file
        img = self._load(f)
        if img.shape[:2] != (self.intrinsics.height, self.intrinsics.width):
            raise InvalidInputError(f"{f} is {img.shape[1]}x{img.shape[0]}, the first image was "
                                    f"{self.intrinsics.width}x{self.intrinsics.height}; set size:=[w, h] to resize all")
        return Frame(img, time.time_ns(), self.intrinsics, self._i - 1)

    def close(self) -> None:
        pass
