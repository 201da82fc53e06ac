"""Expert demonstrations on Act2Answer items and a (very short) fine-tune of the tiny VLA."""
import numpy as np

from embeval.act2answer.finetune import finetune_tiny_vla, record_demos
from embeval.act2answer.generator import generate_items


def test_demos_and_short_finetune(tmp_path):
    items = generate_items(tmp_path / "s", ["color"], per_category=1, seed=5)
    d = record_demos(items, seed=0)
    assert set(np.unique(d.episode_index)) == {0, 1}  # both layouts, both successful
    assert d.images["third_person"].shape[1:] == (48, 64, 3) and d.state.shape[1] == 4 and d.action.shape[1] == 7
    assert d.aux.shape == (len(d), 6)
    goals = {tuple(round(float(v), 3) for v in a[3:5]) for a in d.aux}
    assert goals == {(0.55, 0.15), (0.55, -0.15)}  # the correct card moves with the layout
    assert d.action[:, 6].min() == 0.0 and d.action[-1, 6] == 1.0  # grasps, ends with the release
    _pol, n = finetune_tiny_vla(items, tmp_path / "m", steps=3, seed=0, threads=1)
    assert n == len(d) and (tmp_path / "m" / "config.json").exists()
    from embeval.subjects.embedded.zoo import load_vla

    assert load_vla(tmp_path / "m").id == "tiny-vla-a2a"
