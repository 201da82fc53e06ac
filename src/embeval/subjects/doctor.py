"""``embeval subjects doctor``: check a policy's action conventions against the scripted expert before a long run.

The commonest wrong number in VLA evaluation is a convention mix-up (gripper polarity, axes, units, frame, an
unread camera, an upside-down image), not a weak model. The doctor collects **probes**: the scripted expert
(:meth:`embeval.sim.env.SimEnv.expert`) drives a few short episodes in the pybullet workcell (default 8 ``Pick``
episodes, at most 16 steps each: about 100 probes covering gripper open and closed, a translation along x, y and
z, and the yaw the expert turns to the cube). At every step the policy is asked for its action on the expert's
observation (the expert, not the policy, moves the arm, so every policy sees the same states), and the checks
compare the two. The policy is asked in ``3 + C`` passes over the probes (``C``: cameras it should read):
upright, the same again (its noise floor), each camera replaced by another probe's image, and every image
rotated 180 degrees. Each pass resets the policy at every episode start and asks it step by step, so stateful
and chunking policies see a normal episode. Bounded time: ``(3 + C) x probes`` policy calls (about 500 for the
default and two cameras; the tiny VLA takes about 5 s on one CPU thread).

Each check (:data:`CHECKS`, a :class:`~embeval.registry.Registry` of :class:`Check`) is one small record: a name,
what it measures, its threshold and a one-line diagnosis with the fix. Thresholds are set for convention errors,
which are large (x10, x57.3, x1000, a sign, a swap), with margins a correct but weak model passes: the shipped
tiny VLA (translation gain 0.88 to 0.92, rotation gain 0.08 to 0.13, lowest axis cosine 0.78 to 0.98, gripper
agreement 0.94 to 1.0 over probe seeds 0 to 5000) passes every check; ``yaw_direction`` skips for it (a yaw that
weak has no reliable direction). Statistics: the default probes hold about 21 expert-closed and 77 expert-open
gripper states, 86 moving and 11 turning ones; a policy whose gripper agrees with the expert on 80 % of probes
falls under the 0.25 polarity threshold with probability ~1e-23, a coin-flip gripper with ~1e-5, and an
inverted one lands near 0. Scale ratios sum over all moving probes, so one bad probe moves them by about 1 %.
Deterministic policies change by exactly 0 in the noise-floor pass; the camera check allows 1.2 x the floor for
sampling ones. Policy actions are compared
in frame ``base``: actions the policy declares in frame ``tool0`` (``action_spec.frame``) are rotated into it
first, absolute poses (``action_spec.absolute``) become deltas from the observed TCP pose.

Python::

    from embeval.subjects.doctor import DoctorConfig, diagnose
    report = diagnose(policy, DoctorConfig(episodes=8))
    print(report.format_text()); raise SystemExit(report.exit_code)
"""
from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from embeval.action import Observation, gripper_closed, pose_delta, rpy_to_matrix
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError
from embeval.registry import Registry

__all__ = ["CHECKS", "Check", "CheckResult", "DoctorConfig", "DoctorReport", "Evidence", "Probe", "ProbeSet",
           "collect_probes", "diagnose", "expected_cameras", "gate", "register_check", "EXIT_FAIL"]

#: exit code of ``embeval subjects doctor`` when a check fails (0: all pass or skip; 2: usage error)
EXIT_FAIL = 1
#: a probe "moves" when the expert's translation is at least this long (m)
MIN_MOVE = 0.005
#: a probe "rotates" when the expert's rotation delta is at least this large (rad, about 1.1 degrees)
MIN_TURN = 0.02
#: yaw_direction needs the policy's yaw to be at least this fraction of the expert's (else it skips)
MIN_YAW_GAIN = 0.3
#: the policy's action is "constant" when its spread is at most this fraction of the expert's
CONSTANT_RATIO = 1e-3
#: unit factors a wrong translation scale is named after (factor -> cause, fix)
_TRANSLATION_CAUSES = {
    1000.0: ("millimetres read as metres", "divide the translation by 1000 (the model emits mm)"),
    100.0: ("centimetres read as metres", "divide the translation by 100 (the model emits cm)"),
    10.0: ("a scale off by 10 (un-normalisation statistics or action_scale)", "check unnorm_key / params.action_scale"),
    0.1: ("a scale off by 10 (un-normalisation statistics or action_scale)", "check unnorm_key / params.action_scale"),
    0.01: ("metres where centimetres were expected", "multiply the translation by 100"),
    0.001: ("metres read as millimetres", "multiply the translation by 1000 (the adapter divides by 1000 twice?)"),
}
_ROTATION_CAUSES = {
    180.0 / math.pi: ("degrees read as radians", "convert with numpy.deg2rad (the model emits degrees)"),
    math.pi / 180.0: ("radians read as degrees", "drop the deg2rad conversion (the model already emits radians)"),
    10.0: ("a rotation scale off by 10", "check unnorm_key / params.action_scale"),
}
_INVERSE_GRIPPER = {"open1": "close1", "close1": "open1", "signed_open_positive": "signed_close_positive",
                    "signed_close_positive": "signed_open_positive"}


# --------------------------------------------------------------------------- configuration and probes
@dataclass(frozen=True)
class DoctorConfig:
    """What the doctor probes. ``episodes`` x at most ``max_steps`` probes; time grows with both."""

    task: str = "Pick"  # the sim task verb of the probe episodes (one the policy was trained for)
    episodes: int = 8  # probe episodes, seeds ``seed .. seed + episodes - 1``
    seed: int = 0
    max_steps: int = 16  # steps per probe episode at most (Pick: about 12 until lifted)
    cameras: tuple[str, ...] | None = None  # cameras the policy must read; None: declared by the policy, else all
    checks: tuple[str, ...] | None = None  # names from CHECKS to run; None: all
    mode: str = "kinematic"  # SimConfig.mode of the probe cell ("kinematic": fast, no physics between steps)

    def __post_init__(self):
        for name, lo, hi in (("episodes", 1, 200), ("max_steps", 2, 400)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ConfigError(f"doctor {name} must be a whole number in {lo}..{hi}, got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"doctor seed must be a whole number >= 0, got {self.seed!r}")


@dataclass
class Probe:
    """One probe: the observation the policy is asked on and the expert's action there (frame base)."""

    episode: int
    step: int
    stage: str  # the expert's stage ("above", "descend", "close", "lift", ...)
    observation: Observation
    expert: np.ndarray  # (7,) [dx, dy, dz, droll, dpitch, dyaw, gripper], m / rad / 1 = open
    tcp_pose: np.ndarray  # (6,) [x, y, z, rx, ry, rz] before the step (m, rotation vector)


@dataclass
class ProbeSet:
    """Probes in episode order (a pass asks the policy through them in this order)."""

    probes: list[Probe]
    task: str
    seconds: float = 0.0  # time to collect

    @property
    def expert(self) -> np.ndarray:
        return np.stack([p.expert for p in self.probes])

    @property
    def cameras(self) -> list[str]:
        return list(self.probes[0].observation.images) if self.probes else []


def collect_probes(config: DoctorConfig = DoctorConfig(), env=None) -> ProbeSet:
    """Run the expert through ``config.episodes`` episodes of ``config.task`` and record every step's
    observation and expert action. ``env``: a :class:`~embeval.sim.env.SimEnv` to reuse (else one is made
    and closed)."""
    from embeval.sim.env import SimEnv
    from embeval.sim.workcell import SimConfig

    t0 = time.perf_counter()
    own = env is None
    env = SimEnv(SimConfig(mode=config.mode)) if own else env
    probes: list[Probe] = []
    try:
        for k in range(config.episodes):
            obs = env.reset(seed=config.seed + k, task=config.task)
            expert = env.expert()
            for step in range(config.max_steps):
                if env.done:
                    break
                tcp = env.cell.tcp_pose().copy()
                a = expert.act(obs).vector
                if expert.finished:
                    break
                stage = expert.stages[expert.i].name  # the stage this action belongs to
                probes.append(Probe(k, step, stage, obs, a.copy(), tcp))
                obs = env.step(a).observation
    finally:
        if own:
            env.close()
    if not probes or not probes[0].observation.images:
        raise ConfigError("the probe episodes gave no observations with images; render cameras (SimConfig.render)")
    return ProbeSet(probes, config.task, time.perf_counter() - t0)


# --------------------------------------------------------------------------- asking the policy
def _vector(action: Any) -> np.ndarray:
    v = np.asarray(getattr(action, "vector", action), dtype=np.float64).reshape(-1)
    if v.shape != (7,):
        raise InvalidInputError(f"the policy returned {v.size} numbers; expected 7 [dx,dy,dz,droll,dpitch,dyaw,gripper]")
    return v


def _to_base(v: np.ndarray, tcp: np.ndarray, spec) -> np.ndarray:
    """The policy's action as a frame-base delta (see the module docstring)."""
    from embeval.rotations import euler_to_rotvec, matrix_to_rpy, rotvec_to_matrix

    out = v.copy()
    R = rotvec_to_matrix(tcp[3:6])
    if getattr(spec, "absolute", False):
        out[:6] = pose_delta(tcp, np.concatenate([v[:3], euler_to_rotvec(v[3:6], "xyz")]))
    elif getattr(spec, "frame", "base") == "tool0":
        out[:3] = R @ v[:3]
        out[3:6] = matrix_to_rpy(R @ rpy_to_matrix(v[3:6]) @ R.T)
    return out


Transform = Callable[[int, Observation], Observation]


def ask(policy, probes: ProbeSet, transform: Transform | None = None) -> tuple[np.ndarray, list[str | None]]:
    """One pass: ``(actions (N, 7) in frame base, errors)``; a probe whose ``act`` raised has a NaN row and its
    error text (a NaN/inf action counts as an error: ``Action`` refuses it)."""
    spec = getattr(policy, "action_spec", None)
    out = np.full((len(probes.probes), 7), np.nan)
    errors: list[str | None] = [None] * len(probes.probes)
    episode = None
    for i, p in enumerate(probes.probes):
        obs = p.observation if transform is None else transform(i, p.observation)
        try:
            if p.episode != episode:
                episode = p.episode
                policy.reset(obs.instruction)
            v = _vector(policy.act(obs))
            if not np.all(np.isfinite(v)):
                raise InvalidInputError(f"action contains NaN or inf: {v.tolist()}")
            out[i] = _to_base(v, p.tcp_pose, spec)
        except ServerUnavailableError:
            raise  # no server, no diagnosis: one line, exit 2 (retrying each probe would only take long)
        except Exception as exc:  # noqa: BLE001 - the adapter's refusal (NaN, shape, gripper range) or the model's error
            errors[i] = f"{type(exc).__name__}: {exc}"
    return out, errors


def _with_images(obs: Observation, images: Mapping[str, np.ndarray]) -> Observation:
    return Observation(images=dict(images), instruction=obs.instruction, state=obs.state, timestamp=obs.timestamp)


def flipped(_: int, obs: Observation) -> Observation:
    """Every image rotated 180 degrees (both axes flipped)."""
    return _with_images(obs, {k: np.ascontiguousarray(v[::-1, ::-1]) for k, v in obs.images.items()})


def swap_camera(probes: ProbeSet, camera: str) -> Transform:
    """Camera ``camera``'s image replaced by the one of the probe half the set away (another state, same camera)."""
    n = len(probes.probes)

    def transform(i: int, obs: Observation) -> Observation:
        other = probes.probes[(i + n // 2) % n].observation.images[camera]
        return _with_images(obs, {**obs.images, camera: other})

    return transform


def expected_cameras(policy, available: Sequence[str]) -> tuple[list[str], str]:
    """``(cameras the policy should read, where that came from)``: what the policy declares (``cfg.cameras``,
    ``cameras``, ``camera`` + ``extra_cameras``, ``camera_map``: observation camera names), else all ``available``."""
    found: list[str] = []
    for obj, attr in ((getattr(policy, "cfg", None), "cameras"), (policy, "cameras"), (policy, "camera"),
                      (policy, "extra_cameras"), (policy, "camera_map")):
        val = getattr(obj, attr, None) if obj is not None else None
        names = [val] if isinstance(val, str) else list(val.values()) if isinstance(val, Mapping) else \
            list(val) if isinstance(val, (list, tuple)) else []
        found += [n for n in names if isinstance(n, str) and n in available and n not in found]
    if found:
        return found, "declared by the policy"
    return list(available), "all cameras of the observation (none declared; --cameras names them)"


# --------------------------------------------------------------------------- evidence, checks, report
@dataclass
class Evidence:
    """What the checks read: the expert's actions and the policy's passes (all (N, 7), frame base)."""

    probes: ProbeSet
    expert: np.ndarray
    upright: np.ndarray
    errors: list[str | None]
    repeat: np.ndarray | None = None  # the upright pass again (noise floor)
    camera_passes: dict[str, np.ndarray] = field(default_factory=dict)  # camera -> pass with it replaced
    flipped: np.ndarray | None = None  # every image rotated 180 degrees
    cameras: list[str] = field(default_factory=list)  # cameras the policy should read
    cameras_from: str = ""
    gripper: str | None = None  # the subject's gripper convention (params.gripper), when known
    frame: str = "base"  # the frame the policy declares (action_spec.frame)

    @property
    def valid(self) -> np.ndarray:
        return np.all(np.isfinite(self.upright), axis=1)

    @property
    def constant(self) -> bool:
        """Whether the policy's actions barely vary (the 'constant' check fails)."""
        return int(self.valid.sum()) >= 2 and _spread(self)[2] <= CONSTANT_RATIO


def _spread(ev: Evidence) -> tuple[float, float, float]:
    """``(largest std of the policy's 7 numbers, the expert's, their ratio)`` over the valid probes."""
    P, E = ev.upright[ev.valid], ev.expert[ev.valid]
    sp, se = float(np.max(P.std(axis=0))), float(np.max(E.std(axis=0)))
    return sp, se, sp / max(se, 1e-12)


@dataclass
class CheckResult:
    """One check's outcome: ``status`` pass | fail | skip; ``value`` the measured statistic."""

    name: str
    status: str
    value: float | None
    threshold: str
    detail: str  # what was measured, in words
    diagnosis: str = ""  # the one-line diagnosis with the fix (failures only)


@dataclass(frozen=True)
class Check:
    """A registered check: ``run(evidence) -> (status, value, detail, diagnosis)``."""

    name: str
    measures: str
    threshold: str
    run: Callable[[Evidence], tuple[str, float | None, str, str]]
    needs: tuple[str, ...] = ()  # extra passes: "repeat", "cameras", "flipped"
    varying: bool = True  # compares how the actions vary: skipped when the policy's action is constant

    def __call__(self, ev: Evidence) -> CheckResult:
        if self.varying and not ev.valid.any():
            return CheckResult(self.name, "skip", None, self.threshold, "no valid action (see 'finite' and 'responds')")
        if self.varying and ev.constant:
            return CheckResult(self.name, "skip", None, self.threshold, "the policy's action is constant (see 'constant')")
        status, value, detail, diagnosis = self.run(ev)
        return CheckResult(self.name, status, None if value is None else float(value), self.threshold, detail,
                           diagnosis if status == "fail" else "")


#: name -> :class:`Check`; plugins join through the entry-point group ``embeval.doctor_checks``
CHECKS: Registry[Check] = Registry("doctor check", group="embeval.doctor_checks",
                                   hint="register one with embeval.subjects.doctor.register_check")


def register_check(name: str, measures: str, threshold: str, needs: tuple[str, ...] = (), varying: bool = True):
    """Decorator: register ``fn(evidence) -> (status, value, detail, diagnosis)`` as a check (``needs``, ``varying``:
    see :class:`Check`)."""

    def deco(fn):
        CHECKS.register(name, Check(name, measures, threshold, fn, needs, varying), description=measures)
        return fn

    return deco


def _skip(why: str):
    return "skip", None, why, ""


def _nan_error(e: str | None) -> bool:
    return e is not None and re.search(r"\b(nan|inf)\b", e, re.IGNORECASE) is not None


@register_check("finite", "probes whose action is NaN or inf", "0 probes", varying=False)
def _finite(ev: Evidence):
    bad = [i for i, e in enumerate(ev.errors) if _nan_error(e)]
    n = len(ev.errors)
    if not bad:
        return "pass", 0, f"all {n} actions finite", ""
    p = ev.probes.probes[bad[0]]
    return ("fail", len(bad), f"{len(bad)}/{n} actions NaN or inf",
            f"the policy returns NaN/inf on {len(bad)}/{n} probes (first: episode {p.episode} step {p.step}): the model "
            "diverged or un-normalises with a zero std; check the checkpoint's statistics (unnorm_key), its dtype and inputs")


@register_check("responds", "probes on which act() raised an error other than NaN/inf", "0 probes", varying=False)
def _responds(ev: Evidence):
    bad = [e for e in ev.errors if e is not None and not _nan_error(e)]
    n = len(ev.errors)
    if not bad:
        return "pass", 0, f"act() answered all {n} probes", ""
    return ("fail", len(bad), f"act() raised on {len(bad)}/{n} probes",
            f"act() raised on {len(bad)}/{n} probes: {bad[0][:300]}; fix that first (the other checks used the rest)")


@register_check("constant", "spread of the policy's actions over the probes (largest std of the 7 numbers) against "
                "the expert's", f"fails at <= {CONSTANT_RATIO:g} x the expert's", varying=False)
def _constant(ev: Evidence):
    P = ev.upright[ev.valid]
    if len(P) < 2:
        return _skip("fewer than 2 valid actions")
    sp, se, ratio = _spread(ev)
    detail = f"largest std {sp:.3g} (expert {se:.3g}), ratio {ratio:.3g}"
    if ratio > CONSTANT_RATIO:
        return "pass", ratio, detail, ""
    a = " ".join(f"{x:+.3g}" for x in P[0])
    return ("fail", ratio, detail, f"the policy returns the same action [{a}] on all {len(P)} probes while the expert's "
            "vary: it ignores its inputs; check that images and state reach the model (camera names, state_fields) "
            "and that the weights loaded")


def _gripper_classes(ev: Evidence):
    ok = ev.valid
    e_open = ~np.array([gripper_closed(g) for g in ev.expert[:, 6]])
    p_open = np.array([not gripper_closed(g) if np.isfinite(g) else False for g in ev.upright[:, 6]])
    return e_open & ok, ~e_open & ok, p_open


@register_check("gripper_polarity", "balanced agreement of the binary gripper (open >= 0.5) with the expert's: the mean "
                "of the agreement on expert-open and on expert-closed probes", "fails below 0.25 (chance 0.5)")
def _gripper_polarity(ev: Evidence):
    e_open, e_closed, p_open = _gripper_classes(ev)
    if e_open.sum() < 5 or e_closed.sum() < 5:
        return _skip(f"the expert opens on {e_open.sum()} and closes on {e_closed.sum()} probes (5 of each needed)")
    wrong_open = int((p_open & e_closed).sum())  # policy open, expert closed
    wrong_close = int((~p_open & e_open).sum())
    bal = 0.5 * (1 - wrong_open / e_closed.sum()) + 0.5 * (1 - wrong_close / e_open.sum())
    detail = (f"balanced agreement {bal:.2f}: opens when the expert closes {wrong_open}/{e_closed.sum()}, closes when "
              f"it opens {wrong_close}/{e_open.sum()}")
    if bal >= 0.25:
        return "pass", bal, detail, ""
    now = ev.gripper
    fix = (f"set params.gripper: {_INVERSE_GRIPPER[now]} (now {now}) or params.convention: "
           f"{{gripper: {_INVERSE_GRIPPER[now]}}}" if now in _INVERSE_GRIPPER
           else "set params.gripper: close1 (or signed_close_positive for a [-1, 1] model; or params.convention: "
                "{gripper: close1})")
    return ("fail", bal, detail, f"gripper looks inverted: the policy opens when the expert closes in {wrong_open}/"
            f"{e_closed.sum()} probes and closes when it opens in {wrong_close}/{e_open.sum()}; {fix}")


@register_check("gripper_moves", "whether the policy's binary gripper takes both states on probes where the expert's does",
                "fails when it stays in one state on all probes")
def _gripper_moves(ev: Evidence):
    e_open, e_closed, p_open = _gripper_classes(ev)
    ok = e_open | e_closed
    if e_open.sum() < 5 or e_closed.sum() < 5:
        return _skip("the expert does not use both gripper states on 5 probes each")
    n_open = int(p_open[ok].sum())
    detail = f"policy open on {n_open}/{ok.sum()} probes (expert {e_open.sum()})"
    if 0 < n_open < ok.sum():
        return "pass", n_open / ok.sum(), detail, ""
    state = "open" if n_open else "closed"
    return ("fail", n_open / ok.sum(), detail, f"the gripper stays {state} on all {ok.sum()} probes although the expert "
            f"opens on {e_open.sum()} and closes on {e_closed.sum()}: the gripper output is on another scale or index; "
            "check the 7th number and params.gripper (open1 | close1 | signed_open_positive | signed_close_positive)")


def _ratio_diagnosis(r: float, causes: Mapping[float, tuple[str, str]], what: str) -> str:
    factor = min(causes, key=lambda f: abs(math.log10(r) - math.log10(f)))
    cause, fix = causes[factor]
    near = abs(math.log10(r) - math.log10(factor)) < 0.5
    guess = f"about {factor:.3g}x = {cause}" if near else f"nearest known cause: {cause} ({factor:.3g}x)"
    return f"{what} is {r:.3g}x the expert's ({guess}); {fix}"


def _scale(ev: Evidence, sl: slice, mask_min: float, lo: float, hi: float, what: str, causes):
    E, P = ev.expert[:, sl], ev.upright[:, sl]
    m = ev.valid & (np.linalg.norm(E, axis=1) >= mask_min)
    if m.sum() < 3:
        return _skip(f"{m.sum()} probes where the expert's {what} is >= {mask_min:g} (3 needed)")
    r = float(np.linalg.norm(P[m], axis=1).sum() / np.linalg.norm(E[m], axis=1).sum())
    detail = f"{what} {r:.3g}x the expert's over {m.sum()} probes"
    if lo <= r <= hi:
        return "pass", r, detail, ""
    if r == 0:
        return "fail", r, detail, f"the policy never emits a {what} where the expert does on {m.sum()} probes; check the output indices"
    return "fail", r, detail, _ratio_diagnosis(r, causes, what)


@register_check("translation_scale", "sum of |policy translation| / sum of |expert translation| on probes where the "
                f"expert moves >= {MIN_MOVE * 1000:g} mm", "passes in [0.32, 3.2] (10^-0.5 .. 10^0.5)")
def _translation_scale(ev: Evidence):
    return _scale(ev, slice(0, 3), MIN_MOVE, 10 ** -0.5, 10 ** 0.5, "translation", _TRANSLATION_CAUSES)


@register_check("rotation_scale", "sum of |policy rotation| / sum of |expert rotation| on probes where the expert turns "
                f">= {MIN_TURN:g} rad", "passes in [1/30, 3.2] (a weak model under-rotates: the tiny VLA is at 0.12)")
def _rotation_scale(ev: Evidence):
    return _scale(ev, slice(3, 6), MIN_TURN, 1 / 30, 10 ** 0.5, "rotation", _ROTATION_CAUSES)


_AXES = "xyz"


def _cosines(P: np.ndarray, E: np.ndarray) -> np.ndarray:
    """C[i, j] = cosine over probes between policy component i and expert component j."""
    num = P.T @ E
    den = np.sqrt(np.outer((P ** 2).sum(0), (E ** 2).sum(0)))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def _axis_problems(C: np.ndarray, axes: Sequence[int]) -> list[str]:
    out = []
    for j in axes:
        i = int(np.argmax(C[:, j]))
        if i != j and C[i, j] > C[j, j] and C[i, j] >= 0.5:
            out.append(f"policy {_AXES[i]} follows the expert's {_AXES[j]} (cos {C[i, j]:.2f}; its own {C[j, j]:.2f})")
        elif C[j, j] <= -0.5:
            out.append(f"{_AXES[j]} is inverted (cos {C[j, j]:.2f})")
    return out  # an axis that merely follows weakly (|cos| < 0.5) is a weak model, not a convention


@register_check("translation_axes", "cosine over moving probes between each policy axis and each expert axis",
                "fails when an expert axis (with 5 probes moving >= 5 mm along it) is followed by another policy axis "
                "better than by its own, or by its own with cos <= -0.5 (inverted); the tiny VLA's lowest: 0.40 to 0.98")
def _translation_axes(ev: Evidence):
    E, P = ev.expert[:, :3], ev.upright[:, :3]
    m = ev.valid & (np.linalg.norm(E, axis=1) >= MIN_MOVE)
    axes = [j for j in range(3) if (np.abs(E[m, j]) >= MIN_MOVE).sum() >= 5]
    if not axes:
        return _skip("no axis with 5 probes moving >= 5 mm")
    C = _cosines(P[m], E[m])
    diag = ", ".join(f"{_AXES[j]} {C[j, j]:.2f}" for j in axes)
    problems = _axis_problems(C, axes)
    if not problems:
        return "pass", float(min(C[j, j] for j in axes)), f"cosines {diag} over {m.sum()} probes", ""
    hint = "swap or negate them in the adapter (its output indices / signs)"
    other = "tool0" if ev.frame == "base" else "base"
    alt = np.stack([_reframe(P[k], ev.probes.probes[k].tcp_pose, ev.frame) for k in np.flatnonzero(m)])
    if not _axis_problems(_cosines(alt, E[m]), axes):
        hint = f"the deltas match the expert when read in frame {other}: set params.frame: {other} (or params.convention: {{frame: {other}}})"
    swapped = {(min(a, b), max(a, b)) for a in range(3) for b in axes
               if a != b and int(np.argmax(C[:, b])) == a and C[a, b] >= 0.5}
    inverted = [_AXES[j] for j in axes if C[j, j] <= -0.5 and not any(j in pair for pair in swapped)]
    parts = [f"axes {' and '.join(f'{_AXES[a]}/{_AXES[b]}' for a, b in sorted(swapped))} look swapped"] if swapped else []
    if inverted:
        parts.append(f"{' and '.join(inverted)} look{'s' if len(inverted) == 1 else ''} inverted")
    head = " and ".join(parts)
    return "fail", float(min(C[j, j] for j in axes)), f"cosines {diag} over {m.sum()} probes", \
        f"{head}: {'; '.join(problems)}; {hint}"


def _reframe(base_delta: np.ndarray, tcp: np.ndarray, declared: str) -> np.ndarray:
    """A translation (frame base after reading it in the ``declared`` frame) read in the other frame instead."""
    from embeval.rotations import rotvec_to_matrix

    R = rotvec_to_matrix(tcp[3:6])
    return R @ base_delta if declared == "base" else R.T @ base_delta


@register_check("yaw_direction", "cosine between the policy's and the expert's yaw on probes where the expert turns",
                f"fails at <= -0.5; skipped when the policy's rotation is under {MIN_YAW_GAIN:g}x the expert's (a weak "
                "yaw, e.g. the tiny VLA's 0.1x, has no reliable direction: its cosine ranges -0.4 to +0.8 over seeds)")
def _yaw_direction(ev: Evidence):
    E, P = ev.expert[:, 5], ev.upright[:, 5]
    m = ev.valid & (np.linalg.norm(ev.expert[:, 3:6], axis=1) >= MIN_TURN)
    if m.sum() < 3:
        return _skip(f"{m.sum()} probes where the expert turns (3 needed)")
    gain = float(np.abs(P[m]).sum() / np.abs(E[m]).sum())
    if gain < MIN_YAW_GAIN:
        return _skip(f"the policy's yaw is {gain:.2g}x the expert's over {m.sum()} probes: too weak to tell its direction")
    c = float(_cosines(P[m, None], E[m, None])[0, 0])
    detail = f"yaw cosine {c:.2f} over {m.sum()} probes"
    if c > -0.5:
        return "pass", c, detail, ""
    return "fail", c, detail, ("yaw looks inverted: the policy turns against the expert; the rotation sign or frame "
                               "differs (tool0 vs base, a left-handed convention): negate dyaw or set params.frame")


def _disagreement(ev: Evidence, P: np.ndarray) -> float:
    """Mean |policy - expert| translation over the mean |expert translation|, plus the gripper mismatch rate."""
    ok = np.all(np.isfinite(P), axis=1)
    if not ok.any():
        return float("inf")
    E = ev.expert[ok]
    trans = np.linalg.norm(P[ok, :3] - E[:, :3], axis=1).mean() / max(np.linalg.norm(E[:, :3], axis=1).mean(), 1e-9)
    grip = np.mean([gripper_closed(a) != gripper_closed(b) for a, b in zip(P[ok, 6], E[:, 6])])
    return float(trans + grip)


@register_check("cameras_read", "mean over probes of the largest change of the action when a camera's image is "
                "replaced by another probe's, against the noise floor (the upright pass asked twice)",
                "each expected camera changes the action by > 1e-6 + 1.2 x the noise floor", needs=("repeat", "cameras"))
def _cameras_read(ev: Evidence):
    if not ev.cameras:
        return _skip("the observations have no camera")
    ok = ev.valid & np.all(np.isfinite(ev.repeat), axis=1)
    noise = float(np.abs(ev.repeat[ok] - ev.upright[ok]).max(axis=1).mean()) if ok.any() else 0.0
    limit = 1e-6 + 1.2 * noise
    changes = {}
    for cam in ev.cameras:
        Q = ev.camera_passes[cam]
        k = ok & np.all(np.isfinite(Q), axis=1)
        changes[cam] = float(np.abs(Q[k] - ev.upright[k]).max(axis=1).mean()) if k.any() else 0.0
    detail = ", ".join(f"{c} {v:.3g}" for c, v in changes.items()) + f" (noise floor {noise:.3g}; cameras {ev.cameras_from})"
    unread = [c for c, v in changes.items() if v <= limit]
    if not unread:
        return "pass", min(changes.values()), detail, ""
    names = ", ".join(repr(c) for c in unread)
    return ("fail", min(changes.values()), detail,
            f"camera {names} never reaches the model: replacing its image changes no action on {ok.sum()} probes; map it "
            "in the adapter (params.extra_cameras / cameras / camera_map, serve.cameras), or if the model has no such "
            f"camera, name the ones it reads with --cameras")


@register_check("image_orientation", "disagreement with the expert (mean |translation error| / mean |expert translation| "
                "+ gripper mismatch rate) on upright images against images rotated 180 degrees",
                "fails when the rotated images agree better: disagreement < 0.8 x the upright one", needs=("flipped",))
def _image_orientation(ev: Evidence):
    if not ev.cameras:
        return _skip("the observations have no camera")
    up, fl = _disagreement(ev, ev.upright), _disagreement(ev, ev.flipped)
    ratio = fl / up if up > 0 else float("inf")
    detail = f"disagreement upright {up:.3g}, rotated 180 degrees {fl:.3g}"
    if not fl < 0.8 * up:
        return "pass", ratio, detail, ""
    return ("fail", ratio, detail, "the policy agrees with the expert better on images rotated 180 degrees "
            f"({fl:.2f} vs {up:.2f} upright): it sees its camera upside down; rotate the images 180 degrees "
            "(img[::-1, ::-1]) before the model, or fix the camera flip in the adapter / camera driver")


@dataclass
class DoctorReport:
    """The doctor's verdict; :attr:`exit_code` 0 when no check fails, :data:`EXIT_FAIL` otherwise."""

    subject: str
    task: str
    probes: int
    episodes: int
    calls: int  # policy.act calls
    seconds: float
    checks: list[CheckResult]
    action_spec: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def exit_code(self) -> int:
        return EXIT_FAIL if self.failed else 0

    def result(self, name: str) -> CheckResult:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = not self.failed
        d["exit_code"] = self.exit_code
        return d

    def format_text(self) -> str:
        lines = [f"doctor: {self.subject!r} on {self.probes} probes ({self.episodes} {self.task} episodes), "
                 f"{self.calls} calls in {self.seconds:.1f} s"]
        for c in self.checks:
            lines.append(f"  {c.status.upper():<4} {c.name:<18} {c.detail}")
            if c.diagnosis:
                lines.append(f"       -> {c.diagnosis}")
        n = len(self.failed)
        lines.append("all checks pass" if not n else f"{n} check{'s' * (n > 1)} failed: "
                     + ", ".join(c.name for c in self.failed))
        return "\n".join(lines)


def diagnose(policy, config: DoctorConfig = DoctorConfig(), probes: ProbeSet | None = None, env=None,
             gripper: str | None = None) -> DoctorReport:
    """Run the checks (``config.checks``, default all of :data:`CHECKS`) on ``policy``. ``probes``: a probe set
    to reuse (else :func:`collect_probes` with ``env``); ``gripper``: the subject's gripper convention, named in
    the fix (default: the policy's ``gripper`` attribute)."""
    names = list(config.checks) if config.checks is not None else CHECKS.names()
    checks = [CHECKS.get(n, "--checks") for n in names]
    t0 = time.perf_counter()
    probes = probes if probes is not None else collect_probes(config, env)
    cams, cams_from = (list(config.cameras), "given") if config.cameras is not None else \
        expected_cameras(policy, probes.cameras)
    missing = [c for c in cams if c not in probes.cameras]
    if missing:
        raise ConfigError(f"--cameras: {', '.join(missing)} not in the probe observations (has {', '.join(probes.cameras)})")
    upright, errors = ask(policy, probes)
    # no valid action at all: the extra passes would tell nothing (finite / responds say why)
    needs = {n for c in checks for n in c.needs} if np.isfinite(upright).all(axis=1).any() else set()
    calls = len(probes.probes)
    ev = Evidence(probes, probes.expert, upright, errors, cameras=cams, cameras_from=cams_from,
                  gripper=gripper if gripper is not None else (getattr(policy, "gripper", None)
                                                                if isinstance(getattr(policy, "gripper", None), str) else None))
    ev.frame = getattr(getattr(policy, "action_spec", None), "frame", "base")
    if "repeat" in needs:
        ev.repeat, _ = ask(policy, probes)
        calls += len(probes.probes)
    if "cameras" in needs:
        for cam in cams:
            ev.camera_passes[cam], _ = ask(policy, probes, swap_camera(probes, cam))
            calls += len(probes.probes)
    if "flipped" in needs:
        ev.flipped, _ = ask(policy, probes, flipped)
        calls += len(probes.probes)
    results = [c(ev) for c in checks]
    spec = getattr(policy, "action_spec", None)
    return DoctorReport(str(getattr(policy, "id", type(policy).__name__)), probes.task, len(probes.probes),
                        len({p.episode for p in probes.probes}), calls, time.perf_counter() - t0, results,
                        asdict(spec) if spec is not None and hasattr(spec, "__dataclass_fields__") else {})


def gate(subjects: Sequence[Any], config: DoctorConfig = DoctorConfig(), base_dir: str | None = None,
         out: Callable[[str], Any] = print, probes: ProbeSet | None = None) -> int:
    """The doctor before a long run (a ``--doctor`` flag): each subject (a loaded policy, a subject spec mapping or
    a YAML path; specs of another kind than policy are left out) is diagnosed on one shared probe set; the report
    of every one that fails is passed to ``out``. Returns 0 when none fails, else :data:`EXIT_FAIL`."""
    from pathlib import Path

    from embeval.subjects.registry import SubjectSpec, load_subject, read_spec

    code = 0
    for subject in subjects:
        if isinstance(subject, (str, Path, Mapping, SubjectSpec)):
            spec = SubjectSpec.from_mapping(subject, base_dir=Path(base_dir) if base_dir else None) \
                if isinstance(subject, Mapping) else read_spec(subject)
            if spec.kind != "policy":
                continue
            policy, gripper = load_subject(spec), spec.params.get("gripper")
        else:
            policy, gripper = subject, None
        probes = probes if probes is not None else collect_probes(config)
        report = diagnose(policy, config, probes=probes, gripper=gripper)
        if report.exit_code:
            out(report.format_text())
            code = EXIT_FAIL
    return code


def _names(text: str | None, what: str) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise ConfigError(f"--{what}: give one or more comma-separated names, got {text!r}")
    return names


def run_cli(args) -> int:
    """``embeval subjects doctor SPEC``: 0 when every check passes (or skips), :data:`EXIT_FAIL` when one fails;
    a malformed spec, a non-policy subject or an unknown check/task/camera is a :class:`ConfigError` (exit 2)."""
    import json

    from embeval.sim.expert import PLANNERS
    from embeval.subjects.registry import load_subject, read_spec

    spec = read_spec(args.spec)
    if spec.kind != "policy":
        raise ConfigError(f"{args.spec}: the doctor checks policies (kind: policy); this subject is a {spec.kind} "
                          "(a VLM or LLM answers in text and has no action conventions to check)")
    if args.task not in PLANNERS:
        raise ConfigError(f"--task: the scripted expert cannot solve {args.task!r}; choose from {', '.join(PLANNERS)}")
    checks = _names(args.checks, "checks")
    for name in checks or ():
        CHECKS.get(name, "--checks")
    config = DoctorConfig(task=args.task, episodes=args.episodes, seed=args.seed, max_steps=args.max_steps,
                          cameras=_names(args.cameras, "cameras"), checks=checks)
    try:
        import torch

        torch.set_num_threads(1)  # batch-1 inference per probe: more threads only contend
    except ImportError:
        pass
    policy = load_subject(spec)
    try:
        report = diagnose(policy, config, gripper=spec.params.get("gripper"))
    finally:
        close = getattr(policy, "close", None)
        if callable(close):
            close()
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.format_text())
    return report.exit_code
