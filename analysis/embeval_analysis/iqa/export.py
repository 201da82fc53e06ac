"""Export a database in pyiqa's format: meta CSVs for full-reference (FR) and no-reference (NR)
training and pickled split files, 8:2 train/test, 10 repeats.

Splits (:data:`SPLITS`): ``random`` (default, the Embodied-IQA paper's: the image pairs are partitioned
at random 8:2, ten times) or ``scene`` (disjoint by scene: every image of a reference scene, both
views and all distortions included, lies on one side only; stricter, no scene is seen in training
and test). The export writes both split files.

Files written to ``OUT`` (``--dataroot`` for pyiqa = the database folder)::

    meta_nr_<target>.csv         dist_name, mos, + breakdown columns    (pyiqa GeneralNRDataset)
    meta_fr_<target>.csv         ref_name, dist_name, mos, + columns    (pyiqa GeneralFRDataset)
    splits_8x2_10.pkl            {1..10: {"train": [row idx], "val": [...], "test": [...]}}  (val == test), random
    splits_scene_8x2_10.pkl      the same, disjoint by scene
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from embeval.errors import ConfigError

#: split protocols: "random" (the paper's: image pairs at random) and "scene" (disjoint by scene)
SPLITS = ("random", "scene")


def scene_splits(groups, n_splits: int = 10, test_size: float = 0.2, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) row indices, ``n_splits`` repeats, never splitting a group (scikit-learn
    GroupShuffleSplit: ``test_size`` is the share of groups)."""
    from sklearn.model_selection import GroupShuffleSplit

    groups = np.asarray(groups)
    if len(np.unique(groups)) < 2:
        raise ConfigError("splits need images of at least 2 scenes")
    gss = GroupShuffleSplit(n_splits=n_splits, test_size=test_size, random_state=seed)
    return [(np.sort(tr), np.sort(te)) for tr, te in gss.split(np.zeros(len(groups)), groups=groups)]


def random_splits(n: int, n_splits: int = 10, test_size: float = 0.2, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) row indices of ``n`` images, ``n_splits`` repeats, each image independently of its
    scene (scikit-learn ShuffleSplit: ``test_size`` is the share of images, ``ceil(test_size * n)``):
    the Embodied-IQA paper's random 8:2 partition of image pairs."""
    from sklearn.model_selection import ShuffleSplit

    if n < 2:
        raise ConfigError(f"splits need at least 2 images, got {n}")
    ss = ShuffleSplit(n_splits=n_splits, test_size=test_size, random_state=seed)
    return [(np.sort(tr), np.sort(te)) for tr, te in ss.split(np.zeros(n))]


def make_splits(scene_ids, split_by: str = "random", n_splits: int = 10, test_size: float = 0.2,
                seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """The splits of a database whose images have ``scene_ids``, by protocol ``split_by`` (:data:`SPLITS`)."""
    if split_by == "random":
        return random_splits(len(scene_ids), n_splits, test_size, seed)
    if split_by == "scene":
        return scene_splits(scene_ids, n_splits, test_size, seed)
    raise ConfigError(f"unknown split protocol {split_by!r}; choose one of {', '.join(SPLITS)} "
                      "(random: the paper's 8:2 over image pairs; scene: disjoint by scene)")


def split_file_name(split_by: str, n_splits: int, test_size: float) -> str:
    """``splits_8x2_10.pkl`` (random) or ``splits_scene_8x2_10.pkl`` (scene)."""
    tag = "" if split_by == "random" else f"{split_by}_"
    return f"splits_{tag}{round((1 - test_size) * 10)}x{round(test_size * 10)}_{n_splits}.pkl"


def export_pyiqa(scores, out: str | Path, targets=("decision", "cognition"), n_splits: int = 10,
                 test_size: float = 0.2, seed: int = 0, split_by: str = "random") -> dict[str, Path]:
    """Write the meta CSVs and both split files; returns {name: path}: ``splits`` is the file of protocol
    ``split_by`` (default ``random``, the paper's), ``splits_<other>`` the other protocol's (absent for a
    database of one scene, which has no scene-disjoint split)."""
    if split_by not in SPLITS:
        raise ConfigError(f"unknown split protocol {split_by!r}; choose one of {', '.join(SPLITS)}")
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
    scene_ids = scores["scene_id"].to_numpy()
    for proto in (split_by, *(p for p in SPLITS if p != split_by)):
        if proto == "scene" and proto != split_by and len(np.unique(scene_ids)) < 2:
            continue  # one scene: only the random splits exist
        splits = make_splits(scene_ids, proto, n_splits, test_size, seed)
        doc = {i + 1: {"train": tr.tolist(), "val": te.tolist(), "test": te.tolist()} for i, (tr, te) in enumerate(splits)}
        key = "splits" if proto == split_by else f"splits_{proto}"
        files[key] = out / split_file_name(proto, n_splits, test_size)
        with open(files[key], "wb") as fh:
            pickle.dump(doc, fh)
    return files
