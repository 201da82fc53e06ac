"""Which weights produced a result: each subject's checkpoint fingerprint, and the check a resume makes.

A subject's checkpoint is its ``path`` (a weights file or folder, resolved against the spec's folder)
or, for ``adapter: embedded``, the shipped model its name resolves to. Every result row carries the
fingerprint of its subject's checkpoint (:func:`embeval.provenance.weights_fingerprint`, a content
hash) in the store's ``weights`` column; subjects without local weights (a model server, a metric)
carry none. Continuing a run whose subject's weights changed since its stored results would mix two
models in one table, so :func:`check_weights` refuses, or with ``rerun_changed`` marks those units
for running again. File hashes are cached in the store by (path, size, mtime, inode): an unchanged
checkpoint is not re-read on resume.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from embeval.errors import ConfigError, EmbevalError
from embeval.runs.spec import RunSpec, SubjectEntry
from embeval.runs.store import ResultsStore
from embeval.runs.units import Unit

#: subject kind -> embedded model kind and its adapter's default name
_EMBEDDED = {"policy": ("vla", "tiny-vla"), "vlm": ("vlm", "tiny-vlm")}


class WeightsChangedError(EmbevalError):
    """A subject's checkpoint differs from the one its stored results were computed with."""


def subject_checkpoint(spec: RunSpec, subject: SubjectEntry) -> Path | None:
    """The file or folder holding ``subject``'s weights on this machine (None: no local weights)."""
    if subject.path:
        p = spec.resolve_path(subject.path)
        if p is not None and p.exists():
            return p
    if subject.adapter == "embedded" and subject.kind in _EMBEDDED:
        from embeval.errors import MissingWeightsError
        from embeval.subjects.embedded.zoo import resolve_model

        kind, default = _EMBEDDED[subject.kind]
        try:
            return resolve_model(subject.path or default, kind)
        except MissingWeightsError:
            return None
    return None


def fingerprints(spec: RunSpec, subjects: Iterable[SubjectEntry], store: ResultsStore) -> dict[str, str | None]:
    """Subject id -> fingerprint of its checkpoint (None without local weights), hashes cached in ``store``."""
    from embeval.provenance import weights_fingerprint

    cache = store.hash_cache()
    before = dict(cache)
    out: dict[str, str | None] = {}
    for s in subjects:
        p = subject_checkpoint(spec, s)
        try:
            if p is not None:
                _announce_hashing(s.id, p, cache)
            out[s.id] = None if p is None else weights_fingerprint(p, cache)
        except ValueError as exc:
            raise ConfigError(f"subject {s.id!r}: {exc}") from None
    store.save_hash_cache({k: v for k, v in cache.items() if before.get(k) != v})
    return out


def _announce_hashing(sid: str, path: Path, cache: dict, min_bytes: int = 1 << 30) -> None:
    """Say so on stderr when a checkpoint's files not hashed before add up to ``min_bytes`` or more (seconds of reading)."""
    import sys

    from embeval.provenance import checkpoint_files, hash_cache_key

    todo = 0
    for f in checkpoint_files(path):
        key = hash_cache_key(f)
        if key not in cache:
            todo += key[1]
    if todo >= min_bytes:
        print(f"fingerprinting {todo / 2**20:,.0f} MiB of weights of subject {sid!r} ({path}); once per change, the hashes "
              "are kept in the run's store", file=sys.stderr, flush=True)


def check_weights(store: ResultsStore, run_id: str, units: list[Unit], current: dict[str, str | None],
                  spec: RunSpec, subjects: dict[str, SubjectEntry], rerun_changed: bool = False) -> int:
    """Refuse (:class:`WeightsChangedError`) when done units of ``units`` were computed with other weights than
    ``current``; with ``rerun_changed`` mark them failed so this invocation runs them again. Rows without a
    fingerprint (older stores, subjects without local weights) are not checked. Returns the units marked."""
    mine = {u.key for u in units}
    stale: dict[str, list[tuple]] = {}
    stored: dict[str, set[str]] = {}
    for key, fp in store.done_weights(run_id):
        if key in mine and fp is not None and fp != current.get(key[0]):
            stale.setdefault(key[0], []).append(key)
            stored.setdefault(key[0], set()).add(fp)
    if not stale:
        return 0
    if not rerun_changed:
        sid = sorted(stale)[0]
        where = subject_checkpoint(spec, subjects[sid]) if sid in subjects else None
        more = f" (and {len(stale) - 1} more subject(s): {', '.join(sorted(stale)[1:4])})" if len(stale) > 1 else ""
        raise WeightsChangedError(
            f"the weights of subject {sid!r} changed since {len(stale[sid])} of its stored results "
            f"({where or 'no local weights now'}: {current.get(sid) or 'none'} now, {', '.join(sorted(stored[sid]))} "
            f"then){more}; run again with --rerun-changed to recompute those units with the new weights, or start a "
            "new run folder (--out) to keep both")
    n = 0
    for sid, keys in stale.items():
        n += store.invalidate(run_id, keys, f"weights changed: computed with {', '.join(sorted(stored[sid]))}, "
                                            f"now {current.get(sid) or 'none'} (--rerun-changed)")
    return n
