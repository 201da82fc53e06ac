"""Rotation conversions: the one home for quaternions, rotation vectors, Euler angles and matrices.

Conventions (docs/kinematics.md, Frames and conventions):

- radians throughout; matrices rotate column vectors (``v_parent = R @ v_child``);
- quaternions are scalar-last ``[x, y, z, w]`` (ROS's and scipy's order); inputs are normalised here
  (a zero quaternion is refused); outputs are canonical: ``w >= 0`` (for ``w == 0`` the first non-zero of
  x, y, z is positive), so ``q`` and ``-q`` (the same rotation) give the same output;
- rotation vectors are axis * angle; outputs have the angle in [0, pi] (UR's convention);
- ``rpy`` = (roll, pitch, yaw) about the fixed x, y, z axes in that order (extrinsic x-y-z):
  ``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)`` (URDF, ROS, and embeval's action deltas); the same as intrinsic
  z-y'-x''. Outputs: roll, yaw in [-pi, pi], pitch in [-pi/2, pi/2];
- other Euler sequences (:func:`euler_to_matrix`): lower-case axes are extrinsic (fixed), upper-case
  intrinsic (moving), e.g. ManiSkill's / pytorch3d's ``"XYZ"`` is ``Rx(a) @ Ry(b) @ Rz(c)``.

Products, rotated vectors and interpolation take :class:`Turn` s (one rotation, or a batch, in any of the
representations above, optionally inverted): :func:`compose` (``a * b``: ``b`` acts first; out as a rotation
vector, quaternion, matrix, Euler angles or the rotation angle), :func:`apply` and :func:`slerp`. Where an
output feeds a recorded number, pass ``canonical=False`` to keep scipy's own quaternion sign.

This is the only module that imports :mod:`scipy.spatial.transform` (tests/core/test_rotations.py holds the tree to
it). Every function takes one item or a batch (leading axes) and is computed by
:class:`scipy.spatial.transform.Rotation` with the same arithmetic as the direct scipy call, to the bit
(tests/core/test_rotations.py checks each against it), except the two ``*_fast`` ones: one item, no input checks, closed forms 2-12x faster than scipy's per-call overhead
(about 4 vs 50 us for a rotation vector), for per-tick control loops (the UR emulator's 2 ms tick);
tests/core/test_rotations.py holds them equal to scipy within 1e-15.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from embeval.errors import InvalidInputError

if TYPE_CHECKING:
    from scipy.spatial.transform import Rotation


def _scipy_rotation() -> type[Rotation]:
    """scipy's ``Rotation``, imported at first use: ``scipy.spatial`` took ~0.3 s of every command's start."""
    from scipy.spatial.transform import Rotation

    return Rotation

__all__ = [
    "Turn",
    "apply",
    "as_vectors",
    "compose",
    "euler_to_matrix",
    "euler_to_rotvec",
    "matrix_to_euler",
    "matrix_to_quat",
    "matrix_to_rotvec",
    "matrix_to_rotvec_fast",
    "matrix_to_rpy",
    "quat_to_euler",
    "quat_to_matrix",
    "quat_to_rotvec",
    "rotvec_to_euler",
    "rotvec_to_matrix",
    "rotvec_to_matrix_fast",
    "rotvec_to_quat",
    "rpy_to_matrix",
    "slerp",
]


def as_vectors(x, n: int, what: str) -> np.ndarray:
    """``x`` as float64 with last dimension ``n`` and finite values, else :class:`InvalidInputError` naming ``what``."""
    a = np.asarray(x, dtype=np.float64)
    if a.shape[-1:] != (n,):
        raise InvalidInputError(f"{what} must have last dimension {n}, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise InvalidInputError(f"{what} contains NaN or inf: {a}")
    return a


def _as_matrices(R) -> np.ndarray:
    a = np.asarray(R, dtype=np.float64)
    if a.shape[-2:] != (3, 3):
        raise InvalidInputError(f"rotation matrix must have shape (..., 3, 3), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise InvalidInputError(f"rotation matrix contains NaN or inf: {a}")
    return a


def _as_quats(q) -> np.ndarray:
    q = as_vectors(q, 4, "quaternion [x, y, z, w]")
    if np.any(np.linalg.norm(q, axis=-1) < 1e-12):
        raise InvalidInputError("zero quaternion: expected a unit quaternion [x, y, z, w] (scalar last)")
    return q


def _check_seq(seq: str, axes: str = "3") -> str:
    """``seq`` if it is an Euler sequence of ``axes`` axes (a regex count: ``"3"``, ``"1,3"``), else a named error."""
    if (not isinstance(seq, str) or not re.fullmatch(rf"[xyz]{{{axes}}}|[XYZ]{{{axes}}}", seq)
            or any(a == b for a, b in zip(seq, seq[1:]))):
        raise InvalidInputError(f"Euler sequence {seq!r}: use {axes.replace(',', ' to ')} axes, all lower-case (extrinsic) "
                                "or all upper-case (intrinsic), no axis twice in a row, e.g. 'xyz' or 'XYZ'")
    return seq


def _as_angles(angles, seq: str) -> np.ndarray:
    """Euler angles ``(..., len(seq))``; a single-axis sequence also takes a bare number."""
    a = np.asarray(angles, dtype=np.float64)
    if len(seq) == 1 and a.ndim == 0:
        a = a.reshape(1)
    return as_vectors(a, len(seq), f"Euler angles ({seq})")


def rotvec_to_matrix(rv) -> np.ndarray:
    """Rotation vector(s) ``(..., 3)`` (axis * angle, radians) -> rotation matrices ``(..., 3, 3)``."""
    rv = as_vectors(rv, 3, "rotation vector")
    return _scipy_rotation().from_rotvec(rv.reshape(-1, 3)).as_matrix().reshape(rv.shape[:-1] + (3, 3))


def matrix_to_rotvec(R) -> np.ndarray:
    """Rotation matrices ``(..., 3, 3)`` -> rotation vectors ``(..., 3)``, angle in [0, pi]."""
    R = _as_matrices(R)
    return _scipy_rotation().from_matrix(R.reshape(-1, 3, 3)).as_rotvec().reshape(R.shape[:-2] + (3,))


def quat_to_matrix(q) -> np.ndarray:
    """Quaternion(s) ``[x, y, z, w]`` (scalar last; normalised here) -> ``(..., 3, 3)``."""
    q = _as_quats(q)
    return _scipy_rotation().from_quat(q.reshape(-1, 4)).as_matrix().reshape(q.shape[:-1] + (3, 3))


def matrix_to_quat(R, canonical: bool = True) -> np.ndarray:
    """Rotation matrices ``(..., 3, 3)`` -> unit quaternions ``[x, y, z, w]``, canonical (w >= 0); ``canonical=False``:
    the sign scipy's matrix conversion happens to give, for numbers recorded before this module existed."""
    R = _as_matrices(R)
    return _scipy_rotation().from_matrix(R.reshape(-1, 3, 3)).as_quat(canonical=canonical).reshape(R.shape[:-2] + (4,))


def rotvec_to_quat(rv, canonical: bool = True) -> np.ndarray:
    """Rotation vector(s) ``(..., 3)`` -> unit quaternions ``[x, y, z, w]``, canonical (w >= 0); ``canonical=False``:
    scipy's sign (w < 0 for an angle beyond pi), for numbers recorded before this module existed."""
    rv = as_vectors(rv, 3, "rotation vector")
    return _scipy_rotation().from_rotvec(rv.reshape(-1, 3)).as_quat(canonical=canonical).reshape(rv.shape[:-1] + (4,))


def quat_to_rotvec(q) -> np.ndarray:
    """Quaternion(s) ``[x, y, z, w]`` (normalised here; ``q`` and ``-q`` alike) -> rotation vectors, angle in [0, pi]."""
    q = _as_quats(q)
    return _scipy_rotation().from_quat(q.reshape(-1, 4)).as_rotvec().reshape(q.shape[:-1] + (3,))


def euler_to_matrix(angles, seq: str) -> np.ndarray:
    """Euler angles ``(..., len(seq))`` (radians) about the 1 to 3 axes of ``seq`` (lower-case extrinsic,
    upper-case intrinsic; a single axis also takes a bare number) -> ``(..., 3, 3)``."""
    return compose(Turn.euler(seq, angles), to="matrix")


def matrix_to_euler(R, seq: str) -> np.ndarray:
    """Inverse of :func:`euler_to_matrix`: first and last angle in [-pi, pi], the middle one in [-pi/2, pi/2]
    (for sequences like ``xyz``; [0, pi] for ``xyx``-like ones). At gimbal lock scipy sets the third angle to 0
    and warns."""
    seq = _check_seq(seq)
    R = _as_matrices(R)
    return _scipy_rotation().from_matrix(R.reshape(-1, 3, 3)).as_euler(seq).reshape(R.shape[:-2] + (3,))


def rpy_to_matrix(rpy) -> np.ndarray:
    """(roll, pitch, yaw) ``(..., 3)`` -> ``Rz(yaw) @ Ry(pitch) @ Rx(roll)`` (extrinsic x-y-z), ``(..., 3, 3)``."""
    return euler_to_matrix(rpy, "xyz")


def matrix_to_rpy(R) -> np.ndarray:
    """Inverse of :func:`rpy_to_matrix`: (roll, pitch, yaw) in radians, pitch in [-pi/2, pi/2]."""
    return matrix_to_euler(R, "xyz")


def rotvec_to_euler(rv, seq: str) -> np.ndarray:
    """Rotation vector(s) ``(..., 3)`` -> Euler angles ``(..., 3)`` of ``seq`` (ranges as :func:`matrix_to_euler`)."""
    return compose(Turn.rotvec(rv), to=seq)


def quat_to_euler(q, seq: str) -> np.ndarray:
    """Quaternion(s) ``[x, y, z, w]`` (normalised here) -> Euler angles ``(..., 3)`` of ``seq``."""
    return compose(Turn.quat(q), to=seq)


def euler_to_rotvec(angles, seq: str) -> np.ndarray:
    """Euler angles ``(..., len(seq))`` of ``seq`` -> rotation vectors ``(..., 3)``, angle in [0, pi]."""
    return compose(Turn.euler(seq, angles))


# ---------------------------------------------------------------------------------------- products of rotations
def _check_matrices(R) -> tuple[np.ndarray, tuple[int, ...]]:
    R = _as_matrices(R)
    return R.reshape(-1, 3, 3), R.shape[:-2]


def _check_rotvecs(rv) -> tuple[np.ndarray, tuple[int, ...]]:
    rv = as_vectors(rv, 3, "rotation vector")
    return rv.reshape(-1, 3), rv.shape[:-1]


def _check_quats(q) -> tuple[np.ndarray, tuple[int, ...]]:
    q = _as_quats(q)
    return q.reshape(-1, 4), q.shape[:-1]


#: a :class:`Turn`'s kind -> (check: value -> (flat batch, leading shape), the scipy ``Rotation`` constructor's name)
_KINDS: dict[str, tuple[Callable, str]] = {
    "rotvec": (_check_rotvecs, "from_rotvec"),
    "quat": (_check_quats, "from_quat"),
    "matrix": (_check_matrices, "from_matrix"),
}


@dataclass(frozen=True, eq=False)
class Turn:
    """One rotation (or a batch, leading axes) for :func:`compose`, :func:`apply` and :func:`slerp`.

    Build it with :meth:`rotvec` (radians), :meth:`quat` (``[x, y, z, w]``, normalised), :meth:`matrix` or
    :meth:`euler` (1 to 3 axes, radians); :meth:`inv` is its inverse. The value is checked when it is built."""

    kind: str  # "rotvec", "quat", "matrix" or an Euler sequence such as "z", "xyz", "XYZ"
    value: np.ndarray  # the flat batch: (n, 3), (n, 4), (n, 3, 3) or (n, len(seq))
    lead: tuple[int, ...]  # leading shape of the value as given (() for one rotation)
    inverse: bool = False

    @classmethod
    def rotvec(cls, rv) -> "Turn":
        return cls("rotvec", *_check_rotvecs(rv))

    @classmethod
    def quat(cls, q) -> "Turn":
        return cls("quat", *_check_quats(q))

    @classmethod
    def matrix(cls, R) -> "Turn":
        return cls("matrix", *_check_matrices(R))

    @classmethod
    def euler(cls, seq: str, angles) -> "Turn":
        seq = _check_seq(seq, "1,3")
        a = _as_angles(angles, seq)
        return cls(seq, a.reshape(-1, len(seq)), a.shape[:-1])

    def inv(self) -> "Turn":
        """The inverse rotation(s)."""
        return Turn(self.kind, self.value, self.lead, not self.inverse)

    def _scipy(self) -> Rotation:
        R = _scipy_rotation()
        r = R.from_euler(self.kind, self.value) if self.kind not in _KINDS else getattr(R, _KINDS[self.kind][1])(self.value)
        return r.inv() if self.inverse else r


#: :func:`compose`'s ``to`` -> (scipy rotation, canonical) -> the flat batch out, and its trailing shape
_OUTPUTS: dict[str, tuple[Callable[[Rotation, bool], np.ndarray], tuple[int, ...]]] = {
    "rotvec": (lambda r, canonical: r.as_rotvec(), (3,)),
    "quat": (lambda r, canonical: r.as_quat(canonical=canonical), (4,)),
    "matrix": (lambda r, canonical: r.as_matrix(), (3, 3)),
    "angle": (lambda r, canonical: r.magnitude(), ()),
}


def _lead(turns, extra: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The leading shape of a product: every batch the same shape, single rotations broadcast."""
    if not turns or not all(isinstance(t, Turn) for t in turns):
        raise InvalidInputError(f"expected one or more rotations as Turn.rotvec/quat/matrix/euler(...), got {turns!r}")
    leads = {t.lead for t in turns if t.lead} | ({extra} if extra else set())
    if len(leads) > 1:
        raise InvalidInputError(f"rotation batches of different shapes {sorted(leads)}: give batches of one shape "
                                "(or single rotations, which apply to every item)")
    return leads.pop() if leads else ()


def _product(turns) -> Rotation:
    r = turns[0]._scipy()
    for t in turns[1:]:
        r = r * t._scipy()
    return r


def _output(to: str) -> tuple[Callable[[Rotation, bool], np.ndarray], tuple[int, ...]]:
    if to in _OUTPUTS:
        return _OUTPUTS[to]
    if isinstance(to, str) and re.fullmatch(r"[xyz]{3}|[XYZ]{3}", to):
        seq = _check_seq(to)
        return (lambda r, canonical: r.as_euler(seq)), (3,)
    raise InvalidInputError(f"rotation output {to!r}: choose one of {', '.join(_OUTPUTS)} or a 3-axis Euler sequence "
                            "such as 'xyz' or 'XYZ'")


def compose(*turns: Turn, to: str = "rotvec", canonical: bool = True) -> np.ndarray:
    """The product ``turns[0] * turns[1] * ...`` (the last acts first; ``Turn.euler("z", yaw), Turn.euler("x", pi)``
    is ``Rz(yaw) @ Rx(pi)``), as ``to``: ``"rotvec"`` (angle in [0, pi]), ``"quat"`` (canonical unless
    ``canonical=False``), ``"matrix"``, ``"angle"`` (radians in [0, pi]; of ``a * b.inv()``: the angle between
    ``a`` and ``b``) or a 3-axis Euler sequence. Batches keep their leading axes; one rotation applies to every item
    of a batch. Computed by scipy's quaternion products, to the bit what ``Rotation`` s multiplied directly give."""
    convert, tail = _output(to)
    lead = _lead(turns)
    return np.asarray(convert(_product(turns), canonical), dtype=np.float64).reshape(lead + tail)


def apply(turn: Turn, vectors) -> np.ndarray:
    """``vectors`` ``(..., 3)`` rotated by ``turn`` (``R @ v``); a batch of rotations pairs with a batch of vectors of
    the same leading shape, or with one vector."""
    v = as_vectors(vectors, 3, "vector to rotate")
    lead = _lead([turn], v.shape[:-1])
    return _product([turn]).apply(v.reshape(-1, 3)).reshape(lead + (3,))


def slerp(start: Turn, end: Turn, fractions, to: str = "matrix") -> np.ndarray:
    """Spherical linear interpolation from ``start`` (fraction 0) to ``end`` (1), both single rotations, at each of
    ``fractions`` (``(n,)``, in [0, 1]) -> ``(n, ...)`` as ``to`` (see :func:`compose`; the shorter way round)."""
    _lead([start, end])
    if start.lead or end.lead:
        raise InvalidInputError(f"slerp takes single start and end rotations, got batches of {start.lead or end.lead}")
    f = np.asarray(fractions, dtype=np.float64).reshape(-1)
    if not np.all((f >= 0.0) & (f <= 1.0)):
        raise InvalidInputError(f"slerp fractions must lie in [0, 1] (0 = start, 1 = end), got {f}")
    convert, tail = _output(to)
    from scipy.spatial.transform import Slerp

    r = Slerp([0.0, 1.0], _scipy_rotation().concatenate([_product([start]), _product([end])]))(f)
    return np.asarray(convert(r, True), dtype=np.float64).reshape((f.size,) + tail)


def rotvec_to_matrix_fast(rv) -> np.ndarray:
    """One rotation vector (3,) -> (3, 3) by Rodrigues' formula; no input checks (see the module docstring)."""
    rv = np.asarray(rv, float)
    th = math.sqrt(float(rv @ rv))
    if th < 1e-15:
        return np.eye(3)
    k = rv / th
    K = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(th) * K + (1.0 - math.cos(th)) * (K @ K)


def matrix_to_rotvec_fast(R: np.ndarray) -> np.ndarray:
    """One (3, 3) rotation -> rotation vector (3,), angle in [0, pi], via its quaternion (Shepperd's branch on the
    largest of trace and diagonal: robust at pi); no input checks (see the module docstring)."""
    tr = R[0, 0] + R[1, 1] + R[2, 2]
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        w, x, y, z = 0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s
    elif R[0, 0] >= R[1, 1] and R[0, 0] >= R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        w, x, y, z = (R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s
    elif R[1, 1] >= R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        w, x, y, z = (R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s
    else:
        s = 2.0 * math.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        w, x, y, z = (R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s
    if w < 0:
        w, x, y, z = -w, -x, -y, -z
    n = math.sqrt(x * x + y * y + z * z)
    if n < 1e-15:
        return np.zeros(3)
    angle = 2.0 * math.atan2(n, w)
    return np.array([x, y, z]) * (angle / n)
