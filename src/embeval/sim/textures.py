"""Procedural textures (seeded) for texture variation of the table, named in specs as
``"procedural:<kind>:<seed>"`` so scene YAMLs stay portable (no image files to ship).

Kinds: ``wood_grain``, ``checker``, ``speckle``, ``fabric``. Images are RGB uint8, 256x256.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from embeval.action import check_image
from embeval.errors import ConfigError

PREFIX = "procedural:"
TEXTURES: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {}


def texture(kind: str):
    def deco(fn):
        TEXTURES[kind] = fn
        return fn

    return deco


def _muted(rng: np.random.Generator, lo: float, hi: float) -> np.ndarray:
    """A random colour pulled halfway towards its grey (table-like, not neon)."""
    c = rng.uniform(lo, hi, 3)
    return 0.5 * c + 0.5 * c.mean()


def _grid(n: int):
    y, x = np.mgrid[0:n, 0:n] / n
    return x, y


@texture("wood_grain")
def _wood(rng: np.random.Generator, n: int) -> np.ndarray:
    x, y = _grid(n)
    freq = rng.uniform(12, 24)
    warp = 0.04 * np.sin(2 * np.pi * (y * rng.uniform(1, 3) + rng.uniform()))
    rings = 0.5 + 0.5 * np.sin(2 * np.pi * freq * (x + warp + 0.02 * rng.standard_normal((n, n)).cumsum(0) / n))
    base = rng.uniform([0.45, 0.30, 0.18], [0.70, 0.52, 0.35])
    img = base[None, None] * (0.75 + 0.25 * rings[..., None])
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


@texture("checker")
def _checker(rng: np.random.Generator, n: int) -> np.ndarray:
    x, y = _grid(n)
    k = int(rng.integers(12, 28))
    cell = ((np.floor(x * k) + np.floor(y * k)) % 2)[..., None]
    a, b = _muted(rng, 0.6, 0.9), _muted(rng, 0.15, 0.45)
    return (np.clip(a * cell + b * (1 - cell), 0, 1) * 255).astype(np.uint8)


@texture("speckle")
def _speckle(rng: np.random.Generator, n: int) -> np.ndarray:
    base = _muted(rng, 0.3, 0.75)
    noise = rng.normal(0.0, 0.08, (n, n, 1))
    return (np.clip(base[None, None] + noise, 0, 1) * 255).astype(np.uint8)


@texture("fabric")
def _fabric(rng: np.random.Generator, n: int) -> np.ndarray:
    x, y = _grid(n)
    f = rng.uniform(40, 70)
    weave = 0.5 + 0.25 * np.sin(2 * np.pi * f * x) * np.sin(2 * np.pi * f * y)
    base = _muted(rng, 0.25, 0.65)
    return (np.clip(base[None, None] * (0.7 + 0.6 * weave[..., None]), 0, 1) * 255).astype(np.uint8)


def procedural(kind: str, seed: int, size: int = 256) -> np.ndarray:
    """The RGB uint8 (size, size, 3) texture ``kind`` for ``seed`` (deterministic)."""
    if kind not in TEXTURES:
        raise ConfigError(f"unknown procedural texture {kind!r}; use one of {sorted(TEXTURES)}")
    return TEXTURES[kind](np.random.default_rng(seed), size)


def name(kind: str, seed: int) -> str:
    """The spec string for a procedural texture: ``procedural:<kind>:<seed>``."""
    return f"{PREFIX}{kind}:{int(seed)}"


def resolve(value: str) -> str:
    """A texture spec value -> an image file path (procedural names are rendered to a cached PNG)."""
    if not value.startswith(PREFIX):
        return value
    try:
        _, kind, seed = value.split(":")
        seed_i = int(seed)
    except ValueError:
        raise ConfigError(f"procedural texture must look like 'procedural:<kind>:<seed>', got {value!r}") from None
    return texture_file(procedural(kind, seed_i))


def texture_file(rgb: np.ndarray, folder: str | Path | None = None) -> str:
    """Write an RGB uint8 image to a PNG named by its content hash; returns the path (for ``texture``)."""
    from PIL import Image

    rgb = check_image(np.ascontiguousarray(rgb), "texture")
    folder = Path(folder or Path(tempfile.gettempdir()) / "embeval_textures")
    folder.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256(rgb.tobytes() + str(rgb.shape).encode()).hexdigest()[:20]
    path = folder / f"{h}.png"
    if not path.exists():  # written aside, then renamed: a concurrent reader never sees half a PNG
        tmp = folder / f".{h}.{os.getpid()}.{threading.get_ident()}.tmp.png"
        Image.fromarray(rgb).save(tmp)
        os.replace(tmp, path)
    return str(path)


_LOADABLE: dict[tuple[str, int, int], str] = {}


def loadable(path: str | Path, what: str = "texture image") -> str:
    """An image file the simulators' texture loaders read as the image: ``path`` itself when it is an 8-bit RGB PNG,
    else a PNG of the pixels :func:`embeval.image_io.read_image` decodes (WebP, 16-bit, grey, palette, JPEG, ...).
    pybullet and SAPIEN decode few formats (pybullet draws an unsupported one blank with only a warning); going
    through here, the UR5 cell, ManiSkill and the VLM path show the same pixels. One-line
    :class:`~embeval.errors.InvalidInputError` / :class:`~embeval.errors.MissingFileError` naming ``what``
    and the file when it is not a readable image of bounded size. Cached by path, size and mtime."""
    from embeval.image_io import read_image

    p = Path(path)
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    except OSError:
        key = None
    if key is not None and key in _LOADABLE:
        return _LOADABLE[key]
    rgb = read_image(p, what)  # decodes (checks size, truncation) or raises one line
    with open(p, "rb") as f:  # IHDR: bit depth (byte 24) 8 and colour type (byte 25) 2 = 8-bit RGB, no alpha
        head = f.read(26)
    native = head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) == 26 and head[24] == 8 and head[25] == 2
    out = str(p) if native else texture_file(rgb)
    if key is not None:
        _LOADABLE[key] = out
    return out
