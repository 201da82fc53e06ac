"""Image sources of an Embodied-IQA database: where the reference images and their tasks come from.

Every source yields :class:`IQAReference` records (RGB uint8 image + 5 task instructions + the robot
state a policy needs). Sources are registered in :data:`SOURCES` by name:

- ``sim``: the simulated reference generator (:func:`embeval.sim.references.generate_references`),
  both views of each scene; state = the scene's home TCP pose, gripper open.
- ``folder``: an image folder plus a task file (YAML/JSON: ``{"*": [5 tasks], "img.png": [...]}``;
  optional ``views:``/``source:`` mappings of file name -> "first_person"/"third_person", "real"/"simulated").
- ``lerobot``: a LeRobot v3.0 dataset (every ``stride``-th frame of camera ``camera``; the frame's task).
- ``rosbag``: a rosbag2 bag folder or ``.mcap`` file: every ``stride``-th frame of an image topic,
  the robot state from ``/joint_states`` (and the TCP pose) nearest in time, the task from the
  instruction topic, the run's Execution score when its score records are in the bag.
- ``realsense``: a librealsense recording (``.db3``, ``.bag``; :mod:`embeval.camera.realsense`, played in real
  time through librealsense): every ``stride``-th colour frame, the tasks of ``tasks`` / ``tasks_file``, one scene per
  recording; state :data:`DEFAULT_STATE` (a recording holds no robot state).
- ``maniskill``: the first camera frame of seeded ManiSkill3 episodes (:mod:`embeval.sim.maniskill`),
  cycling through ``envs`` (default the six covered tasks); the env's instruction is the first task,
  state = the observed TCP pose in the robot's base frame, gripper open. ``sim`` records the env and
  seed, so Execution can replay actions there.
- ``libero``: LIBERO's agent-view renders at its own initial states of a suite's tasks or a task list
  (:mod:`embeval_analysis.iqa.libero_source`); ``sim`` records the task and initial state for Execution.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from embeval.errors import ConfigError, InvalidInputError, MissingFileError, load_yaml
from embeval.image_io import check_decoded_pixels
from embeval.scoring.decision import DEFAULT_TASKS
from embeval_analysis.iqa.libero_source import libero_source
from embeval_analysis.iqa.reference import DEFAULT_STATE, IQAReference, _tasks5  # noqa: F401 - re-exported

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
            return np.asarray(check_decoded_pixels(im, f"image {path}").convert("RGB"))
    except OSError as exc:
        raise InvalidInputError(f"cannot read image {path}: {exc}; is it a PNG/JPEG file?") from None


def sim_source(n: int, seed: int = 0, size: tuple[int, int] = (128, 96), work_dir: str | Path | None = None,
               views: tuple[str, ...] = ("first_person", "third_person"), **_) -> list[IQAReference]:
    """``n`` images from ceil(n / len(views)) simulated scenes (both views of a scene)."""
    import tempfile

    from embeval.rotations import rotvec_to_quat
    from embeval.sim.references import generate_references
    from embeval.sim.scene import SceneSpec

    n_scenes = -(-int(n) // len(views))
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="iqa_refs_"))
    recs = generate_references(n_scenes, work, seed=seed, views=views, width=size[0], height=size[1])
    out = []
    for r in recs[:n]:
        scene = SceneSpec.from_yaml(work / "scenes" / f"{r.scene_id}.yaml")
        home = list(scene.home_tcp)
        quat = rotvec_to_quat(home[3:6], canonical=False).tolist()  # home_tcp rotation is a rotation vector
        out.append(IQAReference(r.image_id, _read_rgb(work / r.path), [t["instruction"] for t in r.tasks][:5], r.scene_id,
                                r.view, "simulated", {"tcp_pose": home[:3] + quat, "gripper": [1.0]}, sim_seed=int(r.seed)))
    return out


def folder_source(path: str | Path, tasks_file: str | Path | None = None, n: int | None = None,
                  size: tuple[int, int] | None = None, glob: str = "*", **_) -> list[IQAReference]:
    """Images of a folder (PNG/JPEG, sorted) with tasks from ``tasks_file`` (default: ``PATH/tasks.yaml``
    if present, else :data:`DEFAULT_TASKS`). Each image is its own scene unless ``scenes:`` maps it."""
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
        doc = load_yaml(tf, "task file") or {}
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


#: topics the rosbag source reads besides the images (UR driver and embeval names; override per call)
BAG_TOPICS = {
    "joint_topic": "/joint_states",  # sensor_msgs/JointState (UR driver; embeval adds "gripper_opening")
    "tcp_topic": "/tcp_pose_broadcaster/pose",  # geometry_msgs/PoseStamped, frame base (UR driver)
    "instruction_topic": "/embeval/instruction",  # std_msgs/String
    "events_topic": "/embeval/events",  # std_msgs/String JSON: episode_start / episode_end
    "scores_topic": "/embeval/scores",  # std_msgs/String JSON score records (Execution of each episode)
}
UR_JOINTS = ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint")


def _tasks_from(tasks: list[str] | None, tasks_file: str | Path | None) -> list[str]:
    """Task list from ``tasks`` or a YAML/JSON ``tasks_file`` (a list, or ``{'*': [...]}`` as the folder source)."""
    if tasks_file:
        tf = Path(tasks_file)
        if not tf.is_file():
            raise MissingFileError(f"task file {tf} not found; write YAML like {{'*': [five instructions]}}")
        doc = load_yaml(tf, "task file")
        doc = doc.get("tasks", doc) if isinstance(doc, dict) else doc
        doc = doc.get("*") if isinstance(doc, dict) else doc
        if not isinstance(doc, list):
            raise ConfigError(f"{tf}: a rosbag source needs a list of tasks or {{'*': [tasks]}}")
        return _tasks5(doc, str(tf))
    return list(tasks or DEFAULT_TASKS)


class _Nearest:
    """Values of a topic by bag time (ns); ``at(t)`` is the value nearest in time, ``before(t)`` the
    latest at or before ``t`` (None when none lies within ``max_gap_ns``)."""

    def __init__(self, times: list[int], values: list[Any], max_gap_ns: int | None = None):
        order = np.argsort(times, kind="stable")
        self.t = np.asarray(times, dtype=np.int64)[order]
        self.v = [values[i] for i in order]
        self.gap = max_gap_ns

    def __bool__(self) -> bool:
        return len(self.v) > 0

    def at(self, t: int) -> Any:
        if not self:
            return None
        j = int(np.searchsorted(self.t, t))
        cands = [k for k in (j - 1, j) if 0 <= k < len(self.t)]
        k = min(cands, key=lambda c: (abs(int(self.t[c]) - t), c))
        return self.v[k] if self.gap is None or abs(int(self.t[k]) - t) <= self.gap else None

    def before(self, t: int) -> Any:
        j = int(np.searchsorted(self.t, t, side="right")) - 1
        return self.v[j] if j >= 0 else None


def _joint_state(msg) -> dict[str, list[float]]:
    """``joint_positions`` (UR joint order when the six UR names are present), ``gripper`` from
    ``gripper_opening`` when recorded, and ``tcp_pose`` by forward kinematics (UR5, frame base)."""
    pos = dict(zip(list(msg.name), np.asarray(msg.position, dtype=float).tolist()))
    out: dict[str, list[float]] = {}
    if all(j in pos for j in UR_JOINTS):
        from embeval.kinematics.ur import UR5
        from embeval.rotations import matrix_to_quat

        q = [pos[j] for j in UR_JOINTS]
        out["joint_positions"] = q
        T = UR5().fk(np.asarray(q), frame="base")
        out["tcp_pose"] = T[:3, 3].tolist() + matrix_to_quat(T[:3, :3], canonical=False).tolist()
    else:
        out["joint_positions"] = np.asarray(msg.position, dtype=float).tolist()
    if "gripper_opening" in pos:
        out["gripper"] = [float(np.clip(pos["gripper_opening"], 0.0, 1.0))]
    return out


def _json_records(msgs) -> list[tuple[int, dict]]:
    import json

    out = []
    for m in msgs:
        try:
            rec = json.loads(m.msg.data)
        except (json.JSONDecodeError, TypeError):
            continue
        if isinstance(rec, dict):
            out.append((m.timestamp_ns, rec))
    return out


def rosbag_source(path: str | Path, topic: str = "/camera/camera/color/image_raw", n: int | None = None, stride: int = 10,
                  size: tuple[int, int] | None = None, tasks: list[str] | None = None, tasks_file: str | Path | None = None,
                  view: str = "third_person", source: str = "real", max_state_gap_s: float = 0.5,
                  **topics: Any) -> list[IQAReference]:
    """Every ``stride``-th image of ``topic`` in a rosbag2 bag (a folder with ``metadata.yaml`` or a
    single ``.mcap`` file), with what the bag recorded around each frame (bag receive times, ns):

    - state: the ``/joint_states`` message nearest in time (within ``max_state_gap_s``; frames with
      none that close are skipped): ``joint_positions``, ``gripper`` (embeval's ``gripper_opening``),
      ``tcp_pose`` from ``/tcp_pose_broadcaster/pose`` nearest in time when recorded, else by UR5
      forward kinematics; no joint topic in the bag: :data:`DEFAULT_STATE`;
    - tasks: the latest instruction (``/embeval/instruction``, else the episode's ``instruction``)
      first, then ``tasks`` / ``tasks_file`` (default :data:`DEFAULT_TASKS`);
    - outcome: when the bag holds the run's events and score records, the episode the frame belongs
      to and its Execution score (``IQAReference.outcome``);
    - scene: one per episode when events are recorded, else one per ``stride * 10`` frames.
    Topic names: ``joint_topic``, ``tcp_topic``, ``instruction_topic``, ``events_topic``,
    ``scores_topic`` (defaults :data:`BAG_TOPICS`)."""
    from embeval.camera.base import image_from_msg
    from embeval.recording import bag_info, read_bag

    bad = set(topics) - set(BAG_TOPICS)
    if bad:
        raise ConfigError(f"rosbag source: unknown parameter(s) {sorted(bad)}; topics are {', '.join(BAG_TOPICS)}")
    names = {**BAG_TOPICS, **topics}
    info = bag_info(path)
    if topic not in info["topics"]:
        raise ConfigError(f"topic {topic} is not in bag {path}; it has: {', '.join(sorted(info['topics'])) or 'no topics'}")
    if info["topics"][topic]["type"] != "sensor_msgs/msg/Image":
        raise ConfigError(f"topic {topic} in {path} is {info['topics'][topic]['type']}, not sensor_msgs/msg/Image")
    extra = [t for t in names.values() if t in info["topics"]]
    by_topic: dict[str, list] = {t: [] for t in extra}
    for m in read_bag(path, extra):
        by_topic[m.topic].append(m)
    gap = int(float(max_state_gap_s) * 1e9)
    joints = _Nearest([m.timestamp_ns for m in by_topic.get(names["joint_topic"], [])],
                      [m.msg for m in by_topic.get(names["joint_topic"], [])], gap)
    tcps = _Nearest([m.timestamp_ns for m in by_topic.get(names["tcp_topic"], [])],
                    [m.msg.pose for m in by_topic.get(names["tcp_topic"], [])], gap)
    instr = _Nearest([m.timestamp_ns for m in by_topic.get(names["instruction_topic"], [])],
                     [str(m.msg.data) for m in by_topic.get(names["instruction_topic"], [])])
    events = _json_records(by_topic.get(names["events_topic"], []))
    starts = _Nearest([t for t, e in events if e.get("event") in ("episode_start", "episode_end")],
                      [e for t, e in events if e.get("event") in ("episode_start", "episode_end")])
    scores = {}
    for _, rec in _json_records(by_topic.get(names["scores_topic"], [])):
        key = (str(rec.get("item")), str(rec.get("distortion", "none")), int(rec.get("level", 0) or 0))
        if isinstance(rec.get("scores"), dict):
            scores.setdefault(key, []).append(rec["scores"])
    base_tasks = _tasks_from(tasks, tasks_file)
    step = max(1, int(stride))
    out, k = [], 0
    for m in read_bag(path, [topic]):
        if k % step:
            k += 1
            continue
        t, k = m.timestamp_ns, k + 1
        state = {kk: list(v) for kk, v in DEFAULT_STATE.items()}
        if joints:
            js = joints.at(t)
            if js is None:
                continue  # no joint state within max_state_gap_s of this frame
            state.update(_joint_state(js))
        pose = tcps.at(t) if tcps else None
        if pose is not None:
            state["tcp_pose"] = [pose.position.x, pose.position.y, pose.position.z,
                                 pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w]
        ev = starts.before(t) if starts else None
        episode = ev if ev is not None and ev.get("event") == "episode_start" else None
        own = instr.before(t) if instr else None
        own = own or (episode or {}).get("instruction") or None
        ts = ([own] if own else []) + [x for x in base_tasks if x != own]
        outcome = None
        if episode is not None:
            key = (str(episode.get("item")), str(episode.get("distortion", "none")), int(episode.get("level", 0) or 0))
            recs = scores.get(key)
            outcome = {"item": key[0], "distortion": key[1], "level": key[2],
                       "execution": float(recs[-1]["execution"]) if recs and recs[-1].get("execution") is not None else None}
        scene = (f"bag_ep_{episode.get('item')}_{episode.get('distortion', 'none')}_{episode.get('level', 0)}"
                 if episode is not None else f"bag_{(k - 1) // (step * 10):04d}")
        ref = IQAReference(f"bag_{k - 1:06d}", _resize(image_from_msg(m.msg), size), _tasks5(ts, str(path)), scene, view, source)
        ref.state, ref.outcome = state, outcome
        out.append(ref)
        if n and len(out) >= n:
            break
    if not out and joints:
        raise InvalidInputError(f"{path}: no frame of {topic} has a {names['joint_topic']} message within "
                                f"max_state_gap_s = {max_state_gap_s} s; raise it or record the joint states")
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


def realsense_source(path: str | Path, n: int | None = None, stride: int = 10, size: tuple[int, int] | None = None,
                     tasks: list[str] | None = None, tasks_file: str | Path | None = None, view: str = "third_person",
                     **_) -> list[IQAReference]:
    """Every ``stride``-th colour frame of a librealsense recording (played at its recorded rate, so that the
    reader keeps pace: librealsense's pipeline keeps only the latest frames), up to ``n``."""
    from embeval.camera import make_source

    src = make_source("realsense", recording=path)
    task_list = _tasks5(_tasks_from(tasks, tasks_file), str(tasks_file or path))
    stem, step, out = Path(path).stem, max(1, int(stride)), []
    try:
        while not n or len(out) < n:
            f = src.read()
            if f is None:
                break
            if f.index % step == 0:
                out.append(IQAReference(f"rs_{stem}_f{f.index:06d}", _resize(f.image, size), list(task_list), stem, view,
                                        "real"))
    finally:
        src.close()
    if not out:
        raise InvalidInputError(f"RealSense recording {path} holds no colour frame; record it again")
    return out


#: source name -> loader(**params) -> list[IQAReference]
SOURCES: dict[str, Callable[..., list[IQAReference]]] = {
    "sim": sim_source,
    "folder": folder_source,
    "lerobot": lerobot_source,
    "rosbag": rosbag_source,
    "realsense": realsense_source,
    "maniskill": maniskill_source,
    "libero": libero_source,
}


#: the most reference images and the largest reference side (pixels) a source is asked for: a typo such as
#: ``--size 100000 100000`` or ``--n 10**9`` is refused instead of exhausting memory and disk
MAX_REFERENCES = 100_000
from embeval.image_io import MAX_IMAGE_SIDE as MAX_SIDE  # noqa: E402 - one image-side bound for the project


def _whole(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_params(source: str, params: dict[str, Any]) -> None:
    """:class:`ConfigError` naming the parameter (and its ``iqa build`` option) and the value given when ``source``
    is unknown or ``n`` / ``size`` is out of range; checked before anything is read or written."""
    if source not in SOURCES:
        raise ConfigError(f"unknown image source {source!r}; choose from {', '.join(SOURCES)}")
    import inspect

    need = [k for k, v in inspect.signature(SOURCES[source]).parameters.items()
            if v.default is inspect.Parameter.empty and v.kind is v.POSITIONAL_OR_KEYWORD and params.get(k) is None]
    if need:
        raise ConfigError(f"image source {source!r} needs {', '.join(f'build.source_params.{k} (--{k})' for k in need)}; "
                          "see `embeval iqa build --help`")
    n = params.get("n")
    if n is not None and not (_whole(n) and 1 <= n <= MAX_REFERENCES):
        raise ConfigError(f"build.source_params.n (--n): the number of reference images must be a whole number in "
                          f"1..{MAX_REFERENCES}, got {n!r}")
    size = params.get("size")
    if size is not None and not (isinstance(size, (list, tuple)) and len(size) == 2
                                 and all(_whole(v) and 1 <= v <= MAX_SIDE for v in size)):
        shown = list(size) if isinstance(size, tuple) else size
        raise ConfigError(f"build.source_params.size (--size W H): width and height must be whole numbers of pixels in "
                          f"1..{MAX_SIDE}, got {shown!r}")


def load_references(source: str, **params) -> list[IQAReference]:
    """References from the registered ``source`` (see :data:`SOURCES`; parameters checked by :func:`check_params`)."""
    check_params(source, params)
    refs = SOURCES[source](**params)
    if not refs:
        raise InvalidInputError(f"image source {source!r} gave no images (params {params})")
    ids = [r.ref_id for r in refs]
    if len(set(ids)) != len(ids):
        raise InvalidInputError(f"image source {source!r} gave duplicate image ids; rename the files")
    return refs
