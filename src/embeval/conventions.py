"""Gripper conventions of common models, and conversion to and from embeval's (``[0, 1]``, 1 = open);
which camera image a one-camera policy reads (:func:`camera_image`).

Each convention is one :class:`GripperConvention` record on :data:`GRIPPERS` (an
:class:`embeval.registry.Registry`; installed packages add some through the ``embeval.gripper_conventions``
entry-point group). Add one with :func:`register_gripper`. Values are clipped into range after conversion;
thresholds are for binarising policies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from embeval.errors import ConfigError, InvalidInputError
from embeval.registry import Registry


@dataclass(frozen=True)
class GripperConvention:
    """A model's gripper value <-> embeval's (``[0, 1]``, 1 = open): both maps and the range in words."""

    name: str
    to_embeval: Callable[[float], float]
    from_embeval: Callable[[float], float]
    doc: str = ""


GRIPPERS: Registry[GripperConvention] = Registry(
    "gripper convention", group="embeval.gripper_conventions",
    hint="add one with embeval.conventions.register_gripper(name, to_embeval, from_embeval, doc)")


def register_gripper(name: str, to_embeval: Callable[[float], float], from_embeval: Callable[[float], float], doc: str) -> None:
    """Register convention ``name``: ``to_embeval(model value) -> [0, 1]`` and its inverse (replaces one of that name)."""
    if not callable(to_embeval) or not callable(from_embeval):
        raise ConfigError(f"gripper convention {name!r}: to_embeval and from_embeval must be functions")
    GRIPPERS.register(name, GripperConvention(name, to_embeval, from_embeval, doc), description=doc)


register_gripper("open1", lambda g: g, lambda g: g,
                 "[0, 1], 1 = open, 0 = closed (embeval and OpenVLA's raw predict_action output)")
register_gripper("close1", lambda g: 1.0 - g, lambda g: 1.0 - g, "[0, 1], 1 = closed (e.g. LeRobot datasets of closing force)")
register_gripper("signed_open_positive", lambda g: (g + 1.0) / 2.0, lambda g: 2.0 * g - 1.0, "[-1, 1], +1 = open, -1 = closed")
register_gripper("signed_close_positive", lambda g: (1.0 - g) / 2.0, lambda g: 1.0 - 2.0 * g,
                 "[-1, 1], +1 = closed, -1 = open (LIBERO / robosuite; OpenVLA's LIBERO deploy after invert_gripper_action)")


def _get(name: str) -> GripperConvention:
    conv = GRIPPERS.get(name, "field 'params.gripper'")
    if not isinstance(conv, GripperConvention):
        raise ConfigError(f"gripper convention {name!r} is a {type(conv).__name__}, not a GripperConvention")
    return conv


def check_gripper(name: str) -> str:
    _get(name)
    return name


def gripper_to_embeval(value: float, convention: str) -> float:
    """Model's gripper value -> embeval's [0, 1], 1 = open (clipped)."""
    return float(np.clip(_get(convention).to_embeval(float(value)), 0.0, 1.0))


def gripper_from_embeval(value: float, convention: str) -> float:
    """embeval's [0, 1], 1 = open -> the model's convention."""
    return float(_get(convention).from_embeval(float(np.clip(value, 0.0, 1.0))))


def camera_image(observation, camera: str | None, model: str, where: str = "params.camera") -> tuple[str, np.ndarray]:
    """``(name, RGB uint8 image)`` of the camera a one-camera ``model`` reads: ``camera`` (the adapter's
    ``params.camera``, or its convention's first camera: ``where`` names the field), else the observation's first
    image; errors name the field and the cameras there."""
    from embeval.action import check_image

    if not observation.images:
        raise InvalidInputError(f"the observation has no camera image; {model} needs one RGB image")
    name = camera or next(iter(observation.images))
    if name not in observation.images:
        raise ConfigError(f"field '{where}': camera {name!r} not in the observation (has {sorted(observation.images)})")
    return name, check_image(observation.images[name], f"images[{name!r}]")


# -- action conventions ------------------------------------------------------------------------------------
#: rotation representation -> numbers it takes in the raw vector
ROTATIONS = {"euler": 3, "rotvec": 3, "quaternion": 4, "rot6d": 6, "none": 0}
#: translation unit -> metres per unit; rotation unit -> radians per unit
TRANSLATION_UNITS = {"m": 1.0, "cm": 0.01, "mm": 0.001}
ROTATION_UNITS = {"rad": 1.0, "deg": float(np.pi / 180.0)}
FRAMES = ("base", "tool0")


@dataclass(frozen=True)
class ActionConvention:
    """What a model's raw action vector means, and how it maps to embeval's 7-DoF action (:func:`to_embeval`).

    The raw vector is ``[translation (3), rotation (ROTATIONS[rotation] numbers), gripper (1)]``. It is clipped
    to ``[-clip, clip]`` (when ``clip`` is set), multiplied element-wise by ``scale`` (one number or one per raw
    number; e.g. LIBERO's [-1, 1] OSC output times 0.05 m / 0.5 rad), then read in ``translation_units`` and
    ``rotation_units``. ``euler`` angles are about the axes of ``order`` (lower-case extrinsic, upper-case
    intrinsic; ``xyz`` is embeval's roll-pitch-yaw); ``quaternion`` is ``[x, y, z, w]``; ``rot6d`` is the first two
    columns of the rotation matrix (Gram-Schmidt orthonormalised). ``absolute``: the numbers are a target TCP
    pose in frame base, turned into a delta in ``frame`` from the current pose. ``chunk_size``, ``image_size``
    (pixels, square side or [H, W]), ``crop`` (centre-crop area fraction, 1 = none) and ``cameras`` describe the
    model's inputs and output chunking for the adapter.
    """

    name: str = "embeval"
    frame: str = "base"
    rotation: str = "euler"
    order: str = "xyz"
    translation_units: str = "m"
    rotation_units: str = "rad"
    scale: tuple[float, ...] = (1.0,)
    clip: float | None = None
    gripper: str = "open1"
    absolute: bool = False
    chunk_size: int = 1
    image_size: tuple[int, ...] | None = None
    crop: float = 1.0
    cameras: tuple[str, ...] = ()
    doc: str = ""

    @property
    def size(self) -> int:
        """Numbers in one raw action."""
        return 3 + ROTATIONS[self.rotation] + 1

    def action_spec(self):
        """The :class:`embeval.action.ActionSpec` of the actions an adapter makes under this convention: deltas in
        ``frame``, also for an absolute convention, whose targets the adapters turn into deltas against the
        observation's TCP pose (:func:`tcp_pose_of` refuses an observation without one)."""
        from embeval.action import ActionSpec

        return ActionSpec(frame=self.frame, gripper_open_is_one=self.gripper in ("open1", "signed_open_positive"),
                          chunk_size=int(self.chunk_size), absolute=False)

    def check(self, where: str = "params.convention") -> "ActionConvention":
        """This convention, or a one-line :class:`ConfigError` naming the field and the choices."""
        def bad(field: str, why: str):
            return ConfigError(f"field '{where}.{field}' {why}")

        if self.frame not in FRAMES:
            raise bad("frame", f"must be one of {', '.join(FRAMES)}, got {self.frame!r}")
        if self.rotation not in ROTATIONS:
            raise bad("rotation", f"must be one of {', '.join(ROTATIONS)}, got {self.rotation!r}")
        if self.rotation == "euler":
            from embeval.rotations import _check_seq

            try:
                _check_seq(self.order)
            except Exception:  # noqa: BLE001 - its message names rotations' rules; ours names the field
                raise bad("order", f"must be 3 axes like xyz (extrinsic) or XYZ (intrinsic), got {self.order!r}") from None
        if self.translation_units not in TRANSLATION_UNITS:
            raise bad("translation_units", f"must be one of {', '.join(TRANSLATION_UNITS)}, got {self.translation_units!r}")
        if self.rotation_units not in ROTATION_UNITS:
            raise bad("rotation_units", f"must be one of {', '.join(ROTATION_UNITS)}, got {self.rotation_units!r}")
        s = np.asarray(self.scale, dtype=np.float64).reshape(-1) if _numbers(self.scale) else None
        if s is None or s.size not in (1, self.size) or not np.all(np.isfinite(s)) or np.any(s == 0):
            raise bad("scale", f"must be one non-zero finite number or {self.size} (one per raw number), got {self.scale!r}")
        if self.clip is not None and (not _numbers(self.clip) or not 0 < float(self.clip) < float("inf")):
            raise bad("clip", f"must be a positive number or null, got {self.clip!r}")
        if self.gripper not in GRIPPERS:
            raise bad("gripper", f"must be one of {', '.join(GRIPPERS.names())}, got {self.gripper!r}")
        for field, v, lo in (("chunk_size", self.chunk_size, 1),):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise bad(field, f"must be a whole number >= {lo}, got {v!r}")
        if not isinstance(self.absolute, bool):
            raise bad("absolute", f"must be true or false, got {self.absolute!r}")
        if self.image_size is not None and (len(self.image_size) not in (1, 2) or any(
                isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in self.image_size)):
            raise bad("image_size", f"must be a side or [H, W] in pixels, got {self.image_size!r}")
        if not _numbers(self.crop) or not 0 < float(self.crop) <= 1:
            raise bad("crop", f"must be a centre-crop area fraction in (0, 1], got {self.crop!r}")
        if any(not isinstance(c, str) or not c for c in self.cameras):
            raise bad("cameras", f"must list camera names, got {list(self.cameras)!r}")
        return self


def _numbers(x) -> bool:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return not isinstance(x, bool) and a.ndim <= 1 and a.size > 0


CONVENTIONS: Registry[ActionConvention] = Registry(
    "action convention", group="embeval.action_conventions",
    hint="add one with embeval.conventions.register_convention(ActionConvention(name=..., ...))")


def register_convention(conv: ActionConvention) -> ActionConvention:
    """Register ``conv`` under its name (checked first; replaces one of that name)."""
    CONVENTIONS.register(conv.name, conv.check(f"convention {conv.name}"), description=conv.doc)
    return conv


register_convention(ActionConvention(
    "embeval", doc="embeval's own: [dx dy dz] m, [droll dpitch dyaw] rad (extrinsic xyz), gripper [0, 1] 1 = open, frame base"))
register_convention(ActionConvention(
    "openvla_bridge", image_size=(224,), cameras=("third_person",),
    doc="OpenVLA un-normalised with unnorm_key bridge_orig: BridgeData V2 end-effector deltas (m, rad rpy), "
        "gripper [0, 1] 1 = open, one 224 px image"))
CONVENTIONS.register("libero_osc", "embeval.sim.libero:LIBERO_OSC_CONVENTION",
                     description="LIBERO / robosuite OSC_POSE (embeval.sim.libero.osc_convention)")
CONVENTIONS.register("openvla_libero", "embeval.sim.libero:OPENVLA_LIBERO_CONVENTION",
                     description="OpenVLA's LIBERO fine-tunes (embeval.sim.libero.OPENVLA_LIBERO_CONVENTION)")
register_convention(ActionConvention(
    "tcp_abs_rotvec", rotation="rotvec", absolute=True,
    doc="absolute TCP pose [x y z rx ry rz] (m, rotation vector, frame base, ur_rtde's getActualTCPPose layout) "
        "+ gripper [0, 1] 1 = open; converted to a delta from the current pose"))
register_convention(ActionConvention(
    "mm_deg", translation_units="mm", rotation_units="deg",
    doc="deltas in millimetres and degrees (extrinsic xyz roll-pitch-yaw), gripper [0, 1] 1 = open"))

#: ActionConvention's fields a spec may set (all but the name)
CONVENTION_FIELDS = tuple(f for f in ActionConvention.__dataclass_fields__ if f not in ("name", "doc"))


def convention(value=None, where: str = "params.convention", **overrides) -> ActionConvention:
    """The convention a subject spec names: ``value`` is a built-in's name, a mapping ``{base: NAME, FIELD: ...}``
    (fields override the base's; base defaults to ``embeval``), an :class:`ActionConvention` or None (``embeval``);
    ``overrides`` (the adapter's own older params such as ``gripper``, ``frame``; None = not set) apply last.
    One-line :class:`ConfigError` for an unknown name or field, or a bad value."""
    from dataclasses import replace

    if value is None or isinstance(value, str):
        base, fields = (value or "embeval"), {}
    elif isinstance(value, ActionConvention):
        base, fields = value, {}
    elif isinstance(value, dict):
        fields = dict(value)
        base = fields.pop("base", "embeval")
        unknown = sorted(set(fields) - set(CONVENTION_FIELDS))
        if unknown:
            raise ConfigError(f"field '{where}.{unknown[0]}' is not a convention field; use base or one of "
                              f"{', '.join(CONVENTION_FIELDS)}")
    else:
        raise ConfigError(f"field '{where}' must be a convention name ({', '.join(CONVENTIONS.names())}) or a mapping "
                          f"{{base: NAME, FIELD: value}}, got {value!r}")
    if isinstance(base, str):
        base = CONVENTIONS.get(base, f"field '{where}'")
    fields.update({k: v for k, v in overrides.items() if v is not None})
    for k in ("scale", "image_size", "cameras"):
        if k in fields and fields[k] is not None:
            v = fields[k]
            fields[k] = tuple(np.asarray(v).reshape(-1).tolist()) if k != "cameras" else (
                (v,) if isinstance(v, str) else tuple(v))
    return replace(base, **fields).check(where) if fields else base


def _rotation_matrix(r: np.ndarray, conv: ActionConvention) -> np.ndarray:
    from embeval.rotations import euler_to_matrix, quat_to_matrix, rotvec_to_matrix

    if conv.rotation == "euler":
        return euler_to_matrix(r, conv.order)
    if conv.rotation == "rotvec":
        return rotvec_to_matrix(r)
    if conv.rotation == "quaternion":
        return quat_to_matrix(r)
    if conv.rotation == "rot6d":
        a1, a2 = r[:3], r[3:6]
        n1 = np.linalg.norm(a1)
        b1 = a1 / n1
        u2 = a2 - (b1 @ a2) * b1
        n2 = np.linalg.norm(u2)
        if n1 < 1e-9 or n2 < 1e-9:
            raise InvalidInputError(f"rot6d rotation {r.tolist()} has a zero or parallel column; the policy output is invalid")
        b2 = u2 / n2
        return np.stack([b1, b2, np.cross(b1, b2)], axis=1)
    return np.eye(3)


def _rotation_numbers(R: np.ndarray, conv: ActionConvention) -> np.ndarray:
    from embeval.rotations import matrix_to_euler, matrix_to_quat, matrix_to_rotvec

    if conv.rotation == "euler":
        return matrix_to_euler(R, conv.order)
    if conv.rotation == "rotvec":
        return matrix_to_rotvec(R)
    if conv.rotation == "quaternion":
        return matrix_to_quat(R)
    if conv.rotation == "rot6d":
        return np.concatenate([R[:, 0], R[:, 1]])
    return np.zeros(0)


def _scale(conv: ActionConvention) -> np.ndarray:
    return np.broadcast_to(np.asarray(conv.scale, dtype=np.float64), (conv.size,))


def to_embeval(raw, conv: ActionConvention | str, tcp_pose=None):
    """A model's raw action (``conv.size`` numbers, see :class:`ActionConvention`) -> embeval's :class:`Action`
    (m, rad extrinsic xyz delta in ``conv.frame``, gripper [0, 1] 1 = open, clipped). ``conv.absolute``: with
    ``tcp_pose`` (the current ``[x y z rx ry rz]``, m, rotation vector, frame base) the target pose becomes that
    delta; without, the Action holds the absolute pose ``[x y z roll pitch yaw]`` (for a caller that declares
    ``ActionSpec.absolute`` itself; the adapters pass :func:`tcp_pose_of` the observation, which refuses that case)."""
    from embeval.action import Action, as_pose6, matrix_to_rpy
    from embeval.rotations import rotvec_to_matrix

    conv = CONVENTIONS.get(conv, "field 'params.convention'") if isinstance(conv, str) else conv
    v = np.asarray(raw, dtype=np.float64).reshape(-1)
    if v.shape[0] != conv.size:
        raise InvalidInputError(f"convention {conv.name!r} ({conv.rotation} rotation) reads {conv.size} numbers "
                                f"[translation 3, rotation {ROTATIONS[conv.rotation]}, gripper 1], got {v.shape[0]}")
    if not np.all(np.isfinite(v)):
        raise InvalidInputError(f"action contains NaN or inf: {v.tolist()}; the policy output is invalid")
    if conv.clip is not None:
        v = np.clip(v, -conv.clip, conv.clip)
    v = v * _scale(conv)
    t = v[:3] * TRANSLATION_UNITS[conv.translation_units]
    r = v[3:-1].copy()
    if conv.rotation in ("euler", "rotvec"):
        r = r * ROTATION_UNITS[conv.rotation_units]
    relative = not conv.absolute or tcp_pose is None
    if conv.rotation == "euler" and conv.order == "xyz" and relative:  # embeval's own rpy: exact, unwrapped
        return Action(np.concatenate([t, r, [gripper_to_embeval(v[-1], conv.gripper)]]))
    R = _rotation_matrix(r, conv)
    if not relative:
        p = as_pose6(tcp_pose, "tcp_pose")
        Rc = rotvec_to_matrix(p[3:])
        if conv.frame == "base":
            t, R = t - p[:3], R @ Rc.T
        else:
            t, R = Rc.T @ (t - p[:3]), Rc.T @ R
    g = gripper_to_embeval(v[-1], conv.gripper)
    return Action(np.concatenate([t, matrix_to_rpy(R), [g]]))


def from_embeval(action, conv: ActionConvention | str, tcp_pose=None) -> np.ndarray:
    """embeval's :class:`Action` (or 7 numbers) -> the raw vector of ``conv`` (the inverse of :func:`to_embeval`
    inside the clip range; values beyond ``conv.clip`` are clipped). ``tcp_pose`` as for :func:`to_embeval`: with it,
    an absolute convention's target is the delta applied to it; without, the action is taken as the absolute pose."""
    from embeval.action import Action, apply_delta, rpy_to_matrix
    from embeval.rotations import rotvec_to_matrix

    conv = CONVENTIONS.get(conv, "field 'params.convention'") if isinstance(conv, str) else conv
    a = action.vector if isinstance(action, Action) else Action(action).vector
    t, R = a[:3], rpy_to_matrix(a[3:6])
    relative = not conv.absolute or tcp_pose is None
    if not relative:
        target = apply_delta(tcp_pose, a[:6], conv.frame)
        t, R = target[:3], rotvec_to_matrix(target[3:])
    r = a[3:6] if conv.rotation == "euler" and conv.order == "xyz" and relative else _rotation_numbers(R, conv)
    if conv.rotation in ("euler", "rotvec"):
        r = r / ROTATION_UNITS[conv.rotation_units]
    out = np.concatenate([t / TRANSLATION_UNITS[conv.translation_units], r, [gripper_from_embeval(a[6], conv.gripper)]])
    out = out / _scale(conv)
    return np.clip(out, -conv.clip, conv.clip) if conv.clip is not None else out


def main_camera(camera: str | None, conv: ActionConvention) -> tuple[str | None, str]:
    """The camera a one-camera adapter reads and the field that chose it: ``camera`` (``params.camera``) when set,
    else the convention's first camera (``params.convention.cameras``), else None (the observation's first image)."""
    if camera:
        return camera, "params.camera"
    return (conv.cameras[0] if conv.cameras else None), "params.convention.cameras"


def camera_names(cameras, conv: ActionConvention) -> dict[str, str] | None:
    """A multi-camera adapter's ``policy camera -> wire name`` map: ``cameras`` (its ``params.cameras``) when set,
    else the convention's cameras under their own names, else None (every observation camera as is)."""
    if cameras is not None:
        return dict(cameras)
    return {c: c for c in conv.cameras} if conv.cameras else None


def input_size(image_size, conv: ActionConvention, fallback=None) -> tuple[int, int] | None:
    """The ``(H, W)`` pixels a model reads: ``image_size`` (the adapter's ``params.image_size``: a side or
    ``[H, W]``) when set, else the convention's ``image_size``, else ``fallback``; None = keep the camera's size."""
    size = next((s for s in (image_size, conv.image_size, fallback) if s is not None), None)
    if size is None:
        return None
    side = np.asarray(size).reshape(-1).tolist() if not isinstance(size, (int, np.integer)) else [size]
    if len(side) not in (1, 2) or any(isinstance(x, bool) or not float(x).is_integer() or x < 1 for x in side):
        raise ConfigError(f"field 'params.image_size' must be a side or [H, W] in pixels, got {size!r}")
    return (int(side[0]), int(side[-1]))


def model_image(img: np.ndarray, conv: ActionConvention, size: tuple[int, int] | None,
                method: str = "pil_lanczos") -> np.ndarray:
    """``img`` (RGB uint8) as the model reads it: centre-cropped to ``conv.crop`` of its area (each side
    ``sqrt(crop)``, OpenVLA's centre-crop augmentation at test time), then resized to ``size`` ``(H, W)`` with
    :func:`embeval.resize.resize` (``method``; OpenVLA's preprocessing uses Lanczos); None = no resize."""
    from embeval.resize import resize

    if conv.crop < 1:
        h, w = img.shape[:2]
        side = float(np.sqrt(conv.crop))
        ch, cw = max(1, round(h * side)), max(1, round(w * side))
        top, left = (h - ch) // 2, (w - cw) // 2
        img = img[top:top + ch, left:left + cw]
    return img if size is None else resize(img, size[0], size[1], method)


def tcp_pose_of(observation, conv: ActionConvention | None = None) -> np.ndarray | None:
    """The current TCP pose ``[x y z rx ry rz]`` (m, rotation vector, frame base) from ``observation.state['tcp_pose']``
    (7 numbers xyz + quaternion xyzw, as the simulators give it, or 6 with a rotation vector); None when absent,
    unless ``conv`` is absolute (it needs the pose to turn its targets into deltas: :class:`InvalidInputError`)."""
    from embeval.rotations import quat_to_rotvec

    state = getattr(observation, "state", None) or {}
    if "tcp_pose" not in state:
        if conv is not None and conv.absolute:
            raise InvalidInputError(f"convention {conv.name!r} is absolute: observation.state needs 'tcp_pose' (x y z + "
                                    f"quaternion xyzw, or + rotation vector) to turn its target poses into deltas; it has "
                                    f"{sorted(state)[:8]}")
        return None
    p = np.array(state["tcp_pose"], dtype=np.float64).reshape(-1)  # a copy: decoded payloads are read-only
    if p.shape[0] == 7 and np.all(np.isfinite(p)):
        return np.concatenate([p[:3], quat_to_rotvec(p[3:])])
    if p.shape[0] == 6 and np.all(np.isfinite(p)):
        return p
    raise InvalidInputError(f"observation.state['tcp_pose'] must be 7 finite numbers (x y z + quaternion xyzw) or 6 "
                            f"(x y z + rotation vector), got {p.shape[0]}")


def conventions_table() -> str:
    """The built-in conventions as a markdown table (docs/subjects.md embeds it; a test keeps them equal)."""
    rows = ["| name | frame | rotation | units | scale | clip | gripper | absolute | chunk | image | cameras | meaning |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in CONVENTIONS.names():
        c = CONVENTIONS.get(name)
        rot = f"{c.rotation} {c.order}" if c.rotation == "euler" else c.rotation
        scale = " ".join(f"{s:g}" for s in c.scale)
        img = "" if c.image_size is None else "x".join(map(str, c.image_size)) + ("" if c.crop == 1 else f", crop {c.crop:g}")
        rows.append(f"| `{name}` | {c.frame} | {rot} | {c.translation_units}, {c.rotation_units} | {scale} | "
                    f"{'' if c.clip is None else f'{c.clip:g}'} | {c.gripper} | {str(c.absolute).lower()} | {c.chunk_size} | "
                    f"{img} | {', '.join(c.cameras)} | {c.doc} |")
    return "\n".join(rows)
