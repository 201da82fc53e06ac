"""`embeval train vla` streams its demonstrations: frames are decoded and resized one at a
time instead of all decoded at full size first. The arrays it trains on, and so the trained weights,
are the same as with the previous loader (kept here as the reference)."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.subjects.embedded.nets import VisionConfig, VLAConfig
from embeval.subjects.embedded.recipes import demo_arrays
from embeval.subjects.embedded.training import DemoArrays, TrainConfig, train_vla


def _old_demo_arrays(root, image_size, cameras, episodes=None) -> DemoArrays:
    """The earlier loader (every image decoded at full size and stacked, then resized), kept as
    the reference in the training-memory bench."""
    from bench.bench_train_memory import old_demo_arrays

    return old_demo_arrays(root, image_size, cameras, episodes)


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    from embeval.datasets.demos import DemoConfig, record_demos

    root = tmp_path_factory.mktemp("stream") / "ds"
    record_demos(root, DemoConfig(episodes=3, seed=2, max_frames=12))
    return root


def _same(a: DemoArrays, b: DemoArrays):
    assert sorted(a.images) == sorted(b.images)
    for c in a.images:
        assert a.images[c].dtype == np.uint8 and np.array_equal(a.images[c], b.images[c])
    for f in ("state", "action", "task_index", "episode_index", "aux", "waypoint", "phase"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and np.array_equal(x, y), f
    assert a.tasks == b.tasks


def test_streamed_arrays_equal_previous_loader(demos, monkeypatch):
    import embeval.datasets.lerobot_format as lf

    cams = ("third_person", "wrist")
    for size, eps in (([48, 64], None), ([24, 32], np.array([0, 2])), ([96, 128], None)):
        _same(demo_arrays(demos, size, cams, eps), _old_demo_arrays(demos, size, cams, eps))
    # several read batches per column give the same arrays
    seen = []
    real = lf._stream_images
    monkeypatch.setattr(lf, "_stream_images", lambda *a: seen.append(a[4]) or real(*a[:4], 5, a[5]))
    _same(demo_arrays(demos, [48, 64], cams), _old_demo_arrays(demos, [48, 64], cams))
    assert seen


def test_training_on_streamed_frames_gives_identical_weights(demos):
    import torch

    cfg = TrainConfig(steps=4, batch_size=8, log_every=2)
    vcfg = dict(cameras=["third_person", "wrist"], image_size=[48, 64], vision=VisionConfig(width=8), backbone_dims=[64], expert_dims=[64])
    new = train_vla(demo_arrays(demos, [48, 64], vcfg["cameras"]), VLAConfig(**vcfg), cfg, seed=1)[0]
    old = train_vla(_old_demo_arrays(demos, [48, 64], vcfg["cameras"]), VLAConfig(**vcfg), cfg, seed=1)[0]
    a, b = new.net.state_dict(), old.net.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], v) for k, v in train_vla(demo_arrays(demos, [48, 64], vcfg["cameras"]), VLAConfig(**vcfg),
                                                                cfg, seed=2)[0].net.state_dict().items())  # the check can fail


def test_missing_camera_named(demos):
    from embeval.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="no camera 'top'.*third_person"):
        demo_arrays(demos, [48, 64], ("top",))


def test_writer_image_stats_equal_the_all_at_once_formula():
    """The LeRobot writer's image statistics, computed one episode at a time, equal (bit for bit) the
    previous formula over all frames concatenated in float64."""
    from embeval.datasets.lerobot_format import _image_stats, _stats

    rng = np.random.default_rng(1)
    for k in range(4):
        eps = [rng.integers(0, 256, (int(rng.integers(1, 30)), 24, 32, 3), dtype=np.uint8) for _ in range(int(rng.integers(1, 12)))]
        if k == 3:
            eps = [np.full((3, 4, 5, 3), 9, np.uint8), np.zeros((2, 4, 5, 3), np.uint8)]
        assert _image_stats(eps) == _stats(np.concatenate(eps), True)


def test_training_on_shared_channels_last_frames_gives_identical_weights(demos, monkeypatch):
    """train_vla gathers each batch from the (N, H, W, 3) frames and makes it channels-first, instead of
    holding a channels-first copy of all frames (the previous way, restored here): same weights."""
    import torch

    from embeval.subjects.embedded import training

    data = demo_arrays(demos, [48, 64], ("third_person", "wrist"))
    vcfg = dict(cameras=["third_person", "wrist"], image_size=[48, 64], vision=VisionConfig(width=8), backbone_dims=[64], expert_dims=[64])
    cfg = TrainConfig(steps=4, batch_size=8, log_every=2)
    new = train_vla(data, VLAConfig(**vcfg), cfg, seed=4)[0].net.state_dict()
    monkeypatch.setattr(training, "frames_source", lambda a: torch.from_numpy(a).permute(0, 3, 1, 2).contiguous())
    monkeypatch.setattr(training, "frames_batch", lambda v, ii: v[ii])
    old = train_vla(data, VLAConfig(**vcfg), cfg, seed=4)[0].net.state_dict()
    assert all(torch.equal(new[k], old[k]) for k in new)
