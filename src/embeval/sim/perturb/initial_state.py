"""initial_state: the robot starts with each of its six joints offset from the home pose by the level's degrees
(seeded signs; each joint's magnitude drawn within the range). Offsets that would take the TCP outside the
workspace box (or below 10 cm above the table), past a joint limit or into contact are refused: the next of 32
seeded sign patterns is tried, and none fitting is refused in one line."""
from __future__ import annotations

import numpy as np

from embeval.errors import ConfigError, NotApplicableError
from embeval.sim.perturb.axis import Axis, Quantity

OFFSET = Quantity("joint offset", "deg", ((1, 2), (2, 4), (4, 7), (7, 10), (10, 14)))
MIN_TCP_Z = 0.10  # m above the table
_TRIES = 32


def home_joints(scene) -> np.ndarray:
    """The joints (rad) the workcell starts at for ``scene`` (its home TCP pose, the IK branch near home)."""
    from embeval.kinematics import UR5, gripper_tcp
    from embeval.kinematics.transforms import pose_to_matrix
    from embeval.sim.workcell import Q_NEAR_HOME

    q = UR5(tool=gripper_tcp()).ik_closest(pose_to_matrix(scene.home_tcp), Q_NEAR_HOME, frame="base")
    if q is None:
        raise ConfigError(f"initial_state: scene {scene.name!r} home_tcp is not reachable")
    return q


def _fits(q: np.ndarray, limits) -> bool:
    from embeval.kinematics import UR5, gripper_tcp
    from embeval.robot.safety import check_command, check_joint_limits

    tcp = UR5(tool=gripper_tcp()).fk(q, frame="base")[:3, 3]
    return (tcp[2] >= MIN_TCP_Z and not check_command(limits, tcp_target=tcp).stopped
            and not check_joint_limits(q, limits).stopped)


def sample(rng, level, scene, task):
    from embeval.robot.safety import SafetyLimits

    u = rng.uniform(size=6)
    signs = np.where(rng.uniform(size=(_TRIES, 6)) < 0.5, -1.0, 1.0)
    mags = np.array([OFFSET.magnitude(level, float(v)) for v in u])
    q0, limits = home_joints(scene), SafetyLimits.from_dict(scene.safety)
    for s in signs:
        off = s * mags
        if _fits(q0 + np.radians(off), limits):
            return {"offsets_deg": [round(float(v), 4) for v in off]}
    raise NotApplicableError(f"initial_state:{level}: no seeded joint offset of {OFFSET.describe(level)} keeps the TCP "
                             f"of scene {scene.name!r} in the workspace; the task would not be solvable (use a lower level)")


def apply(cell, params):
    q = cell.q + np.radians(params["offsets_deg"])
    cell.set_robot(q)
    status = cell._contact_status()
    if status.stopped:
        raise NotApplicableError(f"initial_state: offsets {params['offsets_deg']} deg put the arm in contact "
                                 f"({status.reason}); the task would not be solvable (use a lower level)")


def sample_joints(rng, level: int, joints: int) -> dict:
    """The draw for another simulator's arm of ``joints`` joints (LIBERO's and ManiSkill's Panda: 7): each joint's
    magnitude (deg) in the level's range and :data:`_TRIES` seeded sign patterns; the backend applies the first
    pattern that fits its own checks (:func:`choose`) and records ``offsets_deg``."""
    if joints < 1:
        raise ConfigError("initial_state: this backend told the sampler of no arm joints to offset")
    u = rng.uniform(size=joints)
    signs = np.where(rng.uniform(size=(_TRIES, joints)) < 0.5, -1, 1)
    return {"magnitudes_deg": [round(OFFSET.magnitude(level, float(v)), 4) for v in u],
            "sign_patterns": signs.tolist(), "min_tcp_z": MIN_TCP_Z}


def candidates(params) -> list[np.ndarray]:
    """The offsets (deg) of :func:`sample_joints`'s params, one per sign pattern, in the order they are tried."""
    mags = np.asarray(params["magnitudes_deg"], dtype=np.float64)
    return [np.asarray(s, dtype=np.float64) * mags for s in params["sign_patterns"]]


def choose(params, fits, where: str) -> dict:
    """``{"offsets_deg", "pattern"}``: the first of :func:`candidates` for which ``fits(offsets_deg)`` is true (the
    backend's checks: joint limits, the TCP's height, contacts); a one-line :class:`ConfigError` when none does."""
    for k, off in enumerate(candidates(params)):
        if fits(off):
            return {"offsets_deg": [round(float(v), 4) for v in off], "pattern": k}
    level = params.get("level", "?")
    raise NotApplicableError(f"initial_state:{level}: no seeded joint offset of {max(params['magnitudes_deg']):.1f} deg "
                             f"at most keeps the arm of {where} inside its joint limits, clear of contact and its TCP "
                             "high enough; the task would not be solvable (use a lower level)")


AXIS = Axis("initial_state", (OFFSET,), sample, cell=apply, changes="state",
            description="robot starts with each joint offset from home (deg, seeded signs)",
            direction="largest joint offset from the home pose",
            note=lambda p: f"max {max(abs(v) for v in p['offsets_deg']):.1f} deg")
