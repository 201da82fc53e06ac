"""The LIBERO environment worker: runs in LIBERO's own interpreter (``.venv-libero/bin/python worker.py``).

Self-contained on purpose: it imports only the standard library, numpy and (lazily) LIBERO, so embeval itself
need not be installed beside LIBERO's pins (numpy 1.26, mujoco 2.3.7, opencv-python<5). The embeval side
(:mod:`embeval.sim.libero.client`) imports the frame codec below, so both ends share one protocol.

Protocol: one request, one reply, over the worker's stdin / its original stdout (LIBERO's own prints are sent
to stderr). A frame is ``<II`` (header bytes, array bytes), a JSON header, then the arrays' raw bytes; the header
names each array as ``[dtype, shape, offset]`` under ``"arrays"``. Frames are bounded (:data:`MAX_HEADER`,
:data:`MAX_ARRAYS`): a larger one is refused before it is read. Requests are ``{"op": ...}`` (see ``OPS``);
replies are ``{"ok": true, ...}`` or ``{"ok": false, "error": "...", "kind": "config" | "not_applicable" | "internal"}``
(``not_applicable``: a perturbation this scene cannot take).

The worker dies with its parent: PR_SET_PDEATHSIG (Linux), and it exits at end of input.

Images are sent as LIBERO renders them (``IMAGE_CONVENTION = "opengl"``: rows bottom-up); the embeval side
turns them (:data:`embeval.sim.libero.ORIENTATIONS`).
"""
from __future__ import annotations

import json
import os
import struct
import sys

import numpy as np

MAX_HEADER = 1 << 20  # bytes of JSON per frame
MAX_ARRAYS = 64 << 20  # bytes of array data per frame
_PREFIX = struct.Struct("<II")
#: LIBERO camera name -> the key its image has in an observation
CAMERAS = {"agentview": "agentview_image", "robot0_eye_in_hand": "robot0_eye_in_hand_image"}
#: LIBERO's "do nothing" action (OSC delta 0, gripper -1 = open): what its evaluations step while objects settle
DUMMY_ACTION = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]
#: render settings -> what they do to MuJoCo's offscreen rendering. ``default`` is robosuite's own (4x
#: multisampling, floor reflections: the images published LIBERO checkpoints saw); ``fast`` turns both off
#: (about 4x faster on Mesa llvmpipe, images differ: docs/sim.md)
RENDER_MODES = {"default": {"offsamples": None, "reflection": True}, "fast": {"offsamples": 0, "reflection": False}}


class ProtocolError(RuntimeError):
    pass


def _read_exact(stream, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            raise EOFError("the other end closed the pipe")
        buf += chunk
    return bytes(buf)


def write_frame(stream, header: dict, arrays: dict[str, np.ndarray] | None = None) -> None:
    """Write one frame: ``header`` (JSON-able) and ``arrays`` (name -> numpy array)."""
    blobs, meta, offset = [], {}, 0
    for name, a in (arrays or {}).items():
        a = np.ascontiguousarray(a)
        meta[name] = [a.dtype.str, list(a.shape), offset]
        blobs.append(a.tobytes())
        offset += a.nbytes
    head = json.dumps({**header, "arrays": meta}).encode()
    if len(head) > MAX_HEADER or offset > MAX_ARRAYS:
        raise ProtocolError(f"frame too large: {len(head)} header bytes (max {MAX_HEADER}), "
                            f"{offset} array bytes (max {MAX_ARRAYS}); use smaller images")
    stream.write(_PREFIX.pack(len(head), offset) + head + b"".join(blobs))
    stream.flush()


def read_frame(stream) -> tuple[dict, dict[str, np.ndarray]]:
    """Read one frame written by :func:`write_frame`: ``(header, arrays)``; oversize frames are refused unread."""
    n_head, n_arr = _PREFIX.unpack(_read_exact(stream, _PREFIX.size))
    if n_head > MAX_HEADER or n_arr > MAX_ARRAYS:
        raise ProtocolError(f"refused a frame of {n_head} header + {n_arr} array bytes "
                            f"(limits {MAX_HEADER} + {MAX_ARRAYS})")
    header = json.loads(_read_exact(stream, n_head))
    data = _read_exact(stream, n_arr)
    arrays = {}
    for name, (dtype, shape, off) in header.pop("arrays", {}).items():
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise ProtocolError(f"array {name!r}: object dtype refused")
        count = int(np.prod(shape, dtype=np.int64))
        if off < 0 or off + count * dt.itemsize > n_arr:
            raise ProtocolError(f"array {name!r} lies outside its frame")
        arrays[name] = np.frombuffer(data, dt, count, off).reshape(shape).copy()
    return header, arrays


class ConfigProblem(ValueError):
    """A request the caller can fix (unknown suite, task id out of range, ...)."""


class NotApplicable(ConfigProblem):
    """A perturbation this scene cannot take (no surface to retexture, no table top, ...): a study skips it."""


# ---- scene perturbations (embeval.sim.perturb draws the parameters; they are applied here to the MuJoCo model) ------
#: model arrays a perturbation may change, restored from the freshly built model before each episode
_PERTURBED = ("cam_pos", "cam_quat", "cam_fovy", "light_dir", "light_ambient", "light_diffuse", "light_specular")
_LIGHT_COLOURS = ("light_ambient", "light_diffuse", "light_specular")


def _rotation(axis, degrees: float) -> np.ndarray:
    """3x3 rotation about unit ``axis`` by ``degrees`` (Rodrigues)."""
    k = np.asarray(axis, dtype=np.float64)
    k = k / np.linalg.norm(k)
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    t = np.radians(degrees)
    return np.eye(3) + np.sin(t) * K + (1 - np.cos(t)) * K @ K


def _quat_to_matrix(q) -> np.ndarray:
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def _matrix_to_quat(R) -> np.ndarray:
    """3x3 rotation -> unit quaternion wxyz (MuJoCo's order), w >= 0."""
    m = np.asarray(R)
    w = np.sqrt(max(0.0, 1 + m[0, 0] + m[1, 1] + m[2, 2])) / 2
    x = np.copysign(np.sqrt(max(0.0, 1 + m[0, 0] - m[1, 1] - m[2, 2])) / 2, m[2, 1] - m[1, 2])
    y = np.copysign(np.sqrt(max(0.0, 1 - m[0, 0] + m[1, 1] - m[2, 2])) / 2, m[0, 2] - m[2, 0])
    z = np.copysign(np.sqrt(max(0.0, 1 - m[0, 0] - m[1, 1] + m[2, 2])) / 2, m[1, 0] - m[0, 1])
    q = np.array([w, x, y, z])
    return q / np.linalg.norm(q)


def _camera_ids(model, names) -> list[int]:
    import mujoco

    ids = []
    for n in names:
        i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, n)
        if i < 0:
            raise ConfigProblem(f"perturb: LIBERO has no camera {n!r}")
        ids.append(i)
    return ids


def _body_rotation(data, body: int) -> np.ndarray:
    return np.asarray(data.xmat[body]).reshape(3, 3)


def _camera_pose(model, data, p, aspect):
    """Move each named camera by ``translation_cm`` along world ``direction`` and turn it by ``rotation_deg``
    about world ``axis`` through its own position (cam_pos / cam_quat are in the parent body's frame)."""
    R_d = _rotation(p["axis"], p["rotation_deg"])
    t = np.asarray(p["direction"], dtype=np.float64) * p["translation_cm"] / 100.0
    for i in _camera_ids(model, p["cameras"]):
        Rb = _body_rotation(data, model.cam_bodyid[i])
        model.cam_pos[i] = model.cam_pos[i] + Rb.T @ t
        model.cam_quat[i] = _matrix_to_quat(Rb.T @ R_d @ Rb @ _quat_to_matrix(model.cam_quat[i]))


def horizontal_fov_deg(fovy_deg: float, aspect: float) -> float:
    """Horizontal field of view (deg) of a MuJoCo camera of vertical ``fovy_deg`` rendering ``aspect`` = w / h."""
    return float(np.degrees(2 * np.arctan(aspect * np.tan(np.radians(fovy_deg) / 2))))


def _fov(model, data, p, aspect):
    """Change each named camera's horizontal field of view by ``fov_change_deg`` (MuJoCo stores the vertical one)."""
    for i in _camera_ids(model, p["cameras"]):
        h = np.radians(horizontal_fov_deg(model.cam_fovy[i], aspect) + p["fov_change_deg"])
        model.cam_fovy[i] = np.degrees(2 * np.arctan(np.tan(h / 2) / aspect))


def _light_intensity(model, data, p, aspect):
    """Scale every light's ambient, diffuse and specular colour by ``1 + intensity_change_pct / 100``."""
    k = 1.0 + p["intensity_change_pct"] / 100.0
    for name in _LIGHT_COLOURS:
        getattr(model, name)[:] = getattr(model, name) * k


def _light_color(model, data, p, aspect):
    """Multiply every light's colours by ``rgb_gain`` (the drawn temperature relative to 6500 K)."""
    g = np.asarray(p["rgb_gain"], dtype=np.float64)
    for name in _LIGHT_COLOURS:
        getattr(model, name)[:] = getattr(model, name) * g


def _light_direction(model, data, p, aspect):
    """Turn every light's direction by ``direction_change_deg`` about world ``axis`` (the same rotation for all)."""
    R_d = _rotation(p["axis"], p["direction_change_deg"])
    for i in range(model.nlight):
        Rb = _body_rotation(data, model.light_bodyid[i])
        model.light_dir[i] = Rb.T @ R_d @ Rb @ model.light_dir[i]


#: axis name -> ``apply(mujoco model, data, params, aspect)`` (the embeval axes of the same names)
PERTURB_APPLY = {"camera_pose": _camera_pose, "fov": _fov, "light_intensity": _light_intensity,
                 "light_color": _light_color, "light_direction": _light_direction}
#: axes applied to the robot after LIBERO's initial state is set (``Worker._initial_state``)
STATE_AXES = ("initial_state",)
#: texture axis -> the surface whose materials it retextures (the image embeval sends under the axis's name)
TEXTURE_AXES = {"table_texture": "table", "background_texture": "background"}
#: robot bodies (robosuite's prefixes): contacts of their geoms decide whether an initial_state offset fits
_ROBOT_BODIES = ("robot0_", "gripper0_", "mount0_")


def _is_surface(geom: str, body: str, surface: str) -> bool:
    """Whether textured geom ``geom`` of body ``body`` belongs to ``surface``: the table (a body named like a table:
    ``table``'s ``table_visual``, ``living_room_table_col``, ``study_table``; not its legs) or the background (the
    ``wall*_visual`` geoms: the walls behind the table, as on pybullet)."""
    if surface == "table":
        return "table" in body and "leg" not in geom
    return geom.startswith("wall") and geom.endswith("_visual")


def surfaces(model) -> dict[str, list[int]]:
    """Surface (``table``, ``background``) -> the textures its geoms' materials use (texture ids; empty when the
    scene has no such textured surface)."""
    import mujoco

    out: dict[str, list[int]] = {"table": [], "background": []}
    for g in range(model.ngeom):
        mat = model.geom_matid[g]
        if mat < 0 or model.mat_texid[mat] < 0:
            continue
        geom = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) or ""
        body = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, model.geom_bodyid[g]) or ""
        for surface, texs in out.items():
            if _is_surface(geom, body, surface) and model.mat_texid[mat] not in texs:
                texs.append(int(model.mat_texid[mat]))
    return out


def _texture_view(model, tex: int) -> np.ndarray:
    """Texture ``tex``'s RGB bytes in the model (a writable (height, width, 3) view)."""
    h, w, adr = int(model.tex_height[tex]), int(model.tex_width[tex]), int(model.tex_adr[tex])
    return model.tex_rgb[adr:adr + h * w * 3].reshape(h, w, 3)


def surface_mean_rgb(model, texs) -> list[float]:
    """The mean colour (0..1) of textures ``texs`` (pixel-weighted)."""
    pix = np.concatenate([_texture_view(model, t).reshape(-1, 3) for t in texs]).astype(np.float64)
    return (pix.mean(axis=0) / 255.0).round(4).tolist()


def _tile(image: np.ndarray, h: int, w: int) -> np.ndarray:
    """``image`` (H, W, 3) repeated to fill (h, w, 3)."""
    reps = (-(-h // image.shape[0]), -(-w // image.shape[1]), 1)
    return np.tile(image, reps)[:h, :w]


# ---- distractors: the task's model built a second time with extra blocks and cans (embeval's distractors axis) ------
#: a distractor kind -> (robosuite primitive, its size arguments from embeval's shape in m, its resting half height)
_DISTRACTOR_KINDS = {"block": ("BoxObject", lambda s: [s[0] / 2, s[1] / 2, s[2] / 2], lambda s: s[2] / 2),
                     "can": ("CylinderObject", lambda s: [s[0], s[1] / 2], lambda s: s[1] / 2)}
#: where an unused distractor waits (m, world): out of every view, weightless (gravcomp) and collision-free
_PARK_XYZ = (10.0, 10.0, -5.0)
#: the geom group an unused distractor's geoms go to: one MuJoCo's default render options do not draw (0-2 are drawn)
_HIDDEN_GROUP = 5
#: the fields of :class:`Worker` that belong to one built environment (swapped by ``Worker._activate``)
_SCENE_FIELDS = ("env", "_base", "_tex_base", "surfaces", "_drefs")


def _distractor_name(slot: int, kind: str) -> str:
    return f"embeval_distractor{slot}_{kind}"


def _with_distractors(cls, shapes: dict, slots: int):
    """LIBERO problem class ``cls`` whose model gets ``slots`` (block, can) pairs of robosuite primitives after the
    task's own bodies (their free joints come after LIBERO's in the state; same class name: LIBERO's problem check)."""
    from robosuite.models import objects as primitives

    def _load_model(self):
        cls._load_model(self)
        extra = []
        for slot in range(slots):
            for kind, (prim, size, _half) in _DISTRACTOR_KINDS.items():
                extra.append(getattr(primitives, prim)(name=_distractor_name(slot, kind), size=size(shapes[kind]),
                                                       rgba=[1.0, 1.0, 1.0, 1.0]))
        self.model.merge_objects(extra)

    return type(cls.__name__, (cls,), {"_load_model": _load_model})


def _joint_layout(m) -> dict[str, tuple[int, int, int, int]]:
    """Joint name -> (qpos address, qpos size, dof address, dof size) of MuJoCo model ``m``."""
    import mujoco

    sizes = {0: (7, 6), 1: (4, 3), 2: (1, 1), 3: (1, 1)}  # free, ball, slide, hinge
    out = {}
    for j in range(m.njnt):
        nq, nv = sizes[int(m.jnt_type[j])]
        out[mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j)] = (int(m.jnt_qposadr[j]), nq, int(m.jnt_dofadr[j]), nv)
    return out


def map_state(state, base: dict, base_nq: int, m, parked: dict[str, np.ndarray]) -> np.ndarray:
    """LIBERO's flattened state ``[time, qpos, qvel]`` of the task's own model (joint layout ``base``, ``base_nq``
    qpos entries) -> the same state in model ``m`` (the task's bodies plus the distractors), joint by name; the
    joints only ``m`` has take ``parked`` (joint name -> qpos), at rest."""
    state = np.asarray(state, dtype=np.float64).reshape(-1)
    out = np.zeros(1 + m.nq + m.nv)
    out[0] = state[0]
    for name, (qa, nq, da, nv) in _joint_layout(m).items():
        if name in base:
            bqa, _, bda, _ = base[name]
            out[1 + qa:1 + qa + nq] = state[1 + bqa:1 + bqa + nq]
            out[1 + m.nq + da:1 + m.nq + da + nv] = state[1 + base_nq + bda:1 + base_nq + bda + nv]
        elif name in parked:
            out[1 + qa:1 + qa + nq] = parked[name]
        else:
            raise RuntimeError(f"joint {name!r} is neither LIBERO's nor a distractor's")
    return out


def _owners(m, bodies: dict[str, int]) -> dict[int, str]:
    """Geom id -> the name of the body of ``bodies`` (name -> body id) whose subtree holds it."""
    root = {b: n for n, b in bodies.items()}
    out = {}
    for g in range(m.ngeom):
        b = int(m.geom_bodyid[g])
        while b > 0 and b not in root:
            b = int(m.body_parentid[b])
        if b in root:
            out[g] = root[b]
    return out


def _xy_extent(m, d, g) -> tuple[np.ndarray, np.ndarray]:
    """Geom ``g``'s bounding box in the world's xy plane: (centre (2,), half sizes (2,)), m."""
    R = np.asarray(d.geom_xmat[g]).reshape(3, 3)
    c = np.asarray(d.geom_xpos[g]) + R @ m.geom_aabb[g][:3]
    return c[:2], np.abs(R[:2]) @ m.geom_aabb[g][3:]


#: m around the robot base's axis where distractors may go on a floor (the Panda's reach)
REACH = 0.9


def table_top(m, d, base_xy=(0.0, 0.0)) -> dict | None:
    """The surface distractors rest on: the widest collision box of a table body (``table``, ``main_table``,
    ``kitchen_table``, ...; not its legs), else the floor plane in front of the robot base ``base_xy`` (LIBERO's
    robots face +x) within :data:`REACH` (LIBERO-Object's floor scenes) -> ``{"x": [x0, x1], "y": [y0, y1], "z": top, "body": id}`` (m, world);
    None when the scene has neither."""
    import mujoco

    best = None
    for g in range(m.ngeom):
        if int(m.geom_type[g]) == int(mujoco.mjtGeom.mjGEOM_PLANE) and (m.geom_contype[g] or m.geom_conaffinity[g]):
            x, y = (float(v) for v in base_xy)
            best = (0.0, {"x": [x, x + REACH], "y": [y - REACH, y + REACH], "z": float(d.geom_xpos[g][2]),
                          "body": int(m.geom_bodyid[g])})
    for g in range(m.ngeom):
        body = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, m.geom_bodyid[g]) or ""
        geom = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) or ""
        if ("table" not in body or "leg" in geom or int(m.geom_type[g]) != int(mujoco.mjtGeom.mjGEOM_BOX)
                or not (m.geom_contype[g] or m.geom_conaffinity[g])):
            continue
        c, e = _xy_extent(m, d, g)
        R = np.asarray(d.geom_xmat[g]).reshape(3, 3)
        top = float(d.geom_xpos[g][2] + np.abs(R[2]) @ m.geom_size[g])
        if best is None or e[0] * e[1] > best[0]:
            best = (float(e[0] * e[1]), {"x": [float(c[0] - e[0]), float(c[0] + e[0])],
                                         "y": [float(c[1] - e[1]), float(c[1] + e[1])], "z": top,
                                         "body": int(m.geom_bodyid[g])})
    return None if best is None else best[1]


def visible_rect(table: dict, cam_pos, cam_quat, fovy_deg: float, aspect: float, margin: float = 0.1,
                 step: float = 0.02) -> list[list[float]] | None:
    """The largest x, y rectangle ([[x0, x1], [y0, y1]], m, world) of ``table``'s top (``{"x", "y", "z"}``) whose
    points a world camera (``cam_pos``, ``cam_quat`` wxyz, vertical ``fovy_deg``, image ``aspect`` = w / h) sees
    at least ``margin`` (a fraction of the half image) inside its image's edges, on a ``step`` (m) grid; None when
    it sees none of the table."""
    xs = np.arange(table["x"][0], table["x"][1] + 1e-9, step)
    ys = np.arange(table["y"][0], table["y"][1] + 1e-9, step)
    X, Y = np.meshgrid(xs, ys, indexing="ij")
    pts = np.stack([X, Y, np.full_like(X, table["z"])], axis=-1) - np.asarray(cam_pos, dtype=np.float64)
    c = pts @ _quat_to_matrix(cam_quat)  # camera frame: x right, y up, looking along -z
    ty = np.tan(np.radians(fovy_deg) / 2) * (1 - margin)
    depth = -c[..., 2]
    seen = (depth > 0) & (np.abs(c[..., 0]) < ty * aspect * depth) & (np.abs(c[..., 1]) < ty * depth)
    best, rect = 0.0, None
    for i0 in range(len(xs)):  # rows i0..i1 (x), the longest run of columns (y) seen in all of them
        run_all = np.ones(len(ys), dtype=bool)
        for i1 in range(i0, len(xs)):
            run_all &= seen[i1]
            if not run_all.any():
                break
            j = k = 0
            while j < len(ys):
                if not run_all[j]:
                    j += 1
                    continue
                k = j
                while k < len(ys) and run_all[k]:
                    k += 1
                area = (xs[i1] - xs[i0]) * (ys[k - 1] - ys[j])
                if area > best or rect is None:
                    best, rect = area, [[float(xs[i0]), float(xs[i1])], [float(ys[j]), float(ys[k - 1])]]
                j = k
    return rect


def _geom_rgb(m, g) -> np.ndarray:
    """Geom ``g``'s mean colour (0..1): its material's colour times its texture's mean, else its own rgba."""
    mat = int(m.geom_matid[g])
    if mat < 0:
        return np.asarray(m.geom_rgba[g][:3], dtype=np.float64)
    rgb = np.asarray(m.mat_rgba[mat][:3], dtype=np.float64)
    tex = int(m.mat_texid[mat])
    return rgb * np.asarray(surface_mean_rgb(m, [tex])) if tex >= 0 else rgb


def object_view(m, d, bodies: dict[str, int], skip=()) -> tuple[dict, dict]:
    """The task's objects and fixtures (``bodies``: name -> root body id; ``skip``: body ids left out, the table)
    as ``{name: [x, y, footprint radius]}`` (m, world: the body's place and the farthest reach of its geoms in xy:
    a mesh's farthest vertex, a primitive's bounding-box corner) and ``{name: mean RGB 0..1}`` of their drawn (visual) geoms."""
    import mujoco

    owners = _owners(m, {n: b for n, b in bodies.items() if b not in skip})
    place, colours = {}, {}
    for g, name in owners.items():
        xy = np.asarray(d.xpos[bodies[name]][:2])
        mesh = int(m.geom_dataid[g]) if int(m.geom_type[g]) == int(mujoco.mjtGeom.mjGEOM_MESH) else -1
        if mesh >= 0:  # a mesh: its farthest vertex
            adr, n = int(m.mesh_vertadr[mesh]), int(m.mesh_vertnum[mesh])
            R = np.asarray(d.geom_xmat[g]).reshape(3, 3)
            v = np.asarray(d.geom_xpos[g]) + m.mesh_vert[adr:adr + n] @ R.T
            r = float(np.linalg.norm(v[:, :2] - xy, axis=1).max())
        else:  # a primitive: the farthest corner of its xy bounding box
            c, e = _xy_extent(m, d, g)
            r = float(np.linalg.norm(np.abs(c - xy) + e))
        place[name] = [float(xy[0]), float(xy[1]), max(r, place.get(name, [0, 0, 0.0])[2])]
        if not (m.geom_contype[g] or m.geom_conaffinity[g]) and m.geom_rgba[g][3] > 0:
            colours.setdefault(name, []).append(_geom_rgb(m, g))
    return place, {n: np.mean(v, axis=0).round(4).tolist() for n, v in colours.items()}


class Worker:
    """One LIBERO task environment (``OffScreenRenderEnv``) and its initial states; with distractors, a second one
    (the same task with extra bodies), made the active one while an episode has them."""

    def __init__(self):
        self.env = None
        self.init_states = None
        self._base = None  # the unperturbed model arrays (_PERTURBED)
        self._tex_base: dict[int, np.ndarray] = {}  # texture id -> its unperturbed RGB bytes (changed ones only)
        self.surfaces: dict[str, list[int]] = {}
        self._drefs = None  # the distractor bodies of the active model (distractor environment only)
        self.active = "base"  # which environment the fields above hold: base (LIBERO's task) or distractors
        self._scenes: dict[str, dict] = {}  # the inactive environments' fields (_SCENE_FIELDS)
        self._distractor_key = None  # (shapes, slots) the distractor environment was built with

    # ---- ops -------------------------------------------------------------------------------------------------
    def op_make(self, req, _arrays):
        from libero.libero import benchmark, get_libero_path

        suites = benchmark.get_benchmark_dict()
        suite_name, task_id = req["suite"], int(req["task_id"])
        if suite_name not in suites:
            raise ConfigProblem(f"unknown LIBERO suite {suite_name!r}; choose from {', '.join(sorted(suites))}")
        suite = suites[suite_name]()
        if not 0 <= task_id < suite.n_tasks:
            raise ConfigProblem(f"suite {suite_name} has tasks 0..{suite.n_tasks - 1}, got task id {task_id}")
        cams = list(req["cameras"])
        for c in cams:
            if c not in CAMERAS:
                raise ConfigProblem(f"unknown LIBERO camera {c!r}; choose from {', '.join(CAMERAS)}")
        mode = req.get("render_mode", "default")  # refused before the model is built (seconds)
        if mode not in RENDER_MODES:
            raise ConfigProblem(f"unknown render mode {mode!r}; choose from {', '.join(RENDER_MODES)}")
        task = suite.get_task(task_id)
        self.init_states = np.asarray(suite.get_task_init_states(task_id))
        bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
        self.close()
        kw = {"bddl_file_name": bddl, "camera_heights": int(req["height"]), "camera_widths": int(req["width"]),
              "hard_reset": bool(req.get("hard_reset", True))}
        self._kw = kw
        self.cameras = cams
        self.env = self._build(kw)
        self.seed = int(req.get("seed", 0))
        self.render_mode = RENDER_MODES[mode]
        self.aspect = int(req["width"]) / int(req["height"])
        self.hard_reset = kw["hard_reset"]
        self._base = None
        self._tex_base = {}
        inner = self.env.env
        m = inner.sim.model._model
        import mujoco

        world_cams = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(m.ncam)
                      if m.cam_bodyid[i] == 0]
        self.surfaces = surfaces(m)
        self._layout = (_joint_layout(m), int(m.nq), int(m.nv))  # the state layout of LIBERO's initial states
        return {"surfaces": {k: surface_mean_rgb(m, v) for k, v in self.surfaces.items() if v},
                "arm_joints": len(inner.robots[0].robot_joints),
                "instruction": task.language, "bddl_instruction": self.env.language_instruction, "task": task.name,
                "n_tasks": suite.n_tasks, "n_init_states": len(self.init_states),
                "control_freq": float(inner.control_freq), "action_dim": int(inner.action_dim),
                "goal": inner.parsed_problem["goal_state"], "world_cameras": world_cams,
                "key_light_direction": (np.asarray(m.light_dir[0]).tolist() if m.nlight else [0.0, 0.0, -1.0])}, {}

    def _build(self, kw, cls=None):
        """A LIBERO environment of ``kw`` (no cameras: physics only, ControlEnv without an offscreen renderer);
        ``cls``: a problem class to build it with instead of LIBERO's (the one of the same BDDL problem name)."""
        from libero.libero.envs import OffScreenRenderEnv
        from libero.libero.envs.bddl_base_domain import TASK_MAPPING
        from libero.libero.envs.bddl_utils import get_problem_info
        from libero.libero.envs.env_wrapper import ControlEnv

        _keep_compiled_models()
        problem = get_problem_info(kw["bddl_file_name"])["problem_name"]
        own = TASK_MAPPING[problem]
        if cls is not None:
            TASK_MAPPING[problem] = cls(own)  # ControlEnv looks the class up here; put back at once
        try:
            if self.cameras:
                return OffScreenRenderEnv(**kw, camera_names=self.cameras)
            return ControlEnv(**kw, has_offscreen_renderer=False, use_camera_obs=False)
        finally:
            TASK_MAPPING[problem] = own

    def _activate(self, name: str) -> None:
        """Make environment ``name`` (``base``, ``distractors``) the one the ops use (it must have been built)."""
        if name == self.active:
            return
        self._scenes[self.active] = {k: getattr(self, k) for k in _SCENE_FIELDS}
        for k, v in self._scenes.pop(name).items():
            setattr(self, k, v)
        self.active = name

    def _distractor_env(self, spec) -> None:
        """Make the distractor environment (built once per ``spec``: ``{"shapes": {"block": [x, y, z], "can":
        [radius, height]} (m), "slots": n}``) the active one."""
        shapes, slots = spec.get("shapes"), spec.get("slots")
        if (not isinstance(shapes, dict) or set(shapes) != set(_DISTRACTOR_KINDS) or not isinstance(slots, int)
                or not 1 <= slots <= 16 or any(not isinstance(v, list) or not all(isinstance(x, (int, float)) and 0 < x < 0.5
                                                                             for x in v) for v in shapes.values())):
            raise ConfigProblem("perturb distractors: send shapes {block: [x, y, z], can: [radius, height]} (m, each "
                                "under 0.5) and 1..16 slots")
        key = (json.dumps(shapes, sort_keys=True), slots)
        if key != self._distractor_key:
            self._activate("base")
            old = self._scenes.pop("distractors", None)
            if old is not None and old["env"] is not None:
                old["env"].close()
            self._distractor_key = None
            env = self._build(self._kw, lambda own: _with_distractors(own, shapes, slots))
            self._scenes["distractors"] = {"env": env, "_base": None, "_tex_base": {},
                                           "surfaces": surfaces(env.env.sim.model._model), "_drefs": None}
            self._distractor_key = key
        self._activate("distractors")

    def _distractor_refs(self) -> dict[str, tuple]:
        """Distractor body name -> (body id, joint name, [(geom, contype, conaffinity, group)]) in the active model:
        read (the compiled values) once per built model, before anything parks them."""
        import mujoco

        m = self.env.env.sim.model._model
        if self._drefs is not None and self._drefs[0] is m:
            return self._drefs[1]
        refs = {}
        for slot in range(self._distractor_key[1]):
            for kind in _DISTRACTOR_KINDS:
                name = _distractor_name(slot, kind)
                b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name + "_main")
                jnt = int(m.body_jntadr[b])
                geoms = [(g, int(m.geom_contype[g]), int(m.geom_conaffinity[g]), int(m.geom_group[g]))
                         for g in range(m.ngeom) if m.geom_bodyid[g] == b]
                refs[name] = (b, mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, jnt), geoms)
        self._drefs = (m, refs)
        return refs

    def _park_distractors(self) -> dict[str, np.ndarray]:
        """Park every distractor body (weightless, no contacts, hidden geom group: see :data:`_PARK_XYZ`); returns
        joint name -> its parked qpos."""
        m = self.env.env.sim.model._model
        parked = {}
        for b, joint, geoms in self._distractor_refs().values():
            m.body_gravcomp[b] = 1.0
            for g, *_ in geoms:
                m.geom_contype[g] = m.geom_conaffinity[g] = 0
                m.geom_group[g] = _HIDDEN_GROUP
            parked[joint] = np.array([*_PARK_XYZ, 1.0, 0.0, 0.0, 0.0])
        return parked

    def _need_env(self):
        if self.env is None:
            raise ConfigProblem("no environment: send op 'make' first")
        return self.env

    def _obs(self, obs):
        out = {c: obs[CAMERAS[c]] for c in self.cameras}
        for k in ("robot0_joint_pos", "robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos"):
            out[k] = np.asarray(obs[k], dtype=np.float64)
        return out

    def op_reset(self, req, arrays):
        """Reset to initial state ``init_index`` with ``perturb`` applied (``arrays``: the table_texture /
        background_texture images, under the axis's name); ``applied``: what the state axes chose."""
        env = self._need_env()
        i = int(req["init_index"])
        if not 0 <= i < len(self.init_states):
            raise ConfigProblem(f"this task has initial states 0..{len(self.init_states) - 1}, got {i}")
        # re-seeded before every reset: a hard reset rebuilds the model, drawing from numpy's global generator
        # (the textures of a reset after the first differ otherwise), so every episode starts the same
        draws = list(req.get("perturb") or [])
        known = (*PERTURB_APPLY, *STATE_AXES, *TEXTURE_AXES)
        bad = [d.get("axis") if isinstance(d, dict) else d for d in draws
               if not isinstance(d, dict) or d.get("axis") not in known or not isinstance(d.get("params"), dict)]
        if bad:
            raise ConfigProblem(f"perturb axis {bad[0]!r} is not implemented on LIBERO; it applies {', '.join(known)}")
        for d in draws:
            if d["axis"] in TEXTURE_AXES:
                img = arrays.get(d["axis"])
                if img is None or img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                    raise ConfigProblem(f"perturb {d['axis']}: send its texture as an RGB uint8 array named {d['axis']!r}")
                if not self.surfaces[TEXTURE_AXES[d["axis"]]]:
                    raise NotApplicable(f"perturb {d['axis']}: this LIBERO scene has no textured "
                                        f"{TEXTURE_AXES[d['axis']]} surface to retexture")
        spec = req.get("distractors")
        if spec is not None:  # the same task built with the distractor bodies (parked until op distractors)
            self._distractor_env(spec if isinstance(spec, dict) else {})
        else:
            self._activate("base")
        env = self.env
        env.seed(self.seed)
        env.reset()
        self._apply_render_mode()
        self._perturb([d for d in draws if d["axis"] in PERTURB_APPLY],
                      {d["axis"]: arrays[d["axis"]] for d in draws if d["axis"] in TEXTURE_AXES})
        state = self.init_states[i]
        if spec is not None:
            m = env.env.sim.model._model
            state = map_state(state, self._layout[0], self._layout[1], m, self._park_distractors())
        obs = env.set_init_state(state)
        applied = {}
        for d in draws:
            if d["axis"] in STATE_AXES:
                applied[d["axis"]] = self._initial_state(d["params"], d.get("level"))
                obs = env.regenerate_obs_from_state(env.get_sim_state())
        out = {"applied": applied}
        if spec is not None:
            out["distractor_view"] = self._distractor_view()
        obs = self._settle(obs, req.get("settle_steps", 0))
        return {**out, "success": bool(env.check_success())}, self._obs(obs)

    def _settle(self, obs, steps):
        """``steps`` of LIBERO's "do nothing" action (objects settle); the last observation."""
        for _ in range(int(steps)):
            obs, _r, _done, _info = self.env.step(DUMMY_ACTION)
        return obs

    def _distractor_view(self) -> dict:
        """Where distractors may go in this episode's start (m, world): the table top (``table``: x, y ranges and
        top z), the task's objects and fixtures (``objects``: name -> [x, y, footprint radius]), their mean colours
        (``colors``: name -> RGB 0..1) and the robot base (``robot_base``: x, y)."""
        inner = self.env.env
        m, d = inner.sim.model._model, inner.sim.data._data
        xy = self._robot_xy()
        table = table_top(m, d, xy)
        if table is None:
            raise NotApplicable("perturb distractors: this LIBERO scene has no table top (a collision box of a table "
                                "body) or floor plane to place distractors on; use another axis")
        place, colours = object_view(m, d, dict(inner.obj_body_id), skip={table.pop("body")})
        import mujoco

        cam = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_CAMERA, "agentview")
        if cam >= 0 and m.cam_bodyid[cam] == 0:  # the unperturbed third-person camera's view (camera_pose moves it)
            table["visible"] = visible_rect(table, self._base["cam_pos"][cam], self._base["cam_quat"][cam],
                                            float(self._base["cam_fovy"][cam]), self.aspect)
        return {"table": table, "objects": place, "colors": colours, "robot_base": [float(v) for v in xy]}

    def _robot_xy(self) -> np.ndarray:
        """The robot base's world x, y (m)."""
        import mujoco

        inner = self.env.env
        m, d = inner.sim.model._model, inner.sim.data._data
        return d.xpos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, inner.robots[0].robot_model.root_body)][:2]

    def op_distractors(self, req, _arrays):
        """Place distractors in the episode ``reset`` (with ``distractors``) started: ``objects`` [{"kind", "xy"
        (m, world), "yaw" (rad), "rgba"}] rest upright on the table top at their place and yaw, in their colour
        (slot i takes the i-th object; the rest stay parked); then ``settle_steps`` "do nothing" steps. Returns
        LIBERO's success check and ``placed``: name -> the body's world position (m) after the settle steps."""
        env = self._need_env()
        if self.active != "distractors":
            raise ConfigProblem("op distractors: reset with distractors first (this episode has none)")
        objs = req.get("objects")
        refs = self._distractor_refs()
        slots = self._distractor_key[1]
        if not isinstance(objs, list) or len(objs) > slots:
            raise ConfigProblem(f"op distractors: send a list of at most {slots} objects")
        sim = env.env.sim
        m, d = sim.model._model, sim.data._data
        table = table_top(m, d, self._robot_xy())
        shapes = json.loads(self._distractor_key[0])
        state = env.get_sim_state()
        layout = _joint_layout(m)
        placed = []
        for slot, o in enumerate(objs):
            try:
                kind, (x, y), yaw = o["kind"], (float(v) for v in o["xy"]), float(o["yaw"])
                rgba = [float(v) for v in o["rgba"]]
            except (KeyError, TypeError, ValueError):
                raise ConfigProblem("op distractors: each object is {kind, xy: [x, y], yaw, rgba: [r, g, b, a]}") from None
            if kind not in _DISTRACTOR_KINDS or len(rgba) != 4 or not np.all(np.isfinite([x, y, yaw, *rgba])):
                raise ConfigProblem(f"op distractors: kind {kind!r} (choose from {', '.join(_DISTRACTOR_KINDS)}) "
                                    "with finite xy, yaw and rgba")
            name = _distractor_name(slot, kind)
            b, joint, geoms = refs[name]
            m.body_gravcomp[b] = 0.0
            for g, contype, conaffinity, group in geoms:
                m.geom_contype[g], m.geom_conaffinity[g], m.geom_group[g] = contype, conaffinity, group
                m.geom_rgba[g] = rgba if group != 0 else [*rgba[:3], m.geom_rgba[g][3]]
            z = table["z"] + _DISTRACTOR_KINDS[kind][2](shapes[kind])
            qa = layout[joint][0]
            state[1 + qa:1 + qa + 7] = [x, y, z, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
            placed.append(name)
        obs = env.regenerate_obs_from_state(state)
        obs = self._settle(obs, req.get("settle_steps", 0))
        return {"success": bool(env.check_success()),
                "placed": {n: d.xpos[refs[n][0]].round(5).tolist() for n in placed}}, self._obs(obs)

    def _perturb(self, draws, textures=None):
        """Restore the model's camera and light arrays and the surface textures to the fresh model's, then apply
        ``draws`` (embeval's seeded parameters, ``[{"axis", "level", "params"}]``) in order and write ``textures``
        (axis -> RGB uint8 image, tiled over the surface's textures); the next ``set_init_state`` renders them."""
        sim = self.env.env.sim
        m, d = sim.model._model, sim.data._data
        if self._base is None or self.hard_reset:  # a hard reset rebuilt the model: its arrays are the base
            self._base = {k: np.array(getattr(m, k)) for k in _PERTURBED}
            self._tex_base = {}
        else:
            for k, v in self._base.items():
                getattr(m, k)[:] = v
        changed = set()
        for tex, rgb in self._tex_base.items():
            _texture_view(m, tex)[:] = rgb
            changed.add(tex)
        self._tex_base = {}
        for p in draws:
            PERTURB_APPLY[p["axis"]](m, d, p["params"], self.aspect)
        for axis, img in (textures or {}).items():
            for tex in self.surfaces[TEXTURE_AXES[axis]]:
                view = _texture_view(m, tex)
                self._tex_base[tex] = view.copy()
                view[:] = _tile(img, *view.shape[:2])
                changed.add(tex)
        self._upload_textures(changed)

    def _upload_textures(self, texs) -> None:
        """Send changed textures to the offscreen render context (MuJoCo keeps its own GPU copy)."""
        ctx = getattr(self.env.env.sim, "_render_context_offscreen", None)
        if ctx is None or not texs:
            return
        import mujoco

        ctx.gl_ctx.make_current()
        for tex in sorted(texs):
            mujoco.mjr_uploadTexture(ctx.model._model, ctx.con, int(tex))

    def _initial_state(self, p, level) -> dict:
        """Offset the arm's joints from LIBERO's initial state by the first drawn sign pattern (``sign_patterns``
        times ``magnitudes_deg``, deg) that keeps them inside their ranges, adds no contact of a robot geom the
        initial state did not have and leaves the TCP (the grip site) no lower than ``min_tcp_z`` above the table
        (or than its own height, when that is lower); zero joint velocities; the offset posture becomes the OSC
        controller's nullspace rest posture. Returns ``{"offsets_deg", "pattern"}``."""
        import mujoco

        sim, robot = self.env.env.sim, self.env.env.robots[0]
        m, d = sim.model._model, sim.data._data
        jids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in robot.robot_joints]
        qadr, vadr = m.jnt_qposadr[jids], m.jnt_dofadr[jids]
        lo, hi = m.jnt_range[jids, 0], m.jnt_range[jids, 1]
        q0 = d.qpos[qadr].copy()
        mags = np.asarray(p["magnitudes_deg"], dtype=np.float64)
        if mags.shape != (len(jids),):
            raise ConfigProblem(f"perturb initial_state: give {len(jids)} joint magnitudes, got {mags.shape}")
        robot_geoms = {g for g in range(m.ngeom)
                       if (mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, m.geom_bodyid[g]) or "").startswith(_ROBOT_BODIES)}

        def contacts() -> set:
            return {(int(c.geom1), int(c.geom2)) for c in d.contact[:d.ncon]
                    if (c.geom1 in robot_geoms) != (c.geom2 in robot_geoms)}

        table_z = float(np.asarray(getattr(self.env.env, "table_offset", (0.0, 0.0, 0.0)))[2])
        before, z0 = contacts(), float(d.site_xpos[robot.eef_site_id][2])
        floor = min(z0, table_z + float(p["min_tcp_z"]))
        for k, signs in enumerate(p["sign_patterns"]):
            off = np.asarray(signs, dtype=np.float64) * mags
            q = q0 + np.radians(off)
            if np.any(q < lo) or np.any(q > hi):
                continue
            d.qpos[qadr] = q
            mujoco.mj_forward(m, d)
            if float(d.site_xpos[robot.eef_site_id][2]) >= floor and contacts() <= before:
                d.qvel[vadr] = 0.0
                mujoco.mj_forward(m, d)
                # the offset posture is the controller's rest posture, as LIBERO's start is unperturbed (OSC's
                # nullspace torques would otherwise pull the joints back while the hand drifts; the controller is
                # rebuilt at the next reset)
                robot.controller.update(force=True)
                robot.controller.update_initial_joints(q)
                return {"offsets_deg": [round(float(v), 4) for v in off], "pattern": k}
        d.qpos[qadr] = q0
        mujoco.mj_forward(m, d)
        raise NotApplicable(f"initial_state:{level}: no seeded joint offset of {mags.max():.1f} deg at most keeps the "
                            "LIBERO arm inside its joint ranges, clear of new contacts and its TCP high enough; the task "
                            "would not be solvable (use a lower level)")

    def op_scene_params(self, _req, _arrays):
        """The model's camera and light arrays now (:data:`_PERTURBED`), camera names in model order, and the
        surfaces' textures (``tex_table_0``, ``tex_background_0``, ...: RGB bytes, model order)."""
        import mujoco

        m = self._need_env().env.sim.model._model
        names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(m.ncam)]
        textures = {f"tex_{surface}_{k}": _texture_view(m, t).copy() for surface, texs in self.surfaces.items()
                    for k, t in enumerate(texs)}
        return {"cameras": names, "aspect": self.aspect}, {**{k: np.array(getattr(m, k)) for k in _PERTURBED}, **textures}

    def _apply_render_mode(self):
        """Apply :data:`RENDER_MODES` to the current render context (a hard reset makes a new one; the MuJoCo
        context is re-created only when its multisampling differs, about 1 s)."""
        ctx = getattr(self.env.env.sim, "_render_context_offscreen", None)
        if ctx is None:
            return
        import mujoco

        samples = self.render_mode["offsamples"]
        if samples is not None and ctx.con.offSamples != samples:
            ctx.model._model.vis.quality.offsamples = samples
            ctx.gl_ctx.make_current()
            ctx.con.free()
            ctx._set_mujoco_context_and_buffers()
        ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = int(self.render_mode["reflection"])

    def op_step(self, _req, arrays):
        env = self._need_env()
        a = np.asarray(arrays["action"], dtype=np.float64).reshape(-1)
        if a.shape != (7,) or not np.all(np.isfinite(a)):
            raise ConfigProblem(f"a LIBERO action is 7 finite numbers, got shape {a.shape}")
        obs, _r, done, _info = env.step(a)
        return {"success": bool(done)}, self._obs(obs)

    def op_get_state(self, _req, _arrays):
        return {}, {"state": self._need_env().get_sim_state()}

    def op_set_state(self, _req, arrays):
        """Set the flattened state; in an episode with distractors a state of LIBERO's own layout (an initial-state
        file's) is mapped onto the bigger model joint by joint, the distractors staying where they are, at rest."""
        env = self._need_env()
        state = np.asarray(arrays["state"], dtype=np.float64).reshape(-1)
        base, nq, nv = self._layout
        if self.active == "distractors" and state.size == 1 + nq + nv:
            m, now = env.env.sim.model._model, env.get_sim_state()
            keep = {j: now[1 + qa:1 + qa + n] for j, (qa, n, _, _) in _joint_layout(m).items() if j not in base}
            state = map_state(state, base, nq, m, keep)
        obs = env.regenerate_obs_from_state(state)
        return {"success": bool(env.check_success())}, self._obs(obs)

    def op_object_pose(self, req, _arrays):
        """World position (m) and quaternion (wxyz) of LIBERO object ``name``, and the index of its free joint's
        first qpos entry in the flattened state (1 + qpos address: the state is [time, qpos, qvel]; -1: none)."""
        inner = self._need_env().env
        name = req["name"]
        if name not in inner.obj_body_id:
            raise ConfigProblem(f"no LIBERO object {name!r}; objects: {', '.join(sorted(inner.obj_body_id))}")
        bid = inner.obj_body_id[name]
        sim = inner.sim
        jnt = sim.model.body_jntadr[bid]
        free = jnt >= 0 and sim.model.jnt_type[jnt] == 0  # mjJNT_FREE
        index = 1 + int(sim.model.jnt_qposadr[jnt]) if free else -1
        return {"state_index": index}, {"pos": sim.data.body_xpos[bid].copy(), "quat": sim.data.body_xquat[bid].copy()}

    def op_close(self, _req, _arrays):
        self.close()
        return {}, {}

    def close(self):
        envs = [self.env, *(sc["env"] for sc in self._scenes.values())]
        self.env, self._scenes, self.active, self._distractor_key, self._drefs = None, {}, "base", None, None
        for env in envs:
            if env is not None:
                env.close()


#: compiled MuJoCo models kept by their XML (most recently used last). A hard reset rebuilds LIBERO's model from an
#: XML that is the same each time (the worker re-seeds numpy before every reset), and compiling it was about half of
#: the reset's CPU (2.5 of 5.2 s for libero_spatial); every simulation gets its own copy (mj_copyModel) of the kept
#: model, which is the same model, so episodes are unchanged (tests/core/sim/test_libero.py holds them equal).
#: Memory: one model each (libero_spatial:0: +175 MiB of RSS, mostly its 180 MiB of textures)
MODEL_CACHE_SIZE = 2


def _keep_compiled_models(size: int = MODEL_CACHE_SIZE) -> None:
    """Make robosuite's ``MjSim.from_xml_string`` reuse the compiled model of an XML it compiled before (once per
    process; ``EMBEVAL_LIBERO_COMPILE_EACH_RESET=1``: compile at every hard reset, as robosuite does)."""
    from robosuite.utils.binding_utils import MjSim

    if getattr(MjSim.from_xml_string, "_embeval_kept", False) or os.environ.get("EMBEVAL_LIBERO_COMPILE_EACH_RESET") == "1":
        return
    import copy
    from collections import OrderedDict

    import mujoco

    kept: OrderedDict[str, object] = OrderedDict()
    counts = {"compiled": 0, "reused": 0}  # what the simulations got so far (read by the tests)

    def from_xml_string(cls, xml):
        model = kept.get(xml)
        if model is None:
            model = kept[xml] = mujoco.MjModel.from_xml_string(xml)
            counts["compiled"] += 1
            while len(kept) > size:
                kept.popitem(last=False)
        else:
            counts["reused"] += 1
        kept.move_to_end(xml)
        return cls(copy.copy(model))  # the kept model itself is never handed out: perturbations change a copy

    from_xml_string._embeval_kept = True
    from_xml_string.counts = counts
    MjSim.from_xml_string = classmethod(from_xml_string)


def _die_with_parent() -> None:
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def main() -> int:
    _die_with_parent()
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    # the protocol keeps the original stdout; everything printed later (LIBERO, robosuite) goes to stderr
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    proto_in = sys.stdin.buffer
    worker = Worker()
    write_frame(proto_out, {"ok": True, "ready": True, "pid": os.getpid()})
    while True:
        try:
            req, arrays = read_frame(proto_in)
        except EOFError:
            break
        op = req.get("op")
        fn = getattr(worker, f"op_{op}", None) if isinstance(op, str) else None
        try:
            if fn is None:
                raise ConfigProblem(f"unknown op {op!r}")
            header, out = fn(req, arrays)
            write_frame(proto_out, {"ok": True, **header}, out)
        except ConfigProblem as exc:
            kind = "not_applicable" if isinstance(exc, NotApplicable) else "config"
            write_frame(proto_out, {"ok": False, "kind": kind, "error": str(exc)})
        except Exception as exc:  # noqa: BLE001 -- reported to the caller, who raises it there
            write_frame(proto_out, {"ok": False, "kind": "internal", "error": f"{type(exc).__name__}: {exc}"})
        if op == "close":
            break
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
