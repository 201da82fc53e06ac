"""The ``json_numpy`` wire format that OpenVLA's REST server and its clients use for arrays:
``{"__numpy__": base64(raw C-order bytes), "dtype": numpy descr (e.g. "|u1", "<f4"), "shape": [..]}``.
Implemented here (a few lines) so neither side needs the json-numpy package; interoperable with it.
"""
from __future__ import annotations

import base64
from typing import Any

import numpy as np

from embeval.errors import InvalidInputError


def encode_array(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a)
    return {"__numpy__": base64.b64encode(a.tobytes()).decode("ascii"),
            "dtype": np.lib.format.dtype_to_descr(a.dtype), "shape": list(a.shape)}


def is_encoded(obj: Any) -> bool:
    return isinstance(obj, dict) and "__numpy__" in obj


def decode_array(obj: Any) -> np.ndarray:
    """An array from a json_numpy dict, or from a (nested) list of numbers."""
    if is_encoded(obj):
        try:
            dtype = np.lib.format.descr_to_dtype(obj["dtype"])
            arr = np.frombuffer(base64.b64decode(obj["__numpy__"]), dtype=dtype)
            shape = obj.get("shape")
            return arr.reshape(shape) if shape else arr[0]
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise InvalidInputError(f"malformed json_numpy array ({type(exc).__name__}: {exc})") from None
    try:
        return np.asarray(obj)
    except (ValueError, TypeError) as exc:
        raise InvalidInputError(f"expected an array (json_numpy dict or nested list), got {type(obj).__name__}") from exc


def decode_tree(obj: Any) -> Any:
    """Decode every json_numpy dict inside ``obj`` (dicts and lists, recursively)."""
    if is_encoded(obj):
        return decode_array(obj)
    if isinstance(obj, dict):
        return {k: decode_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_tree(v) for v in obj]
    return obj
