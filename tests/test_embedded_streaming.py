"""`embeval train vla` streams its demonstrations (issue 20): frames are decoded and resized one at a
time instead of all decoded at full size first. The arrays it trains on, and so the trained weights,
are the same as with the previous loader (kept here as the reference)."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.subjects.embedded.nets import VisionConfig, VLAConfig
from embeval.subjects.embedded.preprocess import resize_image
from embeval.subjects.embedded.recipes import demo_arrays
from embeval.subjects.embedded.training import DemoArrays, TrainConfig, train_vla


def _old_demo_arrays(root, image_size, cameras, episodes=None) -> DemoArrays:
    """The loader before issue 20: every image column decoded at full size and stacked, then resized."""
    import io

    import pyarrow.parquet as pq
    from PIL import Image

    from embeval.datasets import validate_layout

    info = validate_layout(root)
    table = pq.read_table(sorted((root / "data").glob("chunk-*/file-*.parquet"))[0])
    frames = {}
    for k, f in info["features"].items():
        col = table.column(k).to_pylist()
        if f["dtype"] == "image":
            frames[k] = np.stack([np.asarray(Image.open(io.BytesIO(c["bytes"])).convert("RGB")) for c in col])
        else:
            frames[k] = np.asarray(col, dtype=f["dtype"]).reshape(len(col), *f["shape"])
    ep, ti = np.asarray(table.column("episode_index")), np.asarray(table.column("task_index"))
    tasks_df = pq.read_table(root / "meta" / "tasks.parquet").to_pandas()
    tasks = [t for t, _ in sorted(zip(tasks_df.index, tasks_df["task_index"]), key=lambda x: x[1])]
    keep = np.ones(len(ep), bool) if episodes is None else np.isin(ep, episodes)
    images = {cam: np.stack([resize_image(im, image_size) for im in frames[f"observation.images.{cam}"][keep]]) for cam in cameras}
    st = frames["observation.state"][keep]
    return DemoArrays(images, np.concatenate([st[:, :3], st[:, 7:8]], axis=1).astype(np.float32),
                      frames["action"][keep].astype(np.float64), ti[keep], tasks, ep[keep],
                      frames["observation.environment_state"][keep].astype(np.float64),
                      frames["expert.waypoint"][keep].astype(np.float64), frames["expert.phase"][keep, 0].astype(np.int64))


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
