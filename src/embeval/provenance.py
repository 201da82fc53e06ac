"""What produced a result: stable hashes of specs and the code version."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
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
