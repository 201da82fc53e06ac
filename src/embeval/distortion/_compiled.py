"""Compiled (numba) kernels of the distortions: numpy's float32 ziggurat for standard normals on
32-bit words given in bulk (:mod:`embeval.distortion._fastnormal`), and the contrast tone table.
Imported only when numba is installed (callers fall back to numpy, same bytes); compiled on first
use and cached next to this file (``__pycache__``)."""
from __future__ import annotations

import ctypes.util
import math

import llvmlite.binding as _llvm
import numba
import numpy as np
from numba import types

R = 3.6541528853610088  # right edge of the base layer
V = 4.92867323399e-3  # area of every layer


def tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ki, wi, fi) of the 256-layer ziggurat (Marsaglia & Tsang's recurrence), layer 0 = the base:
    ki = uint32 acceptance thresholds on the 23-bit magnitude, wi = layer widths / 2^23, fi = density
    at the layer edges (float32)."""
    m = 2.0 ** 23
    ki = np.zeros(256, np.uint32)
    wi = np.zeros(256, np.float64)
    fi = np.zeros(256, np.float64)
    dn = tn = R
    q = V / math.exp(-0.5 * dn * dn)
    ki[0] = round(dn / q * m)
    wi[0], wi[255] = q / m, dn / m
    fi[0], fi[255] = 1.0, math.exp(-0.5 * dn * dn)
    for i in range(254, 0, -1):
        dn = math.sqrt(-2.0 * math.log(V / dn + math.exp(-0.5 * dn * dn)))
        ki[i + 1] = round(dn / tn * m)
        tn = dn
        fi[i] = math.exp(-0.5 * dn * dn)
        wi[i] = dn / m
    return ki, wi.astype(np.float32), fi.astype(np.float32)


KI, WI, FI = tables()

# the C library's exp and log1pf, as numpy's draw calls them (not numba's own maths)
_llvm.load_library_permanently(ctypes.util.find_library("m") or "libm.so.6")
_exp = types.ExternalFunction("exp", types.float64(types.float64))
_log1pf = types.ExternalFunction("log1pf", types.float32(types.float32))

_F32, _F64 = np.float32, np.float64
_R_F = np.float32(R)
_INV_R_F = np.float32(1.0 / R)
_TO_UNIT = np.float32(1.0 / 16777216.0)


@numba.njit(cache=True, nogil=True, inline="always")
def _one(words, pos):
    """One number from ``words[pos:]`` -> (value, next position); position -1 when the words ran out."""
    n = words.shape[0]
    while True:
        if pos >= n:
            return _F32(0.0), -1
        r = words[pos]
        pos += 1
        idx = r & 0xFF
        rabs = (r >> 9) & 0x7FFFFF
        x = _F32(rabs) * WI[idx]
        if (r >> 8) & 1:
            x = -x
        if rabs < KI[idx]:
            return x, pos
        if idx == 0:  # the tail beyond R
            while True:
                if pos + 2 > n:
                    return _F32(0.0), -1
                u1 = _F32(words[pos] >> 8) * _TO_UNIT
                u2 = _F32(words[pos + 1] >> 8) * _TO_UNIT
                pos += 2
                xx = -_INV_R_F * _log1pf(-u1)
                yy = -_log1pf(-u2)
                if yy + yy > xx * xx:
                    if (rabs >> 8) & 1:
                        return -(_R_F + xx), pos
                    return _R_F + xx, pos
        else:  # the wedge: compare with the density (in double, as numpy)
            if pos >= n:
                return _F32(0.0), -1
            u = _F32(words[pos] >> 8) * _TO_UNIT
            pos += 1
            if _F64((FI[idx - 1] - FI[idx]) * u + FI[idx]) < _exp(_F64(-0.5) * _F64(x) * _F64(x)):
                return x, pos


@numba.njit(cache=True, nogil=True)
def _slow(words, pos):
    return _one(words, pos)


@numba.njit(cache=True, nogil=True, inline="always")
def _to_u8(y):
    """numpy's ``clip(y, 0, 255).astype(uint8)`` for float32 ``y`` (truncation)."""
    return np.uint8(np.int32(min(max(y, _F32(0.0)), _F32(255.0))))


#: what :func:`draw` does with each number
RAW, ADD, MUL = 0, 1, 2


@numba.njit(cache=True, nogil=True)
def draw(words, mode, img, sigma, out_f, out_u8):
    """n float32 normals from ``words``; returns the number of words used, or -1 if they ran out.
    RAW: out_f[i] = n_i. ADD: out_u8[i] = uint8(clip(n_i * sigma + img[i] + 0.5, 0, 255)); MUL: the same
    with (n_i * sigma + 1) * img[i] + 0.5 (float32, numpy's order of operations; n = len of the output)."""
    pos = 0
    nw = words.shape[0]
    for i in range(out_f.shape[0] if mode == RAW else out_u8.shape[0]):
        if pos >= nw:
            return -1
        r = words[pos]
        idx = r & 0xFF
        rabs = (r >> 9) & 0x7FFFFF
        if rabs < KI[idx]:  # numpy's fast path (99.3 % of draws) inline
            v = _F32(rabs) * WI[idx]
            if (r >> 8) & 1:
                v = -v
            pos += 1
        else:
            v, pos = _slow(words, pos)
            if pos < 0:
                return -1
        if mode == RAW:
            out_f[i] = v
        elif mode == MUL:
            out_u8[i] = _to_u8((v * sigma + _F32(1.0)) * _F32(img[i]) + _F32(0.5))
        else:
            out_u8[i] = _to_u8(v * sigma + _F32(img[i]) + _F32(0.5))
    return pos


@numba.njit(cache=True, nogil=True)
def contrast_table(m, factor, out):
    """out[v] = uint8(clip(((v - m) * factor + m) + 0.5, 0, 255)) for v = 0..255, float64 in numpy's order
    (the contrast change's table, without 7 numpy calls on 256 numbers)."""
    for v in range(256):
        t = ((_F64(v) - m) * factor + m) + 0.5
        out[v] = np.uint8(np.int64(min(max(t, 0.0), 255.0)))
    return out


@numba.njit(cache=True, nogil=True)
def gather_rgb(flat, table, out):
    """out pixel = bytes 0..2 of table[R | G << 8 | B << 16] for every RGB pixel of ``flat`` (uint8, 3 per
    pixel): the 24-bit colour-table map in one pass (no index array, no 4-byte intermediate)."""
    for i in range(flat.shape[0] // 3):
        j = 3 * i
        v = table[np.uint32(flat[j]) | (np.uint32(flat[j + 1]) << 8) | (np.uint32(flat[j + 2]) << 16)]
        out[j] = v & 0xFF
        out[j + 1] = (v >> 8) & 0xFF
        out[j + 2] = (v >> 16) & 0xFF
    return out
