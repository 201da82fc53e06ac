"""Linear probes per layer, their controls, and Chance-Normalized Retention (CNR).

Each layer's features are standardised and fed to an L2 logistic regression; accuracy is
estimated by grouped k-fold cross-validation (an item's two layouts share a fold). Controls:

- shuffled labels: the same probe on permuted labels (seeded); should sit at chance;
- random weights: the same probe on features from the same architecture with random weights
  (pass them as ``control_features``); a probe that beats it reads what *training* put there.

Transfer probes (:func:`probe_transfer`): the probe is fitted on the items of some categories
(e.g. those an action expert was fine-tuned on) and scored on the items of the others, so a layer
scores high only when it carries the answer along a direction *shared* across categories, the way a
readout trained on the first categories would find it on the rest.

CNR = max_n(s_exp_n - c) / (max_n(s_bb_n - c) + eps): the best above-chance probe accuracy of the
action-expert layers relative to that of the backbone layers (c = chance, 0.5 for binary items).
1 means the action layers keep all the answer information the backbone had; 0 none. The paper's
formula is computed as written, also when no backbone layer beats chance (the denominator is then
at most eps: the value is huge or negative and means nothing; :attr:`ProbeReport.backbone_above_chance`
is False and the table says so). ``below_chance="nan"`` reports NaN there instead (the earlier
default). eps = 1e-6 (the paper does not state it; accuracies are fractions here, c = 0.5).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from embeval.errors import ConfigError


@dataclass
class LayerProbe:
    layer: str
    accuracy: float  # mean cross-validated accuracy
    accuracy_std: float
    shuffled: float  # shuffled-label control accuracy
    random_weights: float | None = None  # same layer of the random-weight network
    dim: int = 0


@dataclass
class ProbeReport:
    subject: str
    n_samples: int
    folds: int
    chance: float
    layers: list[LayerProbe] = field(default_factory=list)
    cnr: float = float("nan")
    backbone_best: float = float("nan")
    expert_best: float = float("nan")
    below_chance: str = "formula"  # how cnr was computed when no backbone layer beats chance (chance_normalized_retention)

    @property
    def backbone_above_chance(self) -> bool:
        """Whether some backbone layer beats chance (else the CNR ratio means nothing)."""
        return bool(self.backbone_best > self.chance)

    def to_dict(self) -> dict:
        return asdict(self)

    def table(self) -> str:
        lines = [f"{'layer':<22} {'dim':>5} {'acc':>6} {'+-':>5} {'shuffled':>9} {'random-w':>9}"]
        for p in self.layers:
            rw = "" if p.random_weights is None else f"{p.random_weights:.3f}"
            lines.append(f"{p.layer:<22} {p.dim:>5} {p.accuracy:6.3f} {p.accuracy_std:5.3f} {p.shuffled:9.3f} {rw:>9}")
        lines.append(f"CNR = {self.cnr:.3f} (best backbone {self.backbone_best:.3f}, best action expert "
                     f"{self.expert_best:.3f}, chance {self.chance:.2f}; n = {self.n_samples}, "
                     + (f"{self.folds}-fold grouped CV)" if self.folds > 1 else "test samples of a category split)"))
        if self.backbone_best == self.backbone_best and not self.backbone_above_chance:
            lines.append("  no backbone layer beats chance: the CNR ratio has nothing to retain and means nothing")
        return "\n".join(lines)


#: what :func:`chance_normalized_retention` returns when no backbone layer beats chance
BELOW_CHANCE = ("formula", "nan")


def chance_normalized_retention(expert_scores: Sequence[float], backbone_scores: Sequence[float], chance: float = 0.5,
                                eps: float = 1e-6, below_chance: str = "formula") -> float:
    """CNR = max_n(s_exp_n - c) / (max_n(s_bb_n - c) + eps), the Act2Answer paper's formula (see the
    module docstring). When the best backbone layer is at or below chance: ``below_chance="formula"``
    (default, the paper's) still evaluates it (NaN only for a zero denominator); ``"nan"`` returns NaN."""
    if len(expert_scores) == 0 or len(backbone_scores) == 0:
        raise ConfigError("CNR needs at least one backbone and one action-expert layer score")
    if below_chance not in BELOW_CHANCE:
        raise ConfigError(f"CNR below_chance must be one of {', '.join(BELOW_CHANCE)}, got {below_chance!r}")
    den = max(backbone_scores) - chance
    if den <= 0 and below_chance == "nan":
        return float("nan")
    if den + eps == 0:
        return float("nan")
    return float((max(expert_scores) - chance) / (den + eps))


def _cv_accuracy(X: np.ndarray, y: np.ndarray, groups: np.ndarray, folds: int, seed: int) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000, random_state=seed))
    return cross_val_score(clf, X, y, groups=groups, cv=GroupKFold(n_splits=folds), scoring="accuracy")


def probe_layers(features, control_features=None, folds: int = 5, seed: int = 0, chance: float = 0.5,
                 backbone_prefix: str = "backbone.", expert_prefix: str = "action_expert.") -> ProbeReport:
    """Probe every layer of ``features`` (:class:`~embeval_analysis.probing.features.Features`)."""
    y, g = features.labels, features.groups
    n_groups = len(np.unique(g))
    if len(np.unique(y)) < 2:
        raise ConfigError("probing needs both labels (left and right correct); run both layouts")
    folds = min(folds, n_groups)
    if folds < 2:
        raise ConfigError(f"probing needs at least 2 items for cross-validation, got {n_groups}")
    rng = np.random.default_rng(seed)
    y_shuf = rng.permutation(y)
    rep = ProbeReport(features.subject, len(y), folds, chance)
    for name, X in features.layers.items():
        acc = _cv_accuracy(X, y, g, folds, seed)
        shuf = _cv_accuracy(X, y_shuf, g, folds, seed)
        rw = None
        if control_features is not None and name in control_features.layers:
            rw = float(_cv_accuracy(control_features.layers[name], control_features.labels, control_features.groups, folds, seed).mean())
        rep.layers.append(LayerProbe(name, float(acc.mean()), float(acc.std()), float(shuf.mean()), rw, int(X.shape[1])))
    return retention(rep, backbone_prefix, expert_prefix)


def _split_accuracy(Xtr, ytr, Xte, yte, seed: int) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000, random_state=seed))
    return float(clf.fit(Xtr, ytr).score(Xte, yte))


def probe_transfer(features, train_categories, control_features=None, seed: int = 0, chance: float = 0.5,
                   backbone_prefix: str = "backbone.", expert_prefix: str = "action_expert.") -> ProbeReport:
    """Per layer: a probe fitted on the samples of ``train_categories`` and scored on all other samples
    (see the module docstring); shuffled-label control = the same fit on permuted training labels;
    random-weight control from ``control_features``. ``folds`` of the report is 1 (one split)."""
    train = np.isin(features.categories, list(train_categories))
    test = ~train
    for name, mask in (("training", train), ("test", test)):
        if len(np.unique(features.labels[mask])) < 2:
            raise ConfigError(f"transfer probing needs both labels among the {name} categories' samples; "
                              f"train on {sorted(set(train_categories))} and test on the others, both layouts")
    rng = np.random.default_rng(seed)
    y = features.labels
    y_shuf = rng.permutation(y[train])
    rep = ProbeReport(features.subject, int(test.sum()), 1, chance)
    for name, X in features.layers.items():
        acc = _split_accuracy(X[train], y[train], X[test], y[test], seed)
        shuf = _split_accuracy(X[train], y_shuf, X[test], y[test], seed)
        rw = None
        if control_features is not None and name in control_features.layers:
            cx, cy = control_features.layers[name], control_features.labels
            ctr = np.isin(control_features.categories, list(train_categories))
            rw = _split_accuracy(cx[ctr], cy[ctr], cx[~ctr], cy[~ctr], seed)
        rep.layers.append(LayerProbe(name, acc, 0.0, shuf, rw, int(X.shape[1])))
    return retention(rep, backbone_prefix, expert_prefix)


def retention(rep: ProbeReport, backbone_prefix: str = "backbone.", expert_prefix: str = "action_expert.",
              below_chance: str | None = None) -> ProbeReport:
    """Fill ``rep.cnr`` from its layers (backbone vs action expert by name prefix); ``below_chance`` as in
    :func:`chance_normalized_retention` (default: ``rep.below_chance``)."""
    bb = [p.accuracy for p in rep.layers if p.layer.startswith(backbone_prefix)]
    ex = [p.accuracy for p in rep.layers if p.layer.startswith(expert_prefix)]
    if below_chance is not None:
        rep.below_chance = below_chance
    if bb and ex:
        rep.backbone_best, rep.expert_best = max(bb), max(ex)
        rep.cnr = chance_normalized_retention(ex, bb, rep.chance, below_chance=rep.below_chance)
    return rep
