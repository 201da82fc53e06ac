"""The wire format of allenai/vla-evaluation-harness's model servers ("vla-eval"), written from its RFC-0002.

Transport: one WebSocket per client; every message is one *binary* frame holding a msgpack map
``{"type": str, "payload": map, "seq": int, "timestamp": float}`` (all four required). Types: ``hello``
(handshake, answered by a ``hello``), ``episode_start``, ``observation`` (answered by one ``action`` or
one ``error`` carrying the observation's ``seq``), ``action``, ``episode_end``, ``error`` (payload
``{"error": "<what went wrong>"}``).

numpy arrays travel inline as maps: ``{"__ndarray__": true, "data": <bytes>, "dtype": "<f4", "shape": [..]}``
(only bool / int / uint / float dtypes); images (HWC uint8, 1/3/4 channels) may instead be
``{"__image__": true, "format": "raw" | "png" | "jpeg", "data": <bytes>, "shape": [H, W, C]}`` (``dtype``
too for raw). Payload convention: ``images`` (camera -> HWC uint8), ``task_description`` (str), ``state``
or ``states`` (proprioception); replies ``{"actions": float32 (D,) or (N, D)}``.

:func:`unpack` is written for hostile input: every failure is a :class:`ProtocolError` with a one-line
reason; message bytes, container sizes, items, nesting, images and decoded pixels are bounded
(:class:`DecodeLimits`) and PNG/JPEG sizes are read from their headers before any pixel is decoded.
"""
from __future__ import annotations

import io
import math
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

#: the protocol version this module speaks (the harness's ``PROTOCOL_VERSION``)
PROTOCOL_VERSION = 1
HELLO, OBSERVATION, ACTION = "hello", "observation", "action"
EPISODE_START, EPISODE_END, ERROR = "episode_start", "episode_end", "error"
MESSAGE_TYPES = (HELLO, OBSERVATION, ACTION, EPISODE_START, EPISODE_END, ERROR)
NDARRAY_KEY, IMAGE_KEY = "__ndarray__", "__image__"
IMAGE_FORMATS = ("raw", "png", "jpeg")
ImageFormat = Literal["raw", "png", "jpeg"]
_DTYPE_KINDS = "biuf"


class ProtocolError(ValueError):
    """A message that cannot be read; ``code`` names the kind (e.g. ``invalid_msgpack``, ``too_many_pixels``),
    ``seq`` the message's sequence number when known, ``fatal`` whether the frame itself was unreadable."""

    def __init__(self, message: str, code: str = "invalid_message", seq: int = 0, fatal: bool = True):
        super().__init__(message)
        self.code, self.seq, self.fatal = code, seq, fatal


@dataclass(frozen=True)
class DecodeLimits:
    """Bounds on one decoded message. ``max_bytes``: the frame; ``max_items``: values in all plain
    containers together (arrays and maps, their items counted); ``max_depth``: nesting of containers;
    ``max_images``: images (``__image__`` maps and HWC uint8 ``__ndarray__`` maps); ``max_image_pixels``:
    pixels of one image; ``max_pixels``: pixels of all images of the message."""

    max_bytes: int = 32 * 2 ** 20
    max_items: int = 200_000
    max_depth: int = 32
    max_images: int = 16
    max_image_pixels: int = 4096 * 4096
    max_pixels: int = 4096 * 4096


@dataclass
class Message:
    """One protocol message; ``pixels``: decoded image pixels it holds (0 for outgoing ones)."""

    type: str
    payload: dict
    seq: int = 0
    timestamp: float = 0.0
    pixels: int = 0


# --------------------------------------------------------------------------- encoding
def _is_image(arr: np.ndarray) -> bool:
    return arr.ndim == 3 and arr.dtype == np.uint8 and arr.shape[2] in (1, 3, 4)


def encode_image(img: np.ndarray, fmt: ImageFormat = "raw") -> dict[str, Any]:
    """An HWC uint8 image as the protocol's ``__image__`` map (``raw`` bytes, lossless ``png`` or ``jpeg``
    at quality 95)."""
    img = np.ascontiguousarray(img)
    if fmt == "raw":
        return {IMAGE_KEY: True, "format": "raw", "data": img.tobytes(), "dtype": img.dtype.str, "shape": list(img.shape)}
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"image format {fmt!r} is not one of {', '.join(IMAGE_FORMATS)}")
    from PIL import Image

    pil = Image.fromarray(img[:, :, 0] if img.shape[2] == 1 else img)
    if fmt == "jpeg" and pil.mode != "RGB":
        raise ValueError(f"jpeg needs an RGB image, got {img.shape[2]} channels; use png or raw")
    buf = io.BytesIO()
    pil.save(buf, format="PNG" if fmt == "png" else "JPEG", **({"quality": 95} if fmt == "jpeg" else {}))
    return {IMAGE_KEY: True, "format": fmt, "data": buf.getvalue(), "shape": list(img.shape)}


def encode_value(obj: Any, image_format: ImageFormat = "raw") -> Any:
    """``msgpack`` default hook: numpy arrays as ``__ndarray__`` maps (HWC uint8 images as ``__image__`` maps
    when ``image_format`` is ``png`` or ``jpeg``), numpy scalars as plain numbers."""
    if isinstance(obj, np.ndarray):
        if image_format != "raw" and _is_image(obj):
            return encode_image(obj, image_format)
        if obj.dtype.kind not in _DTYPE_KINDS:
            raise TypeError(f"numpy dtype {obj.dtype} cannot be sent; only bool, int, uint and float arrays")
        a = np.ascontiguousarray(obj)
        return {NDARRAY_KEY: True, "data": a.tobytes(), "dtype": a.dtype.str, "shape": list(a.shape)}
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    raise TypeError(f"cannot send a {type(obj).__name__} over the vla-eval protocol")


def pack(type: str, payload: dict, seq: int = 0, timestamp: float | None = None,
         image_format: ImageFormat = "raw") -> bytes:
    """One message as msgpack bytes (see the module docstring)."""
    import msgpack

    if type not in MESSAGE_TYPES:
        raise ValueError(f"message type {type!r} is not one of {', '.join(MESSAGE_TYPES)}")
    raw = {"type": type, "payload": payload, "seq": int(seq), "timestamp": time.time() if timestamp is None else float(timestamp)}
    return msgpack.packb(raw, default=lambda o: encode_value(o, image_format), use_bin_type=True)


def error_message(text: str, seq: int = 0, code: str | None = None) -> bytes:
    """An ``error`` message answering the message ``seq``: payload ``{"error": text}`` (and ``code``)."""
    return pack(ERROR, {"error": text, **({"code": code} if code else {})}, seq)


# --------------------------------------------------------------------------- decoding
class _Decoder:
    """Decodes the ``__ndarray__`` / ``__image__`` maps of a payload under :class:`DecodeLimits`."""

    def __init__(self, limits: DecodeLimits, seq: int):
        self.limits, self.seq = limits, seq
        self.images = 0
        self.pixels = 0

    def fail(self, message: str, code: str) -> ProtocolError:
        return ProtocolError(message, code, self.seq, fatal=False)

    def tree(self, obj: Any, level: int = 1) -> Any:
        """``obj`` with its array maps decoded (maps and lists rebuilt; at most ``max_depth`` levels)."""
        if level > self.limits.max_depth:
            raise self.fail(f"the payload is nested deeper than {self.limits.max_depth} levels; flatten it", "too_deep")
        if isinstance(obj, dict):
            if obj.get(IMAGE_KEY) is True:
                return self._image(obj)
            if obj.get(NDARRAY_KEY) is True:
                return self._ndarray(obj)
            return {k: self.tree(v, level + 1) if isinstance(v, (dict, list)) else v for k, v in obj.items()}
        return [self.tree(v, level + 1) if isinstance(v, (dict, list)) else v for v in obj]

    def _shape(self, obj: dict, what: str) -> tuple[int, ...]:
        shape = obj.get("shape")
        if (not isinstance(shape, (list, tuple)) or len(shape) > 8
                or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2 ** 31 for s in shape)):
            raise self.fail(f"{what} 'shape' must be a list of at most 8 whole numbers >= 0, got {str(shape)[:60]}",
                            "invalid_array")
        return tuple(shape)

    def _take_image(self, h: int, w: int) -> None:
        lim = self.limits
        self.images += 1
        if self.images > lim.max_images:
            raise self.fail(f"the message holds more than {lim.max_images} images, the server's limit; send fewer",
                            "too_many_images")
        if h * w > lim.max_image_pixels:
            raise self.fail(f"an image is {w}x{h} pixels, over the server's limit of {lim.max_image_pixels} per "
                            "image; send smaller images", "too_many_pixels")
        self.pixels += h * w
        if self.pixels > lim.max_pixels:
            raise self.fail(f"the message's images hold more than {lim.max_pixels} pixels, the server's limit per "
                            "message; send smaller or fewer images", "too_many_pixels")

    def _raw(self, obj: dict, shape: tuple[int, ...], what: str) -> np.ndarray:
        try:
            dtype = np.dtype(obj.get("dtype")) if isinstance(obj.get("dtype"), str) else None
        except (TypeError, ValueError):
            dtype = None
        if dtype is None or dtype.kind not in _DTYPE_KINDS:
            raise self.fail(f"{what} 'dtype' {str(obj.get('dtype'))[:40]!r} is not allowed; send a bool, int, uint "
                            "or float dtype such as '<f4' or '|u1'", "invalid_array")
        data = obj.get("data")
        if not isinstance(data, bytes):
            raise self.fail(f"{what} 'data' must be bytes (msgpack bin), got {type(data).__name__}", "invalid_array")
        need = math.prod(shape) * dtype.itemsize
        if len(data) != need:
            raise self.fail(f"{what} has {len(data)} bytes of data; its shape {list(shape)} and dtype {dtype.str} "
                            f"need {need}", "invalid_array")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()

    def _ndarray(self, obj: dict) -> np.ndarray:
        shape = self._shape(obj, "an __ndarray__")
        if len(shape) == 3 and obj.get("dtype") in ("|u1", "u1", "uint8") and shape[2] in (1, 3, 4):
            self._take_image(shape[0], shape[1])
        return self._raw(obj, shape, "an __ndarray__")

    def _image(self, obj: dict) -> np.ndarray:
        fmt = obj.get("format")
        shape = self._shape(obj, "an __image__")
        if len(shape) != 3 or shape[2] not in (1, 3, 4):
            raise self.fail(f"an __image__ 'shape' must be [H, W, C] with C in 1, 3, 4, got {list(shape)}", "invalid_image")
        if fmt == "raw":
            self._take_image(shape[0], shape[1])
            img = self._raw(obj, shape, "an __image__")
            if img.dtype != np.uint8:
                raise self.fail(f"an __image__ must be uint8, got {img.dtype}", "invalid_image")
            return img
        if fmt not in ("png", "jpeg"):
            raise self.fail(f"an __image__ 'format' must be one of {', '.join(IMAGE_FORMATS)}, got {str(fmt)[:20]!r}",
                            "invalid_image")
        data = obj.get("data")
        if not isinstance(data, bytes):
            raise self.fail(f"an __image__ 'data' must be bytes, got {type(data).__name__}", "invalid_image")
        from PIL import Image, UnidentifiedImageError

        try:
            pil = Image.open(io.BytesIO(data), formats=["PNG" if fmt == "png" else "JPEG"])
            w, h = pil.size  # from the header: nothing decoded yet
            self._take_image(h, w)
            if (h, w) != shape[:2]:
                raise self.fail(f"an __image__ says shape {list(shape)} but its {fmt} is {w}x{h}", "invalid_image")
            arr = np.asarray(pil.convert({1: "L", 3: "RGB", 4: "RGBA"}[shape[2]]), dtype=np.uint8)
        except ProtocolError:
            raise
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            raise self.fail(f"an __image__ is not a readable {fmt} ({type(exc).__name__}: {str(exc)[:80]})",
                            "invalid_image") from None
        return arr.reshape(shape)


class _Counter:
    """msgpack hooks bounding the values of all arrays and maps of a message together."""

    def __init__(self, limit: int):
        self.limit, self.items = limit, 0

    def _count(self, obj):
        self.items += len(obj) + 1
        if self.items > self.limit:
            raise ProtocolError(f"the message holds more than {self.limit} values in arrays and maps; send numbers "
                                "as numpy arrays (__ndarray__)", "too_many_items")
        return obj

    list_hook = object_hook = _count


def unpackb_bounded(data: bytes, limits: DecodeLimits) -> Any:
    """msgpack bytes -> Python objects (``__ndarray__`` maps not yet decoded) with every container, string and
    the count of all values bounded by ``limits``; a fatal :class:`ProtocolError` naming the problem."""
    import msgpack

    count = _Counter(limits.max_items)
    n = limits.max_items
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, object_hook=count.object_hook,
                               list_hook=count.list_hook, max_array_len=n, max_map_len=n, max_ext_len=0,
                               max_str_len=limits.max_bytes, max_bin_len=limits.max_bytes)
    except ProtocolError:
        raise
    except msgpack.StackError:
        raise ProtocolError("the message is nested too deeply to read; flatten it", "too_deep") from None
    except (ValueError, TypeError, msgpack.UnpackException, OverflowError, RecursionError) as exc:
        why = f"{type(exc).__name__}: {str(exc)[:100]}" if str(exc) else type(exc).__name__
        raise ProtocolError(f"the message is not valid msgpack ({why})", "invalid_msgpack") from None


def _envelope(data: Any, limits: DecodeLimits) -> dict:
    """The message map of a frame, its fields checked (array maps not yet decoded); fatal ProtocolErrors."""
    if isinstance(data, str):
        raise ProtocolError("got a text frame; vla-eval messages are binary frames of msgpack", "text_frame")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"got a {type(data).__name__} frame; send msgpack bytes", "invalid_msgpack")
    if len(data) > limits.max_bytes:
        raise ProtocolError(f"the message is {len(data)} bytes, over the server's limit of {limits.max_bytes}",
                            "message_too_large")
    raw = unpackb_bounded(data, limits)
    if not isinstance(raw, dict):
        raise ProtocolError(f"a message must be a msgpack map {{type, payload, seq, timestamp}}, got {type(raw).__name__}",
                            "invalid_message")
    missing = [k for k in ("type", "payload", "seq", "timestamp") if k not in raw]
    if missing:
        raise ProtocolError(f"the message misses {', '.join(missing)} (a message is a map with type, payload, seq "
                            "and timestamp)", "invalid_message")
    seq = raw["seq"]
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise ProtocolError(f"'seq' must be a whole number, got {type(seq).__name__}", "invalid_message")
    for key, types, what in (("timestamp", (int, float), "a number (seconds since the epoch)"),
                             ("type", (str,), "a string"), ("payload", (dict,), "a map")):
        v = raw[key]
        if isinstance(v, bool) or not isinstance(v, types):
            raise ProtocolError(f"'{key}' must be {what}, got {type(v).__name__}", "invalid_message", seq)
    return raw


def unpack(data: Any, limits: DecodeLimits | None = None) -> Message:
    """Decode one frame (bytes) under ``limits``; :class:`ProtocolError` naming the problem for anything
    that is not a well-formed message. Its ``fatal`` is True when the message itself could not be read
    (not msgpack, not a map, fields missing or mistyped), False for a bad payload (its ``seq`` is the
    message's)."""
    limits = limits or DecodeLimits()
    raw = _envelope(data, limits)
    dec = _Decoder(limits, raw["seq"])
    payload = dec.tree(raw["payload"])
    return Message(raw["type"], payload, raw["seq"], float(raw["timestamp"]), dec.pixels)
