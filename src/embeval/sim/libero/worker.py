"""The LIBERO environment worker: runs in LIBERO's own interpreter (``.venv-libero/bin/python worker.py``).

Self-contained on purpose: it imports only the standard library, numpy and (lazily) LIBERO, so embeval itself
need not be installed beside LIBERO's pins (numpy 1.26, mujoco 2.3.7, opencv-python<5). The embeval side
(:mod:`embeval.sim.libero.client`) imports the frame codec below, so both ends share one protocol.

Protocol: one request, one reply, over the worker's stdin / its original stdout (LIBERO's own prints are sent
to stderr). A frame is ``<II`` (header bytes, array bytes), a JSON header, then the arrays' raw bytes; the header
names each array as ``[dtype, shape, offset]`` under ``"arrays"``. Frames are bounded (:data:`MAX_HEADER`,
:data:`MAX_ARRAYS`): a larger one is refused before it is read. Requests are ``{"op": ...}`` (see ``OPS``);
replies are ``{"ok": true, ...}`` or ``{"ok": false, "error": "...", "kind": "config" | "internal"}``.

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


class Worker:
    """One LIBERO task environment (``OffScreenRenderEnv``) and its initial states."""

    def __init__(self):
        self.env = None
        self.init_states = None
        self._base = None  # the unperturbed model arrays (_PERTURBED)
        self._tex_base: dict[int, np.ndarray] = {}  # texture id -> its unperturbed RGB bytes (changed ones only)

    # ---- ops -------------------------------------------------------------------------------------------------
    def op_make(self, req, _arrays):
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv

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
        if cams:
            kw["camera_names"] = cams
        else:  # no cameras: physics only (ControlEnv without an offscreen renderer)
            from libero.libero.envs.env_wrapper import ControlEnv

            self.env = ControlEnv(**kw, has_offscreen_renderer=False, use_camera_obs=False)
        if self.env is None:
            self.env = OffScreenRenderEnv(**kw)
        self.seed = int(req.get("seed", 0))
        self.cameras = cams
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
        return {"surfaces": {k: surface_mean_rgb(m, v) for k, v in self.surfaces.items() if v},
                "arm_joints": len(inner.robots[0].robot_joints),
                "instruction": task.language, "bddl_instruction": self.env.language_instruction, "task": task.name,
                "n_tasks": suite.n_tasks, "n_init_states": len(self.init_states),
                "control_freq": float(inner.control_freq), "action_dim": int(inner.action_dim),
                "goal": inner.parsed_problem["goal_state"], "world_cameras": world_cams,
                "key_light_direction": (np.asarray(m.light_dir[0]).tolist() if m.nlight else [0.0, 0.0, -1.0])}, {}

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
                    raise ConfigProblem(f"perturb {d['axis']}: this LIBERO scene has no textured "
                                        f"{TEXTURE_AXES[d['axis']]} surface to retexture")
        env.seed(self.seed)
        env.reset()
        self._apply_render_mode()
        self._perturb([d for d in draws if d["axis"] in PERTURB_APPLY],
                      {d["axis"]: arrays[d["axis"]] for d in draws if d["axis"] in TEXTURE_AXES})
        obs = env.set_init_state(self.init_states[i])
        applied = {}
        for d in draws:
            if d["axis"] in STATE_AXES:
                applied[d["axis"]] = self._initial_state(d["params"], d.get("level"))
                obs = env.regenerate_obs_from_state(env.get_sim_state())
        for _ in range(int(req.get("settle_steps", 0))):
            obs, _r, _done, _info = env.step(DUMMY_ACTION)
        return {"success": bool(env.check_success()), "applied": applied}, self._obs(obs)

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
        raise ConfigProblem(f"initial_state:{level}: no seeded joint offset of {mags.max():.1f} deg at most keeps the "
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
        env = self._need_env()
        obs = env.regenerate_obs_from_state(np.asarray(arrays["state"], dtype=np.float64))
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
        if self.env is not None:
            try:
                self.env.close()
            finally:
                self.env = None


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
            write_frame(proto_out, {"ok": False, "kind": "config", "error": str(exc)})
        except Exception as exc:  # noqa: BLE001 -- reported to the caller, who raises it there
            write_frame(proto_out, {"ok": False, "kind": "internal", "error": f"{type(exc).__name__}: {exc}"})
        if op == "close":
            break
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
