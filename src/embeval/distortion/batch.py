"""Apply distortions to an image folder or to an image topic of a rosbag2 (MCAP) bag.

Per-image seeds are derived from the master seed (``embeval.provenance.derive_seed``): from
``(seed, file name, type, level)`` for folders and ``(seed, topic, message index, type, level)``
for bags (:class:`embeval.distortion.stream.FrameDistorter`), so every output is reproducible and noise differs between images.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from embeval.distortion.registry import N_LEVELS, distort, get
from embeval.distortion.stream import FrameDistorter
from embeval.errors import ConfigError, InvalidInputError, MissingFileError
from embeval.image_io import IMAGE_EXTENSIONS, check_decoded_pixels, strict_decoding  # the image formats embeval reads (one home)
from embeval.provenance import code_version, derive_seed


@dataclass(frozen=True)
class DistortedFile:
    """One output of :func:`distort_folder` (a line of its ``manifest.jsonl``)."""

    source: str
    output: str
    distortion: str
    level: int
    seed: int


def read_rgb(path: Path) -> np.ndarray:
    """Read an image file as RGB uint8 (H, W, 3)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with strict_decoding(), Image.open(path) as im:
            return np.asarray(check_decoded_pixels(im, f"image {path}").convert("RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:  # the last: a pixel bomb
        raise InvalidInputError(f"cannot read image {path}: {exc}; remove or replace the file") from None


def _plan(types: Sequence[str], levels: Sequence[int]) -> list[tuple[str, int]]:
    if not types:
        raise ConfigError("choose at least one distortion type (--type NAME or --all)")
    for t in types:
        get(t)
    for lv in levels:
        if lv not in range(1, N_LEVELS + 1):
            raise ConfigError(f"distortion level must be 1..{N_LEVELS}, got {lv}")
    return [(t, lv) for t in types for lv in levels]


def distort_folder(in_dir: str | Path, out_dir: str | Path, types: Sequence[str], levels: Sequence[int],
                   seed: int = 0, progress: bool = False, overwrite: bool = False,
                   unreadable: list[str] | None = None) -> list[DistortedFile]:
    """Write ``out_dir/<type>/L<level>/<stem>.png`` for every image in ``in_dir`` (sorted, not recursive; or the one
    image file ``in_dir`` names) and
    every (type, level); returns the records. Existing outputs are skipped unless ``overwrite`` (so an
    interrupted run resumes); ``out_dir/manifest.jsonl`` gets one line per output not listed there yet.
    ``unreadable``: when a list is given, input files that are not readable images are skipped and their
    error messages appended to it (the others are still processed); otherwise the first one raises
    :class:`InvalidInputError`."""
    from PIL import Image

    in_dir, out_dir = Path(in_dir), Path(out_dir)
    if in_dir.is_file():  # one image file
        if in_dir.suffix.lower() not in IMAGE_EXTENSIONS:
            raise InvalidInputError(f"{in_dir} is a file but not an image ({', '.join(IMAGE_EXTENSIONS)}); pass an image "
                                    "file or a folder of images with --in")
        files = [in_dir]
    elif not in_dir.exists():
        raise MissingFileError(f"input {in_dir} does not exist; pass a folder of images (or one image file) with --in")
    elif not in_dir.is_dir():
        raise InvalidInputError(f"input {in_dir} is neither a folder nor a regular file; pass a folder of images with --in")
    else:
        files = sorted(p for p in in_dir.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())
    if not files:
        sub = sorted({p.parent for ext in IMAGE_EXTENSIONS for p in in_dir.glob(f"*/*{ext}")})
        hint = f"; images are in {', '.join(str(d) for d in sub[:3])}: pass that folder (apply is not recursive)" if sub else ""
        raise MissingFileError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) in {in_dir}{hint}")
    if out_dir.resolve() == in_dir.resolve():
        raise ConfigError("--out must differ from --in (inputs are never overwritten)")
    plan = _plan(types, levels)
    records: list[DistortedFile] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    listed = _manifest_outputs(out_dir / "manifest.jsonl")
    with _progress(len(files) * len(plan), progress, "distort") as bar, open(out_dir / "manifest.jsonl", "a") as manifest:
        for f in files:
            try:
                img = read_rgb(f)
            except InvalidInputError as exc:
                if unreadable is None:
                    raise
                unreadable.append(str(exc))
                bar.update(len(plan))
                continue
            for name, level in plan:
                s = derive_seed(seed, f.name, name, level)
                dst = out_dir / name / f"L{level}" / f"{f.stem}.png"
                if overwrite or not dst.exists():
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    tmp = dst.with_suffix(".tmp.png")
                    Image.fromarray(distort(img, name, level, s)).save(tmp)
                    tmp.replace(dst)  # never leave a half-written image under the final name
                rec = DistortedFile(str(f), str(dst), name, level, s)
                records.append(rec)
                if overwrite or rec.output not in listed:
                    manifest.write(json.dumps({**asdict(rec), "code_version": code_version()}) + "\n")
                    manifest.flush()
                bar.update(1)
    return records


def _manifest_outputs(path: Path) -> set[str]:
    """Output paths already listed in a manifest.jsonl (a torn last line of a killed run is ignored)."""
    if not path.exists():
        return set()
    out = set()
    for line in path.read_text().splitlines():
        try:
            out.add(json.loads(line)["output"])
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _progress(total: int, enabled: bool, desc: str):
    """A tqdm bar on stderr; use it as a context manager so that an error ends the bar's line before the
    CLI prints its one-line message (else the message lands on the bar's ``\\r`` line)."""
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="img")


def _image_msg(ts, header, img: np.ndarray):
    Image = ts.types["sensor_msgs/msg/Image"]
    h, w = img.shape[:2]
    return Image(header=header, height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3,
                 data=np.ascontiguousarray(img).reshape(-1))


@dataclass(frozen=True)
class BagResult:
    input: str
    output: str
    topic: str
    distortion: str
    level: int
    seed: int
    images: int  # distorted messages
    copied: int  # other messages copied unchanged


def distort_bag(in_bag: str | Path, out_bag: str | Path, topic: str, name: str, level: int, seed: int = 0,
                other_topics: bool = True, progress: bool = False) -> BagResult:
    """Copy rosbag2 bag ``in_bag`` to a new bag ``out_bag`` with every ``sensor_msgs/msg/Image`` on ``topic``
    distorted (written as rgb8 with the original header and receive time). ``other_topics``: copy the other
    topics unchanged (else drop them). Bags are rosbag2 folders with MCAP storage (``rosbags``)."""
    from embeval.camera.base import image_from_msg
    from embeval.recording import BagRecorder, bag_info, read_bag, typestore

    _plan([name], [level])
    info = bag_info(in_bag)
    if topic not in info["topics"]:
        raise ConfigError(f"topic {topic} is not in bag {in_bag}; it has: {', '.join(sorted(info['topics'])) or 'no topics'}")
    if info["topics"][topic]["type"] != "sensor_msgs/msg/Image":
        raise ConfigError(f"topic {topic} is {info['topics'][topic]['type']}, not sensor_msgs/msg/Image")
    ts = typestore()
    distorter = FrameDistorter(name, level, seed, stream=topic)
    keep: Iterable[str] | None = None if other_topics else [topic]
    total = info["message_count"] if other_topics else info["topics"][topic]["count"]
    n_img = n_copy = 0
    with _progress(total, progress, f"distort {topic}") as bar:
        rec = BagRecorder(out_bag, segment_s=3600.0, custom_data={"embeval.distortion": f"{name}:{level}:seed={seed}"})
        try:
            for m in read_bag(in_bag, keep):
                rec.add_topic(m.topic, m.msgtype)
                if m.topic == topic:
                    img = distorter(image_from_msg(m.msg), n_img)
                    rec.write_msg(topic, _image_msg(ts, m.msg.header, img), m.timestamp_ns)
                    n_img += 1
                else:
                    rec.write(m.topic, m.timestamp_ns, m.raw)
                    n_copy += 1
                bar.update(1)
        except InvalidInputError:  # the input bag is corrupt mid-way: a partial copy is no result and would
            rec.close()            # block the rerun after `embeval bag recover` ("exists already")
            shutil.rmtree(rec.path, ignore_errors=True)
            raise
        finally:
            rec.close()  # complete metadata, also on Ctrl-C (safe to call twice)
    return BagResult(str(in_bag), str(out_bag), topic, name, level, seed, n_img, n_copy)
