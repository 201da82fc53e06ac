"""LIBERO / LIBERO-PRO episodes behind embeval's :class:`~embeval.sim.backends.EpisodeEnv` (conventions: the
package docstring of :mod:`embeval.sim.libero`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from embeval.action import Action, Observation
from embeval.errors import ConfigError
from embeval.rotations import quat_to_rotvec
from embeval.scoring.execution import ExecutionOutcome
from embeval.sim.episode_env import DistortedCameras, EpisodeEnv, StepResult
from embeval.sim.libero import (
    CAMERAS,
    ORIENTATIONS,
    PANDA_FINGER_MAX,
    SETTLE_STEPS,
    parse_task,
    step_limit,
    to_libero,
)

if TYPE_CHECKING:
    from embeval.sim.backends import SimSpec


def gripper_opening(gripper_qpos) -> float:
    """The Panda fingers' joint positions (m; LIBERO's ``robot0_gripper_qpos``, the second finger negative) ->
    embeval's gripper opening in [0, 1], 1 = open (the finger gap over its maximum, 2 x :data:`PANDA_FINGER_MAX`)."""
    q = np.asarray(gripper_qpos, dtype=np.float64).reshape(-1)
    return float(np.clip((q[0] - q[-1]) / (2 * PANDA_FINGER_MAX), 0.0, 1.0))


class LiberoTask:
    """One LIBERO task in a worker process: reset to an initial state, step LIBERO actions, the raw state."""

    def __init__(self, task: str, width: int = 128, height: int = 128, cameras=tuple(CAMERAS), orientation: str = "policy",
                 max_steps: int | None = None, render_mode: str = "default", perturb=None, hard_reset: bool = True):
        """``render_mode``: ``default`` (robosuite's rendering, what published checkpoints saw) or ``fast``
        (no multisampling, no reflections: about 4x faster renders, different pixels; see docs/sim.md).
        ``perturb``: scene perturbations (:class:`embeval.sim.perturb.Perturbations`, LIBERO's axes:
        :func:`embeval.sim.perturb.backends.supported`) applied at every reset, drawn from the initial-state index.
        ``hard_reset``: rebuild the MuJoCo model at every reset (robosuite's default, several seconds each); False
        keeps the model built once (the worker restores the perturbed camera and light arrays itself)."""
        from embeval.sim.libero.client import LiberoWorker
        from embeval.sim.perturb.backends import check

        self.suite, self.task_id = parse_task(task)
        if orientation not in ORIENTATIONS:
            raise ConfigError(f"LIBERO image orientation {orientation!r}: choose from {', '.join(ORIENTATIONS)}")
        bad = [c for c in cameras if c not in CAMERAS]
        if bad:
            raise ConfigError(f"LIBERO camera {bad[0]!r}: choose from {', '.join(CAMERAS)}")
        self.cameras, self.orient = tuple(cameras), ORIENTATIONS[orientation]
        #: scene perturbations applied at every reset (None: none); settable between episodes
        self.perturb = check(perturb, "libero")
        #: what each axis drew for the current episode (``{axis: {"level", params...}}``)
        self.perturbation: dict[str, Any] = {}
        self.worker = LiberoWorker()
        try:
            self.info, _ = self.worker.call("make", suite=self.suite, task_id=self.task_id, width=width, height=height,
                                            cameras=[CAMERAS[c] for c in self.cameras], render_mode=render_mode,
                                            hard_reset=bool(hard_reset))
            self.max_steps = max_steps if max_steps is not None else step_limit(self.suite)
        except BaseException:
            self.worker.close()
            raise
        self.instruction = self.info["instruction"]
        self.control_dt = 1.0 / self.info["control_freq"]  # seconds per control step
        self.steps, self.success, self.reason = 0, False, ""
        self.last: dict[str, np.ndarray] = {}
        #: the current episode's distractor bodies -> their world position (m) after the settle steps ({}: none)
        self.placed: dict[str, list[float]] = {}

    def observation(self, arrays: dict[str, np.ndarray]) -> Observation:
        self.last = arrays
        images = {c: self.orient(arrays[CAMERAS[c]]) for c in self.cameras}
        pos, quat = arrays["robot0_eef_pos"], arrays["robot0_eef_quat"]  # quaternion xyzw (robosuite)
        grip = arrays["robot0_gripper_qpos"]
        state = {"joint_positions": arrays["robot0_joint_pos"], "tcp_pose": np.concatenate([pos, quat]),
                 "gripper_qpos": grip, "gripper": np.array([gripper_opening(grip)]),
                 # the 8 numbers OpenVLA-OFT and openpi feed their LIBERO policies: eef xyz, axis-angle, fingers
                 "libero_state": np.concatenate([pos, quat_to_rotvec(quat), grip])}
        return Observation(images, self.instruction, state, self.steps * self.control_dt)

    def reset(self, init_index: int, settle_steps: int = SETTLE_STEPS) -> Observation:
        n = self.info["n_init_states"]
        if not 0 <= init_index < n:
            raise ConfigError(f"LIBERO {self.suite}:{self.task_id} has initial states 0..{n - 1} (episode seeds); "
                              f"got {init_index}")
        draws = self.draw(init_index)
        worker = [d for d in draws if d["axis"] not in _CLIENT_AXES]
        extra = next((p for p in self.perturb or () if p.axis == "distractors"), None)
        # with distractors: the worker starts the episode in the task's model built with the distractor bodies
        # (parked), tells where they may go, and places what was drawn there before the settle steps
        head, arrays = self.worker.call("reset", _texture_images(worker), init_index=int(init_index),
                                        settle_steps=0 if extra else int(settle_steps), perturb=worker,
                                        distractors=_distractor_spec() if extra else None)
        applied, self.placed = head.get("applied"), {}
        if extra is not None:
            d = self.draw_distractors(extra, init_index, head["distractor_view"])
            head, arrays = self.worker.call("distractors", objects=_distractor_objects(d["params"]),
                                            settle_steps=int(settle_steps))
            self.placed = head["placed"]
            draws = _in_axis_order([*draws, d])
        from embeval.sim.perturb.backends import record

        self.perturbation = record(draws, applied)
        reworded = self.perturbation.get("instruction")
        self.instruction = reworded["instruction"] if reworded else self.info["instruction"]
        self.steps, self.success, self.reason = 0, bool(head["success"]), ""
        return self.observation(arrays)

    def draw(self, seed: int) -> list[dict[str, Any]]:
        """What :attr:`perturb` draws for episode ``seed`` (the axes' own seeded samplers; [] without), but
        ``distractors``: they draw from the episode's start (:meth:`draw_distractors`)."""
        from embeval.sim.perturb import Perturbations
        from embeval.sim.perturb.backends import (
            CameraRef,
            LightingRef,
            SceneView,
            check,
            draw,
        )

        if not check(self.perturb, "libero"):
            return []
        view = SceneView(f"{self.suite}:{self.task_id}", tuple(CameraRef(c) for c in self.info["world_cameras"]
                                                                if c in CAMERAS.values()),
                         LightingRef(tuple(self.info["key_light_direction"])), arm_joints=self.info["arm_joints"],
                         instruction=self.info["instruction"],
                         surfaces={k: tuple(v) for k, v in self.info["surfaces"].items()})
        return draw(Perturbations(p for p in self.perturb if p.axis != "distractors"), int(seed), "libero", view)

    def draw_distractors(self, p, seed: int, view: dict[str, Any]) -> dict[str, Any]:
        """What ``distractors`` (``p``, a :class:`~embeval.sim.perturb.Perturbation`) draws for episode ``seed`` in
        the start the worker tells (``view``: its ``distractor_view``; :func:`distractor_scene_view`)."""
        from embeval.sim.perturb import Perturbations
        from embeval.sim.perturb.backends import draw

        self.distractor_view = distractor_scene_view(f"{self.suite}:{self.task_id}", view, self.info["goal"])
        return draw(Perturbations([p]), int(seed), "libero", self.distractor_view)[0]

    def scene_params(self) -> dict[str, Any]:
        """The MuJoCo model's camera and light arrays now (``cam_pos``, ``cam_quat`` wxyz, ``cam_fovy`` deg,
        ``light_dir``, ``light_ambient``, ``light_diffuse``, ``light_specular``), ``cameras`` (names in model
        order), ``aspect`` (render width / height) and the surfaces' textures (``tex_table_0``,
        ``tex_background_0``, ...: RGB uint8)."""
        head, arrays = self.worker.call("scene_params")
        return {**head, **arrays}

    def step_libero(self, vec) -> StepResult:
        """One control step of a LIBERO-convention 7-vector (see :func:`embeval.sim.libero.to_libero`)."""
        head, arrays = self.worker.call("step", {"action": np.asarray(vec, dtype=np.float64)})
        self.steps += 1
        self.success = bool(head["success"])
        self.reason = "success" if self.success else ("max_steps" if self.steps >= self.max_steps else "")
        return StepResult(self.observation(arrays), self.success, self.done)

    @property
    def done(self) -> bool:
        return self.success or self.steps >= self.max_steps

    def get_state(self) -> np.ndarray:
        """MuJoCo's flattened state (time, qpos, qvel), as LIBERO's initial-state files store it."""
        return self.worker.call("get_state")[1]["state"]

    def set_state(self, state) -> tuple[Observation, bool]:
        """Set the flattened state; ``(observation, LIBERO's success check there)``."""
        head, arrays = self.worker.call("set_state", {"state": np.asarray(state, dtype=np.float64)})
        return self.observation(arrays), bool(head["success"])

    def object_pose(self, name: str) -> tuple[np.ndarray, np.ndarray, int]:
        """World position (m), quaternion wxyz (MuJoCo) of LIBERO object ``name`` (e.g. akita_black_bowl_1), and
        where its free joint's xyz starts in :meth:`get_state` (-1: no free joint)."""
        head, arrays = self.worker.call("object_pose", name=name)
        return arrays["pos"], arrays["quat"], head["state_index"]

    def tcp_pose6(self) -> tuple[float, ...]:
        """The last observation's end-effector pose ``[x, y, z, rx, ry, rz]`` (m, rotation vector), world = base axes."""
        return tuple(np.concatenate([self.last["robot0_eef_pos"], quat_to_rotvec(self.last["robot0_eef_quat"])]))

    def close(self) -> None:
        self.worker.close()


#: axes applied on this side (the worker never sees them): the instruction the policy reads
_CLIENT_AXES = ("instruction",)
#: m kept between a distractor's centre and the table top's edges (its footprint radius plus a finger's width)
TABLE_MARGIN = 0.05


def _distractor_spec() -> dict[str, Any]:
    """The distractor bodies the worker builds: embeval's block and can (m) in as many slots as the top level asks."""
    from embeval.sim.perturb.distractors import BLOCK, CAN, COUNT

    return {"shapes": {"block": list(BLOCK), "can": list(CAN)}, "slots": int(COUNT.range(len(COUNT.ranges))[1])}


def _distractor_objects(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The drawn distractors as the worker places them: kind, xy (m), yaw (rad) and the colour's RGBA."""
    from embeval.sim.scene import COLORS

    return [{"kind": o["kind"], "xy": o["xy"], "yaw": o["yaw"], "rgba": list(COLORS[o["color"]])}
            for o in params["objects"]]


def _in_axis_order(draws: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from embeval.sim.perturb.axis import AXES

    order = AXES.names()
    return sorted(draws, key=lambda d: order.index(d["axis"]))


def distractor_scene_view(name: str, view: dict[str, Any], goal) -> Any:
    """The :class:`~embeval.sim.perturb.backends.SceneView` distractors draw from (world frame, m): the worker's
    table top less :data:`TABLE_MARGIN`, within the part the unperturbed third-person camera sees, kept clear of every task object and fixture (footprint plus
    ``distractors.CLEARANCE``), of the path from each goal predicate's object to its reference (the object's
    footprint plus ``PATH_CLEARANCE``; a region site counts as the object it belongs to) and of the robot base
    (``ROBOT_CLEARANCE``), in colours other than the objects' nearest ones."""
    from embeval.sim.perturb.backends import SceneView
    from embeval.sim.perturb.distractors import (
        CLEARANCE,
        PATH_CLEARANCE,
        ROBOT_CLEARANCE,
        nearest_color,
    )

    objs = view["objects"]
    clear = [(x, y, x, y, r + CLEARANCE) for x, y, r in objs.values()]

    def owner(ref: str) -> str | None:  # an object, or the object a region site (object_region) belongs to
        hits = [n for n in objs if ref == n or ref.startswith(n + "_")]
        return max(hits, key=len) if hits else None

    for pred in goal:
        if len(pred) == 3 and pred[1] in objs and owner(pred[2]) not in (None, pred[1]):
            (ax, ay, ar), (bx, by, _) = objs[pred[1]], objs[owner(pred[2])]
            clear.append((ax, ay, bx, by, ar + PATH_CLEARANCE))
    bx, by = view["robot_base"]
    clear.append((bx, by, bx, by, ROBOT_CLEARANCE))
    t = view["table"]
    (x0, x1), (y0, y1) = t.get("visible") or (t["x"], t["y"])
    area = ((max(x0, t["x"][0] + TABLE_MARGIN), min(x1, t["x"][1] - TABLE_MARGIN)),
            (max(y0, t["y"][0] + TABLE_MARGIN), min(y1, t["y"][1] - TABLE_MARGIN)))
    return SceneView(name, table_area=area, keep_clear=tuple(tuple(float(v) for v in c) for c in clear),
                     colors=tuple(sorted({nearest_color(c) for c in view["colors"].values()})))


def _texture_images(draws) -> dict[str, np.ndarray]:
    """The texture axes' images (RGB uint8, the drawn pattern at the drawn contrast around the surface's mean
    colour), under the axis's name: what the worker tiles over the surface's textures."""
    from embeval.sim.perturb._texture import pattern_image
    from embeval.sim.perturb.backends import TEXTURE_SURFACES

    return {d["axis"]: pattern_image(d["params"]["mean_rgb"], d["params"]) for d in draws
            if d["axis"] in TEXTURE_SURFACES}


class HoldPolicy:
    """The default policy where LIBERO has no scripted expert: hold still, gripper open (runs to the step limit)."""

    id = "hold"
    summary = "holds still with the gripper open, so every episode runs to LIBERO's step limit"

    def reset(self, instruction: str) -> None:
        pass

    def act(self, obs) -> Action:
        return Action.hold()


#: ``sim.options`` of the LIBERO backend -> what it sets
OPTIONS = {"render_mode": "default (robosuite's rendering, as published checkpoints saw) or fast (see docs/sim.md)",
           "perturb": "scene perturbations AXIS:LEVEL applied at reset, e.g. [camera_pose:3] (LIBERO applies "
                      "every axis; docs/sim.md)",
           "hard_reset": "true (default, robosuite's: the model rebuilt at every reset, 5-10 s) or false (built once; "
                         "resets take well under a second)"}


def _flag(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: true or false, got {value!r}")
    return value


class LiberoEpisodes(DistortedCameras, EpisodeEnv):
    """``sim: {backend: libero, env: SUITE:TASK_ID}``; episode seed = LIBERO initial-state index. A distortion
    ``(name, level, seed)`` distorts every camera frame (seeded per camera and frame, as the other backends)."""

    def __init__(self, spec: SimSpec):
        self.spec = spec
        bad = sorted(set(spec.options) - set(OPTIONS))
        if bad:
            raise ConfigError(f"sim.options.{bad[0]}: the LIBERO backend takes {', '.join(OPTIONS)}")
        from embeval.sim.perturb.backends import parse_option

        self.env = LiberoTask(spec.env, spec.width, spec.height, tuple(CAMERAS) if spec.render else (),
                              max_steps=spec.max_steps, render_mode=spec.options.get("render_mode", "default"),
                              perturb=parse_option(spec.options.get("perturb"), "libero"),
                              hard_reset=_flag(spec.options.get("hard_reset", True), "sim.options.hard_reset"))
        self.cameras = self.env.cameras
        self._distorters: dict[str, Any] = {}
        self.clean_images: dict[str, np.ndarray] = {}

    @property
    def instruction(self) -> str:
        """The instruction of the current episode (LIBERO's, or its rewording under the ``instruction`` axis)."""
        return self.env.instruction

    def reset(self, seed, distortion=None):
        self._start_distortion(distortion)
        return self._wrap(self.env.reset(int(seed)))

    def step(self, action: Action) -> StepResult:
        return self._stepped(self.env.step_libero(to_libero(action)))

    @property
    def done(self) -> bool:
        return self.env.done

    def default_policy(self) -> HoldPolicy:
        return HoldPolicy()

    def outcome(self, n_actions: int) -> ExecutionOutcome:
        e = self.env
        return ExecutionOutcome(final_tcp_pose=e.tcp_pose6(), success=e.success, stopped=False, n_actions=n_actions,
                                duration=e.steps * e.control_dt,
                                final_joint_positions=tuple(e.last["robot0_joint_pos"].tolist()),
                                extra={"task": self.spec.env, "libero_task": e.info["task"], "control_steps": e.steps,
                                       "max_steps": e.max_steps, "goal": e.info["goal"],
                                       "perturbation": dict(e.perturbation)})

    def close(self) -> None:
        self.env.close()
