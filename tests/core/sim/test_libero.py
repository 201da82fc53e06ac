"""The LIBERO backend (embeval.sim.libero): the action conversion and the frame codec here; replays, LIBERO's
own success check and the image orientation in LIBERO's interpreter (.venv-libero; skipped without it)."""
from __future__ import annotations

import io

import numpy as np
import pytest

from embeval.action import Action
from embeval.errors import ConfigError
from embeval.sim.libero import (
    OSC_MAX_ROTATION,
    OSC_MAX_TRANSLATION,
    STEP_LIMITS,
    from_libero,
    libero_python,
    parse_task,
    step_limit,
    to_libero,
)
from embeval.sim.libero.worker import MAX_ARRAYS, ProtocolError, read_frame, write_frame

needs_libero = pytest.mark.skipif(not libero_python().is_file(),
                                  reason=f"LIBERO's interpreter {libero_python()} is missing: run scripts/install_libero.sh")


# ---- conversion and protocol (no LIBERO) -------------------------------------------------------------------------
def test_action_conversion_units_and_gripper():
    v = to_libero(Action(np.array([0.05, -0.025, 0.01, 0.0, 0.0, 0.25, 1.0])))
    np.testing.assert_allclose(v, [1.0, -0.5, 0.2, 0.0, 0.0, 0.5, -1.0], atol=1e-12)  # open -> -1
    assert to_libero(Action(np.array([0, 0, 0, 0, 0, 0, 0.0])))[6] == 1.0  # closed -> +1 (LIBERO: close)
    # beyond the controller's range: clipped like robosuite clips
    np.testing.assert_allclose(to_libero(Action(np.array([0.2, 0, 0, 0, -2.0, 0, 0.5])))[[0, 4, 6]], [1.0, -1.0, 0.0])
    # a combined rotation: the axis-angle of R = Rz Ry Rx, not the rpy numbers themselves
    rpy = np.array([0.2, -0.1, 0.3])
    rv = to_libero(Action(np.r_[0, 0, 0, rpy, 1.0]))[3:6] * OSC_MAX_ROTATION
    assert not np.allclose(rv, rpy, atol=1e-3)
    np.testing.assert_allclose(from_libero(np.r_[0, 0, 0, rv / OSC_MAX_ROTATION, -1]).rotation, rpy, atol=1e-12)


def test_action_conversion_round_trips():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lib = rng.uniform(-1, 1, 7)
        lib[3:6] *= 0.9 / max(1.0, np.linalg.norm(lib[3:6]))  # an axis-angle inside [-1, 1] per axis
        np.testing.assert_allclose(to_libero(from_libero(lib)), lib, atol=1e-9)
        a = from_libero(lib)
        np.testing.assert_allclose(from_libero(to_libero(a)).vector, a.vector, atol=1e-9)
        assert np.all(np.abs(a.translation) <= OSC_MAX_TRANSLATION + 1e-12)


def test_task_names_and_step_limits():
    assert parse_task("libero_10_swap:3") == ("libero_10_swap", 3)
    for bad in ("libero_spatial", "libero_spatial:x", ":0", "libero_spatial:-1"):
        with pytest.raises(ConfigError, match="SUITE:TASK_ID"):
            parse_task(bad)
    assert STEP_LIMITS == {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520,
                           "libero_90": 400}
    assert step_limit("libero_10_swap") == 520 and step_limit("libero_goal_lan") == 300
    with pytest.raises(ConfigError, match="sim.max_steps"):
        step_limit("libero_100")


def test_frame_codec_round_trip_and_bounds():
    buf = io.BytesIO()
    arrays = {"img": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3), "state": np.linspace(0, 1, 5)}
    write_frame(buf, {"op": "x", "n": 2}, arrays)
    buf.seek(0)
    head, out = read_frame(buf)
    assert head == {"op": "x", "n": 2}
    for k, a in arrays.items():
        assert out[k].dtype == a.dtype and np.array_equal(out[k], a)
    huge = io.BytesIO(np.array([10, MAX_ARRAYS + 1], dtype="<u4").tobytes())
    with pytest.raises(ProtocolError, match="refused a frame"):
        read_frame(huge)  # refused from its length prefix, before anything is read
    lying = io.BytesIO()
    write_frame(lying, {}, {"a": np.zeros(4, np.uint8)})
    raw = lying.getvalue().replace(b"[4]", b"[9]")  # same length, more than the frame holds
    with pytest.raises(ProtocolError, match="outside its frame"):
        read_frame(io.BytesIO(raw))


def test_cli_names_a_malformed_task(capsys):
    from embeval_cli import main

    assert main(["sim", "render", "--backend", "libero", "--task", "libero_spatial", "--out", "x.png"]) == 2
    assert "SUITE:TASK_ID" in capsys.readouterr().err


# ---- LIBERO itself (its own interpreter) ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def task():
    from embeval.sim.libero.episodes import LiberoTask

    t = LiberoTask("libero_spatial:0", 64, 64)
    yield t
    t.close()


@pytest.fixture(scope="module")
def first(task):
    """``task.reset(0)`` once for the module (a hard reset, ~7 s): its observation, MuJoCo state and LIBERO's raw
    arrays (:attr:`LiberoTask.last`)."""
    obs = task.reset(0)
    return obs, task.get_state(), dict(task.last)


@pytest.fixture(scope="module")
def fast():
    """The same task rendered ``render_mode="fast"`` with soft resets (the model built once, ~1-3 s a reset instead of
    a hard reset's ~7 s), and its first reset(0): the scene of the model built at make, the same as a hard reset's."""
    from embeval.sim.libero.episodes import LiberoTask

    t = LiberoTask("libero_spatial:0", 64, 64, render_mode="fast", hard_reset=False)
    obs = t.reset(0)
    yield t, obs, t.get_state()
    t.close()


MOVE = [Action(np.array([0.02, -0.01, 0.01, 0, 0, 0.05, 1.0]))] * 3 + [Action(np.array([0, 0, 0, 0, 0, 0, 0.0]))]


def _replay(task):
    obs = task.reset(0)
    start = np.asarray(obs.state["tcp_pose"][:3]).copy()
    frames = [np.stack([obs.images[c] for c in task.cameras])]
    for a in MOVE:
        images = task.step_libero(to_libero(a)).observation.images
        frames.append(np.stack([images[c] for c in task.cameras]))
    return task.get_state(), np.stack(frames), start, np.asarray(task.last["robot0_eef_pos"])


@needs_libero
def test_replay_from_an_initial_state_is_identical(task):
    s1, f1, p0, p1 = _replay(task)
    s2, f2, _, _ = _replay(task)
    assert np.array_equal(s1, s2) and np.array_equal(f1, f2)
    assert f1.shape == (len(MOVE) + 1, 2, 64, 64, 3) and f1.dtype == np.uint8
    assert not np.array_equal(f1[0], f1[-1])  # the robot moved in the images
    # embeval's +x / -y reached LIBERO's base frame as +x / -y (set-points of 2 / 1 cm per step)
    d = p1 - p0
    assert d[0] > 0.01 and d[1] < -0.003, d
    assert task.steps == len(MOVE) and not task.success


@needs_libero
def test_libero_success_fires_when_the_goal_holds(fast):
    """The goal of libero_spatial:0 is (On akita_black_bowl_1 plate_1): the bowl is put 2 cm above the plate's
    centre in MuJoCo's state, then LIBERO steps with the gripper open until it rests there (contact). Physics, not
    pixels: on the fast-rendering, soft-resetting task."""
    task = fast[0]
    assert task.info["goal"] == [["on", "akita_black_bowl_1", "plate_1"]]
    task.reset(0)
    assert not task.success
    plate, _, _ = task.object_pose("plate_1")
    _, _, i = task.object_pose("akita_black_bowl_1")
    state = task.get_state()
    state[i:i + 3] = plate + np.array([0.0, 0.0, 0.02])
    state[i + 3:i + 7] = [1, 0, 0, 0]  # upright (wxyz)
    _, at_once = task.set_state(state)
    assert not at_once  # in the air: no contact yet
    hold = to_libero(Action.hold())
    for _ in range(15):
        if task.step_libero(hold).success:
            break
    assert task.success and task.done and task.reason == "success"
    bowl, _, _ = task.object_pose("akita_black_bowl_1")
    assert np.linalg.norm(bowl[:2] - plate[:2]) < 0.03


@needs_libero
def test_image_orientation_is_the_published_checkpoints(first):
    """``policy`` = LIBERO's raw (OpenGL, rows bottom-up) image turned 180 degrees, as OpenVLA / OFT / openpi feed
    their LIBERO checkpoints: the robot and the grey floor behind the table at the top, the wooden table below."""
    obs, _, last = first
    raw = last["agentview"]
    assert np.array_equal(obs.images["agentview"], raw[::-1, ::-1])
    assert np.array_equal(obs.images["wrist"], last["robot0_eye_in_hand"][::-1, ::-1])
    img = obs.images["agentview"].astype(float)
    warm = img[..., 0] - img[..., 2]  # wood: red well above blue; grey floor and robot: about equal
    top, bottom = warm[:12].mean(), warm[-12:].mean()
    assert bottom > 20 and top < 10, (top, bottom)
    raw_warm = raw.astype(float)[..., 0] - raw.astype(float)[..., 2]
    assert raw_warm[:12].mean() > 20  # the raw image is upside down


# ---- render modes, sim.options, run specs ---------------------------------------------------------------------------
def test_unknown_sim_option_is_refused_before_libero_starts():
    from embeval.sim.backends import SimSpec
    from embeval.sim.libero.episodes import LiberoEpisodes

    with pytest.raises(ConfigError, match="sim.options.shadows: the LIBERO backend takes render_mode"):
        LiberoEpisodes(SimSpec("libero", "libero_spatial:0", options={"shadows": False}))


@needs_libero
def test_fast_render_mode_changes_pixels_not_physics(first, fast):
    """``render_mode: fast`` (no multisampling, no reflections) renders the same scene: the same state, images
    close to the default ones (mean absolute difference a few levels) but not identical; an unknown mode is refused."""
    from embeval.sim.libero.episodes import LiberoTask

    ref, ref_state, _ = first
    _, obs, state = fast
    assert np.array_equal(state, ref_state)
    for c in ("agentview", "wrist"):
        d = np.abs(obs.images[c].astype(int) - ref.images[c].astype(int))
        assert d.max() > 0 and d.mean() < 12, (c, d.mean())
    with pytest.raises(ConfigError, match="unknown render mode 'ugly'"):
        LiberoTask("libero_spatial:0", 32, 32, cameras=(), render_mode="ugly")


@needs_libero
def test_run_spec_units_run_on_libero(tmp_path):
    """``sim: {backend: libero}`` in a sim-iqa run spec: a clean and a distorted unit of 3 control steps each."""
    from embeval.runs import ResultsStore, parse_spec, run

    spec = {"evaluator": "sim-iqa",
            "sim": {"backend": "libero", "env": "libero_spatial:0", "width": 32, "height": 32, "max_steps": 3,
                    "options": {"render_mode": "fast"}},
            "subjects": [{"id": "stats", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}}],
            "items": {"source": "synthetic", "count": 1}, "distortions": ["none", "white_noise"], "levels": [4],
            "backend": {"progress": False}}
    s = run(parse_spec(spec, base_dir=tmp_path), tmp_path / "run")
    assert (s.done, s.failed, s.total) == (2, 0, 2)
    with ResultsStore(tmp_path / "run" / "results.sqlite") as st:
        rows = {r["distortion"]: r["outputs"] for r in st.rows(s.run_id)}
    assert set(rows) == {"none", "white_noise"}
    assert rows["none"]["decision"] == 1.0 and rows["none"]["execution"] == 100.0
    assert 0.0 <= rows["white_noise"]["decision"] <= 1.0 and 0.0 <= rows["white_noise"]["execution"] <= 100.0


#: run in LIBERO's interpreter: one worker, the same hard reset compiled fresh (robosuite's own way) and from the kept
#: compiled model after a reset that perturbed its copy; prints whether the observations and states are equal
_KEPT_MODEL_SCRIPT = r"""
import os, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import worker as W

def episode(w, perturb=()):
    _, arrays = w.op_reset({"init_index": 1, "settle_steps": 1, "perturb": list(perturb)}, {})
    frames = [arrays]
    for a in ([0.4, -0.2, 0.1, 0.0, 0.0, 0.2, -1.0], [0.0, 0.3, -0.2, 0.1, 0.0, 0.0, 1.0]):
        frames.append(w.op_step({}, {"action": np.array(a)})[1])
    return frames, np.asarray(w.env.get_sim_state()).copy()

os.environ["EMBEVAL_LIBERO_COMPILE_EACH_RESET"] = "1"
w = W.Worker()
w.op_make({"suite": "libero_spatial", "task_id": 0, "cameras": ["agentview"], "width": 32, "height": 32,
           "render_mode": "fast", "hard_reset": True}, {})
fresh = episode(w)
from robosuite.utils.binding_utils import MjSim
assert not getattr(MjSim.from_xml_string, "_embeval_kept", False)
del os.environ["EMBEVAL_LIBERO_COMPILE_EACH_RESET"]
W._keep_compiled_models()
moved = {"axis": "camera_pose", "params": {"cameras": ["agentview"], "direction": [1, 0, 0], "translation_cm": 5.0,
                                          "axis": [0, 0, 1], "rotation_deg": 10.0}}
perturbed = episode(w, [moved])  # compiled, kept; its copy's camera moved
kept = episode(w)  # a copy of the kept model
same = lambda a, b: all(np.array_equal(x[k], y[k]) for x, y in zip(a[0], b[0]) for k in x) and np.array_equal(a[1], b[1])
c = MjSim.from_xml_string.counts  # the perturbed reset compiled (and kept) the model, the last one reused it
print("counts", c["compiled"], c["reused"], "perturbed-differs", not same(fresh, perturbed), "equal", same(fresh, kept))
"""


@needs_libero
def test_a_kept_compiled_model_gives_the_episode_a_fresh_compile_gives(tmp_path):
    """The worker keeps LIBERO's compiled MuJoCo model across hard resets (about half of a reset's CPU): the episode
    from a copy of the kept model equals, bit for bit, the one robosuite's own compile gives, even after a reset that
    moved a camera in its copy."""
    import os
    import subprocess
    from pathlib import Path

    import embeval.sim.libero.worker as worker_module

    script = tmp_path / "kept_model.py"
    script.write_text(_KEPT_MODEL_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "EMBEVAL_LIBERO_COMPILE_EACH_RESET"}
    env.setdefault("MUJOCO_GL", "egl")
    env.setdefault("PYOPENGL_PLATFORM", env["MUJOCO_GL"])
    p = subprocess.run([str(libero_python()), str(script), str(Path(worker_module.__file__).parent)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[-7:] == ["counts", "1", "1", "perturbed-differs", "True", "equal", "True"], p.stdout
