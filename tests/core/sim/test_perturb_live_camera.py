"""Camera-side scene perturbations on the live camera stream: the sim source renders through the perturbed
camera and lights drawn from the episode seed, the arm's world unchanged; real and recorded sources refuse them."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.camera import make_source
from embeval.sim.perturb.live import CAMERA_SIDE_AXES, PerturbedRenderer, check_live_perturb
from embeval.errors import ConfigError
from embeval.sim.perturb import Perturbations

W, H = 64, 48


@pytest.fixture(scope="module")
def arm():
    from embeval.sim.arm_backend import SimArmBackend

    a = SimArmBackend(task="Pick", seed=3)
    yield a
    a.cell.close()


def test_check_live_perturb_parses_camera_side_axes_for_sim():
    p = check_live_perturb(["camera_pose:3", "light_intensity:2"], "sim")
    assert [str(x) for x in p] == ["camera_pose:3", "light_intensity:2"]
    assert check_live_perturb([""], "sim") is None and check_live_perturb([], "realsense") is None  # ROS's empty default
    assert set(CAMERA_SIDE_AXES) == {"camera_pose", "fov", "light_color", "light_direction", "light_intensity"}


@pytest.mark.parametrize("source, why", [("realsense", "a real camera cannot be moved"),
                                         ("folder", "recorded images cannot be re-rendered"),
                                         ("bag", "recorded images cannot be re-rendered"),
                                         ("synthetic", "no 3-D camera or lights")])
def test_real_and_recorded_sources_refuse_camera_axes_in_one_line(source, why):
    with pytest.raises(ConfigError) as e:
        check_live_perturb(["camera_pose:3"], source)
    msg = str(e.value)
    assert "\n" not in msg and why in msg and "apply image distortions instead" in msg


@pytest.mark.parametrize("axis", ["distractors:2", "initial_state:1", "table_texture:3", "instruction:2"])
def test_world_axes_are_refused_even_for_sim(axis):
    with pytest.raises(ConfigError, match=r"changes the world.*sim episodes --perturb"):
        check_live_perturb([axis], "sim")


def test_camera_pose_renders_from_the_drawn_pose_and_leaves_the_world(arm):
    cell = arm.cell
    base = cell.scene
    clean = arm.render("third_person", W, H)
    r = PerturbedRenderer(cell, Perturbations.parse("camera_pose:5"), seed=3, width=W, height=H, lock=arm.lock)
    img = r("third_person")
    assert cell.scene is base  # restored after the render
    assert img.shape == (H, W, 3) and np.abs(img.astype(int) - clean).mean() > 3.0
    drawn = r.drawn["camera_pose"]
    moved = np.subtract(r.view().camera("third_person").position, base.camera("third_person").position)
    assert np.linalg.norm(moved) * 100 == pytest.approx(drawn["translation_cm"], rel=1e-9)  # cm
    assert 11 <= drawn["translation_cm"] <= 16 and drawn["level"] == 5
    assert np.array_equal(r("wrist"), arm.render("wrist", W, H))  # the wrist camera rides on the TCP
    assert np.array_equal(arm.render("third_person", W, H), clean)  # the unperturbed view is untouched
    again = PerturbedRenderer(cell, Perturbations.parse("camera_pose:5"), seed=3, width=W, height=H)
    assert np.array_equal(again("third_person"), img)  # same seed, same view
    other = PerturbedRenderer(cell, Perturbations.parse("camera_pose:5"), seed=4, width=W, height=H)
    assert not np.array_equal(other("third_person"), img)


def test_light_intensity_follows_the_drawn_sign_and_the_arm_still_moves(arm):
    clean = arm.render("third_person", W, H).astype(float).mean()
    for seed in range(6):
        r = PerturbedRenderer(arm.cell, Perturbations.parse("light_intensity:5"), seed=seed, width=W, height=H)
        change = r.view() and r.drawn["light_intensity"]["intensity_change_pct"]
        got = r("third_person").astype(float).mean()
        assert np.sign(got - clean) == np.sign(change), (seed, change, got, clean)
    r = PerturbedRenderer(arm.cell, Perturbations.parse("camera_pose:2"), seed=0, width=W, height=H, lock=arm.lock)
    before = r("wrist")
    arm.apply_action([0.0, 0.03, 0.0, 0.0, 0.0, 0.0, 1.0])  # the live world moves, the perturbation stays
    assert not np.array_equal(r("wrist"), before)


def test_a_new_scene_is_drawn_again():
    from embeval.sim.tasks import make_task
    from embeval.sim.workcell import SimConfig, Workcell

    with Workcell(SimConfig(mode="kinematic")) as cell:
        cell.load(make_task("Pick", 0)[0])
        r = PerturbedRenderer(cell, Perturbations.parse("fov:4"), seed=1, width=W, height=H)
        first = r.view()
        cell.load(make_task("Pick", 1)[0])
        assert r.view() is not first and r.view().objects == cell.scene.objects
        from embeval.sim.perturb.fov import hfov_deg

        change = hfov_deg(r.view().camera("third_person")) - hfov_deg(cell.scene.camera("third_person"))
        assert change == pytest.approx(r.drawn["fov"]["fov_change_deg"]) and 8 <= abs(change) <= 19  # deg, level 4


def test_sim_source_with_a_perturbed_renderer(arm):
    r = PerturbedRenderer(arm.cell, Perturbations.parse("light_color:4"), seed=2, width=W, height=H, lock=arm.lock)
    src = make_source("sim", renderer=r, camera="third_person")
    f = src.read()
    assert f.image.shape == (H, W, 3) and np.array_equal(f.image, r("third_person"))


def test_camera_node_streams_the_perturbed_view_and_folder_refuses(tmp_path):
    pytest.importorskip("rclpy")
    from embeval_ros.graph import Graph

    from embeval.sim.arm_backend import SimArmBackend

    arm = SimArmBackend(task="Pick", seed=3)  # the graph closes the shared arm on exit

    shared = {"arm": arm, "renderer": lambda camera: arm.render(camera, W, H)}
    params = {"embeval_camera": {"source": "sim", "rate_hz": 20.0, "width": W, "height": H, "seed": 3,
                                 "perturb": ["camera_pose:5"]}}
    with Graph(params, shared=shared) as g:
        node = g.nodes["embeval_camera"]
        g.wait_for(lambda g: node.frames >= 2, 20, "two camera frames")
        img = node.source.read().image
        expect = PerturbedRenderer(arm.cell, Perturbations.parse("camera_pose:5"), seed=3, width=W, height=H)("third_person")
        clean = arm.render("third_person", W, H)
    assert np.array_equal(img, expect) and not np.array_equal(img, clean)
    (tmp_path / "a.png").write_bytes(b"")
    bad = {"embeval_camera": {"source": "folder", "folder": str(tmp_path), "perturb": ["light_intensity:2"]}}
    with pytest.raises(ConfigError, match="recorded images cannot be re-rendered.*apply image distortions instead"):
        with Graph(bad):
            pass
