"""Image files on disk: the formats embeval reads and writes, and the one checked writer.

One home for the list of image extensions (read by ``camera.folder`` and ``distortion.batch``) and for
writing an RGB uint8 image (:func:`save_image`), so that every command that writes an image (``sim
render``, ``sim episodes --sheet``, ``distort grid``) refuses a folder or an unknown extension up front,
before any rendering, with the same one-line :class:`~embeval.errors.ConfigError`.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from embeval.errors import ConfigError, check_out_dir

#: the largest image side (pixels) embeval renders or accepts for a camera: covers real cameras (a D455 gives
#: 1280x800, 4K sensors 4096x2160) and keeps one software render under ~15 s and ~200 MB
MAX_IMAGE_SIDE = 4096

#: most pixels (width x height, from the header) an image from outside may decode to: an 8K frame (7680x4320,
#: 33.2 Mpx) fits; a few hundred KB of PNG can claim 177 Mpx (2.5 GB decoded), which Pillow's own bomb check allows
MAX_DECODED_PIXELS = 1 << 25

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
    check_out_dir(p.parent, f"{what} {p}: folder")  # writable (not /proc, not read-only), before any rendering
    return p


def save_image(path: str | Path, img: np.ndarray, what: str = "output image") -> Path:
    """Write an RGB (or grey) uint8 image to ``path`` (format from the extension, see :func:`check_image_path`),
    creating missing parent folders; returns the path."""
    from PIL import Image

    p = check_image_path(path, what)
    p.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(p)
    return p


def check_decoded_pixels(im, what: str, max_pixels: int = MAX_DECODED_PIXELS):
    """``im`` (an opened, not yet decoded Pillow image) when its header's width x height is at most ``max_pixels``;
    :class:`InvalidInputError` naming ``what`` otherwise (nothing decoded)."""
    from embeval.errors import InvalidInputError

    w, h = im.size
    if w * h > max_pixels:
        raise InvalidInputError(f"{what} is {w}x{h} pixels ({w * h / 1e6:.0f} Mpx decoded), over the limit of "
                                f"{max_pixels / 1e6:.1f} Mpx; downscale it first")
    return im


_STRICT = threading.RLock()


@contextlib.contextmanager
def strict_decoding() -> Iterator[None]:
    """Within the block Pillow refuses truncated image data (OSError "image file is truncated"), whatever its
    process-wide ``ImageFile.LOAD_TRUNCATED_IMAGES`` says: pyiqa sets that flag on import, after which a truncated
    file decodes as grey without a word. The flag is restored afterwards; threads take turns."""
    from PIL import ImageFile

    with _STRICT:
        lenient, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, False
        try:
            yield
        finally:
            ImageFile.LOAD_TRUNCATED_IMAGES = lenient


def read_image(path: str | Path, what: str = "image", max_side: int = MAX_IMAGE_SIDE) -> np.ndarray:
    """An image file decoded by Pillow as RGB uint8 (H, W, 3): the one reader of card/texture images, so that the
    simulators and the VLM path see the same pixels. Grey, palette and alpha images become RGB (alpha dropped);
    16-bit images are scaled to 8 bits (not clipped). The size is checked from the header before decoding: more
    than ``max_side`` pixels a side is refused (a decompression bomb costs nothing). :class:`MissingFileError` or
    :class:`InvalidInputError` in one line naming ``what`` and the file otherwise."""
    from PIL import Image

    from embeval.errors import InvalidInputError

    p = check_image_file(path, what, max_side)  # exists, recognised, bounded: before any decoding
    fix = f"give a PNG or JPEG image of at most {max_side}x{max_side} pixels"
    try:
        with strict_decoding(), Image.open(p) as im:
            im.load()
            if im.mode in ("I", "I;16", "I;16L", "I;16B", "I;16N", "F"):  # 16/32-bit grey: scale, do not clip
                a = np.asarray(im, dtype=np.float64)
                if not np.isfinite(a).all() or a.min() < 0 or a.max() > 65535:
                    raise InvalidInputError(f"{what} {p} holds {im.mode} values outside 0..65535; {fix}")
                a = np.rint(a / 257.0) if a.max() > 255 or im.mode.startswith("I;16") else np.rint(a)
                grey = a.astype(np.uint8)
                return np.ascontiguousarray(np.repeat(grey[:, :, None], 3, axis=2))
            return np.ascontiguousarray(np.asarray(im.convert("RGB"), dtype=np.uint8))
    except InvalidInputError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:  # truncated or corrupt pixels
        msg = " ".join(str(exc).split())[:160]
        raise InvalidInputError(f"{what} {p} is not a readable image ({type(exc).__name__}: {msg}); {fix}") from None


def check_image_file(path: str | Path, what: str = "image", max_side: int = MAX_IMAGE_SIDE) -> Path:
    """Cheap up-front check of an image file (header only, no decoding): it exists, Pillow recognises it and it
    is at most ``max_side`` pixels a side. The same one-line errors as :func:`read_image`, which still reports
    truncated pixel data when the image is decoded."""
    from PIL import Image

    from embeval.errors import InvalidInputError, MissingFileError

    p = Path(path)
    if not p.is_file():
        raise MissingFileError(f"{what} {p} not found; check the path")
    fix = f"give a PNG or JPEG image of at most {max_side}x{max_side} pixels"
    try:
        with Image.open(p) as im:
            w, h = im.size
    except Image.DecompressionBombError:
        raise InvalidInputError(f"{what} {p} claims over {2 * Image.MAX_IMAGE_PIXELS} pixels (a decompression bomb); "
                                f"{fix}") from None
    except (OSError, ValueError, SyntaxError) as exc:
        msg = " ".join(str(exc).split())[:160]
        raise InvalidInputError(f"{what} {p} is not a readable image ({type(exc).__name__}: {msg}); {fix}") from None
    if not (0 < w <= max_side and 0 < h <= max_side):
        raise InvalidInputError(f"{what} {p} is {w}x{h} pixels; {fix}")
    return p
