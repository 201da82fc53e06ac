"""Denavit-Hartenberg parameters and joint limits of UR arms.

Classic (distal) D-H: ``T_{i-1,i} = Rz(theta_i + theta_offset_i) Tz(d_i) Tx(a_i) Rx(alpha_i)``, metres
and radians; frame 0 is the controller's ``base`` frame, frame 6 is ``tool0`` (the flange).
Presets are UR's published nominal values. A robot's calibration enters as a D-H table with
offsets (``delta_*`` keys, as in the controller's calibration) or as a ur_description
``default_kinematics.yaml``-style file (see :meth:`DHParams.from_yaml`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from embeval.errors import ConfigError, InvalidInputError, load_yaml

__all__ = ["JOINT_NAMES", "PRESETS", "DHParams", "JointLimits", "preset"]

#: UR driver joint names, base to flange.
JOINT_NAMES: tuple[str, ...] = (
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "wrist_1_joint",
    "wrist_2_joint",
    "wrist_3_joint",
)

_HALF_PI = np.pi / 2
_ALPHA_UR = (_HALF_PI, 0.0, 0.0, _HALF_PI, -_HALF_PI, 0.0)


@dataclass(frozen=True)
class JointLimits:
    """Position limits (radians) per joint, plus velocity (rad/s) and effort (N m) limits."""

    lower: tuple[float, ...] = (-2 * np.pi, -2 * np.pi, -np.pi, -2 * np.pi, -2 * np.pi, -2 * np.pi)
    upper: tuple[float, ...] = (2 * np.pi, 2 * np.pi, np.pi, 2 * np.pi, 2 * np.pi, 2 * np.pi)
    velocity: tuple[float, ...] = (3.15, 3.15, 3.15, 3.2, 3.2, 3.2)
    effort: tuple[float, ...] = (150.0, 150.0, 150.0, 28.0, 28.0, 28.0)

    def __post_init__(self):
        for name in ("lower", "upper", "velocity", "effort"):
            v = getattr(self, name)
            if len(v) != 6:
                raise ConfigError(f"JointLimits.{name} needs 6 values, got {len(v)}")
            object.__setattr__(self, name, tuple(float(x) for x in v))
        if any(lo > hi for lo, hi in zip(self.lower, self.upper)):
            raise ConfigError(f"JointLimits: lower {self.lower} exceeds upper {self.upper} for some joint")

    @classmethod
    def unlimited(cls) -> JointLimits:
        """Limits that never filter a solution (for analysis)."""
        return cls(lower=(-np.inf,) * 6, upper=(np.inf,) * 6)

    def contains(self, q, tol: float = 1e-12) -> np.ndarray:
        """True where every joint of ``q`` ``(..., 6)`` lies within the position limits."""
        q = np.asarray(q, dtype=float)
        return np.all((q >= np.asarray(self.lower) - tol) & (q <= np.asarray(self.upper) + tol), axis=-1)

    def check(self, q, what: str = "joint vector") -> np.ndarray:
        """``q (6,)`` as a float array when every joint is finite and within the position limits, else
        :class:`~embeval.errors.InvalidInputError` naming the first joint outside them (what the IK side never
        returns either: :meth:`embeval.kinematics.UR.ik_batch` filters by the same limits)."""
        q = np.asarray(q, dtype=float)
        if q.shape != (6,):
            raise InvalidInputError(f"{what} must have 6 values (radians), got shape {q.shape}")
        for i, (v, lo, hi) in enumerate(zip(q, self.lower, self.upper)):
            if not np.isfinite(v):
                raise InvalidInputError(f"{what}: q{i + 1} = {v} is not a finite number; give angles in radians")
            if not lo - 1e-12 <= v <= hi + 1e-12:
                raise InvalidInputError(f"{what}: q{i + 1} = {v:g} rad lies outside the joint limits {lo:.4f}..{hi:.4f} "
                                        "rad; give angles within the limits (wrap by 2 pi)")
        return q


@dataclass(frozen=True)
class DHParams:
    """D-H table of a 6-joint UR arm (see module docstring for the convention)."""

    a: tuple[float, ...]
    d: tuple[float, ...]
    alpha: tuple[float, ...] = _ALPHA_UR
    theta_offset: tuple[float, ...] = (0.0,) * 6
    name: str = "custom"
    limits: JointLimits = field(default_factory=JointLimits)

    def __post_init__(self):
        for key in ("a", "d", "alpha", "theta_offset"):
            v = getattr(self, key)
            if len(v) != 6:
                raise ConfigError(f"DHParams.{key} needs 6 values (one per joint), got {len(v)}: {v}")
            v = tuple(float(x) for x in v)
            if not all(np.isfinite(v)):
                raise ConfigError(f"DHParams.{key} contains NaN or inf: {v}")
            object.__setattr__(self, key, v)
        self._check_ur_structure()

    #: largest deviation from UR's structure (m or rad) accepted; beyond it the arm is not a UR-type arm
    MAX_STRUCTURE_DEVIATION = 0.05

    def structure_deviation(self) -> float:
        """Largest deviation (metres or radians) from the structure the closed-form IK needs:
        ``alpha1..5 = (pi/2, 0, 0, pi/2, -pi/2)``, ``a1 = a4 = a5 = 0``, ``d2 = d3 = 0``. 0 for nominal
        UR tables; calibrated robots deviate by ~1e-4 (their IK is then refined numerically)."""
        dal = np.asarray(self.alpha[:5]) - np.asarray(_ALPHA_UR[:5])
        dal = np.abs((dal + np.pi) % (2 * np.pi) - np.pi)
        return float(max(dal.max(), *(abs(self.a[i]) for i in (0, 3, 4)), abs(self.d[1]), abs(self.d[2])))

    def nominal_structure(self) -> DHParams:
        """The nearest table with exact UR structure (d2 + d3 folded into d4, the parallel-axis
        offsets along z add up); used to seed the IK of calibrated arms."""
        return replace(
            self,
            a=(0.0, self.a[1], self.a[2], 0.0, 0.0, self.a[5]),
            d=(self.d[0], 0.0, 0.0, self.d[3] + self.d[1] + self.d[2], self.d[4], self.d[5]),
            alpha=_ALPHA_UR[:5] + (self.alpha[5],),
            name=self.name + "_nominal",
        )

    def _check_ur_structure(self) -> None:
        dev = self.structure_deviation()
        if dev > self.MAX_STRUCTURE_DEVIATION:
            raise ConfigError(
                f"D-H table {self.name!r} is not a UR-type arm (deviates by {dev:.3g} m/rad from "
                "alpha = (pi/2, 0, 0, pi/2, -pi/2, *), a1 = a4 = a5 = 0, d2 = d3 = 0); the IK needs that "
                "structure. Use a UR preset (ur3, ur5, ur10, ...e) or fix the table."
            )

    # ------------------------------------------------------------------ constructors
    @classmethod
    def preset(cls, name: str) -> DHParams:
        """Nominal parameters of a UR model: one of :data:`PRESETS` (``ur5``, ``ur5e``, ...)."""
        return preset(name)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], name: str = "custom") -> DHParams:
        """Build from a mapping; accepted layouts (all metres / radians):

        1. a D-H table: ``{a: [...6], d: [...6], alpha: [...6] (optional, UR's default),
           theta_offset: [...6] (optional)}``, optionally nested under ``dh:``, optionally with
           calibration deltas ``delta_a, delta_d, delta_alpha, delta_theta`` (added to the
           nominal values; ``base: ur5e`` names the nominal preset when a/d are omitted);
        2. ur_description's ``default_kinematics.yaml`` layout: ``kinematics: {shoulder: {x, y, z,
           roll, pitch, yaw}, upper_arm: ..., forearm: ..., wrist_1: ..., wrist_2: ..., wrist_3: ...}``
           (joint origins; converted to D-H, and rejected if they are not D-H-consistent).
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"kinematics data must be a mapping, got {type(data).__name__}")
        name = str(data.get("name", name))
        limits = _limits_from(data.get("limits") or data.get("joint_limits"))
        if "kinematics" in data:
            return _from_urdf_origins(data["kinematics"], name, limits)
        table = data.get("dh", data)
        base = table.get("base")
        nominal = preset(str(base)) if base else None
        vals: dict[str, tuple[float, ...]] = {}
        for key in ("a", "d", "alpha", "theta_offset"):
            if key in table:
                vals[key] = _six(table[key], key)
            elif nominal is not None:
                vals[key] = getattr(nominal, key)
        for key in ("a", "d"):
            if key not in vals:
                raise ConfigError(
                    f"kinematics table {name!r} has no {key!r}: give a, d (and optionally alpha, "
                    "theta_offset) as 6 numbers each, or `base: ur5` to start from a preset"
                )
        deltas = {"a": "delta_a", "d": "delta_d", "alpha": "delta_alpha", "theta_offset": "delta_theta"}
        for key, dkey in deltas.items():
            if dkey in table:
                base_v = vals.get(key, _ALPHA_UR if key == "alpha" else (0.0,) * 6)
                vals[key] = tuple(np.asarray(base_v) + np.asarray(_six(table[dkey], dkey)))
        if limits is None:
            limits = nominal.limits if nominal is not None else JointLimits()
        return cls(name=name, limits=limits, **vals)

    @classmethod
    def from_yaml(cls, path: str | Path) -> DHParams:
        """Read a YAML file in one of the layouts of :meth:`from_dict`."""
        path = Path(path)
        data = load_yaml(path, "kinematics file", missing=f"kinematics file {path} not found: give a D-H table (a, d, alpha) "
                                                            "or a ur_description default_kinematics.yaml / calibration yaml")
        return cls.from_dict(data or {}, name=path.stem)

    def table(self) -> np.ndarray:
        """``(6, 4)`` array of rows ``[a, d, alpha, theta_offset]``."""
        return np.column_stack([self.a, self.d, self.alpha, self.theta_offset])


def _six(v, key: str) -> tuple[float, ...]:
    try:
        out = tuple(float(x) for x in v)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"kinematics field {key!r} must be 6 numbers, got {v!r}") from exc
    if len(out) != 6:
        raise ConfigError(f"kinematics field {key!r} must be 6 numbers, got {len(out)}")
    return out


def _limits_from(data) -> JointLimits | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ConfigError("joint limits must be a mapping with lower/upper (radians)")
    lo = data.get("lower")
    hi = data.get("upper")
    if lo is None or hi is None:
        raise ConfigError("joint limits need both 'lower' and 'upper' (6 values each, radians)")
    kw = {"lower": _six(lo, "lower"), "upper": _six(hi, "upper")}
    for key in ("velocity", "effort"):
        if key in data:
            kw[key] = _six(data[key], key)
    return JointLimits(**kw)


_SEGMENTS = ("shoulder", "upper_arm", "forearm", "wrist_1", "wrist_2", "wrist_3")


def _from_urdf_origins(kin: Mapping[str, Any], name: str, limits: JointLimits | None) -> DHParams:
    """Joint origins ``Tx(a_{i-1}) Rx(alpha_{i-1}) Tz(d_i) Rz(theta_offset_i)`` -> D-H (ur_description layout)."""
    from embeval.rotations import rpy_to_matrix

    if not isinstance(kin, Mapping) or any(s not in kin for s in _SEGMENTS):
        raise ConfigError(f"'kinematics' must contain the segments {', '.join(_SEGMENTS)} with x, y, z, roll, pitch, yaw")
    a = [0.0] * 6
    alpha = [0.0] * 6
    d = [0.0] * 6
    th = [0.0] * 6
    worst = 0.0
    for i, seg in enumerate(_SEGMENTS):
        o = kin[seg]
        try:
            x, y, z = (float(o[k]) for k in ("x", "y", "z"))
            rpy = [float(o[k]) for k in ("roll", "pitch", "yaw")]
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"kinematics segment {seg!r} needs numeric x, y, z, roll, pitch, yaw") from exc
        R = rpy_to_matrix(rpy)  # URDF rpy: R = Rz(yaw) Ry(pitch) Rx(roll)
        al = np.arctan2(-R[1, 2], R[2, 2])
        t = np.arctan2(-R[0, 1], R[0, 0])
        dd = -np.sin(al) * y + np.cos(al) * z
        # reconstruct and measure what D-H cannot express
        ca, sa, ct, st = np.cos(al), np.sin(al), np.cos(t), np.sin(t)
        R_dh = np.array([[ct, -st, 0], [ca * st, ca * ct, -sa], [sa * st, sa * ct, ca]])
        p_dh = np.array([x, -sa * dd, ca * dd])
        err = max(np.abs(R - R_dh).max(), np.abs(np.array([x, y, z]) - p_dh).max())
        if i == 0:
            err = max(err, abs(x), abs(al))  # base -> shoulder: only d1 and theta_offset1
        else:
            a[i - 1], alpha[i - 1] = x, al
        worst = max(worst, err)
        d[i], th[i] = dd, t
    if worst > 1e-6:
        raise ConfigError(
            f"kinematics {name!r} is not D-H-consistent (residual {worst:.2e}): a full calibration cannot be "
            "expressed as a, d, alpha, theta offsets. Give the controller's D-H calibration instead "
            "(`base: ur5` plus delta_a, delta_d, delta_alpha, delta_theta)."
        )
    # the files round pi/2 to ~10 digits: snap angles within 1e-8 rad of a multiple of pi/2 and
    # lengths below 1e-9 m, so a nominal file gives the exact nominal table (pure closed-form IK)
    def snap_angle(x: float) -> float:
        k = round(x / _HALF_PI)
        return k * _HALF_PI if abs(x - k * _HALF_PI) < 1e-8 else x

    alpha = [snap_angle(x) for x in alpha]
    th = [snap_angle(x) if abs(x) < 1e-8 else x for x in th]
    a = [0.0 if abs(x) < 1e-9 else x for x in a]
    d = [0.0 if abs(x) < 1e-9 else x for x in d]
    return DHParams(a=tuple(a), d=tuple(d), alpha=tuple(alpha), theta_offset=tuple(th), name=name,
                    limits=limits or JointLimits())


def _ur(name: str, a2: float, a3: float, d1: float, d4: float, d5: float, d6: float, **kw) -> DHParams:
    return DHParams(a=(0.0, a2, a3, 0.0, 0.0, 0.0), d=(d1, 0.0, 0.0, d4, d5, d6), name=name, **kw)


_LIMITS_UR10 = JointLimits(velocity=(2.16, 2.16, 3.15, 3.2, 3.2, 3.2), effort=(330.0, 330.0, 150.0, 54.0, 54.0, 54.0))
_LIMITS_UR3 = JointLimits(velocity=(3.15, 3.15, 3.15, 6.28, 6.28, 6.28), effort=(56.0, 56.0, 28.0, 12.0, 12.0, 12.0))

#: UR's published nominal D-H parameters (metres); limits as in ur_description (elbow +/- pi).
PRESETS: dict[str, DHParams] = {
    "ur5": _ur("ur5", -0.425, -0.39225, 0.089159, 0.10915, 0.09465, 0.0823),
    "ur5e": _ur("ur5e", -0.425, -0.3922, 0.1625, 0.1333, 0.0997, 0.0996),
    "ur3": _ur("ur3", -0.24365, -0.21325, 0.1519, 0.11235, 0.08535, 0.0819, limits=_LIMITS_UR3),
    "ur3e": _ur("ur3e", -0.24355, -0.2132, 0.15185, 0.13105, 0.08535, 0.0921, limits=_LIMITS_UR3),
    "ur10": _ur("ur10", -0.612, -0.5723, 0.1273, 0.163941, 0.1157, 0.0922, limits=_LIMITS_UR10),
    "ur10e": _ur("ur10e", -0.6127, -0.57155, 0.1807, 0.17415, 0.11985, 0.11655, limits=_LIMITS_UR10),
}


def preset(name: str) -> DHParams:
    """Nominal parameters by model name (case-insensitive): ur3, ur3e, ur5, ur5e, ur10, ur10e."""
    key = name.lower().replace("-", "")
    if key not in PRESETS:
        raise ConfigError(f"unknown UR model {name!r}; choose one of {', '.join(PRESETS)} or load a D-H table")
    return PRESETS[key]
