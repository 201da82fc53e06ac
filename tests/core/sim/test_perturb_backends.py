"""Scene perturbations on LIBERO and ManiSkill: each implemented axis changes the image, changes the camera or
light parameter by the drawn amount (read back from the simulator's own model), and one seed gives one image."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.errors import ConfigError
from embeval.sim.perturb import Perturbations
from embeval.sim.backend import get_sim_backend
from embeval.sim.perturb.backends import check, parse_option, supported


def _unsupported(backend: str) -> dict:
    """Axis -> why not, as the backend's record declares it."""
    return dict(get_sim_backend(backend).perturb_unsupported)


def _angle_deg(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.degrees(np.arccos(np.clip(a @ b / np.linalg.norm(a) / np.linalg.norm(b), -1, 1))))


def _quat_angle_deg(q1, q2) -> float:
    """Angle (deg) of the rotation between unit quaternions (any component order, same for both)."""
    return float(np.degrees(2 * np.arccos(np.clip(abs(np.dot(q1, q2)), 0, 1))))


@pytest.mark.parametrize("backend", ["libero", "maniskill"])
def test_unimplemented_axes_refused_in_one_line(backend):
    from embeval.sim.perturb import AXES

    assert set(supported(backend)) == set(AXES.names()) - set(_unsupported(backend))
    assert set(_unsupported(backend)) == set()  # every axis on both (LIBERO's distractors: tests/core/sim/test_perturb_libero.py)
    for axis in _unsupported(backend):
        with pytest.raises(ConfigError, match=f"{axis}:2: not implemented on {backend}") as e:
            check(Perturbations.parse(f"{axis}:2"), backend)
        assert "\n" not in str(e.value)
    assert check(Perturbations.parse("camera_pose:1,fov:2"), backend) is not None
    assert parse_option(["camera_pose:3"], backend)[0].level == 3
    assert parse_option(None, backend) is None
    with pytest.raises(ConfigError, match="sim.options.perturb"):
        parse_option(3, backend)


# ---------------------------------------------------------------------------------------------------- LIBERO
@pytest.fixture(scope="module")
def libero():
    from embeval.sim.libero import libero_python

    if not libero_python().is_file():
        pytest.skip("LIBERO is not installed (.venv-libero): run scripts/install_libero.sh")
    from embeval.sim.libero.episodes import LiberoTask

    # soft resets (the model built once): the worker restores the perturbed arrays itself, which the clean reset
    # of test_libero_axes_compose_and_clean_reset_restores_the_model checks (a hard reset rebuilds them, ~7 s each)
    task = LiberoTask("libero_spatial:0", 64, 64, cameras=("agentview",), max_steps=0, render_mode="fast",
                      hard_reset=False)
    task.perturb = None
    clean = task.reset(0, settle_steps=0).images["agentview"]
    yield task, clean, task.scene_params()
    task.close()


def _run(task, words, seed=0):
    task.perturb = Perturbations.parse(words)
    try:
        img = task.reset(seed, settle_steps=0).images["agentview"]
        return img, task.scene_params(), dict(task.perturbation)
    finally:
        task.perturb = None


def test_libero_camera_pose_moves_agentview_by_the_drawn_amount(libero):
    task, clean, base = libero
    img, now, drew = _run(task, "camera_pose:3")
    i = now["cameras"].index("agentview")
    p = drew["camera_pose"]
    assert 4 <= p["translation_cm"] <= 7 and 4 <= p["rotation_deg"] <= 7
    moved = np.linalg.norm(now["cam_pos"][i] - base["cam_pos"][i]) * 100
    assert moved == pytest.approx(p["translation_cm"], abs=1e-6)
    assert _quat_angle_deg(now["cam_quat"][i], base["cam_quat"][i]) == pytest.approx(p["rotation_deg"], abs=1e-4)
    others = [j for j, n in enumerate(now["cameras"]) if n != "agentview"]
    np.testing.assert_array_equal(now["cam_pos"][others], base["cam_pos"][others])  # wrist etc. untouched
    assert np.abs(img.astype(int) - clean.astype(int)).mean() > 2
    img2, _, drew2 = _run(task, "camera_pose:3")
    np.testing.assert_array_equal(img, img2)  # same seed, same image
    assert drew2 == drew
    _, _, drew3 = _run(task, "camera_pose:3", seed=1)
    assert drew3 != drew  # another episode, another draw


def test_libero_fov_changes_horizontal_fov_by_the_drawn_degrees(libero):
    from embeval.sim.libero.worker import horizontal_fov_deg

    task, clean, base = libero
    img, now, drew = _run(task, "fov:4")
    i = now["cameras"].index("agentview")
    change = horizontal_fov_deg(now["cam_fovy"][i], now["aspect"]) - horizontal_fov_deg(base["cam_fovy"][i], now["aspect"])
    assert 13 <= abs(drew["fov"]["fov_change_deg"]) <= 19
    assert change == pytest.approx(drew["fov"]["fov_change_deg"], abs=1e-6)
    assert np.abs(img.astype(int) - clean.astype(int)).mean() > 2


def test_libero_lights_change_by_the_drawn_amounts(libero):
    task, clean, base = libero
    img, now, drew = _run(task, "light_intensity:4")
    k = 1 + drew["light_intensity"]["intensity_change_pct"] / 100
    np.testing.assert_allclose(now["light_diffuse"], base["light_diffuse"] * k)
    np.testing.assert_allclose(now["light_specular"], base["light_specular"] * k)
    assert np.sign(img.astype(float).mean() - clean.astype(float).mean()) == np.sign(k - 1)

    img, now, drew = _run(task, "light_color:5")
    np.testing.assert_allclose(now["light_diffuse"], base["light_diffuse"] * np.asarray(drew["light_color"]["rgb_gain"]))
    assert np.abs(img.astype(int) - clean.astype(int)).mean() > 1

    img, now, drew = _run(task, "light_direction:5")
    for j in range(len(base["light_dir"])):
        assert _angle_deg(now["light_dir"][j], base["light_dir"][j]) == pytest.approx(
            drew["light_direction"]["direction_change_deg"], abs=1e-4)
    assert not np.array_equal(img, clean)


def test_libero_axes_compose_and_clean_reset_restores_the_model(libero):
    task, clean, base = libero
    _, now, drew = _run(task, "camera_pose:2,light_intensity:2")
    assert set(drew) == {"camera_pose", "light_intensity"}
    assert not np.allclose(now["light_diffuse"], base["light_diffuse"])
    assert not np.allclose(now["cam_pos"], base["cam_pos"])
    again = task.reset(0, settle_steps=0).images["agentview"]
    np.testing.assert_array_equal(again, clean)
    assert task.perturbation == {}


# ---------------------------------------------------------------------------------------------------- ManiSkill
def test_maniskill_axes_change_camera_and_lights_by_the_drawn_amounts():
    pytest.importorskip("mani_skill")
    from scipy.spatial.transform import Rotation

    from embeval.sim.maniskill.env import ManiSkillConfig, ManiSkillEnv

    with ManiSkillEnv(ManiSkillConfig("PickCube-v1", width=64, height=64)) as env:
        clean = env.reset(0).images["base_camera"]
        base = env.scene_params()
        env.perturb = Perturbations.parse("camera_pose:3,fov:2,light_color:3,light_direction:3,light_intensity:2")
        img = env.reset(0).images["base_camera"]
        now, drew = env.scene_params(), dict(env.perturbation)
        c0, c1 = base["cameras"]["base_camera"], now["cameras"]["base_camera"]
        p = drew["camera_pose"]
        assert np.linalg.norm(np.subtract(c1["pose"][:3], c0["pose"][:3])) * 100 == pytest.approx(p["translation_cm"], abs=1e-4)
        turn = Rotation.from_quat(np.roll(c1["pose"][3:], -1)) * Rotation.from_quat(np.roll(c0["pose"][3:], -1)).inv()
        assert np.degrees(turn.magnitude()) == pytest.approx(p["rotation_deg"], abs=1e-3)
        assert c1["fovx"] - c0["fovx"] == pytest.approx(drew["fov"]["fov_change_deg"], abs=1e-3)
        k = (1 + drew["light_intensity"]["intensity_change_pct"] / 100) * np.asarray(drew["light_color"]["rgb_gain"])
        np.testing.assert_allclose(now["ambient"], np.asarray(base["ambient"]) * k, rtol=1e-5)
        np.testing.assert_allclose(now["lights"][0]["color"], np.asarray(base["lights"][0]["color"]) * k, rtol=1e-5)
        assert _angle_deg(now["lights"][0]["direction"], base["lights"][0]["direction"]) == pytest.approx(
            drew["light_direction"]["direction_change_deg"], abs=1e-3)
        assert np.abs(img.astype(int) - clean.astype(int)).mean() > 2
        np.testing.assert_array_equal(env.reset(0).images["base_camera"], img)  # same seed, same image
        env.perturb = None
        np.testing.assert_array_equal(env.reset(0).images["base_camera"], clean)  # restored
        assert env.perturbation == {}


def test_cli_render_maniskill_with_perturb(tmp_path, capsys):
    """`embeval sim render --backend maniskill --perturb camera_pose:3` renders the moved camera: the image differs
    from the unperturbed render of the same seed; the same command twice gives the same image."""
    pytest.importorskip("mani_skill")
    from embeval.image_io import read_image
    from embeval_cli import main

    a, b, c = (tmp_path / f"{k}.png" for k in "abc")
    base = ["sim", "render", "--backend", "maniskill", "--task", "PickCube-v1", "--seed", "3", "--width", "64",
            "--height", "64"]
    assert main(base + ["--out", str(a)]) == 0
    assert main(base + ["--perturb", "camera_pose:3", "--out", str(b)]) == 0
    assert main(base + ["--perturb", "camera_pose:3", "--out", str(c)]) == 0
    ia, ib, ic = read_image(a).astype(int), read_image(b).astype(int), read_image(c).astype(int)
    assert np.abs(ia - ib).mean() > 2 and np.array_equal(ib, ic)


def test_docs_support_table_is_the_backends_table():
    """docs/sim.md's "axis | pybullet | LIBERO | ManiSkill" table says "refused" exactly where the backends' records do, and
    names every registered axis once."""
    from pathlib import Path

    from embeval.sim.perturb import AXES

    doc = (Path(__file__).resolve().parents[3] / "docs" / "sim.md").read_text()
    start = doc.index("| axis | pybullet | LIBERO")
    rows = [r for r in doc[start:].split("\n\n", 1)[0].splitlines()[2:] if r.startswith("|")]
    seen = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        names = [n.strip(" `") for n in cells[0].split(",")]
        seen += names
        for name in names:
            for backend, cell in (("libero", cells[2]), ("maniskill", cells[3])):
                assert cell.startswith("refused") == (name in _unsupported(backend)), (name, backend, cell)
    assert sorted(seen) == sorted(AXES.names())
