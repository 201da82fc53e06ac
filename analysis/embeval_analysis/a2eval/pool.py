"""Benchmark pools: the candidate examples A2Eval curates from.

A pool is a list of :class:`PoolItem`. Sources:

- JSONL: one JSON object per line;
- Parquet: one row per item (image columns may hold paths, raw bytes, or ``{"bytes": ...}`` structs
  as Hugging Face datasets write them);
- an lmms-eval task export: a task YAML whose ``dataset_path`` is ``json`` or ``parquet`` with local
  ``dataset_kwargs.data_files`` (what :mod:`.lmms_export` writes), or a folder holding such a YAML.

Item fields (``id``, ``question``, ``answer`` required)::

    {"id": "cnt-001", "question": "How many red cubes are on the table?", "answer": 3,
     "answer_type": "numeric",            # mc | numeric | point | exact   (default: mc if options else exact)
     "options": ["A. 2", "B. 3"],          # multiple choice only; answer is the letter or the option text
     "images": ["img/cnt-001.png"],        # paths relative to the file, or raw bytes in Parquet
     "video": "clips/cnt-001.mp4",         # optional, checked to exist
     "source": "my_bench", "tolerance": 0.5, "mask": "masks/x.png" | [x0, y0, x1, y1],
     "dimension": "counting"}             # optional ground-truth dimension (evaluation only)

Point answers: ``answer`` is ``[x, y]`` in pixels, the mask (path or box) marks where a predicted
point counts as correct.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from embeval.errors import ConfigError, MissingFileError, yaml_problem
from embeval.errors import read_jsonl as jsonl_records
from embeval_analysis.a2eval.media import load_image, load_video_frames

ANSWER_TYPES = ("mc", "numeric", "point", "exact")
_KNOWN = {"id", "question", "answer", "answer_type", "options", "images", "image", "video", "source", "tolerance",
          "mask", "dimension", "meta"}


@dataclass
class PoolItem:
    """One benchmark example. Images are RGB uint8 (H, W, 3) arrays or paths loaded on demand."""

    id: str
    question: str
    answer: Any
    answer_type: str = "exact"
    options: list[str] | None = None
    images: list[Any] = field(default_factory=list)  # np.ndarray | str (path) | bytes
    video: str | None = None
    source: str = ""
    tolerance: float | None = None  # numeric: absolute tolerance (default 0 = exact number)
    mask: Any = None  # point: box [x0, y0, x1, y1] (pixels, inclusive) | bool array | path to a mask image
    dimension: str | None = None  # ground-truth capability dimension, if the source has one (never shown to agents)
    meta: dict[str, Any] = field(default_factory=dict)

    def load_images(self, video_frames: int = 4) -> list[np.ndarray]:
        """The item's images as RGB uint8 arrays (decoding paths and bytes), followed by
        ``video_frames`` frames sampled uniformly from its video, if it has one."""
        out = [load_image(im, f"item {self.id!r} image {i}") for i, im in enumerate(self.images)]
        if self.video and video_frames > 0:
            out += load_video_frames(self.video, video_frames)
        return out

    def text(self) -> str:
        """The text an agent sees: question plus options."""
        opts = "\n".join(self.options or [])
        return self.question + (("\n" + opts) if opts else "")

    def to_record(self, image_dir: Path | None = None) -> dict[str, Any]:
        """A JSON-serialisable record; array images are written as PNG under ``image_dir``."""
        rec: dict[str, Any] = {"id": self.id, "question": self.question, "answer": _jsonable(self.answer),
                               "answer_type": self.answer_type, "source": self.source}
        if self.options:
            rec["options"] = list(self.options)
        if self.tolerance is not None:
            rec["tolerance"] = self.tolerance
        if self.mask is not None:
            rec["mask"] = _jsonable(self.mask) if not isinstance(self.mask, np.ndarray) else None
        if self.dimension:
            rec["dimension"] = self.dimension
        if self.video:
            rec["video"] = self.video
        if self.meta:
            rec["meta"] = _jsonable(self.meta)
        imgs = []
        for i, im in enumerate(self.images):
            if isinstance(im, np.ndarray):
                if image_dir is None:
                    raise ConfigError("to_record: items with in-memory images need an image_dir to write PNGs to")
                from PIL import Image

                image_dir.mkdir(parents=True, exist_ok=True)
                p = image_dir / f"{_safe(self.id)}_{i}.png"
                Image.fromarray(im).save(p)
                imgs.append(str(p))
            else:
                imgs.append(str(im))
        rec["images"] = imgs
        return rec


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


# --------------------------------------------------------------------------- schema check


def item_from_record(rec: dict[str, Any], base_dir: Path | None = None, where: str = "") -> PoolItem:
    """Validate one record and build a :class:`PoolItem`; :class:`ConfigError` names the field and the fix."""
    loc = f"{where}: " if where else ""
    if not isinstance(rec, dict):
        raise ConfigError(f"{loc}each item must be a JSON object with id, question, answer; got {type(rec).__name__}")
    for req in ("id", "question", "answer"):
        if req not in rec or rec[req] is None or (isinstance(rec[req], str) and not rec[req].strip()):
            raise ConfigError(f"{loc}field {req!r} is missing or empty; every item needs id, question and answer")
    if not isinstance(rec["question"], str):
        raise ConfigError(f"{loc}field 'question' must be a string, got {type(rec['question']).__name__}")
    options = rec.get("options")
    if options is not None:
        if isinstance(options, str):
            try:
                options = json.loads(options)
            except json.JSONDecodeError:
                raise ConfigError(f"{loc}field 'options' must be a list of strings") from None
        if not isinstance(options, (list, tuple, np.ndarray)) or len(options) < 2:
            raise ConfigError(f"{loc}field 'options' must be a list of at least 2 strings")
        options = [str(o) for o in options]
    atype = rec.get("answer_type") or ("mc" if options else "exact")
    if atype not in ANSWER_TYPES:
        raise ConfigError(f"{loc}field 'answer_type': {atype!r} is not one of {', '.join(ANSWER_TYPES)}")
    answer = rec["answer"]
    if isinstance(answer, np.ndarray):
        answer = answer.tolist()
    if atype == "mc":
        if not options:
            raise ConfigError(f"{loc}answer_type 'mc' needs a field 'options' (list of choices)")
        from embeval_analysis.a2eval.scorers import mc_index

        if mc_index(str(answer), options) is None:
            raise ConfigError(f"{loc}field 'answer': {answer!r} matches no option letter or text of {options}")
    elif atype == "numeric":
        try:
            answer = float(answer)
        except (TypeError, ValueError):
            raise ConfigError(f"{loc}answer_type 'numeric' needs a number in 'answer', got {answer!r}") from None
    elif atype == "point":
        if rec.get("mask") is None:
            raise ConfigError(f"{loc}answer_type 'point' needs a field 'mask' (box [x0,y0,x1,y1] or mask image path)")
    tol = rec.get("tolerance")
    if tol is not None:
        try:
            tol = float(tol)
        except (TypeError, ValueError):
            raise ConfigError(f"{loc}field 'tolerance' must be a number, got {tol!r}") from None
    images = rec.get("images")
    if images is None:
        images = [rec["image"]] if rec.get("image") is not None else []
    if isinstance(images, (str, bytes, dict)):
        images = [images]
    imgs: list[Any] = []
    for i, im in enumerate(list(images)):
        if isinstance(im, str):
            p = Path(im)
            if not p.is_absolute() and base_dir is not None:
                p = base_dir / p
            if not p.is_file():
                raise MissingFileError(f"{loc}image {i} ({im}) not found at {p}; paths resolve against the pool file's folder")
            imgs.append(str(p))
        elif isinstance(im, (bytes, bytearray, dict, np.ndarray)):
            imgs.append(im)
        else:
            raise ConfigError(f"{loc}image {i}: expected a path, bytes or an array, got {type(im).__name__}")
    video = rec.get("video")
    if video:
        vp = Path(video)
        if not vp.is_absolute() and base_dir is not None:
            vp = base_dir / vp
        if not vp.is_file():
            raise MissingFileError(f"{loc}video {video} not found at {vp}")
        video = str(vp)
    mask = rec.get("mask")
    if isinstance(mask, str) and base_dir is not None and not Path(mask).is_absolute():
        mask = str(base_dir / mask)
    extra = {k: v for k, v in rec.items() if k not in _KNOWN}
    meta = dict(rec.get("meta") or {}, **extra)
    return PoolItem(id=str(rec["id"]), question=rec["question"], answer=answer, answer_type=atype, options=options,
                    images=imgs, video=video or None, source=str(rec.get("source") or ""), tolerance=tol, mask=mask,
                    dimension=rec.get("dimension") or None, meta=meta)


def check_unique(items: Sequence[PoolItem], where: str = "pool") -> None:
    seen: set[str] = set()
    for it in items:
        if it.id in seen:
            raise ConfigError(f"{where}: duplicate item id {it.id!r}; ids must be unique (prefix them with the source)")
        seen.add(it.id)


# --------------------------------------------------------------------------- readers


def read_jsonl(path: str | Path) -> list[PoolItem]:
    path = Path(path)
    recs = jsonl_records(path, "pool file", fix="each line must be one JSON object", missing=f"pool file {path} does not exist")
    return [item_from_record(rec, path.parent, f"{path}:{n}") for n, rec in recs]


def read_parquet(path: str | Path, data_files_base: Path | None = None) -> list[PoolItem]:
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"pool file {path} does not exist")
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise ConfigError(f"{path}: not a readable Parquet file ({exc})") from None
    return [item_from_record(r, data_files_base or path.parent, f"{path} row {i}") for i, r in enumerate(rows)]


def read_lmms_task(path: str | Path) -> list[PoolItem]:
    """An lmms-eval task YAML (or its folder) whose data are local JSON/Parquet files.

    Honoured keys: ``dataset_path`` (``json``/``parquet``), ``dataset_kwargs.data_files`` (a path or
    ``{split: path}``), ``test_split``, ``doc_to_target`` (a field name), ``doc_to_choice`` (a field
    name), ``task`` (used as ``source``). ``!function`` tags are accepted and ignored.
    """
    import yaml

    from embeval.safe_yaml import SafeLoader

    path = Path(path)
    if path.is_dir():
        yamls = sorted(p for p in path.glob("*.yaml") if not p.name.startswith("_"))
        if not yamls:
            raise MissingFileError(f"{path}: no task YAML in this folder; point at the lmms-eval task YAML")
        path = yamls[0]
    if not path.is_file():
        raise MissingFileError(f"lmms-eval task file {path} does not exist")

    class _Loader(SafeLoader):  # bounded aliases, nesting and integers
        pass

    _Loader.add_multi_constructor("!", lambda loader, suffix, node: f"!{suffix} {getattr(node, 'value', '')}")
    try:
        cfg = yaml.load(path.read_text(), Loader=_Loader) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({yaml_problem(exc)})") from None
    kind = str(cfg.get("dataset_path", "")).lower()
    if kind not in ("json", "parquet"):
        raise ConfigError(f"{path}: field 'dataset_path' is {cfg.get('dataset_path')!r}; only local exports are "
                          "supported here: set dataset_path to json or parquet and dataset_kwargs.data_files to the file")
    files = (cfg.get("dataset_kwargs") or {}).get("data_files")
    if isinstance(files, dict):
        split = cfg.get("test_split") or next(iter(files))
        if split not in files:
            raise ConfigError(f"{path}: test_split {split!r} not among data_files splits {sorted(files)}")
        files = files[split]
    if isinstance(files, list):
        files = files[0] if files else None
    if not files:
        raise ConfigError(f"{path}: field 'dataset_kwargs.data_files' is missing; name the local data file")
    data = Path(files)
    if not data.is_absolute():
        data = path.parent / data
    items = read_jsonl(data) if kind == "json" else read_parquet(data)
    target = cfg.get("doc_to_target")
    for it in items:
        if not it.source:
            it.source = str(cfg.get("task") or path.stem)
    if isinstance(target, str) and not target.startswith("!") and target not in ("answer", "{{answer}}"):
        raise ConfigError(f"{path}: doc_to_target {target!r}: the exported docs must keep the target in 'answer'")
    return items


_READERS = {".jsonl": read_jsonl, ".json": read_jsonl, ".parquet": read_parquet, ".yaml": read_lmms_task,
            ".yml": read_lmms_task}


def load_pool(paths: str | Path | Iterable[str | Path]) -> list[PoolItem]:
    """Load and schema-check one or more pool sources (JSONL, Parquet, lmms-eval task YAML/folder).

    Item ids must be unique across sources. Raises :class:`ConfigError` / :class:`MissingFileError`
    that name the file, the line/row and the field.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    items: list[PoolItem] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            items += read_lmms_task(p)
            continue
        reader = _READERS.get(p.suffix.lower())
        if reader is None:
            raise ConfigError(f"{p}: unknown pool format {p.suffix!r}; use .jsonl, .parquet or an lmms-eval task .yaml")
        items += reader(p)
    if not items:
        raise ConfigError("the pool is empty; give at least one file with items")
    check_unique(items)
    return items


def write_jsonl(items: Sequence[PoolItem], path: str | Path) -> Path:
    """Write a pool as JSONL; in-memory images go to ``<path stem>_images/`` as PNG (paths relative)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img_dir = path.parent / f"{path.stem}_images"
    with path.open("w") as fh:
        for it in items:
            rec = it.to_record(img_dir)
            rec["images"] = [str(Path(p).resolve().relative_to(path.parent.resolve()))
                             if Path(p).resolve().is_relative_to(path.parent.resolve()) else p for p in rec["images"]]
            fh.write(json.dumps(rec) + "\n")
    return path
