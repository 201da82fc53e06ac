"""Image sources of an Embodied-IQA database: where the reference images and their tasks come from.

Every source yields :class:`IQAReference` records (RGB uint8 image + 5 task instructions + the robot
state a policy needs). Sources are registered in :data:`SOURCES` by name:

- ``sim``: the simulated reference generator (:func:`embeval.sim.references.generate_references`),
  both views of each scene; state = the scene's home TCP pose, gripper open.
- ``folder``: an image folder plus a task file (YAML/JSON: ``{"*": [5 tasks], "img.png": [...]}``;
  optional ``views:``/``source:`` mappings of file name -> "first_person"/"third_person", "real"/"simulated").
- ``lerobot``: a LeRobot v3.0 dataset (every ``stride``-th frame of camera ``camera``; the frame's task).
- ``rosbag``: a rosbag2 (MCAP) image topic (every ``stride``-th frame); tasks from ``tasks``.
- ``maniskill``: the first camera frame of seeded ManiSkill3 episodes (:mod:`embeval.sim.maniskill`),
  cycling through ``envs`` (default the six covered tasks); the env's instruction is the first task,
  state = the observed TCP pose in the robot's base frame, gripper open. ``sim`` records the env and
  seed, so Execution can replay actions there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from embeval.errors import ConfigError, InvalidInputError, MissingFileError

#: default tasks of rising difficulty, for sources that carry none
DEFAULT_TASKS = (
    "press the red button",
    "pick up the green block",
    "push the blue box to the left",
    "place the yellow cube on the plate",
    "pour the cup into the bowl",
)
#: default robot state (tcp_pose: x y z [m] + quaternion xyzw, frame base; gripper 1 = open)
DEFAULT_STATE = {"tcp_pose": [0.5, 0.0, 0.33, 1.0, 0.0, 0.0, 0.0], "gripper": [1.0]}


@dataclass
class IQAReference:
    """One reference image of the database."""

    ref_id: str
    image: np.ndarray = field(repr=False)  # RGB uint8 (H, W, 3)
    tasks: list[str]
    scene_id: str  # images of one scene never go to different splits
    view: str = "third_person"  # "first_person" (wrist) | "third_person" | "unknown"
    source: str = "simulated"  # "simulated" | "real"
    state: dict[str, list[float]] = field(default_factory=lambda: {k: list(v) for k, v in DEFAULT_STATE.items()})
    sim_seed: int | None = None  # simulated references: the scene seed (embeval.sim.references.reference_scene)
    sim: dict[str, Any] | None = None  # other simulators: {"backend": "maniskill", "env": ..., "seed": ...}


def _resize(img: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    if size is None:
        return img
    from embeval.subjects.embedded.preprocess import resize_image

    w, h = size
    return resize_image(img, [h, w])


def _read_rgb(path: Path) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except OSError as exc:
        raise InvalidInputError(f"cannot read image {path}: {exc}; is it a PNG/JPEG file?") from None


def _tasks5(tasks: list[str], where: str) -> list[str]:
    if not tasks or not all(isinstance(t, str) and t.strip() for t in tasks):
        raise ConfigError(f"{where}: tasks must be a non-empty list of instructions (strings)")
    return [tasks[i % len(tasks)] for i in range(5)] if len(tasks) < 5 else list(tasks[:5])


def sim_source(n: int, seed: int = 0, size: tuple[int, int] = (128, 96), work_dir: str | Path | None = None,
               views: tuple[str, ...] = ("first_person", "third_person"), **_) -> list[IQAReference]:
    """``n`` images from ceil(n / len(views)) simulated scenes (both views of a scene)."""
    import tempfile

    from scipy.spatial.transform import Rotation

    from embeval.sim.references import generate_references
    from embeval.sim.scene import SceneSpec

    n_scenes = -(-int(n) // len(views))
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="iqa_refs_"))
    recs = generate_references(n_scenes, work, seed=seed, views=views, width=size[0], height=size[1])
    out = []
    for r in recs[:n]:
        scene = SceneSpec.from_yaml(work / "scenes" / f"{r.scene_id}.yaml")
        home = list(scene.home_tcp)
        quat = Rotation.from_rotvec(home[3:6]).as_quat().tolist()  # home_tcp rotation is a rotation vector
        out.append(IQAReference(r.image_id, _read_rgb(work / r.path), [t["instruction"] for t in r.tasks][:5], r.scene_id,
                                r.view, "simulated", {"tcp_pose": home[:3] + quat, "gripper": [1.0]}, sim_seed=int(r.seed)))
    return out


def folder_source(path: str | Path, tasks_file: str | Path | None = None, n: int | None = None,
                  size: tuple[int, int] | None = None, glob: str = "*", **_) -> list[IQAReference]:
    """Images of a folder (PNG/JPEG, sorted) with tasks from ``tasks_file`` (default: ``PATH/tasks.yaml``
    if present, else :data:`DEFAULT_TASKS`). Each image is its own scene unless ``scenes:`` maps it."""
    import yaml

    root = Path(path)
    if not root.is_dir():
        raise MissingFileError(f"image folder {root} not found; pass the folder of reference images")
    files = sorted(p for p in root.glob(glob) if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".bmp"))
    if not files:
        raise MissingFileError(f"no PNG/JPEG images in {root} (glob {glob!r})")
    tf = Path(tasks_file) if tasks_file else (root / "tasks.yaml" if (root / "tasks.yaml").exists() else None)
    doc: dict[str, Any] = {}
    if tf is not None:
        if not tf.exists():
            raise MissingFileError(f"task file {tf} not found; write YAML like {{'*': [five instructions]}}")
        doc = yaml.safe_load(tf.read_text()) or {}
        if not isinstance(doc, dict):
            raise ConfigError(f"{tf}: must map image file names (or '*') to lists of tasks")
    tasks, views, sources, scenes = doc.get("tasks", doc), doc.get("views", {}), doc.get("source", {}), doc.get("scenes", {})
    out = []
    for f in files[: n or None]:
        t = tasks.get(f.name, tasks.get("*", list(DEFAULT_TASKS)))
        out.append(IQAReference(f.stem, _resize(_read_rgb(f), size), _tasks5(t, f"{tf}: {f.name}"),
                                str(scenes.get(f.name, f.stem)), views.get(f.name, "unknown"),
                                sources.get(f.name, "real")))
    return out


def lerobot_source(path: str | Path, camera: str = "third_person", n: int | None = None, stride: int = 10,
                   size: tuple[int, int] | None = None, tasks: list[str] | None = None, **_) -> list[IQAReference]:
    """Every ``stride``-th frame of a LeRobot dataset; the frame's own task is the first task."""
    from embeval.datasets import read_lerobot

    d = read_lerobot(path)
    key = f"observation.images.{camera}"
    if key not in d.frames:
        cams = sorted(k.split(".")[-1] for k in d.frames if ".images." in k)
        raise ConfigError(f"{path} has no camera {camera!r}; it has {cams}")
    st = d.frames.get("observation.state")
    out = []
    for i in range(0, len(d.episode_index), max(1, int(stride))):
        own = d.tasks[int(d.task_index[i])]
        extra = [t for t in (tasks or DEFAULT_TASKS) if t != own]
        state = dict(DEFAULT_STATE)
        if st is not None and st.shape[1] >= 8:
            state = {"tcp_pose": st[i, :7].astype(float).tolist(), "gripper": [float(st[i, 7])]}
        out.append(IQAReference(f"lerobot_e{int(d.episode_index[i]):04d}_f{i:06d}", _resize(d.frames[key][i], size),
                                _tasks5([own] + extra, str(path)), f"ep{int(d.episode_index[i])}",
                                "first_person" if "wrist" in camera else "third_person", "real"))
        out[-1].state = state
        if n and len(out) >= n:
            break
    return out


def rosbag_source(path: str | Path, topic: str = "/camera/camera/color/image_raw", n: int | None = None, stride: int = 10,
                  size: tuple[int, int] | None = None, tasks: list[str] | None = None, view: str = "third_person",
                  source: str = "real", **_) -> list[IQAReference]:
    """Every ``stride``-th image of ``topic`` in a rosbag2 (MCAP) bag; consecutive frames of a bag
    form one scene per ``stride * 10`` frames (so near-identical frames stay in one split)."""
    from embeval.camera.bag import BagSource

    src = BagSource(path, topic, loop=False)
    out, k = [], 0
    try:
        while (fr := src.read()) is not None:
            if k % max(1, int(stride)) == 0:
                out.append(IQAReference(f"bag_{k:06d}", _resize(fr.image, size), _tasks5(list(tasks or DEFAULT_TASKS), str(path)),
                                        f"bag_{k // (max(1, int(stride)) * 10):04d}", view, source))
                if n and len(out) >= n:
                    break
            k += 1
    finally:
        src.close()
    return out


def maniskill_source(n: int, seed: int = 0, size: tuple[int, int] = (128, 128), envs: list[str] | None = None,
                     camera: str | None = None, **_) -> list[IQAReference]:
    """``n`` first frames of seeded ManiSkill episodes: reference ``i`` is env ``envs[i % len(envs)]``
    reset with seed ``seed + i // len(envs)``; the image is ``camera`` (default the env's first camera)."""
    from embeval.sim.maniskill.env import TASKS, ManiSkillConfig, ManiSkillEnv

    envs = list(envs or TASKS)
    w, h = (int(v) for v in size)
    per_env: dict[str, list[int]] = {}
    for i in range(int(n)):
        per_env.setdefault(envs[i % len(envs)], []).append(i)
    out: dict[int, IQAReference] = {}
    for env_id, idx in per_env.items():
        with ManiSkillEnv(ManiSkillConfig(env_id, width=w, height=h)) as env:
            cam = camera or env.cameras[0]
            if cam not in env.cameras:
                raise ConfigError(f"maniskill source: {env_id} has no camera {cam!r}; it has {list(env.cameras)}")
            for i in idx:
                s = int(seed) + i // len(envs)
                obs = env.reset(seed=s)
                extra = [t for t in DEFAULT_TASKS if t != obs.instruction]
                out[i] = IQAReference(f"ms_{env_id.replace('-', '_')}_s{s:04d}", obs.images[cam].copy(),
                                      _tasks5([obs.instruction] + extra, env_id), f"{env_id}_s{s}",
                                      "first_person" if "hand" in cam else "third_person", "simulated",
                                      {"tcp_pose": obs.state["tcp_pose"].tolist(), "gripper": [1.0]},
                                      sim={"backend": "maniskill", "env": env_id, "seed": s, "camera": cam})
    return [out[i] for i in sorted(out)]


#: source name -> loader(**params) -> list[IQAReference]
SOURCES: dict[str, Callable[..., list[IQAReference]]] = {
    "sim": sim_source,
    "folder": folder_source,
    "lerobot": lerobot_source,
    "rosbag": rosbag_source,
    "maniskill": maniskill_source,
}


def load_references(source: str, **params) -> list[IQAReference]:
    """References from the registered ``source`` (see :data:`SOURCES`)."""
    if source not in SOURCES:
        raise ConfigError(f"unknown image source {source!r}; choose from {', '.join(SOURCES)}")
    refs = SOURCES[source](**params)
    if not refs:
        raise InvalidInputError(f"image source {source!r} gave no images (params {params})")
    ids = [r.ref_id for r in refs]
    if len(set(ids)) != len(ids):
        raise InvalidInputError(f"image source {source!r} gave duplicate image ids; rename the files")
    return refs
