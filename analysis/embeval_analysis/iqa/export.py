"""Export a database in pyiqa's format: meta CSVs for full-reference (FR) and no-reference (NR)
training and pickled split files, 8:2 train/test, 10 repeats, disjoint by scene (every image of a
reference scene, both views included, lies on one side only).

Files written to ``OUT`` (``--dataroot`` for pyiqa = the database folder)::

    meta_nr_<target>.csv   dist_name, mos, + breakdown columns    (pyiqa GeneralNRDataset)
    meta_fr_<target>.csv   ref_name, dist_name, mos, + columns    (pyiqa GeneralFRDataset)
    splits_8x2_10.pkl      {1..10: {"train": [row idx], "val": [...], "test": [...]}}  (val == test)
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from embeval.errors import ConfigError


def scene_splits(groups, n_splits: int = 10, test_size: float = 0.2, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) row indices, ``n_splits`` repeats, never splitting a group (scikit-learn
    GroupShuffleSplit: ``test_size`` is the share of groups)."""
    from sklearn.model_selection import GroupShuffleSplit

    groups = np.asarray(groups)
    if len(np.unique(groups)) < 2:
        raise ConfigError("splits need images of at least 2 scenes")
    gss = GroupShuffleSplit(n_splits=n_splits, test_size=test_size, random_state=seed)
    return [(np.sort(tr), np.sort(te)) for tr, te in gss.split(np.zeros(len(groups)), groups=groups)]


def export_pyiqa(scores, out: str | Path, targets=("decision", "cognition"), n_splits: int = 10,
                 test_size: float = 0.2, seed: int = 0) -> dict[str, Path]:
    """Write the meta CSVs and split file; returns {name: path}."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    extra = [c for c in ("distortion", "category", "level", "view", "source", "scene_id") if c in scores]
    files: dict[str, Path] = {}
    for t in targets:
        if t not in scores or scores[t].isna().all():
            continue
        nr = scores[["path", t] + extra].rename(columns={"path": "dist_name", t: "mos"})
        fr = scores[["ref_path", "path", t] + extra].rename(columns={"ref_path": "ref_name", "path": "dist_name", t: "mos"})
        files[f"meta_nr_{t}"] = out / f"meta_nr_{t}.csv"
        files[f"meta_fr_{t}"] = out / f"meta_fr_{t}.csv"
        nr.to_csv(files[f"meta_nr_{t}"], index=False)
        fr.to_csv(files[f"meta_fr_{t}"], index=False)
    splits = scene_splits(scores["scene_id"].to_numpy(), n_splits, test_size, seed)
    doc = {i + 1: {"train": tr.tolist(), "val": te.tolist(), "test": te.tolist()} for i, (tr, te) in enumerate(splits)}
    files["splits"] = out / f"splits_{round((1 - test_size) * 10)}x{round(test_size * 10)}_{n_splits}.pkl"
    with open(files["splits"], "wb") as fh:
        pickle.dump(doc, fh)
    return files
