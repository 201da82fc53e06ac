"""The pybullet UR5 workcell: table, walls, UR5 + 2-finger gripper, objects, cameras, safety.

Headless (``pybullet.DIRECT``), deterministic: :meth:`Workcell.load` rebuilds the whole
simulation from a :class:`~embeval.sim.scene.SceneSpec`, so the same spec and the same commands
give identical poses and images.

The arm is position-controlled kinematically: every physics substep sets the joints on a path
computed with the closed-form IK of :mod:`embeval.kinematics` (Cartesian moves are straight lines
of the TCP, split into <= 1 cm IK segments); objects move under physics (240 Hz by default).
Grasping closes the fingers on the object and then carries it rigidly with the TCP ("attachment
grasp"; drawers follow along their joint axis). With ``mode="kinematic"`` no physics step runs
(free objects only move when carried; fastest, for rendering and Pick/Place-style tasks).

Safety, checked every substep: any contact of an arm or gripper link with the table or a wall,
and before a move: TCP outside the workspace box, joint limits, unreachable targets. A violation
latches a protective stop (the arm stays where it was); see :mod:`embeval.robot.safety`.

Frames: the world frame is the UR controller frame ``base``; table top z = 0.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embeval.action import as_pose6, gripper_closed
from embeval.errors import ConfigError
from embeval.kinematics.transforms import pose_to_matrix
from embeval.robot.base import SafetyMode, SafetyStatus, as_joints6
from embeval.robot.safety import (
    OK,
    ProtectiveStop,
    SafetyLimits,
    check_command,
    check_joint_limits,
)
from embeval.rotations import Turn, compose, matrix_to_rotvec, quat_to_matrix, slerp
from embeval.sim.objects import PB, Body, build
from embeval.sim.scene import CameraSpec, SceneSpec
from embeval.sim.tasks import ObjectState, WorldState

#: A joint configuration near the elbow-up, wrist-down solutions used for the home pose.
Q_NEAR_HOME = np.array([math.pi, -1.6, 1.6, -1.57, -1.57, -math.pi / 2])

TABLE_X = (-0.35, 1.00)
TABLE_Y = (-0.62, 0.62)


@dataclass
class SimConfig:
    """Simulation settings (seconds, metres)."""

    physics_hz: int = 240
    control_hz: float = 10.0  # one step() of a policy lasts at least 1/control_hz
    tcp_speed: float = 0.5  # m/s, Cartesian moves (a longer delta takes longer)
    mode: str = "physics"  # "physics" | "kinematic"
    obs_width: int = 128  # policy observation size (D455 intrinsics scaled)
    obs_height: int = 96
    obs_cameras: tuple[str, ...] = ("third_person", "wrist")
    render: bool = True  # render observation images in step()/reset()
    gripper_time: float = 0.25  # s to open/close the fingers
    settle_time: float = 0.25  # s of physics after loading a scene
    segment: float = 0.01  # m, Cartesian path resolution for IK
    solver_iterations: int = 20  # pybullet constraint solver iterations per physics step

    def __post_init__(self):
        if self.mode not in ("physics", "kinematic"):
            raise ConfigError(f"SimConfig.mode must be 'physics' or 'kinematic', got {self.mode!r}")
        if self.physics_hz < 30 or self.control_hz <= 0:
            raise ConfigError("physics_hz must be >= 30 and control_hz > 0")


def intrinsics_projection(cam: CameraSpec) -> list[float]:
    """OpenGL projection matrix (column-major, pybullet layout) from pinhole intrinsics."""
    w, h = cam.width, cam.height
    cx = w / 2 if cam.cx is None else cam.cx
    cy = h / 2 if cam.cy is None else cam.cy
    n, f = cam.near, cam.far
    P = np.array([
        [2 * cam.fx / w, 0.0, 1.0 - 2.0 * cx / w, 0.0],
        [0.0, 2 * cam.fy / h, 2.0 * cy / h - 1.0, 0.0],
        [0.0, 0.0, -(f + n) / (f - n), -2.0 * f * n / (f - n)],
        [0.0, 0.0, -1.0, 0.0],
    ])
    return P.T.reshape(-1).tolist()


@dataclass
class _Grasp:
    body: Body
    rel_pos: tuple  # object pose in the TCP frame at grasp time (rigid carry)
    rel_orn: tuple
    tcp0: np.ndarray  # TCP position at grasp (articulated objects)
    joint0: float = 0.0
    axis_world: np.ndarray = field(default_factory=lambda: np.zeros(3))
    revolute: bool = False
    R0: np.ndarray = field(default_factory=lambda: np.eye(3))  # TCP rotation at grasp (revolute joints)


class Workcell:
    """One simulated cell (its own pybullet client). Use as a context manager or call :meth:`close`."""

    def __init__(self, config: SimConfig | None = None, limits: SafetyLimits | None = None):
        import pybullet as p

        from embeval.kinematics import UR5, gripper_tcp
        from embeval.kinematics.urdf import GRIPPER_STROKE

        self.p = p
        self.config = config or SimConfig()
        self.client = p.connect(p.DIRECT)
        self.pb = PB(p, self.client)
        self.kin = UR5(tool=gripper_tcp())
        self.stroke = GRIPPER_STROKE
        self._base_limits = limits
        self.limits = limits or SafetyLimits()
        self.safety = ProtectiveStop()
        self.scene: SceneSpec | None = None
        self.bodies: dict[str, Body] = {}
        self.q = Q_NEAR_HOME.copy()
        self.gripper = 1.0
        self.grasp: _Grasp | None = None
        self.ever_grasped: set[str] = set()
        self.time = 0.0
        self.steps = 0  # physics substeps since load
        self._joint_extremes: dict[str, list[float]] = {}
        self._fk_cache: tuple = (None, None, None)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Workcell:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.client is not None and self.p.isConnected(self.client):
            self.p.disconnect(self.client)
        self.client = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def load(self, scene: SceneSpec) -> None:
        """Rebuild the simulation from ``scene``: table, walls, robot at home, objects; settle."""
        from embeval.kinematics.urdf import urdf_path

        p, c = self.p, self.client
        p.resetSimulation(physicsClientId=c)
        self.pb.clear()
        p.setGravity(0, 0, -9.81, physicsClientId=c)
        p.setPhysicsEngineParameter(fixedTimeStep=1.0 / self.config.physics_hz, numSolverIterations=self.config.solver_iterations,
                                    deterministicOverlappingPairs=1, physicsClientId=c)
        self.scene = scene
        self.limits = self._base_limits or SafetyLimits.from_dict(scene.safety)
        self.safety = ProtectiveStop()
        self.grasp, self.ever_grasped, self.time, self.steps = None, set(), 0.0, 0
        self._joint_extremes = {}
        self._build_static(scene)
        self.robot = p.loadURDF(str(urdf_path("ur5_gripper")), [0, 0, 0], p.getQuaternionFromEuler([0, 0, math.pi]),
                                useFixedBase=True, physicsClientId=c)
        names = {p.getJointInfo(self.robot, j, physicsClientId=c)[1].decode(): j for j in range(p.getNumJoints(self.robot, physicsClientId=c))}
        links = {p.getJointInfo(self.robot, j, physicsClientId=c)[12].decode(): j for j in range(p.getNumJoints(self.robot, physicsClientId=c))}
        from embeval.robot.base import JOINT_NAMES

        self.arm_joints = [names[n] for n in JOINT_NAMES]
        self.finger_joints = [names["left_finger_joint"], names["right_finger_joint"]]
        self.tcp_link = links["tcp"]
        self._all_joints = self.arm_joints + self.finger_joints
        self.link_names = {j: n for n, j in links.items()}
        self.link_names[-1] = "base_link"
        for j in range(p.getNumJoints(self.robot, physicsClientId=c)):  # no motors: joints are set kinematically
            p.setJointMotorControl2(self.robot, j, p.VELOCITY_CONTROL, force=0, physicsClientId=c)
        for j in self.finger_joints:
            p.changeDynamics(self.robot, j, lateralFriction=1.5, physicsClientId=c)
        home = self.kin.ik_closest(pose_to_matrix(scene.home_tcp), Q_NEAR_HOME, frame="base")
        if home is None:
            raise ConfigError(f"scene home_tcp {list(scene.home_tcp)} is not reachable by the UR5; move it closer to the base")
        self.q = home
        self.gripper = float(scene.gripper_open)
        self._set_robot(self.q, self.gripper)
        self.bodies = {}
        for spec in scene.objects:
            b = build(self.pb, spec)
            self.bodies[spec.name] = b
            if b.joint >= 0:
                if spec.kind == "button":  # spring-loaded cap
                    p.setJointMotorControl2(b.body_id, b.joint, p.POSITION_CONTROL, targetPosition=0.0, force=6.0,
                                            positionGain=0.3, physicsClientId=c)
                else:  # friction: stays where it is unless pushed/pulled
                    p.setJointMotorControl2(b.body_id, b.joint, p.VELOCITY_CONTROL, targetVelocity=0.0, force=3.0,
                                            physicsClientId=c)
                self._joint_extremes[spec.name] = [0.0, 0.0]
        if self.config.mode == "physics":
            for _ in range(int(self.config.settle_time * self.config.physics_hz)):
                self._set_robot(self.q, self.gripper)
                p.stepSimulation(physicsClientId=c)
            self._set_robot(self.q, self.gripper)
        self.time, self.steps = 0.0, 0
        status = self._contact_status()
        if status.stopped:
            raise ConfigError(f"scene {scene.name!r}: the robot at home is in contact ({status.reason}); move home_tcp")

    def _build_static(self, scene: SceneSpec) -> None:
        p, c = self.p, self.client
        self.table = self._box([TABLE_X[0], TABLE_Y[0], -0.04], [TABLE_X[1], TABLE_Y[1], 0.0], scene.table_color)
        if scene.table_texture:
            p.changeVisualShape(self.table, -1, textureUniqueId=self.pb.texture(scene.table_texture), physicsClientId=c)
        self.floor = self._box([-2.0, -2.0, -0.80], [3.0, 3.0, -0.76], scene.floor_color, collide=False)
        self.walls: list[int] = []
        if scene.walls:
            bx, sy = scene.wall_back_x, scene.wall_side_y
            self.walls.append(self._box([bx, min(sy, TABLE_Y[0]) - 0.04, -0.04], [bx + 0.04, TABLE_Y[1], 0.70], scene.wall_color))
            self.walls.append(self._box([TABLE_X[0], sy - 0.04, -0.04], [bx, sy, 0.70], scene.wall_color))
        self.body_names = {self.table: "table", **{w: f"wall{i}" for i, w in enumerate(self.walls)}}

    def _box(self, lo, hi, rgba, collide: bool = True) -> int:
        p, c = self.p, self.client
        lo, hi = np.asarray(lo, float), np.asarray(hi, float)
        half = ((hi - lo) / 2).tolist()
        col = p.createCollisionShape(p.GEOM_BOX, halfExtents=half, physicsClientId=c) if collide else -1
        vis = p.createVisualShape(p.GEOM_BOX, halfExtents=half, rgbaColor=list(rgba), physicsClientId=c)
        bid = p.createMultiBody(0, col, vis, ((hi + lo) / 2).tolist(), physicsClientId=c)
        if collide:
            p.changeDynamics(bid, -1, lateralFriction=0.6, physicsClientId=c)
        return bid

    # ------------------------------------------------------------------ state
    def tcp_matrix(self, q: np.ndarray | None = None) -> np.ndarray:
        """4x4 TCP pose in frame base for joints ``q`` (default: the current joints)."""
        if q is not None:
            return self.kin.fk(q, frame="base")
        key = self.q.tobytes()
        if self._fk_cache[0] != key:
            T = self.kin.fk(self.q, frame="base")
            self._fk_cache = (key, T, np.concatenate([T[:3, 3], matrix_to_rotvec(T[:3, :3])]))
        return self._fk_cache[1].copy()

    def tcp_pose(self) -> np.ndarray:
        """``[x, y, z, rx, ry, rz]`` of the TCP in frame base (from the commanded joints)."""
        self.tcp_matrix()
        return self._fk_cache[2].copy()

    def status(self) -> SafetyStatus:
        return self.safety.status

    def object_pose(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(position (3,), quaternion xyzw (4,)) of an object's base in frame base."""
        b = self._body(name)
        pos, orn = self.p.getBasePositionAndOrientation(b.body_id, physicsClientId=self.client)
        return np.array(pos), np.array(orn)

    def has_object(self, name: str) -> bool:
        """Whether the loaded scene has an object ``name``."""
        return name in self.bodies

    def set_object_pose(self, name: str, position: Sequence[float], quaternion: Sequence[float] = (0, 0, 0, 1)) -> None:
        """Place object ``name``'s base (m, frame base; quaternion xyzw), at rest, without physics."""
        b = self._body(name)
        self.p.resetBasePositionAndOrientation(b.body_id, [float(v) for v in position], [float(v) for v in quaternion],
                                               physicsClientId=self.client)

    def set_robot(self, q: Sequence[float], gripper: float | None = None) -> None:
        """Set the arm's joints (rad, UR order) and gripper opening (0..1, None: unchanged) kinematically, at rest
        (no motion, no contact check: a render-only copy following another arm)."""
        self.q = np.asarray(q, dtype=np.float64).reshape(6)
        if gripper is not None:
            self.gripper = float(np.clip(gripper, 0.0, 1.0))
        self._set_robot(self.q, self.gripper)

    def _body(self, name: str) -> Body:
        try:
            return self.bodies[name]
        except KeyError:
            raise ConfigError(f"no object {name!r} in the workcell; objects: {sorted(self.bodies)}") from None

    def joint_value(self, name: str) -> float | None:
        b = self._body(name)
        if b.joint < 0:
            return None
        return float(self.p.getJointState(b.body_id, b.joint, physicsClientId=self.client)[0])

    def grasp_point(self, name: str) -> np.ndarray:
        """World position of the point the gripper should grasp / touch on an object."""
        b = self._body(name)
        if b.grasp_link >= 0:
            st = self.p.getLinkState(b.body_id, b.grasp_link, computeForwardKinematics=True, physicsClientId=self.client)
            R = quat_to_matrix(st[5])
            return np.array(st[4]) + R @ np.asarray(b.grasp_offset)
        return self.object_pose(name)[0]

    def world_state(self) -> WorldState:
        objs = {}
        for name, b in self.bodies.items():
            pos, orn = self.object_pose(name)
            if b.kind == "marker":
                bottom = 0.0
            else:
                bottom = float(pos[2] - b.height / 2) if b.joint < 0 else float(b.spec.z if b.spec else 0.0)
                if b.joint < 0:  # account for tilt: lowest AABB point
                    aabb = self.p.getAABB(b.body_id, -1, physicsClientId=self.client)
                    bottom = float(aabb[0][2])
            j = self.joint_value(name)
            ext = self._joint_extremes.get(name)
            objs[name] = ObjectState(pos, orn, bottom, j, None if ext is None else ext[0], None if ext is None else ext[1])
        return WorldState(objs, self.tcp_pose(), self.gripper, self.grasp.body.name if self.grasp else None,
                          frozenset(self.ever_grasped), self.safety.status.stopped)

    # ------------------------------------------------------------------ low level
    def _set_robot(self, q: np.ndarray, gripper: float, qd: np.ndarray | None = None) -> None:
        f = float(np.clip(gripper, 0.0, 1.0)) * self.stroke
        qd = np.zeros(6) if qd is None else qd
        self.p.resetJointStatesMultiDof(
            self.robot, self._all_joints, [[float(v)] for v in q] + [[f], [f]],
            targetVelocities=[[float(v)] for v in qd] + [[0.0], [0.0]], physicsClientId=self.client,
        )

    def _contact_status(self) -> SafetyStatus:
        """Protective stop when any arm/gripper link (not the base) touches the table or a wall."""
        p, c = self.p, self.client
        if self.config.mode == "kinematic":
            p.performCollisionDetection(physicsClientId=c)
        for env in (self.table, *self.walls):
            for cp in p.getContactPoints(bodyA=self.robot, bodyB=env, physicsClientId=c):
                link = cp[3]
                if link <= 0:  # base_link / base sit on the table
                    continue
                if cp[8] > 0.0005:
                    continue
                return SafetyStatus(SafetyMode.PROTECTIVE_STOP,
                                    f"contact: {self.link_names.get(link, link)} with {self.body_names.get(env, env)}")
        return OK

    def _carry(self, dt: float) -> None:
        """Move the grasped object with the TCP (rigid carry / along a drawer's axis)."""
        g = self.grasp
        if g is None:
            return
        p, c = self.p, self.client
        b = g.body
        if b.joint >= 0:
            lo, hi = b.joint_range
            T = self.tcp_matrix()
            if g.revolute:  # the TCP's rotation since the grasp, about the joint axis
                s = float(np.dot(matrix_to_rotvec(T[:3, :3] @ g.R0.T), g.axis_world))
            else:  # the TCP's translation since the grasp, along the joint axis
                s = float(np.dot(T[:3, 3] - g.tcp0, g.axis_world))
            p.resetJointState(b.body_id, b.joint, float(np.clip(g.joint0 + s, lo, hi)), physicsClientId=c)
        else:
            st = p.getLinkState(self.robot, self.tcp_link, computeForwardKinematics=True, physicsClientId=c)
            pos, orn = p.multiplyTransforms(st[4], st[5], g.rel_pos, g.rel_orn, physicsClientId=c)
            p.resetBasePositionAndOrientation(b.body_id, pos, orn, physicsClientId=c)
            p.resetBaseVelocity(b.body_id, [0, 0, 0], [0, 0, 0], physicsClientId=c)

    def _substep(self, q: np.ndarray, gripper: float, qd: np.ndarray | None = None) -> SafetyStatus:
        self.q = q
        self._set_robot(q, gripper, qd)
        self._carry(1.0 / self.config.physics_hz)
        if self.config.mode == "physics":
            self.p.stepSimulation(physicsClientId=self.client)
        self.time += 1.0 / self.config.physics_hz
        self.steps += 1
        for name, ext in self._joint_extremes.items():
            v = self.joint_value(name)
            ext[0], ext[1] = min(ext[0], v), max(ext[1], v)
        st = self._contact_status()
        if st.stopped:
            self.safety.trip(st)
        return self.safety.status

    def idle(self, seconds: float) -> SafetyStatus:
        """Let physics run with the arm holding still."""
        n = max(1, round(seconds * self.config.physics_hz))
        for _ in range(n):
            if self._substep(self.q, self.gripper).stopped:
                break
        return self.safety.status

    # ------------------------------------------------------------------ motion
    def cartesian_path(self, target: Sequence[float]) -> tuple[list[np.ndarray], SafetyStatus]:
        """Joint waypoints of a straight TCP line from the current pose to ``target`` (<= segment m apart)."""
        target = as_pose6(target, "target TCP pose")
        start = self.tcp_pose()
        dist = float(np.linalg.norm(target[:3] - start[:3]))
        r0, r1 = Turn.rotvec(start[3:]), Turn.rotvec(target[3:])
        ang = float(compose(r1, r0.inv(), to="angle"))
        n = max(1, math.ceil(max(dist / self.config.segment, ang / 0.1)))
        turns = slerp(r0, r1, [i / n for i in range(1, n + 1)])
        qs, q = [], self.q
        for i in range(1, n + 1):
            s = i / n
            T = np.eye(4)
            T[:3, :3] = turns[i - 1]
            T[:3, 3] = start[:3] + s * (target[:3] - start[:3])
            qn = self.kin.ik_closest(T, q, frame="base")
            if qn is None:
                return qs, SafetyStatus(SafetyMode.PROTECTIVE_STOP, f"unreachable: no IK solution at TCP {np.round(T[:3, 3], 3).tolist()}")
            if np.max(np.abs(qn - q)) > 0.8:
                return qs, SafetyStatus(SafetyMode.PROTECTIVE_STOP, "singularity: joint jump of "
                                        f"{np.max(np.abs(qn - q)):.2f} rad on a {self.config.segment * 100:.0f} cm segment")
            qs.append(qn)
            q = qn
        return qs, OK

    def _run_path(self, qs: list[np.ndarray], duration: float, gripper: float) -> SafetyStatus:
        if not qs:
            return self.idle(duration)
        path = np.vstack([self.q[None], np.asarray(qs)])
        seglen = np.max(np.abs(np.diff(path, axis=0)), axis=1)
        vmax = np.array(self.limits.max_joint_speed) * 0.9
        duration = max(duration, float(np.max(np.sum(np.abs(np.diff(path, axis=0)), axis=0) / vmax)))
        n = max(1, math.ceil(duration * self.config.physics_hz))
        cum = np.concatenate([[0.0], np.cumsum(np.maximum(seglen, 1e-12))])
        cum /= cum[-1]
        dt = 1.0 / self.config.physics_hz
        prev = self.q
        for k in range(1, n + 1):
            s = k / n
            i = min(int(np.searchsorted(cum, s, side="right")) - 1, len(path) - 2)
            w = (s - cum[i]) / max(cum[i + 1] - cum[i], 1e-12)
            q = path[i] + min(max(w, 0.0), 1.0) * (path[i + 1] - path[i])
            if self._substep(q, gripper, (q - prev) / dt).stopped:
                break
            prev = q
        self._set_robot(self.q, gripper)  # zero joint velocities at rest
        return self.safety.status

    def move_tcp(self, target: Sequence[float], speed: float | None = None, min_duration: float = 0.0) -> SafetyStatus:
        """Straight-line TCP move to ``target`` ``[x,y,z,rx,ry,rz]`` (frame base) at ``speed`` m/s."""
        self.safety.require_ok()
        target = as_pose6(target, "target TCP pose")
        pre = check_command(self.limits, tcp_target=target[:3])
        if pre.stopped:
            return self.safety.trip(pre)
        qs, st = self.cartesian_path(target)
        if st.stopped:
            return self.safety.trip(st)
        if (s := check_joint_limits(qs[-1], self.limits)).stopped:
            return self.safety.trip(s)
        dist = float(np.linalg.norm(target[:3] - self.tcp_pose()[:3]))
        v = speed or self.config.tcp_speed
        return self._run_path(qs, max(min_duration, dist / v), self.gripper)

    def move_joints(self, q: Sequence[float], speed: float | None = None) -> SafetyStatus:
        """Joint-space move (linear in joints) to ``q`` (rad) at ``speed`` rad/s on the farthest joint."""
        self.safety.require_ok()
        q = as_joints6(q)
        if (s := check_joint_limits(q, self.limits)).stopped:
            return self.safety.trip(s)
        T = self.tcp_matrix(q)
        if (s := check_command(self.limits, tcp_target=T[:3, 3])).stopped:
            return self.safety.trip(s)
        v = speed or self.limits.default_joint_speed
        dur = float(np.max(np.abs(q - self.q))) / v
        n = max(1, math.ceil(dur / 0.05))
        qs = [self.q + (q - self.q) * (i / n) for i in range(1, n + 1)]
        return self._run_path(qs, dur, self.gripper)

    def set_gripper(self, opening: float) -> SafetyStatus:
        """Open (1) / close (0) the fingers; closing on an object between the fingers grasps it."""
        self.safety.require_ok()
        g = float(np.clip(opening, 0.0, 1.0))
        closing = gripper_closed(g) and not gripper_closed(self.gripper)
        opening_now = not gripper_closed(g) and gripper_closed(self.gripper)
        if opening_now and self.grasp is not None:
            self.grasp = None
        target = g
        if closing and self.grasp is None:
            hit = self._graspable()
            if hit is not None:
                body, width = hit
                target = max(g, min(1.0, width / (2 * self.stroke)))
                self._attach(body)
        n = max(1, round(self.config.gripper_time * self.config.physics_hz))
        g0 = self.gripper
        for k in range(1, n + 1):
            self.gripper = g0 + (target - g0) * k / n
            if self._substep(self.q, self.gripper).stopped:
                break
        return self.safety.status

    def _graspable(self) -> tuple[Body, float] | None:
        """The object whose grasp point lies between the open fingers: (body, width across the fingers)."""
        T = self.tcp_matrix()
        R, t = T[:3, :3], T[:3, 3]
        best = None
        for b in self.bodies.values():
            if b.kind in ("marker",) or (b.spec is not None and b.spec.fixed and b.joint < 0):
                continue
            if b.kind == "button":
                continue
            local = R.T @ (self.grasp_point(b.name) - t)
            if b.joint >= 0:
                half_w, reach = 0.012, 0.03
            else:
                aabb = self.p.getAABB(b.body_id, -1, physicsClientId=self.client)
                reach = max(0.5 * float(aabb[1][2] - aabb[0][2]), 0.01) + 0.01
                half_w = 0.5 * self._width_along(b, R[:, 1], aabb)
            if half_w * 2 > 2 * self.stroke + 1e-3:
                continue  # wider than the open gripper
            if abs(local[0]) <= 0.02 and abs(local[1]) <= 0.03 and abs(local[2]) <= reach:
                d = float(np.linalg.norm(local))
                if best is None or d < best[0]:
                    best = (d, b, 2 * half_w)
        return None if best is None else (best[1], best[2])

    def _width_along(self, b: Body, axis: np.ndarray, aabb) -> float:
        """Extent (m) of an object along a world direction: oriented box / cylinder diameter / AABB fallback."""
        size = b.spec.size if b.spec is not None else ()
        if b.kind in ("box", "card", "peg") and len(size) == 3:
            Ro = quat_to_matrix(self.object_pose(b.name)[1])
            return float(np.sum(np.abs(Ro.T @ axis) * np.asarray(size)))
        if b.kind in ("cylinder", "plate", "bowl", "cup") and size:
            return 2.0 * float(size[0])
        ext = np.array(aabb[1]) - np.array(aabb[0])
        return float(ext @ np.abs(axis))

    def _attach(self, b: Body) -> None:
        p, c = self.p, self.client
        T = self.tcp_matrix()
        pos, orn = self.object_pose(b.name)
        st = p.getLinkState(self.robot, self.tcp_link, computeForwardKinematics=True, physicsClientId=c)
        ipos, iorn = p.invertTransform(st[4], st[5], physicsClientId=c)
        rel_pos, rel_orn = p.multiplyTransforms(ipos, iorn, pos.tolist(), orn.tolist(), physicsClientId=c)
        g = _Grasp(b, rel_pos, rel_orn, T[:3, 3].copy())
        if b.joint >= 0:
            info = self.p.getJointInfo(b.body_id, b.joint, physicsClientId=self.client)
            axis_local = np.array(info[13])
            g.axis_world = quat_to_matrix(orn) @ axis_local
            g.joint0 = self.joint_value(b.name) or 0.0
            g.revolute = info[2] == p.JOINT_REVOLUTE
            g.R0 = T[:3, :3].copy()
        self.grasp = g
        self.ever_grasped.add(b.name)

    def reset_safety(self) -> SafetyStatus:
        return self.safety.reset()

    # ------------------------------------------------------------------ rendering
    def camera_view(self, cam: CameraSpec) -> list[float]:
        if cam.mount == "world":
            return self.p.computeViewMatrix(cam.position, cam.target, cam.up, physicsClientId=self.client)
        T = self.tcp_matrix()
        R, t = T[:3, :3], T[:3, 3]
        eye = t + R @ np.asarray(cam.position)
        target = t + R @ np.asarray(cam.target)
        up = R @ np.asarray(cam.up)
        return self.p.computeViewMatrix(eye.tolist(), target.tolist(), up.tolist(), physicsClientId=self.client)

    def render(self, camera: str | CameraSpec, width: int | None = None, height: int | None = None) -> np.ndarray:
        """RGB uint8 (H, W, 3) image of a scene camera (optionally at another resolution)."""
        if self.scene is None:
            raise ConfigError("load a scene before rendering: Workcell.load(scene)")
        cam = self.scene.camera(camera) if isinstance(camera, str) else camera
        if width or height:
            cam = cam.scaled(width or cam.width, height or cam.height)
        L = self.scene.lighting
        _, _, px, _, _ = self.p.getCameraImage(
            cam.width, cam.height, self.camera_view(cam), intrinsics_projection(cam), renderer=self.p.ER_TINY_RENDERER,
            lightDirection=list(L.direction), lightColor=list(L.color), lightAmbientCoeff=L.ambient,
            lightDiffuseCoeff=L.diffuse, lightSpecularCoeff=L.specular, shadow=int(L.shadow),
            flags=self.p.ER_NO_SEGMENTATION_MASK, physicsClientId=self.client,
        )
        return np.ascontiguousarray(np.asarray(px, dtype=np.uint8).reshape(cam.height, cam.width, 4)[:, :, :3])


def cell_verdict(cell: Workcell, task, scene: SceneSpec | None, source: str = "sim") -> dict[str, Any]:
    """The task's success predicate (a :class:`~embeval.sim.tasks.TaskSpec`) on ``cell``'s state: ``{"success", "success_source", "detail"}``.

    False after a protective stop (as :meth:`embeval.sim.env.SimEnv.success`); ``success`` None when the
    verb has no predicate."""
    if not task.implemented:
        return {"success": None, "success_source": "none", "detail": f"task {task.verb} has no success predicate"}
    if cell.safety.status.stopped:
        return {"success": False, "success_source": source, "detail": f"stopped: {cell.safety.status.reason}"}
    ok = bool(task.success(cell.world_state(), scene))
    return {"success": ok, "success_source": source, "detail": f"{task.verb} {task.target}: {'achieved' if ok else 'not achieved'}"}


def grasp_cube(cell) -> None:
    """The Act2Answer grasped start on a pybullet :class:`Workcell` (scene loaded): the cube put at
    the TCP and the gripper closed on it. A ConfigError when the gripper does not take it (the cube wider
    than the open fingers)."""
    cell.set_object_pose("cube", cell.tcp_pose()[:3])
    cell.set_gripper(0.0)
    if cell.grasp is None or cell.grasp.body.name != "cube":
        raise ConfigError("episode spec start 'grasped': the gripper could not close on the cube (cube_size wider "
                          "than the open fingers?); give a smaller cube_size or start: table")
