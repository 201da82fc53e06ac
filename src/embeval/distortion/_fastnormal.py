"""The same float32 standard-normal numbers as ``Generator.standard_normal(dtype=np.float32)``, faster.

numpy draws float32 normals with a 256-layer ziggurat on 32-bit words of the bit generator, one
indirect call and one data-dependent sign branch per number (about 8 ns on this machine). Here the
words come in bulk from ``bit_generator.random_raw`` (PCG64's 64-bit outputs, low half first, exactly
the order of numpy's ``next_uint32``) and a compiled loop (numba) runs the same ziggurat: the same
tables, the same float32/float64 operations in the same order, the same slow paths (wedge test with
``exp``, tail with ``log1pf`` from the C library), so every number is bit-identical; afterwards the
generator is left in the state numpy's own draw would leave it in.

The tables are rebuilt from the ziggurat recurrence (Marsaglia & Tsang, r = 3.6541528853610088,
v = 4.92867323399e-3) and checked, at first use, against numpy itself: the acceptance threshold and
the width of every layer are probed by feeding chosen words to numpy's own draw (the buffered-word
field of the PCG64 state). Any mismatch, another bit generator, a big-endian machine or no numba:
numpy's own draw is used (the same numbers, slower).

Callers use :func:`normal_f32` (numbers into an array) or :func:`apply_noise` (additive or
multiplicative noise drawn and applied to a uint8 image in one pass, no float buffer).
"""
from __future__ import annotations

import sys
import threading

import numpy as np

#: below this many numbers numpy's own draw is as fast (the state bookkeeping costs ~30 us)
SMALL = 4096
_NO_U8, _NO_F32 = np.zeros(0, np.uint8), np.zeros(0, np.float32)
_LOCK = threading.Lock()
_STATE: dict = {}  # "kernels": the compiled module, or None when unavailable


def _probe_matches(ki: np.ndarray, wi: np.ndarray) -> bool:
    """True when numpy's own float32 ziggurat accepts exactly below ``ki`` and scales by ``wi``, for every
    layer (words fed through PCG64's buffered-word field; about 2000 single draws)."""
    g = np.random.Generator(np.random.PCG64(12345))
    bg = g.bit_generator
    base = bg.state
    inner = base["state"]["state"]

    def draw(word: int) -> tuple[float, bool]:
        s = dict(base)
        s["has_uint32"], s["uinteger"] = 1, word
        bg.state = s
        x = float(g.standard_normal(1, dtype=np.float32)[0])
        return x, bg.state["state"]["state"] == inner  # True: the fast path, only the fed word used

    for idx in range(256):
        k = int(ki[idx])
        for rabs in {k - 1, k, 1 << 22}:
            if not 0 <= rabs < 1 << 23:
                continue
            for sign in (0, 1):
                x, fast = draw(idx | sign << 8 | rabs << 9)
                if fast != (rabs < k):
                    return False
                want = np.float32(rabs) * wi[idx]
                if fast and x != (-want if sign else want):
                    return False
    return True


def _build():
    if sys.byteorder != "little":
        return None
    try:
        from embeval.distortion import _compiled

        if not _probe_matches(_compiled.KI, _compiled.WI):
            return None
        words = np.random.default_rng(0).bit_generator.random_raw(64).view("<u4")
        _compiled.draw(words, _compiled.RAW, _NO_U8, np.float32(0), np.empty(8, np.float32), _NO_U8)  # compiles
    except Exception:  # no numba, no C maths library to bind, or a compiler failure: numpy's own draw
        return None
    return _compiled


def _kernels():
    if "kernels" not in _STATE:
        with _LOCK:
            if "kernels" not in _STATE:
                _STATE["kernels"] = _build()
    return _STATE["kernels"]


def available() -> bool:
    """True when the compiled path is in use (numba present, tables verified against numpy)."""
    return _kernels() is not None


def _run(rng: np.random.Generator, n: int, kernel, *args) -> bool:
    """Feed ``kernel(words, *args)`` with enough of ``rng``'s words for ``n`` numbers; leave ``rng`` as
    numpy would after drawing them. False (rng untouched) when the fast path does not apply."""
    bg = rng.bit_generator
    if type(bg) is not np.random.PCG64:
        return False
    start = bg.state
    lead = [start["uinteger"]] if start["has_uint32"] else []
    n64 = (n - len(lead)) // 2 + n // 64 + 64  # rejections use about 1.1 % more words
    while True:
        raw = bg.random_raw(n64)
        words = raw.view("<u4") if not lead else np.concatenate([np.array(lead, np.uint32), raw.view("<u4")])
        used = kernel(words, *args)
        if used >= 0:
            break
        bg.state = start
        n64 *= 2
    used -= len(lead)  # words taken from the generator itself (after the buffered one)
    bg.state = start
    s = None
    if used > 0:
        bg.advance((used + 1) // 2)
        # numpy keeps the high half of its last 64-bit output (still to be used when ``used`` is odd)
        s = bg.state
        s["has_uint32"], s["uinteger"] = used % 2, int(raw[(used - 1) // 2] >> np.uint64(32))
    elif lead:  # only the buffered word was used
        s = bg.state
        s["has_uint32"] = 0
    if s is not None:
        bg.state = s
    return True


def normal_f32(rng: np.random.Generator, shape) -> np.ndarray:
    """``rng.standard_normal(shape, dtype=np.float32)``: the same numbers, the same state afterwards."""
    out = np.empty(shape, np.float32)
    ks = _kernels() if out.size >= SMALL else None
    if ks is None or not _run(rng, out.size, ks.draw, ks.RAW, _NO_U8, np.float32(0), out.reshape(-1), _NO_U8):
        rng.standard_normal(dtype=np.float32, out=out)
    return out


def apply_noise(img: np.ndarray, sigma: float, rng: np.random.Generator, multiplicative: bool = False) -> np.ndarray:
    """Gaussian noise ``n = rng.standard_normal(img.shape, float32)`` applied to uint8 ``img`` in one pass,
    bit-identical to numpy's float32 arithmetic in this order: additive ``n * sigma + img + 0.5``,
    multiplicative ``(n * sigma + 1) * img + 0.5``; then clip to 0..255 and truncate to uint8."""
    img = np.ascontiguousarray(img)
    out = np.empty_like(img)
    ks = _kernels() if img.size >= SMALL else None
    if ks is not None and _run(rng, img.size, ks.draw, ks.MUL if multiplicative else ks.ADD, img.reshape(-1),
                               np.float32(sigma), _NO_F32, out.reshape(-1)):
        return out
    x = rng.standard_normal(img.shape, dtype=np.float32)
    x *= np.float32(sigma)
    if multiplicative:
        x += np.float32(1.0)
        x *= img
    else:
        x += img
    x += np.float32(0.5)
    np.clip(x, 0, 255, out=x)
    return x.astype(np.uint8)
