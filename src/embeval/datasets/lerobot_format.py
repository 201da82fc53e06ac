"""Write and read robot demonstrations in the LeRobot dataset format (``codebase_version`` v3.0,
the format of LeRobot 0.4 to 0.6), without the hub and without importing lerobot.

Layout under ``root`` (what :class:`LeRobotWriter` produces)::

    meta/info.json                       fps, features (dtype/shape/names), path templates, totals
    meta/stats.json                      per-feature min/max/mean/std/count and quantiles q01/q10/q50/q90/q99
                                         (LeRobot's set, 0.4 to 0.6, :data:`STAT_NAMES`); per episode in meta/episodes
    meta/tasks.parquet                   task string (index) -> task_index
    meta/episodes/chunk-000/file-000.parquet   one row per episode: length, tasks, frame range
    data/chunk-000/file-000.parquet      one row per frame: features + timestamp, frame_index,
                                         episode_index, index, task_index

Camera images are ``dtype: image`` features stored inside the data parquet as PNG bytes
(``{"bytes", "path"}`` structs, the Hugging Face ``datasets`` Image encoding), so no video codec
is needed. lerobot's ``LeRobotDataset(repo_id, root=root)`` reads the result offline.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from embeval.errors import ConfigError, InvalidInputError, MissingFileError

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
IMAGE_PREFIX = "observation.images."


def _png(img: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _unpng(b: bytes) -> np.ndarray:
    from PIL import Image

    from embeval.image_io import check_decoded_pixels

    return np.asarray(check_decoded_pixels(Image.open(io.BytesIO(b)), "a dataset frame").convert("RGB"))


#: quantile statistics LeRobot (0.4 to 0.6) keeps per feature (``lerobot.datasets.compute_stats.DEFAULT_QUANTILES``; its
#: QUANTILES / QUANTILE10 normalisations and pi0.5 read q01/q99 and q10/q90)
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
#: the statistics every feature gets in ``meta/stats.json`` and per episode in ``meta/episodes`` (``stats/<feature>/<stat>``)
STAT_NAMES = ("min", "max", "mean", "std", "count", *QUANTILES)


def histogram_quantiles(hist: np.ndarray) -> dict[str, np.ndarray]:
    """:data:`QUANTILES` of uint8 values given their counts ``hist`` (C, 256) per channel: for each q the smallest
    value whose empirical CDF reaches q (numpy's ``method="inverted_cdf"``; lerobot's definition, which lerobot
    approximates with a 5000-bin histogram of floats)."""
    cum = np.cumsum(np.asarray(hist, dtype=np.int64), axis=1)  # cum[c, v] = values <= v
    n = cum[:, -1].astype(np.float64)
    return {name: np.array([np.searchsorted(cum[c], q * n[c], side="left") for c in range(len(cum))], dtype=np.float64)
            for name, q in QUANTILES.items()}


def _stats(x: np.ndarray, image: bool) -> dict[str, Any]:
    """lerobot's statistics of one feature over frames ``x`` (N, ...): :data:`STAT_NAMES`. Images (N, H, W, 3) uint8:
    per channel in [0, 1], shape (3, 1, 1) as lerobot stores them, ``count`` = frames (as lerobot counts images)."""
    if image:  # the same numbers as the streaming _image_stats (quantiles from the uint8 histogram)
        return _image_stats([np.asarray(x, dtype=np.uint8)])
    x = np.asarray(x, dtype=np.float64)
    x = x.reshape(len(x), -1)
    f = lambda a: np.asarray(a).tolist()  # noqa: E731
    out = {"min": f(x.min(0)), "max": f(x.max(0)), "mean": f(x.mean(0)), "std": f(x.std(0)), "count": [int(len(x))]}
    qs = np.quantile(x, list(QUANTILES.values()), axis=0, method="inverted_cdf")  # lerobot's definition
    return {**out, **{name: f(v) for name, v in zip(QUANTILES, qs)}}


def _image_stats(episodes: Sequence[np.ndarray]) -> dict[str, Any]:
    """:func:`_stats` of the concatenated image ``episodes`` (each (n, H, W, 3) uint8), one episode at a time (the
    float64 copy of all frames at once took 8 bytes per pixel and channel: 17 GB for 24k frames of 2 cameras). numpy
    sums a (pixels, 3) array along axis 0 in row order, so carrying the running sum from episode to episode gives the
    same bits as one sum over all pixels; the quantiles come exactly from a per-channel histogram of the 256 values."""
    total = np.zeros(3)
    n = frames = 0
    hist = np.zeros((3, 256), np.int64)
    for ep in episodes:
        ep = np.asarray(ep, dtype=np.uint8)
        px = ep.reshape(-1, 3)
        if len(px) == 0:
            continue
        for c in range(3):
            hist[c] += np.bincount(px[:, c], minlength=256)
        total = np.sum(np.concatenate([total[None], px / 255.0]), axis=0)
        n += len(px)
        frames += len(ep)
    mean = total / n
    sq = np.zeros(3)
    for ep in episodes:
        d = np.asarray(ep, dtype=np.uint8).reshape(-1, 3) / 255.0 - mean
        sq = np.sum(np.concatenate([sq[None], d * d]), axis=0)
    f = lambda a: np.asarray(a, dtype=np.float64).reshape(3, 1, 1).tolist()  # noqa: E731
    present = hist > 0
    lo = np.argmax(present, axis=1).astype(np.float64)
    hi = 255.0 - np.argmax(present[:, ::-1], axis=1)
    out = {"min": f(lo / 255.0), "max": f(hi / 255.0), "mean": f(mean), "std": f(np.sqrt(sq / n)), "count": [int(frames)]}
    return {**out, **{name: f(v / 255.0) for name, v in histogram_quantiles(hist).items()}}


@dataclass
class Feature:
    """One per-frame feature: ``dtype`` ("image", "float32", "int64", ...), ``shape``, axis ``names``."""

    dtype: str
    shape: tuple[int, ...]
    names: list[str] | None = None

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape), "names": self.names}


class DatasetExistsError(ConfigError):
    """``root`` already holds a dataset and overwriting was not asked for; ``fix`` says how (the CLI names its
    ``--out``/``--overwrite`` flags instead of the API's arguments)."""

    def __init__(self, root: str | Path, fix: str = "choose another root folder or pass overwrite=True"):
        self.root = Path(root)
        super().__init__(f"{self.root} already holds a dataset; {fix}")


class LeRobotWriter:
    """Accumulate episodes, then :meth:`finalize` writes the dataset (one data file; small datasets).

    >>> w = LeRobotWriter("demos", fps=10, features={"observation.images.third_person": Feature("image", (96, 96, 3)),
    ...     "observation.state": Feature("float32", (4,), ["x", "y", "z", "gripper"]),
    ...     "action": Feature("float32", (7,), ["dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"])})
    >>> w.add_episode({"observation.images.third_person": imgs, "observation.state": s, "action": a}, task="pick the red cube")
    >>> w.finalize()
    """

    def __init__(self, root: str | Path, fps: int, features: Mapping[str, Feature], robot_type: str = "ur5",
                 overwrite: bool = False):
        self.root = Path(root)
        if (self.root / "meta" / "info.json").exists() and not overwrite:
            raise DatasetExistsError(self.root)
        clash = set(features) & set(DEFAULT_FEATURES)
        if clash:
            raise ConfigError(f"features {sorted(clash)} are added by the writer; do not pass them")
        self.fps = int(fps)
        self.features = dict(features)
        self.robot_type = robot_type
        self._episodes: list[dict[str, np.ndarray]] = []
        self._tasks: list[str] = []
        self._episode_tasks: list[str] = []
        self._extra: list[dict] = []

    def add_episode(self, frames: Mapping[str, np.ndarray], task: str, extra: Mapping[str, Any] | None = None) -> int:
        """Add one episode: ``frames[feature]`` has a leading time axis; returns its episode index."""
        missing = set(self.features) - set(frames)
        if missing:
            raise InvalidInputError(f"episode lacks features {sorted(missing)}")
        lengths = {k: len(frames[k]) for k in self.features}
        if len(set(lengths.values())) != 1 or 0 in lengths.values():
            raise InvalidInputError(f"features must have the same non-zero number of frames, got {lengths}")
        ep = {}
        for k, f in self.features.items():
            a = np.asarray(frames[k])
            if tuple(a.shape[1:]) != tuple(f.shape):
                raise InvalidInputError(f"feature {k!r}: frames have shape {a.shape[1:]}, declared {tuple(f.shape)}")
            ep[k] = a.astype(np.uint8) if f.dtype == "image" else a.astype(f.dtype)
        if task not in self._tasks:
            self._tasks.append(task)
        self._episodes.append(ep)
        self._episode_tasks.append(task)
        self._extra.append(dict(extra or {}))
        return len(self._episodes) - 1

    def _episode_stats(self, ep: Mapping[str, np.ndarray], defaults: Mapping[str, np.ndarray]) -> dict[str, dict]:
        """One episode's statistics per feature (lerobot keeps them in ``meta/episodes`` as ``stats/<feature>/<stat>``;
        its dataset tools (lerobot-edit-dataset: delete, split, merge) aggregate them into the new stats.json)."""
        out = {k: _stats(ep[k], f.dtype == "image") for k, f in self.features.items()}
        return {**out, **{k: _stats(v.reshape(-1, 1), False) for k, v in defaults.items()}}

    def finalize(self) -> Path:
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._episodes:
            raise InvalidInputError("no episodes to write")
        (self.root / "meta").mkdir(parents=True, exist_ok=True)
        cols: dict[str, list] = {k: [] for k in list(self.features) + list(DEFAULT_FEATURES)}
        ep_rows, start = [], 0
        for e, (ep, task) in enumerate(zip(self._episodes, self._episode_tasks)):
            n = len(next(iter(ep.values())))
            for k, f in self.features.items():
                if f.dtype == "image":
                    cols[k] += [{"bytes": _png(im), "path": None} for im in ep[k]]
                else:
                    cols[k] += list(ep[k])
            cols["timestamp"] += list((np.arange(n) / self.fps).astype(np.float32))
            cols["frame_index"] += list(range(n))
            cols["episode_index"] += [e] * n
            cols["index"] += list(range(start, start + n))
            cols["task_index"] += [self._tasks.index(task)] * n
            row = {"episode_index": e, "tasks": [task], "length": n,
                   "data/chunk_index": 0, "data/file_index": 0,
                   "dataset_from_index": start, "dataset_to_index": start + n,
                   "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
            row.update({f"embeval/{k}": json.dumps(v) for k, v in self._extra[e].items()})
            for k, st in self._episode_stats(ep, {d: np.asarray(cols[d][start:start + n]) for d in DEFAULT_FEATURES}).items():
                row.update({f"stats/{k}/{name}": v for name, v in st.items()})
            ep_rows.append(row)
            start += n
        arrays, fields = [], []
        for k, v in cols.items():
            f = self.features.get(k) or Feature(**DEFAULT_FEATURES[k])
            if f.dtype == "image":
                typ = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
                arrays.append(pa.array(v, type=typ))
            elif tuple(f.shape) == (1,):
                arrays.append(pa.array(np.asarray(v).reshape(-1).astype(f.dtype)))
            else:
                arrays.append(pa.array([np.asarray(x).tolist() for x in v], type=pa.list_(pa.from_numpy_dtype(np.dtype(f.dtype)))))
            fields.append(k)
        table = pa.Table.from_arrays(arrays, names=fields)
        data_file = self.root / DATA_PATH.format(chunk_index=0, file_index=0)
        data_file.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, data_file)
        ep_file = self.root / EPISODES_PATH.format(chunk_index=0, file_index=0)
        ep_file.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pandas(pd.DataFrame(ep_rows), preserve_index=False), ep_file)
        tasks = pd.DataFrame({"task_index": range(len(self._tasks))}, index=pd.Index(self._tasks, name="task"))
        pq.write_table(pa.Table.from_pandas(tasks), self.root / "meta" / "tasks.parquet")
        stats = {}
        for k, f in self.features.items():
            stats[k] = (_image_stats([ep[k] for ep in self._episodes]) if f.dtype == "image"
                        else _stats(np.concatenate([ep[k] for ep in self._episodes]), False))
        for k in DEFAULT_FEATURES:
            stats[k] = _stats(np.asarray(cols[k]).reshape(-1, 1), False)
        (self.root / "meta" / "stats.json").write_text(json.dumps(stats, indent=1))
        info = {
            "codebase_version": CODEBASE_VERSION, "robot_type": self.robot_type,
            "total_episodes": len(self._episodes), "total_frames": start, "total_tasks": len(self._tasks),
            "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 500,
            "fps": self.fps, "splits": {"train": f"0:{len(self._episodes)}"},
            "data_path": DATA_PATH, "video_path": None,
            "features": {**{k: f.to_dict() for k, f in self.features.items()}, **DEFAULT_FEATURES},
        }
        (self.root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
        return self.root


@dataclass
class LeRobotEpisodes:
    """A dataset read back into memory: ``frames[feature]`` stacked over all frames (images decoded
    to uint8 (N, H, W, 3)), plus ``episode_index``, ``task_index``, ``tasks`` and ``info``."""

    frames: dict[str, np.ndarray]
    episode_index: np.ndarray
    task_index: np.ndarray
    tasks: list[str]
    info: dict
    episodes: list[dict]


def read_lerobot(root: str | Path, images: Iterable[str] | None = None,
                 image_transform: Callable[[np.ndarray], np.ndarray] | None = None, batch_rows: int = 256) -> LeRobotEpisodes:
    """Read a v3.0 dataset written by :class:`LeRobotWriter` (or lerobot with ``use_videos=False``).

    Images are streamed: read ``batch_rows`` rows at a time, decoded one by one and (if given)
    passed through ``image_transform`` (e.g. a resize to a model's input size) before they are stored,
    so only the stored form of every frame is held, never all decoded full-size frames at once.
    ``images``: the image features to decode (full names, ``observation.images.<camera>``); None = all,
    an empty list = none (the other features are always read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(root)
    info = validate_layout(root)
    data_files = sorted((root / "data").glob("chunk-*/file-*.parquet"))
    feats = {k: f for k, f in info["features"].items() if k not in DEFAULT_FEATURES}
    image_keys = [k for k, f in feats.items() if f["dtype"] == "image"]
    wanted = image_keys if images is None else [k for k in image_keys if k in set(images)]
    plain = [k for k, f in feats.items() if f["dtype"] != "image"]
    table = pa.concat_tables([pq.read_table(f, columns=plain + ["episode_index", "task_index"]) for f in data_files])
    n = table.num_rows
    frames = {}
    for k in plain:
        f = feats[k]
        try:
            frames[k] = np.asarray(table.column(k).to_pylist(), dtype=f["dtype"]).reshape(n, *f["shape"])
        except (ValueError, TypeError) as exc:
            raise InvalidInputError(f"{root}: feature {k!r}'s data does not match its declared dtype {f['dtype']} "
                                    f"and shape {f['shape']} ({str(exc)[:120]}); record the dataset again") from None
    for k in wanted:
        frames[k] = _stream_images(data_files, k, n, image_transform, batch_rows, tuple(feats[k]["shape"]))
    tasks_df = pq.read_table(root / "meta" / "tasks.parquet").to_pandas()
    tasks = [t for t, _ in sorted(zip(tasks_df.index, tasks_df["task_index"]), key=lambda x: x[1])]
    ep_tab = pq.read_table(sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))[0]).to_pylist()
    return LeRobotEpisodes(frames, np.asarray(table.column("episode_index")), np.asarray(table.column("task_index")),
                           tasks, info, ep_tab)


#: most bytes the decoded (and transformed) frames of one image feature may take together
MAX_IMAGE_FEATURE_BYTES = 16 << 30


def _stream_images(data_files, key: str, n: int, transform, batch_rows: int, shape: tuple) -> np.ndarray:
    """(n, ...) uint8: image column ``key`` decoded ``batch_rows`` rows at a time into one preallocated array."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out, i = None, 0
    for path in data_files:
        # buffered page-by-page reads: only the pages of the current batch are held, not the whole column
        pf = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
        for batch in pf.iter_batches(batch_size=max(1, int(batch_rows)), columns=[key]):
            for blob in batch.column(0).field("bytes").to_pylist():
                im = _unpng(blob)
                if transform is not None:
                    im = transform(im)
                if out is None:
                    if n * im.nbytes > MAX_IMAGE_FEATURE_BYTES:
                        raise InvalidInputError(f"{key}: {n} frames of {'x'.join(map(str, im.shape))} would take "
                                                f"{n * im.nbytes / 2**30:.1f} GiB decoded, over the limit of "
                                                f"{MAX_IMAGE_FEATURE_BYTES / 2**30:g} GiB; pass an image_transform that "
                                                "downsizes them, or read fewer image features")
                    out = np.empty((n,) + im.shape, im.dtype)
                elif im.shape != out.shape[1:]:
                    raise InvalidInputError(f"{key}: frame {i} is {'x'.join(map(str, im.shape))}, the first was "
                                            f"{'x'.join(map(str, out.shape[1:]))}; every frame of a feature has one size")
                if i >= n:
                    raise InvalidInputError(f"{key}: more images in the data files than its {n} frames")
                out[i] = im
                i += 1
    pa.default_memory_pool().release_unused()  # hand the encoded column's buffers back to the OS
    if out is None:  # no rows
        return np.zeros((0,) + shape, np.uint8)
    if i != n:
        raise InvalidInputError(f"{key}: {i} images in the data files, {n} frames")
    return out


#: largest meta/info.json read (LeRobot's own are a few kB)
MAX_INFO_BYTES = 4 << 20
#: feature dtypes a dataset may declare (LeRobot's), and the most values one frame of a non-image feature may hold
FEATURE_DTYPES = frozenset({"float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool",
                            "string", "image", "video"})
MAX_FEATURE_VALUES = 1 << 16


def _check_features(where: Path, features: Any) -> None:
    """``info.json``'s ``features``: a map of name -> {dtype from :data:`FEATURE_DTYPES`, shape of 1-4 positive
    integers}, a non-image frame at most :data:`MAX_FEATURE_VALUES` values. One error naming the feature."""
    if not isinstance(features, dict) or not features:
        raise InvalidInputError(f"{where}: 'features' must be a non-empty object of name -> {{dtype, shape}}")
    for name, f in features.items():
        if not isinstance(f, dict):
            raise InvalidInputError(f"{where}: feature {name!r} must be an object with dtype and shape")
        dtype, shape = f.get("dtype"), f.get("shape")
        if dtype not in FEATURE_DTYPES:
            raise InvalidInputError(f"{where}: feature {name!r} has dtype {str(dtype)[:40]!r}; "
                                    f"one of {', '.join(sorted(FEATURE_DTYPES))}")
        if (not isinstance(shape, list) or not 1 <= len(shape) <= 4
                or not all(isinstance(s, int) and not isinstance(s, bool) and 0 < s <= 1 << 16 for s in shape)):
            raise InvalidInputError(f"{where}: feature {name!r} has shape {str(shape)[:60]}; "
                                    "a list of 1-4 positive integers up to 65536")
        if dtype not in ("image", "video", "string") and int(np.prod(shape)) > MAX_FEATURE_VALUES:
            raise InvalidInputError(f"{where}: feature {name!r} declares {int(np.prod(shape))} values per frame, over "
                                    f"the {MAX_FEATURE_VALUES} a non-image feature may have")


def validate_layout(root: str | Path) -> dict:
    """Check the on-disk layout against the v3.0 format; returns ``info.json``.

    Raises :class:`MissingFileError` (a file is missing) or :class:`InvalidInputError` (an
    inconsistency, e.g. a declared feature absent from the data or a wrong frame count).
    """
    import pyarrow.parquet as pq

    root = Path(root)
    info_file = root / "meta" / "info.json"
    if not info_file.exists():
        raise MissingFileError(f"{root} is not a LeRobot dataset (no meta/info.json); record one with `embeval train demos`")
    if info_file.stat().st_size > MAX_INFO_BYTES:
        raise InvalidInputError(f"{info_file}: {info_file.stat().st_size} bytes, over the {MAX_INFO_BYTES} a dataset's "
                                "info.json may have; it is not a dataset written by LeRobot or embeval")
    try:
        info = json.loads(info_file.read_text())
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidInputError(f"{info_file} is not JSON ({exc}); record the dataset again") from None
    if not isinstance(info, dict):
        raise InvalidInputError(f"{info_file}: must hold a JSON object, got {type(info).__name__}")
    _check_features(info_file, info.get("features"))
    if info.get("codebase_version") != CODEBASE_VERSION:
        raise InvalidInputError(f"{root}: codebase_version {info.get('codebase_version')!r}, this reader handles {CODEBASE_VERSION}")
    for rel in ("meta/tasks.parquet", "meta/stats.json"):
        if not (root / rel).exists():
            raise MissingFileError(f"{root}: {rel} is missing")
    data_files = sorted((root / "data").glob("chunk-*/file-*.parquet"))
    ep_files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    if not data_files or not ep_files:
        raise MissingFileError(f"{root}: data/chunk-*/file-*.parquet or meta/episodes/... is missing")
    names = set(pq.read_schema(data_files[0]).names)
    declared = {k for k, f in info["features"].items() if f["dtype"] != "video"}
    if declared - names:
        raise InvalidInputError(f"{root}: features {sorted(declared - names)} are declared in info.json but not in the data")
    n = sum(pq.read_metadata(f).num_rows for f in data_files)
    if n != info["total_frames"]:
        raise InvalidInputError(f"{root}: {n} frames in the data, info.json says {info['total_frames']}")
    n_ep = sum(pq.read_metadata(f).num_rows for f in ep_files)
    if n_ep != info["total_episodes"]:
        raise InvalidInputError(f"{root}: {n_ep} episodes in meta/episodes, info.json says {info['total_episodes']}")
    return info
