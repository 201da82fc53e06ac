"""A persistent call cache for LLM and VLM subjects (SQLite on disk).

The key is :func:`embeval.provenance.stable_hash` of the subject id, the method, and every
argument (messages, JSON schema, generation parameters; images by the sha256 of their bytes and
shape). Only successful answers are stored, so a failed call is retried next time. The cache is
safe to share between threads and processes (SQLite locking; WAL journal).

    llm = CachedLLM(OpenAIChatLLM(url=..., model=...), "~/.cache/embeval/llm_cache.sqlite")
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from embeval.provenance import canonical_json, stable_hash

DEFAULT_CACHE = Path(os.environ.get("EMBEVAL_CACHE_DIR", "~/.cache/embeval")).expanduser() / "llm_cache.sqlite"


def image_digest(img: np.ndarray) -> str:
    """sha256 of an image's dtype, shape and bytes (hex)."""
    a = np.ascontiguousarray(img)
    h = hashlib.sha256(f"{a.dtype}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


class CallCache:
    """Key -> text store in one SQLite file (table ``calls``)."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path).expanduser() if path else DEFAULT_CACHE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, subject TEXT, method TEXT,"
                " request TEXT, response TEXT, created REAL)"
            )
            self._conn.commit()

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT response FROM calls WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, subject: str, method: str, request: Any, response: str) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?, ?, ?)",
                (key, subject, method, canonical_json(request), response, time.time()),
            )
            self._conn.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class _Cached:
    def __init__(self, inner: Any, cache: CallCache | str | os.PathLike | None = None):
        self.inner = inner
        self.id = inner.id
        self.cache = cache if isinstance(cache, CallCache) else CallCache(cache)
        self.hits = 0
        self.misses = 0

    def _call(self, method: str, request: dict[str, Any], fn):
        key = stable_hash({"subject": self.id, "method": method, **request}, length=32)
        hit = self.cache.get(key)
        if hit is not None:
            self.hits += 1
            return json.loads(hit)
        self.misses += 1
        out = fn()
        if out not in (None, ""):
            self.cache.put(key, self.id, method, request, json.dumps(out))
        return out

    def __getattr__(self, name: str) -> Any:  # pass other attributes (hidden_states, ...) through
        return getattr(self.inner, name)


class CachedLLM(_Cached):
    """Wrap any :class:`~embeval.subjects.protocols.LLM`; identical calls are answered from disk."""

    def chat(self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping | None = None, **gen: Any) -> str:
        req = {"messages": list(messages), "json_schema": json_schema, "gen": gen}
        return self._call("chat", req, lambda: self.inner.chat(messages, json_schema=json_schema, **gen))

    def choose(self, prompt: str, options: Sequence[str]) -> str:
        return self._call("choose", {"prompt": prompt, "options": list(options)},
                          lambda: self.inner.choose(prompt, list(options)))


class CachedVLM(_Cached):
    """Wrap any :class:`~embeval.subjects.protocols.VLM`; images are keyed by their sha256."""

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str:
        req = {"images": [image_digest(im) for im in images], "prompt": prompt, "gen": gen}
        return self._call("generate", req, lambda: self.inner.generate(images, prompt, **gen))
