"""One Act2Answer episode in the simulated cell: the policy answers by moving the cube.

``run_episode`` resets the cell to the item's scene in one layout (a ``grasped`` start puts the cube in
the closed gripper before the first observation), resets the policy with the instruction, steps it
closed loop (the gripper held closed for the spec's ``hold_steps``) until the spec's termination rule
fires (see :mod:`embeval.act2answer.scene`), lets the cube settle and reads its zone under both rules
(:func:`embeval.act2answer.protocol.answer`). The record keeps the policy's raw actions and the TCP
intent metrics (:class:`~embeval.act2answer.protocol.IntentTracker`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embeval.act2answer.items import BinaryItem
from embeval.act2answer.protocol import IntentTracker, answer, held_action
from embeval.act2answer.scene import EpisodeSpec, build_scene
from embeval.action import gripper_closed
from embeval.errors import EmbevalError, InvalidInputError, MissingFileError
from embeval.registry import Registry
from embeval.scoring.record import EpisodeRecord
from embeval.sim.workcell import grasp_cube  # re-exported: the grasped start lives with the cell


#: an Act2Answer record's fields as written (results files, the ROS scorer's records), in this order
ROW = ("item", "category", "layout", "correct_side", "zone", "choice", "success", "cube_xy", "distance_correct",
       "termination", "end_reason", "stopped", "steps", "subject", "instruction", "seed", "actions", "start", "rule",
       "success_board", "success_disc", "is_answered", "intent")


@dataclass
class Act2AnswerRecord(EpisodeRecord):
    """An Act2Answer episode: the episode record with where the cube ended (metres, frame base). ``success`` is 1.0
    in the correct zone of the spec's ``rule``, else 0.0; ``success_board`` / ``success_disc`` are both rules'
    verdicts, ``is_answered`` the cube on either card under the board rule, ``start`` how the cube started,
    ``intent`` the TCP intent metrics, ``end_reason`` what ended it ("released", "max_steps" or the protective
    stop's reason), ``termination`` the rule in force ("release_after_lift" | "max_steps")."""

    success: float = 0.0
    category: str = ""
    layout: str = ""  # "original" | "swapped"
    correct_side: str = ""  # correct side in this layout
    zone: str = ""  # "correct" | "incorrect" | "out_of_bounds"
    choice: str | None = None  # card side holding the cube, or None
    cube_xy: tuple[float, float] = (0.0, 0.0)
    distance_correct: float = 0.0
    termination: str = ""
    start: str = "table"  # "grasped" | "table"
    rule: str = "disc"  # the rule ``success`` and ``zone`` follow: "board" | "disc"
    success_board: float = 0.0
    success_disc: float = 0.0
    is_answered: bool = False
    intent: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The fields of :data:`ROW`, in that order."""
        d = {k: deepcopy(getattr(self, k)) for k in ROW}
        d["cube_xy"] = list(self.cube_xy)
        return d


def run_episode(env, policy, item: BinaryItem, layout: str, spec: EpisodeSpec | None = None, seed: int = 0,
                keep_actions: bool = True) -> Act2AnswerRecord:
    """Run ``item`` in ``layout`` on ``env`` (:class:`embeval.sim.SimEnv`) with ``policy`` (a Policy); under an
    open episode video (:mod:`embeval.recording.video`) every step's observation is recorded."""
    spec = spec or EpisodeSpec()
    scene, task = build_scene(item, layout, spec)
    obs = env.reset(seed, task, scene)
    cell = env.cell
    z_table = float(cell.object_pose("cube")[0][2])
    if spec.start == "grasped":
        obs = grasp_in_hand(env)
    policy.reset(task.instruction)
    intent = IntentTracker(spec, item.correct_side_in(layout), env.config.control_hz)
    reason, n, actions = closed_loop(
        env, policy, obs, spec, lambda: cell.object_pose("cube")[0][2], keep_actions, intent,
        tcp=lambda: cell.tcp_pose()[:3], holding=lambda: cell.grasp is not None and cell.grasp.body.name == "cube",
        table_z=z_table, gripper=lambda: cell.gripper, stops=True)
    if cell.safety.ok and spec.settle_s > 0:
        cell.idle(spec.settle_s)
    pos, _ = cell.object_pose("cube")
    return episode_result(item.id, item.category, layout, item.correct_side_in(layout), spec, pos, end_reason=reason,
                          stopped=bool(cell.safety.status.stopped), steps=n, subject=str(getattr(policy, "id", "")),
                          instruction=task.instruction, seed=int(seed), actions=actions, intent=intent.metrics())


def held(action, step: int, spec: EpisodeSpec):
    """``action`` (an Action) as executed at policy step ``step`` (0-based): its gripper closed during a grasped
    start's ``spec.hold_steps`` (:func:`~embeval.act2answer.protocol.held_action`), else itself."""
    from embeval.action import Action

    forced = held_action(action.vector, step, spec)
    return action if forced is None else Action(forced)


def grasp_in_hand(env):
    """:func:`grasp_cube` on the cell of ``env`` (a reset :class:`~embeval.sim.SimEnv`); returns the new observation."""
    grasp_cube(env.cell)
    return env.observe()


class Termination:
    """The spec's termination rule, fed the cube height and the gripper after every executed step.

    ``update(cube_z, gripper)`` (metres, frame base; gripper 0..1, 1 = open) returns True when
    ``release_after_lift`` ends the episode: the gripper is open (>= 0.5) after the cube was once
    lifted >= ``spec.lift_m`` above ``cube_z0`` (``lifted``: it starts lifted, the grasped start) and once seen
    closed. The step cap and protective stops are the caller's.
    """

    def __init__(self, spec: EpisodeSpec, cube_z0: float, lifted: bool = False):
        self.spec, self.cube_z0, self.lifted = spec, float(cube_z0), bool(lifted)
        self.closed = False  # the gripper was seen closed (a real cell's grasped start closes at the first action)

    def update(self, cube_z: float, gripper: float) -> bool:
        if float(cube_z) - self.cube_z0 >= self.spec.lift_m:
            self.lifted = True
        self.closed = self.closed or gripper_closed(gripper)
        return self.spec.termination == "release_after_lift" and self.lifted and self.closed and not gripper_closed(gripper)


def closed_loop(env, policy, obs, spec: EpisodeSpec, carried_z: Callable[[], float],
                keep_actions: bool = True, intent: IntentTracker | None = None, tcp=None, holding=None,
                table_z: float | None = None, gripper: Callable[[], float] | None = None,
                stops: bool = False) -> tuple[str, int, list[list[float]]]:
    """Step ``policy`` (already reset) from ``obs`` on ``env`` (:func:`embeval.sim.rollout.rollout`) until the spec's
    :class:`Termination` fires on ``carried_z()`` (m, frame base) and ``gripper()`` (0..1; default ``env.gripper``)
    or ``spec.max_steps`` steps, the gripper held closed for a grasped start's ``spec.hold_steps``; returns
    ``(end_reason, steps, actions)`` (actions rounded to 6 decimals) on every backend. ``intent`` is fed ``tcp()``
    (m, frame base) and ``holding()`` after every step; ``table_z``: the carried object's resting height (default:
    its height now); ``stops``: a step result's protective stop (``stopped``) ends the episode with its reason."""
    from embeval.sim.rollout import rollout

    rule = Termination(spec, float(carried_z()) if table_z is None else float(table_z), lifted=spec.start == "grasped")
    grip = gripper or (lambda: env.gripper)

    def after_step(res) -> str | None:
        if intent is not None:
            intent.update(tcp(), bool(holding()))
        if stops and res.stopped:
            return res.reason or "protective stop"
        return "released" if rule.update(float(carried_z()), grip()) else None

    r = rollout(env, policy, obs, max_steps=spec.max_steps, until_done=False, keep_actions=keep_actions, digits=6,
                execute=lambda a, n: held(a, n, spec), after_step=after_step)
    return r.end_reason, r.steps, r.actions


def episode_result(item_id: str, category: str, layout: str, correct_side: str, spec: EpisodeSpec, cube_xy,
                   **fields: Any) -> Act2AnswerRecord:
    """The :class:`Act2AnswerRecord` of a cube at ``cube_xy`` (m, frame base; ``(x, y)`` or ``(x, y, z)``, a 2-vector
    read as resting on the table) at the episode's end: zone and success under the spec's ``rule``, both rules'
    success and ``is_answered`` (:func:`~embeval.act2answer.protocol.answer`), the spec's start and termination
    rule; ``fields``: end_reason, stopped, steps, subject, instruction, seed, actions, intent."""
    xyz = [float(v) for v in cube_xy[:3]]
    a = answer(xyz, spec, correct_side)
    return Act2AnswerRecord(
        item=item_id, category=category, layout=layout, correct_side=correct_side, zone=a.zone, choice=a.choice,
        success=1.0 if a.zone == "correct" else 0.0, cube_xy=(round(xyz[0], 5), round(xyz[1], 5)),
        distance_correct=round(a.distance_correct, 5), termination=spec.termination, start=spec.start, rule=spec.rule,
        success_board=a.success_board, success_disc=a.success_disc, is_answered=a.is_answered, **fields)


def sim_config(obs_width: int = 128, obs_height: int = 96, mode: str = "physics"):
    """The simulation settings Act2Answer episodes use (observation size matches the tiny VLA's cameras)."""
    from embeval.sim.workcell import SimConfig

    return SimConfig(obs_width=obs_width, obs_height=obs_height, mode=mode)


def obs_size_for(policy, default: tuple[int, int] = (128, 96)) -> tuple[int, int]:
    """(width, height) to render observations at: the policy's own input size when it declares one
    (``policy.cfg.image_size`` [H, W], e.g. the tiny VLA's 64x48), else ``default``. Rendering at the
    input size skips a resize and is about twice as fast as 128x96."""
    size = getattr(getattr(policy, "cfg", None), "image_size", None)
    if isinstance(size, int):
        return (size, size)
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return (int(size[1]), int(size[0]))
    return default


def obs_cameras_for(policy) -> tuple[str, ...] | None:
    """The cameras ``policy`` reads when it declares them (``policy.cfg.cameras``, e.g. the tiny VLA's),
    else None (render every camera of the cell)."""
    cams = getattr(getattr(policy, "cfg", None), "cameras", None)
    return tuple(str(c) for c in cams) if isinstance(cams, (list, tuple)) and cams else None


def render_only(env, cameras: tuple[str, ...] | None) -> None:
    """Render only ``cameras`` in ``env``'s observations when it is the pybullet cell and has them all
    (the other images are never read; a 320x240 render costs ~30 ms per camera and step)."""
    from dataclasses import replace as _replace

    cfg = getattr(env, "config", None)
    have = getattr(cfg, "obs_cameras", None)
    if cameras and have and set(cameras) <= set(have):
        env.config = _replace(cfg, obs_cameras=tuple(c for c in have if c in cameras))


@dataclass(frozen=True)
class Backend:
    """Where Act2Answer episodes run. ``make_env(obs_size)`` builds the simulator ((width, height) of
    the observation images; a backend with ``aliases`` True also takes ``aliases={image key: camera}``,
    each camera image also given under its key); ``run_episode(env, policy, item, layout, spec, seed,
    keep_actions)`` returns an :class:`Act2AnswerRecord` under the same zones and termination rule;
    ``expert(env, spec)`` is the privileged scripted answer (reads the simulator: a control ceiling, never
    a subject); ``close(env)`` frees the env. ``cameras``: the image keys its observations hold (empty:
    not declared, not checked)."""

    name: str
    make_env: Callable[..., Any]
    run_episode: Callable[..., Act2AnswerRecord]
    expert: Callable[[Any, EpisodeSpec], Any]
    description: str = ""
    cameras: tuple[str, ...] = ()
    aliases: bool = False

    def close(self, env) -> None:
        env.close()


def _pybullet_env(obs_size: tuple[int, int]):
    from embeval.sim import SimEnv

    return SimEnv(sim_config(*obs_size))


def _pybullet_expert(env, spec: EpisodeSpec):
    from embeval.act2answer.reference_policies import ExpertPolicy

    return ExpertPolicy(env, "answer", spec)


#: the pybullet UR5 cell (the default)
PYBULLET = Backend("pybullet", _pybullet_env, run_episode, _pybullet_expert, "embeval's pybullet UR5 cell (default)",
                   cameras=tuple(sim_config().obs_cameras))

#: Act2Answer backends by name (``--backend`` of ``embeval act2answer run``, ``params.backend`` of a run spec)
BACKENDS: Registry[Backend] = Registry(
    "act2answer backend", group="embeval.act2answer_backends",
    hint="add one with embeval.act2answer.episode.BACKENDS.register(name, Backend(...))",
    entries={"pybullet": "embeval.act2answer.episode:PYBULLET", "maniskill": "embeval.act2answer.maniskill:BACKEND",
             "maniskill-bridge": "embeval.act2answer.maniskill_bridge:BACKEND",
             "maniskill-bridge-spoon": "embeval.act2answer.maniskill_bridge:BACKEND_SPOON",
             "maniskill-bridge-cube": "embeval.act2answer.maniskill_bridge:BACKEND_CUBE",
             "maniskill-bridge-v4": "embeval.act2answer.maniskill_bridge:BACKEND_V4"})


def get_backend(name: str | Backend) -> Backend:
    """The :class:`Backend` named ``name`` (a ConfigError listing the choices otherwise)."""
    return name if isinstance(name, Backend) else BACKENDS.get(name, "backend")


def check_cameras(policy, backend: str | Backend, aliases: dict[str, str] | None = None) -> None:
    """Before any episode: the cameras ``policy`` declares (:func:`obs_cameras_for`) are among ``backend``'s
    (plus ``aliases`` keys). A one-line :class:`ConfigError` naming the missing ones, the ``--alias`` to pass and
    the backends that have them otherwise (a policy that reads ``third_person`` on ``maniskill``, whose
    camera is ``base_camera``, would fail only at its first step)."""
    from embeval.errors import ConfigError

    be = get_backend(backend)
    aliases = dict(aliases or {})
    if aliases and not be.aliases:
        raise ConfigError(f"--alias: backend {be.name} takes no camera aliases (its cameras: "
                          f"{', '.join(be.cameras) or 'not declared'}); drop --alias")
    bad = [f"{k}={c}" for k, c in aliases.items() if be.cameras and c not in be.cameras]
    if bad:
        raise ConfigError(f"--alias {' '.join(bad)}: backend {be.name} has camera(s) {', '.join(be.cameras)}; "
                          f"write KEY=CAMERA with one of them")
    need = obs_cameras_for(policy)
    if not need or not be.cameras:
        return
    have = set(be.cameras) | set(aliases)
    missing = [c for c in need if c not in have]
    if not missing:
        return
    others = []
    for name in BACKENDS.names():
        try:
            b = BACKENDS.get(name)
        except (EmbevalError, ImportError):  # a backend whose module does not import here is just not listed
            b = None
        if b is not None and b.name != be.name and b.cameras and set(need) <= set(b.cameras):
            others.append(name)
    fix = (f"pass --alias {' --alias '.join(f'{c}={be.cameras[0]}' for c in missing)} (camera aliases)"
           if be.aliases else "this backend takes no aliases")
    where = f", or run it on {' / '.join(others)}" if others else ""
    raise ConfigError(f"policy {getattr(policy, 'id', policy)!s} reads camera(s) {', '.join(missing)}; backend {be.name} "
                      f"gives {', '.join(be.cameras)}: {fix}{where}")


#: ``--policy expert``: the backend's privileged scripted answer (a control ceiling, not a subject)
EXPERT = "expert"


class BackendExpert:
    """Placeholder policy for the backend's privileged expert; :func:`run_items` binds it to its env."""

    id = "expert-answer"

    def __init__(self, spec: EpisodeSpec | None = None):
        self.spec, self.inner = spec or EpisodeSpec(), None

    @property
    def action_spec(self):
        from embeval.action import ActionSpec

        return ActionSpec(frame="base")

    def bind(self, env, backend: Backend) -> None:
        self.inner = backend.expert(env, self.spec)

    def reset(self, instruction: str) -> None:
        if self.inner is None:
            from embeval.errors import ConfigError

            raise ConfigError("the expert policy reads the simulator: run it through run_items (or bind(env, backend))")
        self.inner.reset(instruction)

    def act(self, observation):
        return self.inner.act(observation)


def item_error(exc: Exception, item: BinaryItem, layout: str) -> Exception:
    """``exc`` (an InvalidInputError / MissingFileError of one episode) as the same type naming the item."""
    msg = str(exc) if f"item {item.id!r}" in str(exc) else f"item {item.id!r} ({layout}): {exc}"
    return type(exc)(msg)


def run_items(policy, items: Iterable[BinaryItem], spec: EpisodeSpec | None = None, seed: int = 0,
              layouts: tuple[str, ...] = ("original", "swapped"), env=None, keep_actions: bool = True,
              obs_size: tuple[int, int] | None = None, backend: str | Backend = "pybullet",
              aliases: dict[str, str] | None = None, videos=None) -> Iterator[Act2AnswerRecord]:
    """Every item in every layout (both by default), one :class:`Act2AnswerRecord` each, in order.

    Seeds: episode seed = ``derive_seed(seed, item id, layout)``. Creates (and closes) its own env of
    ``backend`` (a :data:`BACKENDS` name: ``pybullet``, ``maniskill``, ``maniskill-bridge``) unless ``env`` is given,
    rendering at ``obs_size`` (width, height; default :func:`obs_size_for` the policy) only the
    cameras the policy declares (:func:`obs_cameras_for`; checked first, :func:`check_cameras`), each camera also
    under its ``aliases`` key (backends that take aliases). A :class:`BackendExpert` policy is bound to that env first.
    Many environments at once, one batched policy call per step: :func:`embeval.act2answer.vector.run_items_vector`.
    ``videos``: an :class:`~embeval.recording.video.EpisodeRecorder`; each episode it keeps is
    ``<policy id>_<item id>_<layout>.mp4`` (success: the cube in the correct zone).
    """
    from embeval.provenance import derive_seed
    from embeval.recording.video import maybe_episode

    be = get_backend(backend)
    own = env is None
    if own:
        check_cameras(policy, be, aliases)
        size = tuple(obs_size or obs_size_for(policy))
        env = be.make_env(size, aliases=dict(aliases)) if aliases else be.make_env(size)
    if own:
        render_only(env, obs_cameras_for(policy))
    try:
        if isinstance(policy, BackendExpert):
            policy.bind(env, be)
        for item in items:
            for layout in layouts:
                with maybe_episode(videos, f"{getattr(policy, 'id', 'policy')}_{item.id}_{layout}") as video:
                    try:
                        res = be.run_episode(env, policy, item, layout, spec, derive_seed(seed, item.id, layout),
                                             keep_actions)
                    except (InvalidInputError, MissingFileError) as exc:  # name the item (a card image, a bad action)
                        raise item_error(exc, item, layout) from None
                    if video is not None:
                        video.finish(res.success == 1.0, f"zone {res.zone} ({res.end_reason})")
                yield res
    finally:
        if own:
            be.close(env)


def write_results(results: Iterable[Act2AnswerRecord | dict], path) -> Path:
    """Write episode (or VLM answer) records as JSONL (one object a line); returns the path."""
    import json

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for r in results:
            f.write(json.dumps(r.to_dict() if hasattr(r, "to_dict") else r, sort_keys=True) + "\n")
    return path


def read_results(path) -> list[dict[str, Any]]:
    """Records written by :func:`write_results` (or exported by a run), as dicts."""
    from embeval.errors import read_jsonl

    p = Path(path)
    recs = read_jsonl(p, "results file", fix="give the episodes_*.jsonl / answers_*.jsonl files `embeval act2answer run` writes",
                      missing=f"results file {p} not found; produce one with `embeval act2answer run --out {p.parent}`")
    return [rec for _, rec in recs]
