"""The Act2Answer reference harness's task sets -> embeval items (``items convert --layout act2answer``).

A task set is a folder (the reference's ``assets/carrot/<set>/``) holding ``pairs.json`` (a list of
``{"left", "right", "question", "answer", "index"}``: two board names, the instruction the policy reads,
``left``/``right``), ``model_db.json`` (one entry per board name) and ``shapes/<name>/`` with the board's
mesh ``textured.glb`` (or ``textured.obj``/``.dae`` next to its image). Each pair becomes one
:class:`~embeval.act2answer.items.BinaryItem` (id ``<set>-<index>``; the question is also the instruction,
used verbatim, as the reference does); the board's picture is an image file in its shape folder
(``texture.png``, ``textured.png``, ... any one PNG/JPEG) or else the first image embedded in its GLB.
An answer other than ``left``/``right`` (case and spaces aside) names the left board, as in the reference;
the board names are also accepted. Inputs are bounded (:data:`MAX_JSON_BYTES`, :data:`MAX_GLB_BYTES`).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from embeval.act2answer.items import BinaryItem, write_items
from embeval.errors import ConfigError, MissingFileError

#: the ``--layout`` name of a reference task set
LAYOUT = "act2answer"
#: largest pairs.json / model_db.json read (bytes)
MAX_JSON_BYTES = 32 * 1024 * 1024
#: largest board mesh read for its embedded texture (bytes)
MAX_GLB_BYTES = 256 * 1024 * 1024
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_MIME = {"image/png": ".png", "image/jpeg": ".jpg"}


def _json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise MissingFileError(f"{what} {path} not found; a reference task set holds pairs.json, model_db.json and shapes/")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise ConfigError(f"{what} {path} is {path.stat().st_size} bytes (more than {MAX_JSON_BYTES}); is it a task set?")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {path}: not valid JSON ({exc})"[:240]) from None


def glb_image(glb: Path) -> tuple[bytes, str]:
    """``(bytes, suffix)`` of the first image embedded in the binary glTF ``glb`` (a ConfigError naming the
    problem when it is not a GLB or holds no embedded PNG/JPEG)."""
    size = glb.stat().st_size
    if size > MAX_GLB_BYTES:
        raise ConfigError(f"board mesh {glb} is {size} bytes (more than {MAX_GLB_BYTES}); put the board's image next to it")
    data = glb.read_bytes()
    if len(data) < 20 or data[:4] != b"glTF":
        raise ConfigError(f"board mesh {glb} is not a binary glTF (no 'glTF' header); put the board's image next to it")
    doc, binary, off = None, b"", 12
    while off + 8 <= len(data):
        n, kind = struct.unpack_from("<I4s", data, off)
        chunk = data[off + 8: off + 8 + n]
        if len(chunk) != n:
            raise ConfigError(f"board mesh {glb} is cut short (a chunk of {n} bytes at {off} runs past the end)")
        if kind == b"JSON" and doc is None:
            try:
                doc = json.loads(chunk)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"board mesh {glb}: its JSON chunk is not valid ({exc})"[:240]) from None
        elif kind == b"BIN\x00" and not binary:
            binary = chunk
        off += 8 + n + (-n % 4)
    for img in (doc or {}).get("images", []) if isinstance(doc, dict) else []:
        suffix = _MIME.get(str(img.get("mimeType", "")))
        view = img.get("bufferView")
        if suffix is None or not isinstance(view, int):
            continue
        views = doc.get("bufferViews", [])
        if not 0 <= view < len(views):
            raise ConfigError(f"board mesh {glb}: image bufferView {view} does not exist")
        bv = views[view]
        start, length = int(bv.get("byteOffset", 0)), int(bv.get("byteLength", 0))
        if start < 0 or length <= 0 or start + length > len(binary):
            raise ConfigError(f"board mesh {glb}: image bufferView {view} lies outside the binary chunk")
        return binary[start:start + length], suffix
    raise ConfigError(f"board mesh {glb} embeds no PNG/JPEG image; put the board's picture (a PNG) in {glb.parent}")


def board_image(shape_dir: Path, out_dir: Path, name: str) -> str:
    """The picture of board ``name`` (path): an image file in ``shape_dir``, else its GLB's, written to
    ``out_dir/<name><suffix>``."""
    if not shape_dir.is_dir():
        raise MissingFileError(f"board {name!r}: shape folder {shape_dir} not found (the task set's shapes/<name>/)")
    files = sorted(p for p in shape_dir.iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES and p.is_file())
    if files:
        return str(files[0].resolve())
    glb = shape_dir / "textured.glb"
    if not glb.is_file():
        raise MissingFileError(f"board {name!r}: no image and no textured.glb in {shape_dir}")
    raw, suffix = glb_image(glb)
    out_dir.mkdir(parents=True, exist_ok=True)
    dst = out_dir / f"{name}{suffix}"
    dst.write_bytes(raw)
    return str(dst.resolve())


def _side(answer: Any, left: str, right: str) -> str:
    a = str(answer if answer is not None else "").strip().lower()
    if a in ("left", "right"):
        return a
    return "right" if a and a == right.strip().lower() and a != left.strip().lower() else "left"


def convert_reference_set(folder: str | Path, out_dir: str | Path, limit: int | None = None) -> list[BinaryItem]:
    """Items of the reference task set ``folder`` (or its ``pairs.json``); writes ``out_dir/items.jsonl`` and
    the board pictures taken from meshes under ``out_dir/images``."""
    root = Path(folder)
    if root.is_file() and root.name == "pairs.json":
        root = root.parent
    if not root.is_dir():
        raise MissingFileError(f"reference task set {root} not found (a folder with pairs.json, model_db.json, shapes/)")
    pairs = _json(root / "pairs.json", "pairs file")
    db = _json(root / "model_db.json", "board model db")
    if not isinstance(pairs, list) or not isinstance(db, dict):
        raise ConfigError(f"{root}: pairs.json must be a list of pairs and model_db.json a mapping of board names")
    out = Path(out_dir)
    images: dict[str, str] = {}
    items: list[BinaryItem] = []
    for pos, p in enumerate(pairs[:limit] if limit else pairs):
        if not isinstance(p, dict):
            raise ConfigError(f"{root}/pairs.json entry {pos}: expected an object with left, right, question, answer")
        missing = [k for k in ("left", "right", "question") if not str(p.get(k, "")).strip()]
        if missing:
            raise ConfigError(f"{root}/pairs.json entry {pos}: missing {', '.join(missing)}")
        left, right = str(p["left"]), str(p["right"])
        for name in (left, right):
            if name not in db:
                raise ConfigError(f"{root}/pairs.json entry {pos}: board {name!r} is not in model_db.json")
            if name not in images:
                images[name] = board_image(root / "shapes" / name, out / "images", name)
        try:
            index = int(p.get("index", pos))
        except (TypeError, ValueError):
            raise ConfigError(f"{root}/pairs.json entry {pos}: index {p.get('index')!r} is not a whole number") from None
        q = str(p["question"]).strip()
        items.append(BinaryItem(f"{root.name}-{index}", q, images[left], images[right], _side(p.get("answer"), left, right),
                                str(p.get("category") or root.name), source=f"act2answer:{root.name}", instruction=q,
                                meta={"index": index, "answer": p.get("answer"), "boards": [left, right]}))
    if not items:
        raise ConfigError(f"{root}/pairs.json holds no pairs")
    write_items(items, out / "items.jsonl")
    return items
