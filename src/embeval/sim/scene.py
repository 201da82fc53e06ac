"""Scene specs: plain data (dataclasses <-> dict/YAML) describing a tabletop cell.

The same spec describes the simulated workcell and the real one. Frame: the UR controller frame
``base`` is the world frame; the robot's base sits at the origin on the table, the table top is
the plane z = 0, objects lie at x > 0 in front of the robot. Metres, radians.

Object ``kind`` names a builder in :mod:`embeval.sim.objects` (``box``, ``cylinder``, ``bowl``,
``plate``, ``card``, ``button``, ``drawer``, ``marker``, ``cup``, ``peg``, ``hole``, ``knob``);
``size`` is kind-specific (see there). A ``texture`` (image file path) is mapped on the top face
of ``card`` and ``box`` objects: the image's up direction is the object's local +x axis, its
right direction the local -y axis (an upright picture for a viewer looking down with +x up).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from embeval.config import from_mapping
from embeval.errors import ConfigError, MissingFileError, read_text, yaml_problem
from embeval.image_io import MAX_IMAGE_SIDE
from embeval.safe_yaml import loads
from embeval.sim.task_registry import VerbList

RGBA = tuple[float, float, float, float]

#: The task verbs, alphabetically: a live view of the task registry (the ten Embodied-IQA verbs, plus any
#: task registered later; embeval.sim.tasks).
VERBS: VerbList = VerbList()

#: Named colours (RGBA 0..1) used by task instructions ("the red cube").
COLORS: dict[str, RGBA] = {
    "red": (0.85, 0.12, 0.10, 1.0),
    "green": (0.15, 0.70, 0.20, 1.0),
    "blue": (0.12, 0.30, 0.85, 1.0),
    "yellow": (0.95, 0.85, 0.10, 1.0),
    "orange": (0.95, 0.50, 0.05, 1.0),
    "purple": (0.55, 0.20, 0.75, 1.0),
    "white": (0.92, 0.92, 0.92, 1.0),
    "black": (0.08, 0.08, 0.08, 1.0),
}


def _floats(v: Any, name: str, n: int | None = None) -> tuple[float, ...]:
    try:
        t = tuple(float(x) for x in v)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a list of numbers, got {v!r}") from None
    if n is not None and len(t) != n:
        raise ConfigError(f"{name} must have {n} numbers, got {len(t)}: {v!r}")
    return t


@dataclass
class ObjectSpec:
    """One object on the table."""

    name: str  # unique in the scene; tasks refer to objects by name
    kind: str  # builder in embeval.sim.objects
    position: tuple[float, ...] = (0.5, 0.0)  # (x, y) on the table, or (x, y, z) of the object's bottom, metres
    yaw: float = 0.0  # rotation about z, radians
    size: tuple[float, ...] = ()  # kind-specific, metres (empty: the kind's default)
    color: RGBA = (0.85, 0.12, 0.10, 1.0)
    texture: str | None = None  # image file mapped on the top face (card, box)
    mass: float = 0.1  # kg (ignored for fixed objects)
    fixed: bool = False  # welded to the table
    category: str = ""  # semantic category recorded in manifests (default: kind)
    color_name: str = ""  # word used in instructions ("red")
    friction: float = 0.8

    def __post_init__(self):
        if not self.name:
            raise ConfigError("object name must not be empty")
        self.position = _floats(self.position, f"object {self.name!r} position")
        if len(self.position) not in (2, 3):
            raise ConfigError(f"object {self.name!r} position must be (x, y) or (x, y, z), got {self.position}")
        self.size = _floats(self.size, f"object {self.name!r} size")
        self.color = _floats(self.color, f"object {self.name!r} color", 4)  # type: ignore[assignment]
        self.yaw = float(self.yaw)
        self.mass = float(self.mass)
        if not self.category:
            self.category = self.kind

    @property
    def xy(self) -> tuple[float, float]:
        return (self.position[0], self.position[1])

    @property
    def z(self) -> float:
        return self.position[2] if len(self.position) == 3 else 0.0

    def describe(self) -> str:
        """Words for instructions: "red cube"."""
        return f"{self.color_name} {self.category}".strip()


@dataclass
class CameraSpec:
    """A pinhole camera. Intrinsics in pixels; ``mount`` "world" (pose = position/target/up in frame
    base) or "wrist" (pose relative to the TCP: ``position`` offset in the TCP frame, looking along
    TCP +z, the tool's approach axis)."""

    name: str
    width: int = 640
    height: int = 480
    fx: float = 382.6
    fy: float = 382.6
    cx: float | None = None  # default width / 2
    cy: float | None = None  # default height / 2
    position: tuple[float, float, float] = (0.40, 0.68, 0.58)
    target: tuple[float, float, float] = (0.55, -0.02, 0.0)
    up: tuple[float, float, float] = (0.0, 0.0, 1.0)
    mount: str = "world"
    near: float = 0.02
    far: float = 3.0

    def __post_init__(self):
        self.position = _floats(self.position, f"camera {self.name} position", 3)  # type: ignore[assignment]
        self.target = _floats(self.target, f"camera {self.name} target", 3)  # type: ignore[assignment]
        self.up = _floats(self.up, f"camera {self.name} up", 3)  # type: ignore[assignment]
        if self.mount not in ("world", "wrist"):
            raise ConfigError(f"camera {self.name!r} mount must be 'world' or 'wrist', got {self.mount!r}")
        if self.width < 8 or self.height < 8:
            raise ConfigError(f"camera {self.name!r} size {self.width}x{self.height} is too small (>= 8x8)")
        if max(self.width, self.height) > MAX_IMAGE_SIDE:
            raise ConfigError(f"camera {self.name!r} size {self.width}x{self.height} is too large; give at most "
                              f"{MAX_IMAGE_SIDE} pixels per side")

    def scaled(self, width: int, height: int) -> CameraSpec:
        """The same camera at another resolution (intrinsics scaled, same field of view)."""
        sx, sy = width / self.width, height / self.height
        return replace(
            self, width=int(width), height=int(height), fx=self.fx * sx, fy=self.fy * sy,
            cx=None if self.cx is None else self.cx * sx, cy=None if self.cy is None else self.cy * sy,
        )


def d455_camera(name: str, mount: str = "world", **kw: Any) -> CameraSpec:
    """A RealSense D455-like colour camera: 640x480, fx = fy = 382.6 px (about 80 x 64 deg)."""
    return CameraSpec(name=name, mount=mount, **kw)


def default_cameras() -> list[CameraSpec]:
    """Third-person (fixed, on the left (+y) side of the table) and wrist (on the TCP) D455-like cameras."""
    return [
        d455_camera("third_person", position=(0.40, 0.68, 0.58), target=(0.55, -0.02, 0.0)),
        # wrist: 9 cm behind the TCP along the approach axis and 9 cm off-axis, looking along it (fingertips in view)
        d455_camera("wrist", mount="wrist", position=(0.09, 0.0, -0.09), target=(0.02, 0.0, 0.25), up=(1.0, 0.0, 0.0)),
    ]


@dataclass
class LightingSpec:
    """TinyRenderer lighting (pybullet getCameraImage light parameters)."""

    direction: tuple[float, float, float] = (0.4, 0.3, 1.0)
    color: tuple[float, float, float] = (1.0, 1.0, 1.0)
    ambient: float = 0.55
    diffuse: float = 0.5
    specular: float = 0.1
    shadow: bool = False

    def __post_init__(self):
        self.direction = _floats(self.direction, "lighting direction", 3)  # type: ignore[assignment]
        self.color = _floats(self.color, "lighting color", 3)  # type: ignore[assignment]


@dataclass
class SceneSpec:
    """A whole cell: table, walls, objects, lighting, cameras, robot home pose, safety limits."""

    name: str = "scene"
    objects: list[ObjectSpec] = field(default_factory=list)
    table_color: RGBA = (0.62, 0.47, 0.33, 1.0)
    table_texture: str | None = None
    background: str = "wood"  # background category recorded in manifests
    floor_color: RGBA = (0.35, 0.35, 0.38, 1.0)
    wall_color: RGBA = (0.80, 0.80, 0.78, 1.0)
    walls: bool = True  # a back wall and a side wall (inner faces at wall_back_x and wall_side_y)
    wall_back_x: float = 0.98  # m, inner face of the back wall (beyond the UR5's reach by default)
    wall_side_y: float = -0.64  # m, inner face of the side wall
    lighting: LightingSpec = field(default_factory=LightingSpec)
    cameras: list[CameraSpec] = field(default_factory=default_cameras)
    home_tcp: tuple[float, ...] = (0.45, 0.0, 0.30, 3.14159265, 0.0, 0.0)  # [x,y,z,rx,ry,rz]: TCP pointing down
    gripper_open: float = 1.0
    safety: dict[str, Any] = field(default_factory=dict)  # SafetyLimits overrides (embeval.robot.safety)
    seed: int = 0  # the seed that generated the spec (for provenance; the spec itself is deterministic)

    def __post_init__(self):
        self.objects = [o if isinstance(o, ObjectSpec) else from_mapping(ObjectSpec, o, "object") for o in self.objects]
        self.cameras = [c if isinstance(c, CameraSpec) else from_mapping(CameraSpec, c, "camera") for c in self.cameras]
        if not isinstance(self.lighting, LightingSpec):
            self.lighting = from_mapping(LightingSpec, self.lighting, "lighting")
        for name in ("table_color", "floor_color", "wall_color"):
            setattr(self, name, _floats(getattr(self, name), name, 4))
        self.home_tcp = _floats(self.home_tcp, "home_tcp", 6)
        names = [o.name for o in self.objects]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"object names must be unique; repeated: {sorted(dup)}")
        cams = [c.name for c in self.cameras]
        if len(set(cams)) != len(cams):
            raise ConfigError(f"camera names must be unique, got {cams}")

    # -- lookup -----------------------------------------------------------------------------
    def object(self, name: str) -> ObjectSpec:
        for o in self.objects:
            if o.name == name:
                return o
        raise ConfigError(f"scene {self.name!r} has no object {name!r}; objects: {[o.name for o in self.objects]}")

    def camera(self, name: str) -> CameraSpec:
        for c in self.cameras:
            if c.name == name:
                return c
        raise ConfigError(f"scene {self.name!r} has no camera {name!r}; cameras: {[c.name for c in self.cameras]}")

    def with_objects(self, *extra: ObjectSpec) -> SceneSpec:
        """A copy with objects added (e.g. image cards for Act2Answer)."""
        return replace(self, objects=[*self.objects, *extra])

    # -- serialisation ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SceneSpec:
        return from_mapping(cls, d, "scene spec")

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_yaml(cls, path_or_text: str | Path) -> SceneSpec:
        p = Path(path_or_text) if not str(path_or_text).lstrip().startswith(("{", "name:", "objects:", "scene:")) else None
        if p is not None:
            if not p.exists():
                raise MissingFileError(f"scene spec {p} not found; write one with `embeval sim scene --out {p}`")
            text = read_text(p, "scene spec")
        else:
            text = str(path_or_text)
        try:
            data = loads(text)  # bounded aliases, nesting and integers
        except yaml.YAMLError as exc:
            raise ConfigError(f"scene spec {p or 'text'} is not valid YAML ({yaml_problem(exc)})") from None
        if isinstance(data, dict) and "scene" in data and set(data) <= {"scene", "task"}:
            data = data["scene"]  # the {scene, task} file that `embeval sim scene` writes
        return cls.from_dict(data or {})


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "item"):
        return x.item()
    return x
