"""Act2Answer as a ManiSkill scene: the card images appear with the cell's orientation, and the
privileged placer answers correctly in both layouts (the swap moves the correct card), judged by the
same zone classifier and termination rule as the UR5 cell."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("mani_skill")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from embeval.act2answer.items import BinaryItem
    from embeval.act2answer.maniskill import make_env

    d = tmp_path_factory.mktemp("cards")
    left = np.zeros((64, 64, 3), np.uint8)
    left[:32] = (0, 0, 255)  # top half blue
    left[32:] = (255, 0, 255)  # bottom half magenta
    Image.fromarray(left).save(d / "L.png")
    Image.fromarray(np.full((64, 64, 3), (0, 255, 255), np.uint8)).save(d / "R.png")  # cyan
    item = BinaryItem("t1", "Which picture is red and blue?", str(d / "L.png"), str(d / "R.png"), "left", "color")
    env = make_env(96, 96)
    yield env, item
    env.close()


def test_card_texture_orientation(setup):
    from embeval.act2answer.scene import EpisodeSpec

    env, item = setup
    # cards far from the arm, seen from straight above with +x up in the image
    spec = EpisodeSpec(left_card_xy=(0.8, 0.2), right_card_xy=(0.8, -0.2), card_size=0.15)
    env.unwrapped.configure(spec, {"card_left": item.left_image, "card_right": item.right_image}, "left")
    env.env.reset(seed=0, options={"reconfigure": True})
    img = env.reset(seed=0).images["base_camera"].astype(int)
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    blue = (b > 120) & (r < 0.5 * b) & (g < 0.5 * b)
    magenta = (r > 120) & (b > 120) & (g < 0.5 * r)
    cyan = (g > 120) & (b > 120) & (r < 0.5 * g)
    assert blue.sum() > 10 and magenta.sum() > 10 and cyan.sum() > 10, (blue.sum(), magenta.sum(), cyan.sum())
    # base_camera looks back at the robot from +x (image up = -x, image right = +y): the image's top half
    # (+x on the card) lies nearer the camera, lower in the picture; the left card (+y) on the right
    assert np.mean(np.nonzero(blue)[0]) > np.mean(np.nonzero(magenta)[0])
    assert np.mean(np.nonzero(blue)[1]) > np.mean(np.nonzero(cyan)[1])


@pytest.mark.parametrize("layout,side", [("original", "left"), ("swapped", "right")])
def test_placer_answers_in_both_layouts(setup, layout, side):
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.act2answer.maniskill import CardExpert, run_episode

    env, item = setup
    r = run_episode(env, CardExpert(env), item, layout, EpisodeSpec(max_steps=45), seed=0)
    assert (r.correct_side, r.choice, r.zone, r.success) == (side, side, "correct", 1.0), r
    assert r.end_reason == "released" and r.termination == "release_after_lift" and r.distance_correct < 0.03
