"""URDF files of the workcell (``urdf/`` in the repository) and their generator.

The UR URDF reproduces the D-H model exactly: each joint origin is
``Tx(a_{i-1}) Rx(alpha_{i-1}) Tz(d_i) Rz(theta_offset_i)`` (the ur_description layout), so link
``wrist_3_link`` and ``tool0`` coincide with D-H frame 6 and ``base`` is ``base_link`` turned by
``Rz(pi)``. Collision shapes are simple cylinders and boxes so pybullet loads them fast.
Regenerate the shipped files with ``python -m embeval.kinematics.urdf``.
"""
from __future__ import annotations

import math
from pathlib import Path

from embeval.errors import MissingFileError
from embeval.kinematics.dh import JOINT_NAMES, DHParams, preset
from embeval.rotations import Turn, compose, euler_to_matrix

__all__ = ["GRIPPER_STROKE", "GRIPPER_TCP_Z", "LINK_NAMES", "table_urdf", "ur_urdf", "urdf_dir", "urdf_path"]

#: tool0 -> tcp distance (metres) of the Robotiq-like gripper: centre between the fingertip pads.
GRIPPER_TCP_Z = 0.14
#: travel of each finger (metres): 0 = closed, GRIPPER_STROKE = open (85 mm gap, like a 2F-85).
GRIPPER_STROKE = 0.0425
#: arm link names, base to flange (UR driver names)
LINK_NAMES = ("base_link", "shoulder_link", "upper_arm_link", "forearm_link", "wrist_1_link", "wrist_2_link", "wrist_3_link")

# link masses (kg) from ur_description; other models fall back to UR5's
_MASSES = {
    "ur5": (4.0, 3.7, 8.393, 2.275, 1.219, 1.219, 0.1879),
    "ur5e": (4.0, 3.761, 8.058, 2.846, 1.37, 1.3, 0.365),
}


def urdf_dir() -> Path:
    """The folder of the workcell URDFs: ``$EMBEVAL_URDF_DIR``, else the repository's ``urdf/`` (found
    upwards from this file), else (a wheel install without the repository) the files generated from
    the D-H table into ``~/.cache/embeval/urdf`` (``$XDG_CACHE_HOME`` respected)."""
    import os

    env = os.environ.get("EMBEVAL_URDF_DIR")
    if env:
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        cand = parent / "urdf"
        if (cand / "ur5.urdf").is_file():
            return cand
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "embeval" / "urdf"
    if not (cache / "ur5.urdf").is_file():
        write_shipped(cache)
    return cache


def urdf_path(name: str) -> Path:
    """Path of a shipped URDF: ``urdf_path("ur5")``, ``"ur5_gripper"``, ``"table"`` (``.urdf`` optional)."""
    fname = name if name.endswith(".urdf") else f"{name}.urdf"
    p = urdf_dir() / fname
    if not p.is_file():
        avail = ", ".join(sorted(f.stem for f in urdf_dir().glob("*.urdf")))
        raise MissingFileError(f"URDF {fname!r} not in {urdf_dir()}; available: {avail}")
    return p


# ---------------------------------------------------------------------------------------------
def _f(x: float) -> str:
    x = float(x)
    if x == 0.0:
        return "0"
    return repr(x)  # shortest round-trip repr: the URDF keeps full double precision


def _origin(xyz=(0, 0, 0), rpy=(0, 0, 0)) -> str:
    return f'<origin xyz="{" ".join(_f(v) for v in xyz)}" rpy="{" ".join(_f(v) for v in rpy)}"/>'


def _frame_link(name: str) -> str:
    """A massless-looking frame link (tiny inertia: pybullet would otherwise give it 1 kg)."""
    return f'  <link name="{name}">\n' + _inertial(1e-4, (1e-8, 1e-8, 1e-8)) + "  </link>\n"


def _rpy(*turns: Turn) -> tuple[float, ...]:
    """URDF roll-pitch-yaw (extrinsic x-y-z) of the product of ``turns``; any valid triple at gimbal lock."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return tuple(float(v) for v in compose(*turns, to="xyz"))


def _cyl_inertia(m: float, r: float, length: float) -> tuple[float, float, float]:
    ixx = m * (3 * r * r + length * length) / 12.0
    return ixx, ixx, 0.5 * m * r * r


def _box_inertia(m: float, size) -> tuple[float, float, float]:
    x, y, z = size
    return m * (y * y + z * z) / 12, m * (x * x + z * z) / 12, m * (x * x + y * y) / 12


def _inertial(m: float, I, xyz=(0, 0, 0), rpy=(0, 0, 0)) -> str:
    return (
        f"    <inertial>{_origin(xyz, rpy)}<mass value=\"{_f(m)}\"/>"
        f'<inertia ixx="{_f(I[0])}" ixy="0" ixz="0" iyy="{_f(I[1])}" iyz="0" izz="{_f(I[2])}"/></inertial>\n'
    )


def _shape(kind: str, geom: str, xyz, rpy, material: str | None = None) -> str:
    mat = f'<material name="{material}"/>' if material else ""
    return f"    <{kind}>{_origin(xyz, rpy)}<geometry>{geom}</geometry>{mat}</{kind}>\n"


def _cylinder_link(name: str, m: float, parts, material: str, extra: str = "") -> str:
    """parts: list of (radius, length, xyz, rpy); the first part carries the inertia."""
    r, length, xyz, rpy = parts[0]
    s = f'  <link name="{name}">\n' + _inertial(m, _cyl_inertia(m, r, length), xyz, rpy)
    for r, length, xyz, rpy in parts:
        g = f'<cylinder radius="{_f(r)}" length="{_f(length)}"/>'
        s += _shape("visual", g, xyz, rpy, material) + _shape("collision", g, xyz, rpy)
    return s + extra + "  </link>\n"


def _joint(name, kind, parent, child, xyz, rpy, axis=(0, 0, 1), limit=None, extra="") -> str:
    s = f'  <joint name="{name}" type="{kind}">\n    <parent link="{parent}"/><child link="{child}"/>\n    {_origin(xyz, rpy)}\n'
    if kind != "fixed":
        s += f'    <axis xyz="{" ".join(_f(v) for v in axis)}"/>\n'
    if limit is not None:
        lo, hi, eff, vel = limit
        s += f'    <limit lower="{_f(lo)}" upper="{_f(hi)}" effort="{_f(eff)}" velocity="{_f(vel)}"/>\n'
        s += '    <dynamics damping="0.0" friction="0.0"/>\n'
    return s + extra + "  </joint>\n"


def _joint_origins(p: DHParams) -> list[tuple[tuple, tuple]]:
    """(xyz, rpy) of each arm joint in its parent link: Tx(a_{i-1}) Rx(alpha_{i-1}) Tz(d_i) Rz(offset_i)."""
    out = []
    for i in range(6):
        a_prev = p.a[i - 1] if i else 0.0
        al_prev = p.alpha[i - 1] if i else 0.0
        ca, sa = math.cos(al_prev), math.sin(al_prev)
        xyz = (a_prev, -sa * p.d[i], ca * p.d[i])
        R = euler_to_matrix(al_prev, "x") @ euler_to_matrix(p.theta_offset[i], "z")
        rpy = _rpy(Turn.matrix(R)) if (al_prev or p.theta_offset[i]) else (0.0, 0.0, 0.0)
        if i == 0:  # shoulder_pan is attached to base_link: include base_link -> base = Rz(pi)
            rpy = _rpy(Turn.matrix(euler_to_matrix(math.pi, "z") @ R))
        out.append((xyz, rpy))
    return out


def ur_urdf(params: DHParams | str = "ur5", gripper: bool = False, name: str | None = None) -> str:
    """URDF text of a UR arm (optionally with the Robotiq-like 2-finger gripper and a ``tcp`` link)."""
    p = preset(params) if isinstance(params, str) else params
    masses = _MASSES.get(p.name, _MASSES["ur5"])
    lim = p.limits
    a2, a3, d1, d4 = abs(p.a[1]), abs(p.a[2]), p.d[0], p.d[3]
    name = name or (p.name + ("_gripper" if gripper else ""))
    hp = math.pi / 2
    s = f'<?xml version="1.0"?>\n<!-- Generated by embeval.kinematics.urdf from the D-H table {p.name!r}; do not edit by hand. -->\n'
    s += f'<robot name="{name}">\n'
    s += '  <material name="ur_grey"><color rgba="0.7 0.7 0.7 1"/></material>\n'
    s += '  <material name="ur_blue"><color rgba="0.2 0.4 0.7 1"/></material>\n'
    s += '  <material name="black"><color rgba="0.15 0.15 0.15 1"/></material>\n'
    # base_link: base cylinder up to just below the shoulder
    hb = max(d1 - 0.02, 0.05)
    s += _cylinder_link("base_link", masses[0], [(0.075, hb, (0, 0, hb / 2), (0, 0, 0))], "ur_grey")
    s += _frame_link("base")
    s += _joint("base_link-base_fixed_joint", "fixed", "base_link", "base", (0, 0, 0), (0, 0, math.pi))
    zu = 1.245 * d4  # lateral offsets of the upper arm and forearm tubes (UR5: 0.136 m, 0.0165 m)
    zf = 0.151 * d4
    links = [
        ("shoulder_link", [(0.06, 0.15, (0, 0, 0), (0, 0, 0))], "ur_blue"),
        ("upper_arm_link", [(0.054, a2, (-a2 / 2, 0, zu), (0, hp, 0)), (0.06, 0.14, (0, 0, zu), (0, 0, 0))], "ur_grey"),
        ("forearm_link", [(0.04, a3, (-a3 / 2, 0, zf), (0, hp, 0)), (0.045, 0.12, (0, 0, zf), (0, 0, 0))], "ur_grey"),
        ("wrist_1_link", [(0.04, 0.11, (0, 0, -0.02), (0, 0, 0))], "ur_blue"),
        ("wrist_2_link", [(0.04, 0.11, (0, 0, -0.02), (0, 0, 0))], "ur_blue"),
        ("wrist_3_link", [(0.0375, 0.03, (0, 0, -0.015), (0, 0, 0))], "black"),
    ]
    parents = ["base_link"] + [ln for ln, _, _ in links[:-1]]
    for i, ((lname, parts, mat), (xyz, rpy)) in enumerate(zip(links, _joint_origins(p))):
        s += _cylinder_link(lname, masses[i + 1], parts, mat)
        s += _joint(
            JOINT_NAMES[i], "revolute", parents[i], lname, xyz, rpy,
            limit=(lim.lower[i], lim.upper[i], lim.effort[i], lim.velocity[i]),
        )
    s += _frame_link("flange")
    # flange/tool0 as in ur_description (the two rotations cancel); Tx(a6) Rx(alpha6) of D-H row 6 goes here
    s += _joint("wrist_3-flange", "fixed", "wrist_3_link", "flange", (p.a[5], 0, 0),
                _rpy(Turn.euler("x", p.alpha[5]), Turn.euler("xyz", (0, -hp, -hp))) if p.alpha[5] else (0, -hp, -hp))
    s += _frame_link("tool0")
    s += _joint("flange-tool0", "fixed", "flange", "tool0", (0, 0, 0), (hp, 0, hp))
    if gripper:
        s += _gripper_urdf()
    return s + "</robot>\n"


def _gripper_urdf() -> str:
    """Robotiq-like 2-finger parallel gripper on tool0: body, two prismatic fingers, ``tcp`` link."""
    s = '  <material name="gripper_dark"><color rgba="0.1 0.1 0.1 1"/></material>\n'
    body = (0.06, 0.10, 0.08)
    s += '  <link name="gripper_base_link">\n' + _inertial(0.9, _box_inertia(0.9, body), (0, 0, 0.05))
    cpl = '<cylinder radius="0.04" length="0.02"/>'
    bx = f'<box size="{_f(body[0])} {_f(body[1])} {_f(body[2])}"/>'
    s += _shape("visual", cpl, (0, 0, 0.01), (0, 0, 0), "gripper_dark") + _shape("collision", cpl, (0, 0, 0.01), (0, 0, 0))
    s += _shape("visual", bx, (0, 0, 0.06), (0, 0, 0), "gripper_dark") + _shape("collision", bx, (0, 0, 0.06), (0, 0, 0))
    s += "  </link>\n"
    s += _joint("tool0-gripper_base", "fixed", "tool0", "gripper_base_link", (0, 0, 0), (0, 0, 0))
    finger = (0.02, 0.01, 0.05)
    contact = '    <contact><lateral_friction value="1.5"/><spinning_friction value="0.01"/></contact>\n'
    for side, sgn in (("left", 1.0), ("right", -1.0)):
        lname = f"{side}_finger_link"
        fx = f'<box size="{_f(finger[0])} {_f(finger[1])} {_f(finger[2])}"/>'
        xyz = (0, sgn * finger[1] / 2, finger[2] / 2)
        s += f'  <link name="{lname}">\n' + _inertial(0.05, _box_inertia(0.05, finger), xyz)
        s += _shape("visual", fx, xyz, (0, 0, 0), "ur_grey") + _shape("collision", fx, xyz, (0, 0, 0)) + contact
        s += "  </link>\n"
        mimic = '    <mimic joint="left_finger_joint" multiplier="1" offset="0"/>\n' if side == "right" else ""
        s += _joint(
            f"{side}_finger_joint", "prismatic", "gripper_base_link", lname, (0, 0, 0.10), (0, 0, 0),
            axis=(0, sgn, 0), limit=(0.0, GRIPPER_STROKE, 100.0, 0.15), extra=mimic,
        )
    s += _frame_link("tcp")
    s += _joint("gripper_base-tcp", "fixed", "gripper_base_link", "tcp", (0, 0, GRIPPER_TCP_Z), (0, 0, 0))
    return s


def table_urdf(size=(1.2, 0.8), height: float = 0.75, top: float = 0.04) -> str:
    """A static table; the link origin is the centre of the top surface (legs go down to -height)."""
    sx, sy = size
    s = '<?xml version="1.0"?>\n<!-- Generated by embeval.kinematics.urdf; origin = centre of the table top surface. -->\n'
    s += '<robot name="table">\n  <material name="wood"><color rgba="0.75 0.6 0.42 1"/></material>\n'
    s += '  <link name="table_top">\n' + _inertial(0.0, (0, 0, 0))
    g = f'<box size="{_f(sx)} {_f(sy)} {_f(top)}"/>'
    s += _shape("visual", g, (0, 0, -top / 2), (0, 0, 0), "wood") + _shape("collision", g, (0, 0, -top / 2), (0, 0, 0))
    s += '    <contact><lateral_friction value="0.8"/></contact>\n'
    leg_h = height - top
    lg = f'<box size="0.05 0.05 {_f(leg_h)}"/>'
    for ix in (-1, 1):
        for iy in (-1, 1):
            xyz = (ix * (sx / 2 - 0.05), iy * (sy / 2 - 0.05), -top - leg_h / 2)
            s += _shape("visual", lg, xyz, (0, 0, 0), "wood") + _shape("collision", lg, xyz, (0, 0, 0))
    return s + "  </link>\n</robot>\n"


def write_shipped(out_dir: Path | None = None) -> list[Path]:
    """(Re)write urdf/ur5.urdf, urdf/ur5_gripper.urdf and urdf/table.urdf."""
    if out_dir is None:
        out_dir = Path(__file__).resolve().parents[3] / "urdf"
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {"ur5.urdf": ur_urdf("ur5"), "ur5_gripper.urdf": ur_urdf("ur5", gripper=True), "table.urdf": table_urdf()}
    paths = []
    for fname, text in files.items():
        (out_dir / fname).write_text(text)
        paths.append(out_dir / fname)
    return paths

