"""Record scripted-expert demonstrations from the simulator into a LeRobot-format dataset.

Each episode: a scene + task generated from a derived seed (:func:`embeval.sim.tasks.make_task`),
the expert (:class:`embeval.sim.expert.ScriptedExpert`) acting closed loop. With ``noise > 0``
the executed action is the expert's plus Gaussian noise proportional to the step (std =
``noise`` x the step's norm, separately for translation and rotation; DART-style), while
the *recorded* action stays the expert's clean correction: the data then show how to recover
from small deviations, which a cloned policy needs in closed loop.

Features: ``observation.images.<camera>`` (H, W, 3) uint8, ``observation.state`` (8,) = the
observation's state entries :data:`STATE_KEYS` concatenated in that order: ``tcp_pose`` ``[x, y, z,
qx, qy, qz, qw]`` (frame base, metres) + ``gripper`` opening (1 = open) (a LeRobot subject spec
feeds the same with ``state_key: [tcp_pose, gripper]``; ``meta/embeval.json`` records the list),
``action`` (7,) ``[dx, dy, dz, droll, dpitch, dyaw, gripper]`` (frame base), and the privileged
fields, outside ``observation.*`` so that ``lerobot-train`` never makes them policy inputs (LeRobot
turns ``observation.environment_state`` into one, and any other ``observation.*`` into state):
:data:`TASK_GEOMETRY` (6,) = the target object's position and the goal position (the receptacle
for Place, 16 cm above the target for Pick), metres, frame base, measured at the frame (auxiliary
supervision of the embedded VLA; datasets recorded before it was renamed carry it as
:data:`LEGACY_TASK_GEOMETRY`), ``expert.waypoint`` (6,) the TCP pose ``[x, y, z, rx, ry, rz]`` (rotation vector) the expert is
heading for at this frame (its current stage target; the TCP pose itself once it has finished),
and ``expert.phase`` (1,) the index of that stage's name in :data:`PHASES` (``done`` once finished).

With ``kick_prob > 0`` the executed action also gets, with that probability per step, an absolute
random TCP offset ("kick", std ``kick_std`` metres per axis, never downwards below 6 cm): the
expert's next frames then show how to recover from centimetre-scale errors near the object, where
the relative noise above is tiny because the expert's own steps are.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from embeval.datasets.lerobot_format import Feature, LeRobotWriter
from embeval.errors import ConfigError
from embeval.provenance import code_version, derive_seed

#: the Observation.state entries that make up ``observation.state``, in order (7 + 1 values)
STATE_KEYS = ("tcp_pose", "gripper")
STATE_NAMES = ["x", "y", "z", "qx", "qy", "qz", "qw", "gripper"]
#: the privileged task geometry's feature name (never a policy input: not under ``observation.``)
TASK_GEOMETRY = "privileged.task_geometry"
#: its name in datasets recorded before (LeRobot made it a policy input: ``observation.environment_state``)
LEGACY_TASK_GEOMETRY = "observation.environment_state"
ACTION_NAMES = ["dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"]
ENV_NAMES = ["target_x", "target_y", "target_z", "goal_x", "goal_y", "goal_z"]
WAYPOINT_NAMES = ["x", "y", "z", "rx", "ry", "rz"]
#: names of the scripted expert's stages (``expert.phase`` indexes this; "other" = a verb-specific stage)
PHASES = ("above", "descend", "close", "lift", "carry", "lower", "release", "retreat", "done", "other")


def expert_phase(expert) -> int:
    """Index in :data:`PHASES` of the stage the expert is executing (``done`` once it has finished)."""
    if expert.finished:
        return PHASES.index("done")
    name = expert.stages[expert.i].name
    return PHASES.index(name) if name in PHASES else PHASES.index("other")


def task_geometry(env) -> np.ndarray:
    """(6,) target position + goal position (see module docstring) of the current episode."""
    task, cell = env.task, env.cell
    t = np.asarray(cell.object_pose(task.target)[0], dtype=np.float64)
    if task.reference:
        g = np.asarray(cell.object_pose(task.reference)[0], dtype=np.float64)
    elif task.goal:
        g = np.array([task.goal[0], task.goal[1], 0.0])
    else:
        g = np.array([t[0], t[1], 0.16])
    return np.concatenate([t, g])


def _kickable(expert, tcp: np.ndarray) -> bool:
    """Kicks go in while approaching the object or the goal from above (stages above/carry, and the
    descents while still 3 cm or more above their end pose): never where they would shove the object."""
    name = PHASES[expert_phase(expert)]
    if name in ("above", "carry"):
        return True
    return name in ("descend", "lower") and tcp[2] > expert.waypoint[2] + 0.03


#: the largest relative action noise: its std then equals the expert's own step (more buries the demonstration)
MAX_NOISE = 1.0
#: the largest kick std (m per axis); the kicks model centimetre-scale errors near the object
MAX_KICK_STD = 0.1


@dataclass
class DemoConfig:
    episodes: int = 100
    seed: int = 0
    verbs: tuple[str, ...] = ("Pick", "Place")
    noise: float = 0.3  # relative std of the executed action noise (0 = pure expert)
    kick_prob: float = 0.0  # probability per step of an absolute TCP offset added to the executed action
    kick_std: float = 0.015  # m, std per axis of that offset
    cameras: tuple[str, ...] = ("third_person", "wrist")
    width: int = 128
    height: int = 96
    fps: int = 10
    keep_failures: bool = False  # failed expert episodes are skipped by default
    max_frames: int | None = None  # truncate episodes after this many frames (1: scene starts only)
    split: str = "train"  # seed stream of the scenes ("train", "starts", ...)
    #: record only the frames whose expert stage is one of these (names in PHASES; the other steps run
    #: unrendered, so e.g. ("carry", "lower", "release") yields many Place scenes' carries cheaply); None = all
    phases: tuple[str, ...] | None = None

    def __post_init__(self):
        import math

        if isinstance(self.episodes, bool) or not isinstance(self.episodes, int) or self.episodes < 1:
            raise ConfigError(f"DemoConfig.episodes must be a whole number >= 1, got {self.episodes!r}")
        for k, hi in (("noise", MAX_NOISE), ("kick_prob", 1.0), ("kick_std", MAX_KICK_STD)):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= hi:
                raise ConfigError(f"DemoConfig.{k} must be a finite number in 0..{hi:g}, got {v!r}")


@dataclass
class DemoReport:
    root: str
    episodes: int
    frames: int
    failures: int
    seconds: float


def episode_seed(seed: int, i: int, split: str = "train") -> int:
    """Scene seed of episode ``i`` (``split`` "train" or "eval" give disjoint streams), < 2**31."""
    return derive_seed("embedded-demos", split, seed, i) % (2**31)


def record_demos(out: str | Path, cfg: DemoConfig, overwrite: bool = False,
                 log: Callable[[str], None] | None = None) -> DemoReport:
    """Run ``cfg.episodes`` expert episodes (verbs alternating) and write them to ``out``."""
    from embeval.sim.env import SimEnv
    from embeval.sim.workcell import SimConfig

    t0 = time.perf_counter()
    feats = {f"observation.images.{c}": Feature("image", (cfg.height, cfg.width, 3), ["height", "width", "channels"])
             for c in cfg.cameras}
    feats["observation.state"] = Feature("float32", (8,), STATE_NAMES)
    feats["action"] = Feature("float32", (7,), ACTION_NAMES)
    feats[TASK_GEOMETRY] = Feature("float32", (6,), ENV_NAMES)
    feats["expert.waypoint"] = Feature("float32", (6,), WAYPOINT_NAMES)
    feats["expert.phase"] = Feature("float32", (1,), ["phase"])
    writer = LeRobotWriter(out, fps=cfg.fps, features=feats, robot_type="ur5_2f_gripper", overwrite=overwrite)
    rng = np.random.default_rng(derive_seed("embedded-demos-noise", cfg.seed))
    kick_rng = np.random.default_rng(derive_seed("embedded-demos-kick", cfg.seed, cfg.split))
    sim_cfg = SimConfig(obs_width=cfg.width, obs_height=cfg.height, obs_cameras=tuple(cfg.cameras))
    failures = frames = 0
    with SimEnv(sim_cfg) as env:
        for i in range(cfg.episodes):
            verb = cfg.verbs[i % len(cfg.verbs)]
            s = episode_seed(cfg.seed, i, cfg.split)
            every = cfg.phases is None
            obs = env.reset(seed=s, task=verb, render=every)
            expert = env.expert()
            rec: dict[str, list] = {k: [] for k in feats}
            result = None
            while not env.done and (cfg.max_frames is None or len(rec["action"]) < cfg.max_frames):
                a = expert.act(obs).vector
                if every or PHASES[expert_phase(expert)] in cfg.phases:
                    if not every:
                        obs = env.observe(render=True)
                    for c in cfg.cameras:
                        rec[f"observation.images.{c}"].append(obs.images[c])
                    rec["observation.state"].append(np.concatenate([np.ravel(obs.state[k]) for k in STATE_KEYS]))
                    rec["action"].append(a)
                    rec[TASK_GEOMETRY].append(task_geometry(env))
                    rec["expert.waypoint"].append(expert.waypoint)
                    rec["expert.phase"].append([float(expert_phase(expert))])
                ex = a.copy()
                if cfg.noise > 0:
                    ex[:3] += rng.normal(0.0, cfg.noise * np.linalg.norm(a[:3]), 3)
                    ex[3:6] += rng.normal(0.0, cfg.noise * np.linalg.norm(a[3:6]), 3)
                if env.cell.tcp_pose()[2] + ex[2] < 0.06:  # near the table, noise never pushes below the expert's own step
                    ex[2] = max(ex[2], a[2])
                if cfg.kick_prob > 0 and kick_rng.random() < cfg.kick_prob and _kickable(expert, env.cell.tcp_pose()):
                    k = kick_rng.normal(0.0, cfg.kick_std, 3)
                    if env.cell.tcp_pose()[2] + ex[2] + k[2] < 0.06:
                        k[2] = abs(k[2])
                    ex[:3] += k
                result = env.step(ex, render=every)
                obs = result.observation
            truncated = cfg.max_frames is not None and not env.done
            ok = bool(result is not None and (result.success or truncated))
            failures += not ok
            if (ok or cfg.keep_failures) and rec["action"]:
                writer.add_episode({k: np.stack(v) for k, v in rec.items()}, task=env.task.instruction,
                                   extra={"verb": verb, "scene_seed": s, "success": ok and not truncated,
                                          "truncated": truncated, "reason": env.reason})
                frames += len(rec["action"])
            if log and ((i + 1) % (10 if cfg.max_frames is None else 500) == 0 or i + 1 == cfg.episodes):
                log(f"demos: {i + 1}/{cfg.episodes} episodes, {frames} frames, {failures} expert failures "
                    f"({time.perf_counter() - t0:.0f} s)")
    writer.finalize()
    meta = Path(out) / "meta" / "embeval.json"
    import json

    meta.write_text(json.dumps({"demo_config": asdict(cfg), "state_keys": list(STATE_KEYS),
                                 "code_version": code_version()}, indent=1))
    return DemoReport(str(out), cfg.episodes - (0 if cfg.keep_failures else failures), frames, failures,
                      time.perf_counter() - t0)
