"""What produced a result: stable hashes of specs, the code version and fingerprints of model weights."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace; dataclasses and paths are converted."""

    def default(o: Any):
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return dataclasses.asdict(o)
        if isinstance(o, Path):
            return str(o)
        if hasattr(o, "tolist"):
            return o.tolist()
        if isinstance(o, (set, frozenset)):
            return sorted(o)
        raise TypeError(f"not JSON-serialisable: {type(o).__name__}")

    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=default)


def stable_hash(obj: Any, length: int = 16) -> str:
    """sha256 of :func:`canonical_json`, hex, truncated to ``length`` characters."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:length]


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``embeval <version>+g<commit>[.dirty]`` when run from a git checkout, else the package version."""
    from embeval import __version__

    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        return f"embeval {__version__}+g{commit}{'.dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return f"embeval {__version__}"


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed derived deterministically from ``parts`` (per-unit reseeding)."""
    return int(hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()[:15], 16)


#: a checkpoint folder with more files than this is not a checkpoint (a dataset, a home folder): refused
MAX_CHECKPOINT_FILES = 10_000
_CHUNK = 1 << 20

#: (absolute path, size, mtime_ns, inode) -> sha256 hex of the file's bytes (a file unchanged on disk is not re-read)
HashCache = dict


def hash_cache_key(path: str | Path) -> tuple[str, int, int, int]:
    """The :data:`HashCache` key of a file as it is on disk now."""
    p = Path(path)
    st = p.stat()
    return (str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


def file_sha256(path: str | Path, cache: HashCache | None = None) -> str:
    """sha256 (hex) of a file's bytes; ``cache`` (see :data:`HashCache`) is read and updated."""
    p = Path(path)
    key = hash_cache_key(p)
    if cache is not None and key in cache:
        return cache[key]
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    digest = h.hexdigest()
    if cache is not None:
        cache[key] = digest
    return digest


def checkpoint_files(path: str | Path) -> list[Path]:
    """The regular files of a checkpoint: the file itself, or every file under the folder (recursive, sorted;
    names starting with '.' such as ``.git`` or ``.cache`` skipped). ValueError over :data:`MAX_CHECKPOINT_FILES`."""
    p = Path(path)
    if p.is_file():
        return [p]
    out: list[Path] = []
    for root, dirs, files in os.walk(p):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and os.path.isfile(os.path.join(root, name)):
                out.append(Path(root) / name)
                if len(out) > MAX_CHECKPOINT_FILES:
                    raise ValueError(f"{p} holds more than {MAX_CHECKPOINT_FILES} files; point 'path' at the checkpoint "
                                     "folder itself (config + weights), not a folder above it")
    return sorted(out)


def weights_fingerprint(path: str | Path, cache: HashCache | None = None) -> str:
    """``sha256:<16 hex>`` over the relative name and content hash of every file of a checkpoint file or folder
    (:func:`checkpoint_files`): equal exactly when the same bytes sit under the same names. Content, not dates:
    weights copied again unchanged keep their fingerprint."""
    p = Path(path)
    files = checkpoint_files(p)
    entries = [(f.name if p.is_file() else f.relative_to(p).as_posix(), file_sha256(f, cache)) for f in files]
    return "sha256:" + hashlib.sha256(canonical_json(entries).encode()).hexdigest()[:16]
