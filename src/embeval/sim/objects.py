"""Object builders: :class:`~embeval.sim.scene.ObjectSpec` -> pybullet bodies (procedural, no mesh files).

Each kind registers a builder on :data:`BUILDERS` (a :class:`~embeval.registry.Registry`; installed packages add
kinds through the ``embeval.object_kinds`` entry-point group); sizes (metres) by kind, defaults in brackets:

- ``box``: (sx, sy, sz) full extents [0.04, 0.04, 0.04]; optional top-face texture
- ``cylinder``: (radius, height) [0.022, 0.06]
- ``card``: (sx, sy, thickness) [0.12, 0.12, 0.003]; flat, textured top (Act2Answer image cards)
- ``marker``: (radius,) [0.035]; a flat goal disc, visual only (no collision), fixed
- ``plate``: (radius, height) [0.07, 0.012]
- ``bowl``: (radius, height, wall) [0.07, 0.045, 0.008]; disc + ring of wall segments
- ``cup``: (radius, height, wall) [0.035, 0.08, 0.006]
- ``button``: (base, cap_radius, travel) [0.08, 0.025, 0.012]; fixed housing + spring-loaded cap (prismatic z)
- ``drawer``: (depth, width, height) [0.16, 0.20, 0.07]; fixed cabinet + drawer (prismatic, opens
  towards -x in the object's frame, i.e. towards the robot at yaw 0) with a knob on its top front edge
- ``knob``: (radius, height) [0.03, 0.03]; fixed base + revolute knob (z)
- ``peg``: (side, length) [0.02, 0.08]; ``hole``: (outer, hole, height) [0.09, 0.03, 0.04] fixed block with a square hole

Positions: (x, y) of the object's centre on the table, z = the object's bottom (0 = on the table).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from embeval.errors import ConfigError, MissingFileError
from embeval.registry import Registry
from embeval.sim.scene import ObjectSpec
from embeval.sim.textures import loadable, resolve


@dataclass
class Body:
    """A built object: pybullet ids and what tasks need to know."""

    name: str
    kind: str
    body_id: int
    height: float  # metres, top of the object above its bottom
    joint: int = -1  # the articulated joint (button cap, drawer, knob), -1 when none
    joint_range: tuple[float, float] = (0.0, 0.0)
    grasp_link: int = -1  # link the gripper attaches to (-1 = base)
    grasp_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)  # grasp point in the grasp link's frame
    spec: ObjectSpec | None = None


Builder = Callable[["PB", ObjectSpec], Body]
#: object kind -> builder ``fn(pb, spec) -> Body``
BUILDERS: Registry[Builder] = Registry("object kind", group="embeval.object_kinds",
                                       hint="add one with @embeval.sim.objects.register('kind')")


def register(kind: str):
    """Decorator: register ``fn(pb, spec) -> Body`` as the builder of object kind ``kind``."""
    return BUILDERS.register(kind)


class PB:
    """A pybullet client handle plus a texture cache."""

    def __init__(self, p, client: int):
        self.p, self.client = p, client
        self._textures: dict[str, int] = {}

    def texture(self, path: str) -> int:
        """pybullet texture id of an image file or a ``procedural:<kind>:<seed>`` name (cached)."""
        if path not in self._textures:
            file = resolve(path)
            if not Path(file).exists():
                raise MissingFileError(f"texture image {file} not found; give an existing PNG/JPG path in the object spec")
            # pybullet draws a format it cannot decode (WebP, 16-bit PNG) blank with only a warning: an 8-bit RGB PNG
            self._textures[path] = self.p.loadTexture(loadable(file), physicsClientId=self.client)
        return self._textures[path]

    def clear(self) -> None:
        self._textures.clear()


def _size(spec: ObjectSpec, default: tuple[float, ...]) -> tuple[float, ...]:
    if not spec.size:
        return default
    if len(spec.size) != len(default):
        raise ConfigError(f"object {spec.name!r} ({spec.kind}) size needs {len(default)} numbers, got {spec.size}")
    if any(s <= 0 for s in spec.size):
        raise ConfigError(f"object {spec.name!r} size must be positive, got {spec.size}")
    return spec.size


def _orn(pb: PB, yaw: float):
    return pb.p.getQuaternionFromEuler([0, 0, yaw])


def _textured_box_mesh(sx: float, sy: float, sz: float):
    """Vertices, indices, uvs, normals of a box whose top face carries the whole texture.

    Texture up = local +x, texture right = local -y; the sides sample the texture's border.
    """
    hx, hy, hz = sx / 2, sy / 2, sz / 2
    verts, uvs, norms, idx = [], [], [], []

    def quad(corners, uv, n):
        base = len(verts)
        verts.extend(corners)
        uvs.extend(uv)
        norms.extend([n] * 4)
        idx.extend([base, base + 1, base + 2, base, base + 2, base + 3])

    # top face (z = +hz): corner (x=+hx, y=+hy) is the image's top-left
    quad([[+hx, +hy, hz], [-hx, +hy, hz], [-hx, -hy, hz], [+hx, -hy, hz]], [[0, 1], [0, 0], [1, 0], [1, 1]], [0, 0, 1])
    edge = [[0, 0]] * 4
    quad([[-hx, -hy, -hz], [-hx, +hy, -hz], [+hx, +hy, -hz], [+hx, -hy, -hz]], edge, [0, 0, -1])
    quad([[+hx, -hy, -hz], [+hx, +hy, -hz], [+hx, +hy, hz], [+hx, -hy, hz]], edge, [1, 0, 0])
    quad([[-hx, +hy, -hz], [-hx, -hy, -hz], [-hx, -hy, hz], [-hx, +hy, hz]], edge, [-1, 0, 0])
    quad([[+hx, +hy, -hz], [-hx, +hy, -hz], [-hx, +hy, hz], [+hx, +hy, hz]], edge, [0, 1, 0])
    quad([[-hx, -hy, -hz], [+hx, -hy, -hz], [+hx, -hy, hz], [-hx, -hy, hz]], edge, [0, -1, 0])
    return verts, idx, uvs, norms


def _single(pb: PB, spec: ObjectSpec, col: int, vis: int, height: float, mass: float | None = None) -> int:
    p = pb.p
    x, y = spec.xy
    m = 0.0 if spec.fixed else (spec.mass if mass is None else mass)
    bid = p.createMultiBody(
        baseMass=m, baseCollisionShapeIndex=col, baseVisualShapeIndex=vis,
        basePosition=[x, y, spec.z + height / 2], baseOrientation=_orn(pb, spec.yaw), physicsClientId=pb.client,
    )
    if col >= 0:
        p.changeDynamics(bid, -1, lateralFriction=spec.friction, spinningFriction=0.001, rollingFriction=0.0001,
                         physicsClientId=pb.client)
    return bid


@register("box")
def build_box(pb: PB, spec: ObjectSpec) -> Body:
    sx, sy, sz = _size(spec, (0.04, 0.04, 0.04))
    p = pb.p
    col = p.createCollisionShape(p.GEOM_BOX, halfExtents=[sx / 2, sy / 2, sz / 2], physicsClientId=pb.client)
    if spec.texture:
        v, i, uv, n = _textured_box_mesh(sx, sy, sz)
        vis = p.createVisualShape(p.GEOM_MESH, vertices=v, indices=i, uvs=uv, normals=n, rgbaColor=[1, 1, 1, 1],
                                  physicsClientId=pb.client)
    else:
        vis = p.createVisualShape(p.GEOM_BOX, halfExtents=[sx / 2, sy / 2, sz / 2], rgbaColor=spec.color,
                                  physicsClientId=pb.client)
    bid = _single(pb, spec, col, vis, sz)
    if spec.texture:
        p.changeVisualShape(bid, -1, textureUniqueId=pb.texture(spec.texture), rgbaColor=[1, 1, 1, 1], physicsClientId=pb.client)
    return Body(spec.name, spec.kind, bid, sz, spec=spec)


@register("card")
def build_card(pb: PB, spec: ObjectSpec) -> Body:
    if not spec.size:
        spec.size = (0.12, 0.12, 0.003)
    if not spec.mass or spec.mass == 0.1:
        spec.mass = 0.05
    return build_box(pb, spec)


@register("cylinder")
def build_cylinder(pb: PB, spec: ObjectSpec) -> Body:
    r, h = _size(spec, (0.022, 0.06))
    p = pb.p
    col = p.createCollisionShape(p.GEOM_CYLINDER, radius=r, height=h, physicsClientId=pb.client)
    vis = p.createVisualShape(p.GEOM_CYLINDER, radius=r, length=h, rgbaColor=spec.color, physicsClientId=pb.client)
    return Body(spec.name, spec.kind, _single(pb, spec, col, vis, h), h, spec=spec)


@register("plate")
def build_plate(pb: PB, spec: ObjectSpec) -> Body:
    if not spec.size:
        spec.size = (0.07, 0.012)
    b = build_cylinder(pb, spec)
    b.kind = "plate"
    return b


@register("marker")
def build_marker(pb: PB, spec: ObjectSpec) -> Body:
    (r,) = _size(spec, (0.035,))
    p = pb.p
    vis = p.createVisualShape(p.GEOM_CYLINDER, radius=r, length=0.001, rgbaColor=spec.color, physicsClientId=pb.client)
    spec.fixed = True
    bid = _single(pb, spec, -1, vis, 0.001)
    return Body(spec.name, spec.kind, bid, 0.001, spec=spec)


def _ring(pb: PB, r: float, h: float, wall: float, segments: int, bottom: float):
    """Collision/visual shape arrays of a disc bottom plus a ring of wall boxes (centred on the body origin)."""
    p = pb.p
    types, half, pos, orn, radii, lengths = [p.GEOM_CYLINDER], [[0, 0, 0]], [[0, 0, -h / 2 + bottom / 2]], [[0, 0, 0, 1]], [r], [bottom]
    seg_len = 2 * r * math.tan(math.pi / segments) + 0.002
    for k in range(segments):
        a = 2 * math.pi * k / segments
        types.append(p.GEOM_BOX)
        half.append([wall / 2, seg_len / 2, h / 2])
        pos.append([(r - wall / 2) * math.cos(a), (r - wall / 2) * math.sin(a), 0])
        orn.append(list(p.getQuaternionFromEuler([0, 0, a])))
        radii.append(0)
        lengths.append(0)
    return types, half, pos, orn, radii, lengths


def _hollow(pb: PB, spec: ObjectSpec, default: tuple[float, float, float], segments: int = 12) -> Body:
    r, h, wall = _size(spec, default)
    p = pb.p
    types, half, pos, orn, radii, lengths = _ring(pb, r, h, wall, segments, bottom=wall)
    col = p.createCollisionShapeArray(types, radii=radii, halfExtents=half, lengths=lengths, collisionFramePositions=pos,
                                      collisionFrameOrientations=orn, physicsClientId=pb.client)
    vis = p.createVisualShapeArray(types, radii=radii, halfExtents=half, lengths=lengths, visualFramePositions=pos,
                                   visualFrameOrientations=orn, rgbaColors=[spec.color] * len(types), physicsClientId=pb.client)
    return Body(spec.name, spec.kind, _single(pb, spec, col, vis, h), h, spec=spec)


@register("bowl")
def build_bowl(pb: PB, spec: ObjectSpec) -> Body:
    return _hollow(pb, spec, (0.07, 0.045, 0.008))


@register("cup")
def build_cup(pb: PB, spec: ObjectSpec) -> Body:
    return _hollow(pb, spec, (0.035, 0.08, 0.006), segments=10)


def _articulated(pb: PB, spec: ObjectSpec, base_col, base_vis, base_h, link_col, link_vis, link_pos, joint_type, axis,
                 link_mass=0.05) -> int:
    p = pb.p
    x, y = spec.xy
    bid = p.createMultiBody(
        baseMass=0.0, baseCollisionShapeIndex=base_col, baseVisualShapeIndex=base_vis,
        basePosition=[x, y, spec.z + base_h / 2], baseOrientation=_orn(pb, spec.yaw),
        linkMasses=[link_mass], linkCollisionShapeIndices=[link_col], linkVisualShapeIndices=[link_vis],
        linkPositions=[link_pos], linkOrientations=[[0, 0, 0, 1]], linkInertialFramePositions=[[0, 0, 0]],
        linkInertialFrameOrientations=[[0, 0, 0, 1]], linkParentIndices=[0], linkJointTypes=[joint_type],
        linkJointAxis=[axis], physicsClientId=pb.client,
    )
    p.changeDynamics(bid, 0, lateralFriction=spec.friction, jointDamping=0.5, linearDamping=0.5, physicsClientId=pb.client)
    return bid


@register("button")
def build_button(pb: PB, spec: ObjectSpec) -> Body:
    """Housing (fixed) + cap on a prismatic z joint; range [-travel, 0] (pressed = negative)."""
    base, cap_r, travel = _size(spec, (0.08, 0.025, 0.012))
    p = pb.p
    base_h, cap_h = 0.03, 0.025
    housing = (0.3, 0.3, 0.32, 1.0)
    bcol = p.createCollisionShape(p.GEOM_BOX, halfExtents=[base / 2, base / 2, base_h / 2], physicsClientId=pb.client)
    bvis = p.createVisualShape(p.GEOM_BOX, halfExtents=[base / 2, base / 2, base_h / 2], rgbaColor=housing, physicsClientId=pb.client)
    ccol = p.createCollisionShape(p.GEOM_CYLINDER, radius=cap_r, height=cap_h, physicsClientId=pb.client)
    cvis = p.createVisualShape(p.GEOM_CYLINDER, radius=cap_r, length=cap_h, rgbaColor=spec.color, physicsClientId=pb.client)
    spec.fixed = True
    # cap centre so that it sticks out by `travel + 3 mm` above the housing
    link_z = base_h / 2 - cap_h / 2 + travel + 0.003
    bid = _articulated(pb, spec, bcol, bvis, base_h, ccol, cvis, [0, 0, link_z], p.JOINT_PRISMATIC, [0, 0, 1])
    p.changeDynamics(bid, 0, jointLowerLimit=-travel, jointUpperLimit=0.0, physicsClientId=pb.client)
    height = base_h + travel + 0.003
    return Body(spec.name, spec.kind, bid, height, joint=0, joint_range=(-travel, 0.0), grasp_link=0,
                grasp_offset=(0, 0, cap_h / 2), spec=spec)


@register("drawer")
def build_drawer(pb: PB, spec: ObjectSpec) -> Body:
    """Cabinet (fixed) + drawer on a prismatic joint along the local x axis; range [-0.15, 0] (open = negative,
    towards the robot at yaw 0). The knob (the grasp point) sits on the drawer's top front edge."""
    depth, width, height = _size(spec, (0.16, 0.20, 0.07))
    p = pb.p
    spec.fixed = True
    cab = (0.55, 0.42, 0.30, 1.0)
    bcol = p.createCollisionShape(p.GEOM_BOX, halfExtents=[depth / 2, width / 2, height / 2], physicsClientId=pb.client)
    bvis = p.createVisualShape(p.GEOM_BOX, halfExtents=[depth / 2, width / 2, height / 2], rgbaColor=cab, physicsClientId=pb.client)
    dh = 0.02  # drawer slab: thin tray on top of the cabinet
    knob_r, knob_h = 0.012, 0.035
    types = [p.GEOM_BOX, p.GEOM_CYLINDER]
    half = [[depth / 2, width / 2 - 0.01, dh / 2], [0, 0, 0]]
    pos = [[0, 0, 0], [-depth / 2 + 0.025, 0, dh / 2 + knob_h / 2]]
    dcol = p.createCollisionShapeArray(types, radii=[0, knob_r], halfExtents=half, lengths=[0, knob_h],
                                       collisionFramePositions=pos, physicsClientId=pb.client)
    dvis = p.createVisualShapeArray(types, radii=[0, knob_r], halfExtents=half, lengths=[0, knob_h], visualFramePositions=pos,
                                    rgbaColors=[spec.color, (0.15, 0.15, 0.15, 1.0)], physicsClientId=pb.client)
    bid = _articulated(pb, spec, bcol, bvis, height, dcol, dvis, [0, 0, height / 2 + dh / 2 + 0.0005], p.JOINT_PRISMATIC,
                       [1, 0, 0], link_mass=0.3)
    p.changeDynamics(bid, 0, jointLowerLimit=-0.15, jointUpperLimit=0.0, physicsClientId=pb.client)
    return Body(spec.name, spec.kind, bid, height + dh + knob_h, joint=0, joint_range=(-0.15, 0.0), grasp_link=0,
                grasp_offset=tuple(pos[1]), spec=spec)


@register("knob")
def build_knob(pb: PB, spec: ObjectSpec) -> Body:
    r, h = _size(spec, (0.03, 0.03))
    p = pb.p
    spec.fixed = True
    base_h = 0.02
    bcol = p.createCollisionShape(p.GEOM_CYLINDER, radius=r * 1.6, height=base_h, physicsClientId=pb.client)
    bvis = p.createVisualShape(p.GEOM_CYLINDER, radius=r * 1.6, length=base_h, rgbaColor=(0.3, 0.3, 0.3, 1), physicsClientId=pb.client)
    kcol = p.createCollisionShape(p.GEOM_BOX, halfExtents=[r, r / 3, h / 2], physicsClientId=pb.client)
    kvis = p.createVisualShape(p.GEOM_BOX, halfExtents=[r, r / 3, h / 2], rgbaColor=spec.color, physicsClientId=pb.client)
    bid = _articulated(pb, spec, bcol, bvis, base_h, kcol, kvis, [0, 0, base_h / 2 + h / 2], p.JOINT_REVOLUTE, [0, 0, 1])
    return Body(spec.name, spec.kind, bid, base_h + h, joint=0, joint_range=(-math.pi, math.pi), grasp_link=0, spec=spec)


@register("peg")
def build_peg(pb: PB, spec: ObjectSpec) -> Body:
    side, length = _size(spec, (0.02, 0.08))
    spec.size = (side, side, length)
    b = build_box(pb, spec)
    b.kind = "peg"
    return b


@register("hole")
def build_hole(pb: PB, spec: ObjectSpec) -> Body:
    outer, hole, h = _size(spec, (0.09, 0.03, 0.04))
    p = pb.p
    spec.fixed = True
    w = (outer - hole) / 2
    off = hole / 2 + w / 2
    half = [[w / 2, outer / 2, h / 2], [w / 2, outer / 2, h / 2], [hole / 2, w / 2, h / 2], [hole / 2, w / 2, h / 2]]
    pos = [[off, 0, 0], [-off, 0, 0], [0, off, 0], [0, -off, 0]]
    types = [p.GEOM_BOX] * 4
    col = p.createCollisionShapeArray(types, halfExtents=half, collisionFramePositions=pos, physicsClientId=pb.client)
    vis = p.createVisualShapeArray(types, halfExtents=half, visualFramePositions=pos, rgbaColors=[spec.color] * 4,
                                   physicsClientId=pb.client)
    return Body(spec.name, spec.kind, _single(pb, spec, col, vis, h), h, spec=spec)


def build(pb: PB, spec: ObjectSpec) -> Body:
    """Build one object; :class:`ConfigError` for an unknown kind. ``spec`` is not modified (builders get a copy)."""
    if spec.kind not in BUILDERS:
        raise ConfigError(f"object {spec.name!r}: unknown kind {spec.kind!r}; known kinds: {sorted(BUILDERS.names())}")
    return BUILDERS.get(spec.kind)(pb, replace(spec))
