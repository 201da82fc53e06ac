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


def test_the_demo_uses_the_shipped_finetune_of_its_own_recipe(tmp_path, capsys):
    """The demo's full-size fine-tune is shipped (a fresh clone spent ~6.5 min training it): the
    shipped recipe.json must equal what the demo would train, and the demo loads it instead."""
    import json
    import types

    from embeval.act2answer.scene import EpisodeSpec
    from embeval_demo import act2answer as demo
    from embeval.subjects.embedded.zoo import MODELS_DIR

    ctx = types.SimpleNamespace(quick=False, seed=0)
    shipped = json.loads((MODELS_DIR / demo.SHIPPED_FINETUNE / "recipe.json").read_text())
    assert shipped == demo._recipe(ctx, EpisodeSpec()), (
        "the shipped demo fine-tune is stale: run EMBEVAL_DEMO_RETRAIN=1 embeval demo --only act2answer and copy "
        "runs/demo/act2answer/tiny-vla-a2a into src/embeval/data/models/demo/")
    pol = demo._finetuned(tmp_path, ctx, EpisodeSpec())
    assert pol.id == "tiny-vla-a2a" and "using the shipped fine-tune" in capsys.readouterr().out
    assert not (tmp_path / "train_items").exists()  # nothing was trained
    # another seed, the quick size or another episode geometry is another recipe: trained, not the shipped one
    assert demo._recipe(types.SimpleNamespace(quick=False, seed=1), EpisodeSpec()) != shipped
    assert demo._recipe(types.SimpleNamespace(quick=True, seed=0), EpisodeSpec()) != shipped
    assert demo._recipe(ctx, EpisodeSpec(eps=0.1)) != shipped
