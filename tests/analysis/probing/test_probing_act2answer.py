"""Layerwise probing: CNR hand cases, probes on planted signals vs an independent sklearn loop,
controls, and hidden-state capture from the tiny VLA on Act2Answer scenes."""
import math

import numpy as np
import pytest
from embeval_analysis.probing import (
    Features,
    chance_normalized_retention,
    collect_features,
    plot_layer_accuracy,
    probe_layers,
)

from embeval.errors import ConfigError


def test_cnr_hand_cases():
    assert chance_normalized_retention([0.6, 0.7], [0.8, 0.9], 0.5, eps=0) == pytest.approx(0.5)
    assert chance_normalized_retention([0.9], [0.9], 0.5) == pytest.approx(1.0, abs=1e-5)
    assert chance_normalized_retention([0.45], [0.75], 0.5, eps=0) == pytest.approx(-0.2)
    # no backbone layer above chance: the paper's formula as written (the default), NaN as the option
    assert chance_normalized_retention([0.7], [0.5], 0.5) == pytest.approx(0.2 / 1e-6)
    assert math.isnan(chance_normalized_retention([0.7], [0.5], 0.5, below_chance="nan"))  # nothing to retain
    with pytest.raises(ConfigError):
        chance_normalized_retention([], [0.7])


def planted(n_items=40, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"i{k}" for k in range(n_items)], 2)
    y = np.tile([0, 1], n_items)
    rng.shuffle(y.reshape(-1, 2).T)  # per item one layout each way
    signal = np.where(y[:, None] == 1, 1.0, -1.0) * np.r_[1.5, np.zeros(15)] + rng.normal(0, 0.5, (2 * n_items, 16))
    noise = rng.normal(0, 1, (2 * n_items, 16))
    return Features({"backbone.0": signal.astype(np.float32), "action_expert.0": noise.astype(np.float32)}, y, groups,
                    np.array(["c"] * 2 * n_items), "planted")


def test_probes_find_planted_signal_and_match_sklearn_loop():
    f = planted()
    rep = probe_layers(f, folds=5, seed=0)
    by = {p.layer: p for p in rep.layers}
    assert by["backbone.0"].accuracy > 0.9
    assert abs(by["action_expert.0"].accuracy - 0.5) < 0.2
    assert abs(by["backbone.0"].shuffled - 0.5) < 0.2  # shuffled-label control at chance
    assert rep.cnr < 0.5
    # independent loop: GroupKFold folds, fresh scaler + logistic regression per fold
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.preprocessing import StandardScaler

    X, accs = f.layers["backbone.0"], []
    for tr, te in GroupKFold(5).split(X, f.labels, f.groups):
        assert not set(f.groups[tr]) & set(f.groups[te])  # an item's layouts never straddle folds
        sc = StandardScaler().fit(X[tr])
        m = LogisticRegression(max_iter=2000, random_state=0).fit(sc.transform(X[tr]), f.labels[tr])
        accs.append(np.mean(m.predict(sc.transform(X[te])) == f.labels[te]))
    assert by["backbone.0"].accuracy == pytest.approx(np.mean(accs))


def test_random_weight_control_and_plot(tmp_path):
    f, ctrl = planted(seed=1), planted(seed=2)
    ctrl.layers["backbone.0"] = np.random.default_rng(3).normal(size=ctrl.layers["backbone.0"].shape).astype(np.float32)
    rep = probe_layers(f, ctrl, folds=4)
    assert rep.layers[0].random_weights is not None and abs(rep.layers[0].random_weights - 0.5) < 0.2
    png = plot_layer_accuracy(rep, tmp_path / "p.png", stamp="test")
    assert png.stat().st_size > 1000
    assert "CNR" in rep.table()
    one = Features({"backbone.0": np.zeros((4, 2))}, np.zeros(4, int), np.array(list("aabb")), np.array(list("cccc")))
    with pytest.raises(ConfigError):
        probe_layers(one)


def test_collect_features_from_tiny_vla(tmp_path):
    from embeval.act2answer.generator import generate_items
    from embeval.act2answer.subjects import untrained_policy

    items = generate_items(tmp_path, ["color"], per_category=2, seed=0)
    pol = untrained_policy(seed=0)
    f = collect_features(pol, items, obs_size=(64, 48))
    assert set(f.layers) == {"backbone.0", "backbone.1", "action_expert.0", "action_expert.1"}
    assert f.layers["backbone.0"].shape == (4, 256) and f.layers["action_expert.1"].shape == (4, 128)
    assert list(f.groups) == [items[0].id, items[0].id, items[1].id, items[1].id]
    assert f.labels[0] != f.labels[1]  # swapped layout flips the label
    # the two layouts differ in the image, so the backbone state differs
    assert not np.allclose(f.layers["backbone.0"][0], f.layers["backbone.0"][1])
    with pytest.raises(ConfigError):
        collect_features(object(), items)


def test_transfer_probe_separates_shared_from_category_specific_answers():
    """A shared answer direction transfers from the fitted categories to the others; an answer coded
    along a different direction per category is found by the within-category CV but not transferred."""
    from embeval_analysis.probing import probe_transfer

    rng = np.random.default_rng(0)
    cats = np.repeat(["a", "b", "c", "d"], 60)
    y = rng.integers(0, 2, len(cats))
    sign = np.where(y == 1, 1.0, -1.0)
    shared = rng.normal(0, 0.5, (len(cats), 8))
    shared[:, 0] += 1.5 * sign
    specific = rng.normal(0, 0.5, (len(cats), 8))
    specific[np.arange(len(cats)), 1 + np.searchsorted(["a", "b", "c", "d"], cats)] += 1.5 * sign  # own axis per category
    f = Features({"backbone.0": shared.astype(np.float32), "action_expert.0": specific.astype(np.float32)}, y,
                 np.arange(len(cats)).astype(str), cats, "planted")
    within = probe_layers(f, folds=5, seed=0)
    assert min(p.accuracy for p in within.layers) > 0.8 and within.cnr > 0.8
    rep = probe_transfer(f, ["a", "b"], seed=0)
    acc = {p.layer: p.accuracy for p in rep.layers}
    assert rep.n_samples == 120 and rep.folds == 1
    assert acc["backbone.0"] > 0.9 and abs(acc["action_expert.0"] - 0.5) < 0.12 and rep.cnr < 0.25
    with pytest.raises(ConfigError, match="both labels"):
        probe_transfer(f, ["a", "b", "c", "d"])
