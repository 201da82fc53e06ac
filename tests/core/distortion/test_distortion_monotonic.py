"""Severity rises with the level: mean PSNR against the reference falls from level 1 to 5 for every
type, on scikit-image photographs, on synthetic robot tabletop images and on renders of the
simulated workcell (independent PSNR: scikit-image)."""
from __future__ import annotations

import numpy as np
import pytest
from skimage.metrics import peak_signal_noise_ratio

from embeval.distortion import DISTORTIONS, distort
from embeval.distortion.measures import mean_abs_shift, psnr, rms_contrast_loss
from embeval.distortion.samples import PHOTOS, photo, synthetic_tabletop

SIZE = (320, 240)
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def sets():
    photos = [photo(p, SIZE) for p in PHOTOS]
    robot = [synthetic_tabletop(*SIZE, seed=s) for s in (0, 1, 2)]
    return {"photos": photos, "robot": robot, "sim": _sim_renders()}


def _sim_renders() -> list[np.ndarray]:
    """The pybullet workcell's Embodied-IQA reference scenes, wrist and third-person views."""
    from embeval.sim.references import VIEWS, reference_scene
    from embeval.sim.workcell import SimConfig, Workcell

    out = []
    with Workcell(SimConfig(mode="physics")) as cell:
        for k in range(2):
            cell.load(reference_scene(k)[0])
            out += [cell.render(v, *SIZE) for v in VIEWS.values()]
    return out


def _mean_curve(images, name, measure):
    return np.array([[np.mean([measure(im, distort(im, name, lv, seed=s)) for im in images]) for lv in range(1, 6)]
                     for s in SEEDS]).mean(axis=0)


@pytest.mark.parametrize("kind", ["photos", "robot", "sim"])
def test_mean_psnr_falls_with_level(sets, kind):
    assert len(sets[kind]) >= 3, f"too few {kind} images to measure a mean"
    bad = {}
    for name in DISTORTIONS:
        curve = _mean_curve(sets[kind], name, lambda a, b: peak_signal_noise_ratio(a, b, data_range=255))
        if not np.all(np.diff(curve) < 0):
            bad[name] = np.round(curve, 2).tolist()
    assert not bad, f"mean PSNR not strictly decreasing on {kind}: {bad}"


def test_secondary_measures_rise(sets):
    images = sets["photos"] + sets["robot"]
    shift = _mean_curve(images, "mean_shift", mean_abs_shift)
    contrast = _mean_curve(images, "contrast_change", rms_contrast_loss)
    assert np.all(np.diff(shift) > 0) and shift[0] > 1
    assert np.all(np.diff(contrast) > 0) and 0 < contrast[0] < contrast[-1] < 1


def test_psnr_matches_skimage():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    assert psnr(a, b) == pytest.approx(peak_signal_noise_ratio(a, b, data_range=255), abs=1e-9)
    assert psnr(a, a) == float("inf")


def test_documented_behaviour_of_some_types():
    im = photo("chelsea", SIZE)
    # mean shift adds the level's offset where nothing clips
    off = DISTORTIONS["mean_shift"].levels[2]
    out = distort(im, "mean_shift", 3)
    keep = im.astype(int) + off <= 255
    np.testing.assert_array_equal(out.astype(int)[keep], im.astype(int)[keep] + off)
    # HSV saturation 0 at level 5: grey image
    grey = distort(im, "color_saturation_hsv", 5).astype(int)
    assert np.abs(grey[..., 0] - grey[..., 1]).max() <= 1 and np.abs(grey[..., 1] - grey[..., 2]).max() <= 1
    # quantisation leaves at most `levels` values per channel
    q = distort(im, "quantization", 5)
    assert all(len(np.unique(q[..., c])) <= DISTORTIONS["quantization"].levels[4] for c in range(3))
    # colour quantisation leaves at most `colors` colours
    cq = distort(im, "color_quantization", 5)
    assert len(np.unique(cq.reshape(-1, 3), axis=0)) <= DISTORTIONS["color_quantization"].levels[4]
    # impulse noise: hit pixels are black or white, about the stated fraction
    imp = distort(im, "impulse_noise", 5, seed=2)
    changed = np.any(imp != im, axis=2)
    assert set(np.unique(imp[changed])) <= {0, 255}
    assert abs(changed.mean() - DISTORTIONS["impulse_noise"].levels[4]) < 0.02
    # white noise: residual std close to sigma away from clipping
    mid = (im > 60) & (im < 195)
    wn = distort(im, "white_noise", 2, seed=0).astype(float) - im
    assert wn[mid].std() == pytest.approx(DISTORTIONS["white_noise"].levels[1], rel=0.05)
    # packet loss: a higher level's lost blocks include the lower level's (same seed)
    lost = [np.any(distort(im, "packet_loss", lv, seed=5) != im, axis=2) for lv in (2, 4)]
    assert lost[0].sum() < lost[1].sum()


def test_hsv_saturation_matches_opencv_hsv_round_trip():
    import cv2

    im = photo("coffee", SIZE)
    for level, factor in enumerate(DISTORTIONS["color_saturation_hsv"].levels, start=1):
        hsv = cv2.cvtColor(im.astype(np.float32) / 255, cv2.COLOR_RGB2HSV)
        hsv[..., 1] *= factor
        ref = np.clip(cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB) * 255 + 0.5, 0, 255).astype(np.uint8)
        diff = np.abs(distort(im, "color_saturation_hsv", level).astype(int) - ref)
        assert diff.max() <= 1, (level, diff.max())


def test_contrast_change_matches_formula():
    im = photo("rocket", SIZE)
    f = DISTORTIONS["contrast_change"].levels[3]
    ref = np.clip(im.mean() + f * (im.astype(float) - im.mean()), 0, 255)
    assert np.abs(distort(im, "contrast_change", 4).astype(float) - ref).max() <= 0.5 + 1e-9
