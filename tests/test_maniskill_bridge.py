"""Act2Answer items staged in SimplerEnv-style Bridge scenes (WidowX): the offline part (item -> scene
spec, frames, zones, swap) and the asset message; building the env needs ManiSkill's download."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.act2answer.items import BinaryItem
from embeval.errors import ConfigError
from embeval.act2answer import maniskill_bridge as B


@pytest.fixture
def item(tmp_path):
    return BinaryItem("b1", "Which picture shows a cat?", str(tmp_path / "cat.png"), str(tmp_path / "dog.png"), "left", "object")


def test_item_to_scene_spec_and_swap(item):
    o = B.bridge_scene(item, "original")
    s = B.bridge_scene(item, "swapped", "PutSpoonOnTableClothInScene-v1")
    assert (o.env_id, o.carried, o.parked) == ("PutCarrotOnPlateInScene-v1", "bridge_carrot_generated_modified",
                                               "bridge_plate_objaverse_larger")
    assert (s.carried, s.parked) == ("bridge_spoon_generated_modified", "table_cloth_generated_shorter")
    assert o.instruction == s.instruction and item.question in o.instruction
    # the swap exchanges the images on the cards and moves the correct side with them
    assert (o.textures["card_left"], o.textures["card_right"], o.correct_side) == (item.left_image, item.right_image, "left")
    assert (s.textures["card_left"], s.textures["card_right"], s.correct_side) == (item.right_image, item.left_image, "right")
    with pytest.raises(ConfigError, match="PutCarrotOnPlateInScene-v1"):
        B.bridge_scene(item, "original", "PutCarrotOnPlate-v9")
    with pytest.raises(ConfigError, match="layout"):
        B.bridge_scene(item, "mirrored")


def test_frames_and_geometry_on_the_bridge_table(item):
    sc = B.bridge_scene(item, "original")
    sp = sc.spec
    # the robot is turned 180 deg: base +y (left) is world -y; the object grid centre (-0.16, 0) is base (0.287, 0.06)
    assert B.base_to_world((0.287, 0.06)) == pytest.approx((-0.16, 0.0))
    assert B.world_to_base(B.base_to_world((0.31, -0.02))) == pytest.approx((0.31, -0.02))
    lx, ly, lz = sc.card_world_xyz("card_left")
    rx, ry, _ = sc.card_world_xyz("card_right")
    assert ly < ry and lx == pytest.approx(rx) and lz == pytest.approx(B.TABLE_Z + 0.003)
    # both cards and the start lie on ManiSkill's object grid (x, y within 0.075 m of the grid centre)
    for xy in (sp.left_card_xy, sp.right_card_xy, sp.cube_xy):
        wx, wy = B.base_to_world(xy)
        assert abs(wx + 0.16) <= 0.075 + 1e-9 and abs(wy) <= 0.075 + 1e-9, xy
    # the zones do not overlap, and the start is in none of them
    assert np.hypot(*np.subtract(sp.left_card_xy, sp.right_card_xy)) > 2 * sp.eps
    assert min(np.hypot(*np.subtract(sp.cube_xy, c)) for c in (sp.left_card_xy, sp.right_card_xy)) > sp.eps


@pytest.mark.parametrize("layout,on,zone", [("original", "card_left", "correct"), ("original", "card_right", "incorrect"),
                                            ("swapped", "card_left", "incorrect"), ("swapped", "card_right", "correct")])
def test_zones_of_the_carried_object(item, layout, on, zone):
    sc = B.bridge_scene(item, layout)
    x, y, _ = sc.card_world_xyz(on)
    r = B.scene_result(sc, (x + 0.01, y - 0.01), end_reason="released", stopped=False, steps=12, subject="s")
    assert (r.zone, r.choice, r.layout, r.success) == (zone, on.split("_")[1], layout, float(zone == "correct"))
    bx, by = B.world_to_base((x + 0.01, y - 0.01))  # world +x, -y = base -x, +y
    cx, cy = sc.spec.card_xy(sc.correct_side)
    assert r.distance_correct == pytest.approx(float(np.hypot(bx - cx, by - cy)), abs=1e-4)
    assert r.cube_xy == pytest.approx((bx, by), abs=1e-5)
    if zone == "correct":
        assert r.distance_correct == pytest.approx(0.01414, abs=1e-4)
    assert r.instruction == sc.instruction and r.termination == "release_after_lift"
    far = B.scene_result(sc, B.base_to_world(sc.spec.cube_xy), end_reason="max_steps", stopped=False, steps=60)
    assert (far.zone, far.choice, far.success) == ("out_of_bounds", None, 0.0)


def test_missing_assets_name_the_download_command(item, monkeypatch):
    pytest.importorskip("mani_skill")
    from embeval.sim.maniskill import env as E

    monkeypatch.setattr(E, "missing_assets", lambda env_id, robot=None: ["bridge_v2_real2sim", "widowx250s"])
    cmd = ("python -m mani_skill.utils.download_asset bridge_v2_real2sim -y && "
           "python -m mani_skill.utils.download_asset widowx250s -y")
    with pytest.raises(ConfigError) as e:
        B.make_bridge_env(B.bridge_scene(item, "original"))
    msg = str(e.value)
    assert cmd in msg and "PutCarrotOnPlateInScene-v1" in msg and "MS_ASSET_DIR" in msg and "\n" not in msg
    # the uids are ManiSkill's own data-source ids
    from mani_skill.utils.assets.data import DATA_SOURCES

    assert set(B.ASSETS) <= set(DATA_SOURCES)
    monkeypatch.setattr(E, "missing_assets", lambda env_id, robot=None: [])
    B.require_assets()  # nothing missing: no error
    # the folders "present" but the files absent (a partial download): the Bridge env's own open fails,
    # answered by the same message (this builds the wrapper class on ManiSkill's Bridge env)
    from mani_skill import ASSET_DIR

    if (ASSET_DIR / "tasks/bridge_v2_real2sim_dataset/custom").exists():
        pytest.skip("the Bridge assets are downloaded here")
    with pytest.raises(ConfigError) as e:
        B.make_bridge_env(B.bridge_scene(item, "original"), obs_mode="state")
    assert cmd in str(e.value) and "FileNotFoundError" in str(e.value) and "\n" not in str(e.value)


def test_offline_here_the_real_check_names_the_command(item):
    pytest.importorskip("mani_skill")
    from embeval.sim.maniskill.env import missing_assets

    if not missing_assets("PutCarrotOnPlateInScene-v1", "widowx"):
        pytest.skip("the Bridge assets are downloaded here")
    with pytest.raises(ConfigError, match=r"download_asset bridge_v2_real2sim -y"):
        B.require_assets()
