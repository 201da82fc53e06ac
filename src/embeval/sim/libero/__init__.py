"""LIBERO and LIBERO-PRO as a simulator backend (``sim: {backend: libero, env: libero_spatial:0}``).

LIBERO runs in its own interpreter (``.venv-libero``, made by ``scripts/install_libero.sh``): its pins
(numpy 1.26.4, mujoco 2.3.7, opencv-python<5) cannot share embeval's. :mod:`.worker` is the process there;
:mod:`.client` starts and talks to it; :mod:`.episodes` is the :class:`embeval.sim.backends.EpisodeEnv`.

Conventions, in one place:

- task: ``SUITE:TASK_ID`` (``libero_spatial:0``, ``libero_10_swap:3``); episode seed ``i`` starts from LIBERO's
  own initial state ``i`` of the task (``benchmark.get_task_init_states``, 50 per task), after
  :data:`SETTLE_STEPS` "do nothing" steps, as LIBERO's published evaluations do;
- step limits (:data:`STEP_LIMITS`): OpenVLA's ``experiments/robot/libero/run_libero_eval.py`` (the limits the
  OpenVLA, OpenVLA-OFT and openpi LIBERO evaluations use), the settle steps not counted; a LIBERO-PRO suite
  (``libero_10_swap``) takes its base suite's limit;
- success: LIBERO's own ``env.check_success()`` (the BDDL goal; ``done`` of ``env.step``);
- images: LIBERO renders in robosuite's OpenGL convention (rows bottom-up). :data:`ORIENTATIONS`:
  ``policy`` (default) turns them 180 degrees (``img[::-1, ::-1]``), the images published LIBERO checkpoints
  (OpenVLA, OpenVLA-OFT, pi0) were trained on; ``upright`` flips only the rows (MuJoCo's own camera view);
  ``raw`` leaves them;
- actions (:func:`to_libero`, :func:`from_libero`): see :func:`to_libero`.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from embeval.action import Action
from embeval.errors import ConfigError

#: robosuite's OSC_POSE controller (robosuite/controllers/config/osc_pose.json, LIBERO's default controller):
#: a normalised action in [-1, 1] scales to at most this set-point offset per control step
OSC_MAX_TRANSLATION = 0.05  # metres
OSC_MAX_ROTATION = 0.5  # radians (axis-angle, base frame)
#: LIBERO's gripper: -1 open, +1 close (embeval's registered convention of that name)
GRIPPER_CONVENTION = "signed_close_positive"
#: the registered action convention of LIBERO's OSC_POSE actions (embeval.conventions.CONVENTIONS
#: names it lazily: ``libero_osc`` -> :func:`osc_convention`)
CONVENTION = "libero_osc"
#: the Panda hand's finger joint range (m per finger, 0 closed): ``gripper`` opening = finger gap / (2 x this)
PANDA_FINGER_MAX = 0.04
#: "do nothing" steps after an initial state is set, while objects settle (OpenVLA's num_steps_wait)
SETTLE_STEPS = 10
#: max policy steps per episode by base suite (OpenVLA's run_libero_eval.py; the longest training demos
#: have 193, 254, 270, 505 and 373 steps)
STEP_LIMITS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}
#: embeval camera name -> LIBERO camera
CAMERAS = {"agentview": "agentview", "wrist": "robot0_eye_in_hand"}
#: image orientation name -> function of LIBERO's raw image
ORIENTATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "policy": lambda im: np.ascontiguousarray(im[::-1, ::-1]),
    "upright": lambda im: np.ascontiguousarray(im[::-1]),
    "raw": lambda im: im,
}


def to_libero(action: Action) -> np.ndarray:
    """embeval's 7-DoF action -> LIBERO's (robosuite OSC_POSE, delta, base frame) 7-vector: convention
    :data:`CONVENTION` through :func:`embeval.conventions.from_embeval`.

    Translation (m) / :data:`OSC_MAX_TRANSLATION` and the rotation as an axis-angle vector (rad; embeval's
    extrinsic roll-pitch-yaw delta ``R' = R_delta R`` is the same left-multiplied base-frame rotation robosuite
    applies) / :data:`OSC_MAX_ROTATION`, each clipped to [-1, 1] (robosuite clips there too); gripper
    [0, 1] 1 = open -> [-1, 1] +1 = close. LIBERO's Panda base frame has the world's axes (identity rotation),
    so embeval's frame ``base`` is LIBERO's. The numbers are controller set-point offsets: the OSC gain moves
    the hand only part of the way in one 50 ms step.
    """
    from embeval.conventions import from_embeval

    return from_embeval(action, CONVENTION)


def from_libero(vec) -> Action:
    """LIBERO's 7-vector (what a LIBERO-trained policy emits after its gripper conversion) -> embeval's
    :class:`Action`; the inverse of :func:`to_libero` inside [-1, 1] (values outside are clipped first)."""
    from embeval.conventions import to_embeval

    v = np.asarray(vec, dtype=np.float64).reshape(-1)
    if v.shape != (7,):
        raise ConfigError(f"a LIBERO action is 7 numbers [x y z ax ay az gripper], got {v.shape[0]}")
    return to_embeval(v, CONVENTION)


def osc_convention():
    """LIBERO / robosuite OSC_POSE as an :class:`embeval.conventions.ActionConvention`: [-1, 1] times
    :data:`OSC_MAX_TRANSLATION` m and :data:`OSC_MAX_ROTATION` rad (axis-angle, base frame), gripper -1 open .. +1 close."""
    from embeval.conventions import ActionConvention

    return ActionConvention(CONVENTION, rotation="rotvec", scale=(OSC_MAX_TRANSLATION,) * 3 + (OSC_MAX_ROTATION,) * 3 + (1.0,),
                            clip=1.0, gripper=GRIPPER_CONVENTION, image_size=(256,), cameras=tuple(CAMERAS),
                            doc=f"LIBERO / robosuite OSC_POSE: [-1, 1] times {OSC_MAX_TRANSLATION:g} m and {OSC_MAX_ROTATION:g} rad "
                                "(axis-angle, base frame), gripper -1 open .. +1 close").check(f"convention {CONVENTION}")


def parse_task(text: str) -> tuple[str, int]:
    """``"SUITE:TASK_ID"`` -> ``(suite, task_id)``; a clear :class:`ConfigError` otherwise."""
    suite, sep, tid = str(text).partition(":")
    if not sep or not suite or not tid.isdigit():
        raise ConfigError(f"LIBERO task {text!r}: write SUITE:TASK_ID, e.g. libero_spatial:0 or libero_10_swap:3")
    return suite, int(tid)


def step_limit(suite: str) -> int:
    """Max policy steps for ``suite``: its own entry of :data:`STEP_LIMITS`, else its base suite's (longest prefix)."""
    for base in sorted(STEP_LIMITS, key=len, reverse=True):
        if suite == base or suite.startswith(base + "_"):
            return STEP_LIMITS[base]
    raise ConfigError(f"LIBERO suite {suite!r} has no known step limit (bases: {', '.join(STEP_LIMITS)}); "
                      "set sim.max_steps")


def libero_python() -> Path:
    """The interpreter that runs the worker: ``$EMBEVAL_LIBERO_PYTHON``, else ``.venv-libero/bin/python`` of the
    checkout (made by ``scripts/install_libero.sh``)."""
    env = os.environ.get("EMBEVAL_LIBERO_PYTHON")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[4] / ".venv-libero" / "bin" / "python"


def check_installed() -> Path:
    """:func:`libero_python`, or a :class:`ConfigError` naming the install script."""
    py = libero_python()
    if not py.is_file():
        raise ConfigError(f"the LIBERO backend needs its own interpreter {py}, which is missing: run "
                          "scripts/install_libero.sh (or set EMBEVAL_LIBERO_PYTHON)")
    return py

#: :func:`osc_convention`, registered lazily as ``libero_osc``
LIBERO_OSC_CONVENTION = osc_convention()
#: OpenVLA's LIBERO fine-tunes (``predict_action`` with a libero ``unnorm_key``, before their deploy script's gripper
#: normalise-and-invert): LIBERO's OSC scale, gripper [0, 1] 1 = open, one 224 px image centre-cropped to 90 % area;
#: registered lazily as ``openvla_libero``
OPENVLA_LIBERO_CONVENTION = replace(LIBERO_OSC_CONVENTION, name="openvla_libero", gripper="open1", image_size=(224,),
                                    crop=0.9, cameras=("agentview",),
                                    doc="OpenVLA's LIBERO fine-tunes before their deploy's gripper invert: LIBERO's OSC "
                                        "scale, gripper [0, 1] 1 = open, 224 px, 90 % centre crop")
