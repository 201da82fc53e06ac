"""Shared helpers for the distortion functions: conversions, kernels."""
from __future__ import annotations

import functools
import sys
import threading

import cv2
import numpy as np


def to_uint8(x: np.ndarray) -> np.ndarray:
    """float in [0, 1] -> uint8 with rounding and clipping."""
    return np.clip(x * 255.0 + 0.5, 0, 255).astype(np.uint8)


def clip_uint8(x: np.ndarray) -> np.ndarray:
    """float in [0, 255] -> uint8 with rounding and clipping."""
    return np.clip(x + 0.5, 0, 255).astype(np.uint8)


def rgb_to_lab8(img: np.ndarray) -> np.ndarray:
    """uint8 RGB -> OpenCV's 8-bit CIELAB (sRGB, D65): L* scaled by 255/100, a* and b* offset by 128.
    Fast (integer tables); an unchanged round trip is within about 50 dB PSNR of the input."""
    return cv2.cvtColor(img, cv2.COLOR_RGB2Lab)


def lab8_to_rgb(lab8: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(lab8, cv2.COLOR_Lab2RGB)


def lut(f) -> np.ndarray:
    """A 256-entry uint8 lookup table of ``f`` evaluated on 0..255 (rounded, clipped)."""
    return np.clip(f(np.arange(256, dtype=np.float64)) + 0.5, 0, 255).astype(np.uint8)


def srgb_to_linear(x: np.ndarray) -> np.ndarray:
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4).astype(np.float32)


def linear_to_srgb(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1 / 2.4) - 0.055).astype(np.float32)


@functools.lru_cache(maxsize=64)
def disk_kernel(radius: float) -> np.ndarray:
    """Normalised disc (pillbox) kernel of ``radius`` pixels, anti-aliased by 4x supersampling."""
    r = max(float(radius), 0.5)
    n = int(np.ceil(r))
    s = 4
    ax = (np.arange(-(n + 0.5) * s + 0.5, (n + 0.5) * s) / s).astype(np.float64)
    xx, yy = np.meshgrid(ax, ax)
    inside = (xx ** 2 + yy ** 2 <= r * r).astype(np.float64)
    k = inside.reshape(2 * n + 1, s, 2 * n + 1, s).mean(axis=(1, 3))
    k = k / k.sum()
    k.setflags(write=False)
    return k.astype(np.float32)


def filter_rgb(img: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Convolve each channel of uint8 RGB with ``kernel`` (reflect border); uint8 out."""
    return cv2.filter2D(img, -1, kernel, borderType=cv2.BORDER_REFLECT_101)


# ---------------------------------------------------------------------------------------------
# Speed helpers: byte lookup tables and exact 24-bit colour tables.

try:  # SIMD byte translation (a dependency of albumentations/albucore); cv2.LUT gives the same bytes
    import stringzilla as _sz
except ImportError:  # pragma: no cover - exercised only where stringzilla is missing
    _sz = None


def apply_lut(img: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Map every byte of uint8 ``img`` through the 256-entry uint8 ``table`` into a new array
    (identical to ``cv2.LUT``; about 6x faster with stringzilla's SIMD translation)."""
    img = np.ascontiguousarray(img)
    out = np.empty_like(img)
    if _sz is None:
        return cv2.LUT(img, table, dst=out)
    _sz.translate(memoryview(img.reshape(-1)), memoryview(table), out=memoryview(out.reshape(-1)))
    return out


_PERCENTILE_OK: "dict[tuple, bool]" = {}


def _percentile_parts(n: int, q: float, dtype) -> "tuple[int, np.ndarray]":
    """numpy's own quantile bookkeeping for ``np.percentile(x, q)`` (method "linear") on ``n`` values of
    ``dtype``: (index of the lower neighbour in sorted order, the interpolation weight)."""
    from numpy.lib import _function_base_impl as fb  # numpy's percentile internals (checked at first use)

    qa = np.asanyarray(np.true_divide(q, np.dtype(dtype).type(100)))
    method = fb._QuantileMethods["linear"]
    vi = np.asanyarray(method["get_virtual_index"](n, qa))
    prev, _ = fb._get_indexes(np.empty(0, dtype), vi, n)
    return int(prev), fb._get_gamma(vi, prev, method)


def percentile(x: np.ndarray, q: float) -> float:
    """``np.percentile(x, q)`` of a finite float array, the same bits, found among the values at or above
    a threshold estimated on a 1/64 subsample (a partial sort of ~2 % of the values instead of all).
    The first call per (size, q, dtype) is checked against np.percentile; a mismatch keeps numpy's."""
    from numpy.lib import _function_base_impl as fb

    flat = np.ascontiguousarray(x).reshape(-1)
    n = flat.size
    key = (n, q, flat.dtype.str)
    if n < 4096 or not _PERCENTILE_OK.get(key, True):
        return np.percentile(flat, q)
    prev, gamma = _percentile_parts(n, q, flat.dtype)
    sub = flat[::64]
    j = max(int((prev / n - 0.01) * sub.size), 0)
    thr = np.partition(sub, j)[j]
    cand = flat[flat >= thr]
    below = n - cand.size
    if below > prev or prev + 1 >= n:  # the threshold was too high: partial sort of everything
        cand, below = flat.copy(), 0
    i = prev - below
    part = np.partition(cand, [i, i + 1] if i + 1 < cand.size else [i])
    hi = part[i + 1] if i + 1 < cand.size else part[i]
    out = fb._lerp(part[i], hi, gamma)
    if key not in _PERCENTILE_OK:
        _PERCENTILE_OK[key] = bool(out == np.percentile(flat, q))
        if not _PERCENTILE_OK[key]:  # pragma: no cover - a numpy whose internals changed
            return np.percentile(flat, q)
    return out


_SCRATCH = threading.local()


def scratch(tag: str, shape: tuple, dtype=np.uint8) -> np.ndarray:
    """A private work buffer of ``shape`` for this thread, reused across calls (no allocation and no
    page faults per frame). Never return it (or a view of it) to a caller: it is overwritten by the
    next call with the same ``tag``. The latest shape per tag is kept."""
    bufs = getattr(_SCRATCH, "bufs", None)
    if bufs is None:
        bufs = _SCRATCH.bufs = {}
    buf = bufs.get(tag)
    if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype:
        buf = bufs[tag] = np.empty(shape, dtype)
    return buf


def add_uint8(img: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``clip_uint8(img + x)`` for float32 ``x`` of img's shape, computed in place in ``x`` (which is
    consumed); the same float32 operations in the same order, so the bytes equal the out-of-place form."""
    np.add(x, img, out=x)
    x += np.float32(0.5)
    np.clip(x, 0, 255, out=x)
    return x.astype(np.uint8)


#: a per-colour map switches to its 24-bit table once it has mapped this many pixels with one parameter
#: (the table costs about as much as mapping 2^24 pixels directly: about 26 frames of 640x480)
COLOR_TABLE_AFTER_PIXELS = 8_000_000
#: tables kept (64 MiB each), least recently used dropped first
COLOR_TABLES_KEPT = 2
_TABLES: "dict[tuple, np.ndarray]" = {}
_PIXELS: "dict[tuple, int]" = {}


def color_table(direct, param) -> np.ndarray:
    """The exact map ``direct(img, param, None)`` for all 2^24 RGB colours, as uint32 words indexed by
    ``R | G << 8 | B << 16`` holding the output bytes ``R, G, B, 0`` (little-endian)."""
    cube = np.arange(1 << 24, dtype="<u4").view(np.uint8).reshape(4096, 4096, 4)[..., :3]
    mapped = direct(np.ascontiguousarray(cube), param, None)
    table = np.zeros((1 << 24, 4), np.uint8)
    table[:, :3] = mapped.reshape(-1, 3)
    return table.view("<u4").reshape(-1)


def apply_color_table(img: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Map every pixel of RGB uint8 ``img`` through a :func:`color_table` (a gather; no arithmetic)."""
    img = np.ascontiguousarray(img)
    h, w = img.shape[:2]
    flat = img.reshape(-1)
    gather = compiled("gather_rgb", (np.zeros(3, np.uint8), np.zeros(1, "<u4"), np.empty(3, np.uint8)))
    if gather is not None and table.shape == (1 << 24,) and table.dtype == np.dtype("<u4"):  # one compiled pass
        out = np.empty_like(img)
        gather(flat, table, out.reshape(-1))
        return out
    n = h * w
    idx = np.empty(n, np.uint32)
    if n > 1:  # pixel i's 3 bytes + the next pixel's first byte, read as one (unaligned) word, then masked
        words = np.ndarray((n - 1,), dtype="<u4", buffer=flat, strides=(3,))
        np.bitwise_and(words, np.uint32(0xFFFFFF), out=idx[:-1])
    r, g, b = (int(v) for v in flat[-3:])
    idx[-1] = r | g << 8 | b << 16
    out4 = np.take(table, idx)
    return cv2.cvtColor(out4.view(np.uint8).reshape(h, w, 4), cv2.COLOR_RGBA2RGB)


_COMPILED: dict = {}


def compiled(name: str, warmup: tuple):
    """The numba kernel ``name`` of :mod:`embeval.distortion._compiled`, compiled on first use by calling it
    on ``warmup``; None when numba is missing or compiling fails (callers then take their numpy route,
    which gives the same bytes)."""
    if name not in _COMPILED:
        try:
            from embeval.distortion import _compiled

            fn = getattr(_compiled, name)
            fn(*warmup)
        except Exception:
            fn = None
        _COMPILED[name] = fn
    return _COMPILED[name]


def cached_color_table(direct, param) -> "np.ndarray | None":
    return _TABLES.get((direct, param))


def clear_color_tables() -> None:
    _TABLES.clear()
    _PIXELS.clear()


def per_color(direct):
    """Decorator for a deterministic distortion that maps each pixel's colour on its own (no neighbours,
    no randomness): the first frames go through ``direct``; once one parameter has mapped
    :data:`COLOR_TABLE_AFTER_PIXELS` pixels (a camera stream), its exact 24-bit table is built from
    ``direct`` itself and every later frame is a table gather (same bytes, about 5x faster)."""
    little = sys.byteorder == "little"

    @functools.wraps(direct)
    def fn(img, param, rng):
        key = (direct, param)
        table = _TABLES.pop(key, None)
        if table is None:
            seen = _PIXELS.get(key, 0) + img.shape[0] * img.shape[1]
            _PIXELS[key] = seen
            if seen < COLOR_TABLE_AFTER_PIXELS or not little:
                return direct(img, param, rng)
            table = color_table(direct, param)
        _TABLES[key] = table  # most recently used last
        while len(_TABLES) > COLOR_TABLES_KEPT:
            dropped = next(iter(_TABLES))
            del _TABLES[dropped]
            _PIXELS.pop(dropped, None)
        return apply_color_table(img, table)

    fn.direct = direct
    return fn
