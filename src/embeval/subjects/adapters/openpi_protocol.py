"""openpi's policy-server protocol (Physical Intelligence's ``openpi``: π0 / π0-FAST / π0.5 servers) and its
example observation layouts.

Transport: one WebSocket per client. On connect the server sends one binary frame, a msgpack map of metadata.
Then the client sends an observation map and the server answers it with a map holding ``actions`` (an
``(H, D)`` chunk the client slices, openpi's ``ActionChunkBroker``) plus anything else (``server_timing``); an
error is a *text* frame (openpi sends the traceback) followed by close code 1011. ``GET /healthz`` answers
``OK``. Clients may send ``Authorization: Api-Key KEY``.

numpy values travel as openpi's ``msgpack_numpy`` maps with *bytes* keys: arrays
``{b"__ndarray__": True, b"data": bytes, b"dtype": "<f4", b"shape": [..]}``, scalars
``{b"__npgeneric__": True, b"data": number, b"dtype": "<f8"}``; object, void and complex dtypes are refused
(as openpi refuses them). :func:`unpack` reads hostile frames under
:class:`~embeval.subjects.adapters.vla_eval_protocol.DecodeLimits` (the vla-eval decoder's bounds).

Layouts (:data:`LAYOUTS`, openpi's example clients): how an embeval :class:`~embeval.action.Observation`
(cameras ``third_person`` / ``wrist``, state ``tcp_pose`` [x y z qx qy qz qw], ``gripper`` [opening 0..1, 1 = open],
``joint_positions``) becomes an openpi observation map and back:

- ``libero`` (openpi ``examples/libero``): ``observation/image`` (third_person) and ``observation/wrist_image``
  (wrist), HWC uint8 224x224; ``observation/state`` 8 floats = end-effector position (3, m), axis-angle (3, rad),
  the two finger joint positions (LIBERO's ``robot0_gripper_qpos``: +-0.04 m open, 0 closed; embeval's opening
  ``g`` is ``[0.04 g, -0.04 g]``); ``prompt``. Replies: LIBERO's OSC actions (convention ``libero_osc``).
- ``droid`` (``examples/droid``): ``observation/exterior_image_1_left`` (third_person),
  ``observation/wrist_image_left`` (wrist), ``observation/joint_position`` (the arm's joints as given),
  ``observation/gripper_position`` (1 value, 1 = closed: ``1 - g``), ``prompt``. DROID's policies answer joint
  velocities, which no embeval action convention reads: give the convention of the server's actions.
- ``aloha`` (``examples/aloha_real``): ``images`` map ``cam_high`` (third_person), ``cam_left_wrist`` (wrist), each
  CHW uint8 224x224; ``state`` 14 floats = left arm (6 joints + gripper opening), right arm (7 zeros: one arm);
  ``prompt``. ALOHA's policies answer joint positions: give the convention of the server's actions.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embeval.registry import Registry
from embeval.subjects.adapters.vla_eval_protocol import (
    _DTYPE_KINDS,
    DecodeLimits,
    ProtocolError,
    _Decoder,
    unpackb_bounded,
)

ND, GEN = b"__ndarray__", b"__npgeneric__"
#: the close code after an error text frame (openpi: 1011, internal error)
ERROR_CLOSE = 1011
#: the key of the instruction in every layout
PROMPT = "prompt"


# --------------------------------------------------------------------------- wire
def encode_value(obj: Any) -> Any:
    """``msgpack`` default hook writing numpy values as openpi's ``msgpack_numpy`` does."""
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind not in _DTYPE_KINDS:
        raise TypeError(f"numpy dtype {obj.dtype} cannot be sent over openpi's protocol; only bool, int, uint, float")
    if isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        return {ND: True, b"data": a.tobytes(), b"dtype": a.dtype.str, b"shape": list(a.shape)}
    if isinstance(obj, np.generic):
        return {GEN: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot send a {type(obj).__name__} over openpi's protocol")


def pack(obj: Any) -> bytes:
    """``obj`` (maps, lists, numbers, strings, numpy values) as one openpi msgpack frame."""
    import msgpack

    return msgpack.packb(obj, default=encode_value, use_bin_type=True)


class _OpenPiDecoder(_Decoder):
    """The vla-eval decoder's bounded array reading for openpi's bytes-keyed maps."""

    def tree(self, obj: Any, level: int = 1) -> Any:
        if isinstance(obj, dict):
            if obj.get(ND) is True:
                return self._ndarray({k.decode("latin-1") if isinstance(k, bytes) else k: v for k, v in obj.items()})
            if obj.get(GEN) is True:
                return self._generic(obj)
        return super().tree(obj, level)

    def _generic(self, obj: dict) -> Any:
        try:
            dtype = np.dtype(obj.get(b"dtype")) if isinstance(obj.get(b"dtype"), str) else None
        except (TypeError, ValueError):
            dtype = None
        data = obj.get(b"data")
        if dtype is None or dtype.kind not in _DTYPE_KINDS or isinstance(data, (dict, list, bytes, str)) or data is None:
            raise self.fail(f"an __npgeneric__ needs a bool/int/uint/float 'dtype' and a number 'data', got "
                            f"{str(obj.get(b'dtype'))[:30]!r} / {type(data).__name__}", "invalid_array")
        try:
            return dtype.type(data)
        except (OverflowError, ValueError, TypeError):
            raise self.fail(f"an __npgeneric__ {data!r:.40} does not fit dtype {dtype.str}", "invalid_array") from None


def unpack(data: Any, limits: DecodeLimits | None = None) -> tuple[Any, int]:
    """One frame -> ``(object with numpy values, decoded image pixels)``; :class:`ProtocolError` naming the
    problem (text frames, oversize frames, bad msgpack, bad arrays, too many images or pixels)."""
    limits = limits or DecodeLimits()
    if isinstance(data, str):
        raise ProtocolError("got a text frame; openpi observations are binary frames of msgpack", "text_frame")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"got a {type(data).__name__} frame; send msgpack bytes", "invalid_msgpack")
    if len(data) > limits.max_bytes:
        raise ProtocolError(f"the message is {len(data)} bytes, over the limit of {limits.max_bytes}", "message_too_large")
    dec = _OpenPiDecoder(limits, 0)
    raw = unpackb_bounded(bytes(data), limits)
    return (dec.tree(raw) if isinstance(raw, (dict, list)) else raw), dec.pixels


# --------------------------------------------------------------------------- layouts
def _state(obs_state: Mapping[str, Any], key: str, n: int | None = None) -> np.ndarray:
    from embeval.errors import InvalidInputError

    if key not in obs_state:
        raise InvalidInputError(f"the layout needs observation.state[{key!r}]; the observation has {sorted(obs_state)}")
    v = np.asarray(obs_state[key], dtype=np.float64).reshape(-1)
    if n is not None and v.size != n:
        raise InvalidInputError(f"observation.state[{key!r}] has {v.size} numbers; the layout needs {n}")
    return v


LIBERO_FINGER_M = 0.04  # one finger's joint position when open (robosuite's Panda gripper)


def _libero_encode(st: Mapping[str, Any]) -> dict[str, np.ndarray]:
    from embeval.rotations import quat_to_rotvec

    pose, g = _state(st, "tcp_pose", 7), float(_state(st, "gripper")[0])
    return {"observation/state": np.concatenate([pose[:3], quat_to_rotvec(pose[3:7]),
                                                 [LIBERO_FINGER_M * g, -LIBERO_FINGER_M * g]]).astype(np.float32)}


def _libero_decode(raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    from embeval.rotations import rotvec_to_quat

    v = _vector(raw, "observation/state", 8)
    return {"tcp_pose": np.concatenate([v[:3], rotvec_to_quat(v[3:6])]),
            "gripper": np.array([float(np.clip((v[6] - v[7]) / (2 * LIBERO_FINGER_M), 0.0, 1.0))])}


def _droid_encode(st: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {"observation/joint_position": _state(st, "joint_positions"),
            "observation/gripper_position": np.array([1.0 - float(_state(st, "gripper")[0])])}


def _droid_decode(raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {"joint_positions": _vector(raw, "observation/joint_position"),
            "gripper": np.array([1.0 - float(_vector(raw, "observation/gripper_position", 1)[0])])}


def _aloha_encode(st: Mapping[str, Any]) -> dict[str, np.ndarray]:
    from embeval.errors import InvalidInputError

    joints = _state(st, "joint_positions")
    if joints.size > 6:
        raise InvalidInputError(f"the aloha layout holds 6 joints per arm; observation.state['joint_positions'] has {joints.size}")
    left = np.concatenate([joints, np.zeros(6 - joints.size), [float(_state(st, "gripper")[0])]])
    return {"state": np.concatenate([left, np.zeros(7)])}


def _aloha_decode(raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    v = _vector(raw, "state", 14)
    return {"joint_positions": v[:6], "gripper": v[6:7]}


def _vector(raw: Mapping[str, Any], key: str, n: int | None = None) -> np.ndarray:
    from embeval.errors import InvalidInputError

    if key not in raw:
        raise InvalidInputError(f"the observation misses {key!r} (its keys: {sorted(map(str, raw))[:10]})")
    try:
        v = np.asarray(raw[key], dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{key!r} must be an array of numbers") from None
    if (n is not None and v.size != n) or v.size > 4096 or not np.all(np.isfinite(v)):
        raise InvalidInputError(f"{key!r} must hold {n if n is not None else 'at most 4096'} finite numbers, got {v.size}")
    return v


@dataclass(frozen=True)
class OpenPiLayout:
    """One openpi example client's observation map. ``images``: wire key (``a/b`` flat, or ``images.cam`` for a
    nested map) -> embeval camera; ``chw``: images travel channels-first; ``image_size``: the side clients resize
    to; ``encode`` / ``decode``: embeval's ``observation.state`` <-> the layout's state keys; ``convention``: the
    :mod:`embeval.conventions` name of the layout's actions (None: joint-space actions, the spec must say)."""

    name: str
    images: dict[str, str]
    encode: Callable[[Mapping[str, Any]], dict[str, np.ndarray]]
    decode: Callable[[Mapping[str, Any]], dict[str, np.ndarray]]
    chw: bool = False
    image_size: int = 224
    convention: str | None = None
    doc: str = ""
    state_keys: tuple[str, ...] = field(default=())


LAYOUTS: Registry[OpenPiLayout] = Registry("openpi layout", hint="add one with LAYOUTS.register(name, OpenPiLayout(...))")
LAYOUTS.register("libero", OpenPiLayout(
    "libero", {"observation/image": "third_person", "observation/wrist_image": "wrist"}, _libero_encode, _libero_decode,
    convention="libero_osc", state_keys=("observation/state",),
    doc="openpi examples/libero: two 224 px HWC images, 8-float state (pos, axis-angle, finger qpos), OSC actions"))
LAYOUTS.register("droid", OpenPiLayout(
    "droid", {"observation/exterior_image_1_left": "third_person", "observation/wrist_image_left": "wrist"},
    _droid_encode, _droid_decode, state_keys=("observation/joint_position", "observation/gripper_position"),
    doc="openpi examples/droid: exterior + wrist 224 px images, joint and gripper position (1 = closed); "
        "joint-velocity actions"))
LAYOUTS.register("aloha", OpenPiLayout(
    "aloha", {"images.cam_high": "third_person", "images.cam_left_wrist": "wrist"}, _aloha_encode, _aloha_decode,
    chw=True, state_keys=("state",),
    doc="openpi examples/aloha_real: an 'images' map of CHW 224 px cameras, 14-float bimanual joint state; "
        "joint-position actions"))


def _get(raw: Mapping[str, Any], key: str) -> Any:
    if "." in key:
        outer, inner = key.split(".", 1)
        sub = raw.get(outer)
        return sub.get(inner) if isinstance(sub, Mapping) else None
    return raw.get(key)


def observation_map(layout: OpenPiLayout, images: Mapping[str, np.ndarray], state: Mapping[str, Any],
                    prompt: str) -> dict[str, Any]:
    """An openpi observation map in ``layout`` from embeval camera images (already at the model's size) and state."""
    out: dict[str, Any] = {}
    for key, cam in layout.images.items():
        img = np.ascontiguousarray(np.transpose(images[cam], (2, 0, 1)) if layout.chw else images[cam])
        if "." in key:
            outer, inner = key.split(".", 1)
            out.setdefault(outer, {})[inner] = img
        else:
            out[key] = img
    out.update(layout.encode(state))
    out[PROMPT] = prompt
    return out


def read_observation(layout: OpenPiLayout, raw: Any, cameras: Mapping[str, str] | None = None):
    """An openpi observation map -> :class:`~embeval.action.Observation`; ``cameras`` (wire key -> camera)
    replaces the layout's images. :class:`~embeval.errors.InvalidInputError` naming the key."""
    from embeval.action import Observation, check_image
    from embeval.errors import InvalidInputError

    if not isinstance(raw, Mapping):
        raise InvalidInputError(f"an openpi observation must be a map, got {type(raw).__name__}")
    prompt = raw.get(PROMPT)
    if not isinstance(prompt, str):
        raise InvalidInputError("the observation misses 'prompt', the instruction (a string)" if prompt is None else
                                f"'prompt' must be a string, got {type(prompt).__name__}")
    imgs = {}
    for key, cam in (cameras or layout.images).items():
        v = _get(raw, key)
        if not isinstance(v, np.ndarray):
            raise InvalidInputError(f"the observation misses image {key!r} (camera {cam} of the {layout.name} layout)"
                                    if v is None else f"{key!r} must be an image array, got {type(v).__name__}")
        if layout.chw and v.ndim == 3 and v.shape[0] in (1, 3):
            v = np.transpose(v, (1, 2, 0))
        if v.ndim == 3 and v.shape[2] == 1:
            v = np.repeat(v, 3, axis=2)
        imgs[cam] = check_image(np.ascontiguousarray(v), key)
    return Observation(images=imgs, instruction=prompt, state=layout.decode(raw))
