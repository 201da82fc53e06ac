"""The results store: SQLite in WAL mode, one row per unit, written as each unit finishes.

Tables:

- ``runs``: one row per run (run id = spec hash): spec JSON, base folder, evaluator, created.
- ``plan``: every unit of the run with its group key (so ``status`` needs no plugins).
- ``results``: one row per finished unit, ``UNIQUE(run_id, subject, item, distortion, level, seed)``;
  ``status`` is ``done`` or ``failed`` (with ``error``); ``outputs`` holds the raw outputs as JSON;
  every row carries the spec hash, code version, unit seed, worker, timings (unix seconds) and
  ``weights``, the fingerprint of its subject's checkpoint (:mod:`embeval.runs.weights`; null
  without local weights).
- ``sessions``: every run/resume invocation (shard, backend, host, pid, code version).
- ``file_hashes``: content hashes of checkpoint files by (path, size, mtime, inode), so an
  unchanged checkpoint is not re-read on resume.

A unit's row is written in its own transaction the moment it finishes; a failed row is replaced
when the unit later succeeds; a done row is never overwritten (so no unit is counted twice, even
when two processes race). WAL with ``synchronous=NORMAL`` survives a killed process (SIGKILL) with
every committed unit intact.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from embeval.errors import ConfigError, MissingFileError
from embeval.runs.units import KEY_FIELDS, Unit, UnitKey, UnitResult, assign_shards, outputs_json

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs(
  run_id TEXT PRIMARY KEY, spec_hash TEXT NOT NULL, evaluator TEXT NOT NULL, name TEXT,
  spec_json TEXT NOT NULL, base_dir TEXT, created REAL NOT NULL, code_version TEXT, total INTEGER);
CREATE TABLE IF NOT EXISTS plan(
  run_id TEXT NOT NULL, subject TEXT NOT NULL, item TEXT NOT NULL, distortion TEXT NOT NULL,
  level INTEGER NOT NULL, seed INTEGER NOT NULL, group_key TEXT NOT NULL, ord INTEGER NOT NULL,
  PRIMARY KEY(run_id, subject, item, distortion, level, seed)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS results(
  id INTEGER PRIMARY KEY,
  run_id TEXT NOT NULL, subject TEXT NOT NULL, item TEXT NOT NULL, distortion TEXT NOT NULL,
  level INTEGER NOT NULL, seed INTEGER NOT NULL, group_key TEXT,
  status TEXT NOT NULL CHECK(status IN ('done', 'failed')), attempts INTEGER NOT NULL DEFAULT 1,
  error TEXT, outputs TEXT, unit_seed INTEGER, spec_hash TEXT NOT NULL, code_version TEXT NOT NULL,
  worker TEXT, started REAL, finished REAL, duration_s REAL, weights TEXT,
  UNIQUE(run_id, subject, item, distortion, level, seed));
CREATE INDEX IF NOT EXISTS results_status ON results(run_id, status);
CREATE TABLE IF NOT EXISTS sessions(
  id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, shard_index INTEGER, num_shards INTEGER,
  backend TEXT, host TEXT, pid INTEGER, code_version TEXT, started REAL);
CREATE TABLE IF NOT EXISTS file_hashes(
  path TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, inode INTEGER NOT NULL, sha256 TEXT NOT NULL,
  PRIMARY KEY(path, size, mtime_ns, inode)) WITHOUT ROWID;
"""

_UPSERT = """
INSERT INTO results(run_id, subject, item, distortion, level, seed, group_key, status, attempts, error,
                    outputs, unit_seed, spec_hash, code_version, worker, started, finished, duration_s, weights)
VALUES(?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(run_id, subject, item, distortion, level, seed) DO UPDATE SET
  status=excluded.status, attempts=results.attempts + 1, error=excluded.error, outputs=excluded.outputs,
  unit_seed=excluded.unit_seed, spec_hash=excluded.spec_hash, code_version=excluded.code_version,
  worker=excluded.worker, started=excluded.started, finished=excluded.finished, duration_s=excluded.duration_s,
  weights=excluded.weights
WHERE results.status != 'done'
"""

STORE_NAME = "results.sqlite"
#: bumped when the schema changes (PRAGMA user_version); 2: results.weights and file_hashes (an older store is
#: upgraded in place when opened for writing; its rows have no fingerprint)
SCHEMA_VERSION = 2


class ResultsStore:
    """One SQLite file (``<run dir>/results.sqlite``); safe to share between local processes."""

    def __init__(self, path: str | os.PathLike, create: bool = True, wal: bool = True):
        """``create``: open for writing, creating the file and its tables when missing. Without it the
        store must exist and is opened read-only (SQLite ``mode=ro``): reading never changes the file."""
        self.path = Path(path)
        self.readonly = not create
        if self.readonly:
            if not self.path.is_file():
                raise MissingFileError(f"no results store at {self.path}; is this a run folder made by `embeval run`?")
            if self.path.stat().st_size == 0:
                raise ConfigError(f"{self.path} is empty (0 bytes), not a results store; it was truncated or never "
                                  "written: start a new run folder (--out), or restore the file")
            self.conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=60.0,
                                        isolation_level=None)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None)
        try:
            self.conn.execute("PRAGMA busy_timeout=60000")
            if wal and not self.readonly:
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute("PRAGMA synchronous=NORMAL")
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as exc:  # not SQLite at all (a wrong or overwritten file), or damaged
            self.conn.close()
            raise ConfigError(f"{self.path} is not a results store ({exc}); it was overwritten or damaged: "
                              "start a new run folder (--out), or restore the file") from None
        if self.readonly and not {"runs", "plan", "results", "sessions"} <= tables:
            self.conn.close()
            raise ConfigError(f"{self.path} is an SQLite file but not a results store (no runs/results tables); "
                              "give the results.sqlite of a run folder made by `embeval run`")
        if version > SCHEMA_VERSION:
            self.conn.close()
            raise ConfigError(f"{self.path} was written by a newer embeval (store schema {version}, this one reads "
                              f"{SCHEMA_VERSION}); upgrade embeval to read or resume it")
        if create:
            self.conn.executescript(SCHEMA)
            if "weights" not in self._columns("results"):  # a schema-1 store: add the fingerprint column
                try:
                    self.conn.execute("ALTER TABLE results ADD COLUMN weights TEXT")
                except sqlite3.OperationalError as exc:  # another shard's process added it a moment ago
                    if "duplicate column" not in str(exc):
                        raise
            if version < SCHEMA_VERSION:
                self.conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _columns(self, table: str, schema: str = "main") -> list[str]:
        return [r[1] for r in self.conn.execute(f"PRAGMA {schema}.table_info({table})")]

    # ----------------------------------------------------------- context
    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "ResultsStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _tx(self):
        return _Transaction(self.conn, self.path)

    # ----------------------------------------------------------- runs and plan
    def register_run(self, run_id: str, spec_hash: str, evaluator: str, name: str, spec: dict[str, Any],
                     base_dir: str, code_version: str, units: Sequence[Unit]) -> None:
        """Record the run and its plan (idempotent; a different spec under the same id is refused)."""
        row = self.conn.execute("SELECT spec_hash FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row and row[0] != spec_hash:  # pragma: no cover - run_id is the hash
            raise ConfigError(f"run {run_id} exists with spec hash {row[0]}, not {spec_hash}")
        n_plan = self.conn.execute("SELECT count(*) FROM plan WHERE run_id=?", (run_id,)).fetchone()[0]
        if row and n_plan == len(units):
            return
        with self._tx():
            self.conn.execute(
                "INSERT OR IGNORE INTO runs(run_id, spec_hash, evaluator, name, spec_json, base_dir, created, code_version, total)"
                " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, spec_hash, evaluator, name, json.dumps(spec, sort_keys=True), base_dir, time.time(), code_version, len(units)),
            )
            self.conn.executemany(
                "INSERT OR IGNORE INTO plan(run_id, subject, item, distortion, level, seed, group_key, ord) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                ((run_id, *u.key, u.group, i) for i, u in enumerate(units)),
            )

    def run_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT run_id FROM runs ORDER BY created")]

    def run_info(self, run_id: str | None = None) -> dict[str, Any]:
        run_id = run_id or self._only_run()
        row = self.conn.execute(
            "SELECT run_id, spec_hash, evaluator, name, spec_json, base_dir, created, code_version, total FROM runs WHERE run_id=?",
            (run_id,)).fetchone()
        if row is None:
            raise ConfigError(f"run {run_id!r} is not in {self.path}")
        keys = ("run_id", "spec_hash", "evaluator", "name", "spec", "base_dir", "created", "code_version", "total")
        info = dict(zip(keys, row))
        info["spec"] = json.loads(info["spec"])
        return info

    def _only_run(self) -> str:
        ids = self.run_ids()
        if not ids:
            raise ConfigError(f"{self.path} holds no run yet")
        return ids[-1]

    def plan(self, run_id: str) -> list[tuple[UnitKey, str]]:
        """(key, group key) of every planned unit, in plan order."""
        rows = self.conn.execute(
            "SELECT subject, item, distortion, level, seed, group_key FROM plan WHERE run_id=? ORDER BY ord", (run_id,))
        return [((r[0], r[1], r[2], r[3], r[4]), r[5]) for r in rows]

    def start_session(self, run_id: str, shard_index: int, num_shards: int, backend: str, code_version: str) -> None:
        with self._tx():
            self.conn.execute(
                "INSERT INTO sessions(run_id, shard_index, num_shards, backend, host, pid, code_version, started) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, shard_index, num_shards, backend, socket.gethostname(), os.getpid(), code_version, time.time()))

    def sessions(self, run_id: str) -> list[dict[str, Any]]:
        cur = self.conn.execute(
            "SELECT shard_index, num_shards, backend, host, pid, code_version, started FROM sessions WHERE run_id=? ORDER BY id", (run_id,))
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r)) for r in cur]

    # ----------------------------------------------------------- results
    def record(self, run_id: str, unit: Unit, result: UnitResult, *, spec_hash: str, code_version: str, unit_seed: int) -> None:
        """Write one finished unit in its own transaction (done rows are never overwritten)."""
        self.record_many(run_id, [(unit, result, unit_seed)], spec_hash=spec_hash, code_version=code_version)

    def record_many(self, run_id: str, rows: Iterable[tuple[Unit, UnitResult, int]], *, spec_hash: str, code_version: str,
                    weights: dict[str, str | None] | None = None) -> None:
        """Write several finished units in one transaction; ``weights``: subject -> checkpoint fingerprint."""
        weights = weights or {}
        params = [
            (run_id, *u.key, u.group, r.status, r.error,
             None if r.outputs is None else outputs_json(r.outputs), int(seed), spec_hash, code_version,
             r.worker, r.started, r.finished, r.duration_s, weights.get(u.subject))
            for u, r, seed in rows
        ]
        with self._tx():
            self.conn.executemany(_UPSERT, params)

    def done_keys(self, run_id: str) -> set[UnitKey]:
        rows = self.conn.execute(
            "SELECT subject, item, distortion, level, seed FROM results WHERE run_id=? AND status='done'", (run_id,))
        return {tuple(r) for r in rows}

    def done_weights(self, run_id: str) -> list[tuple[UnitKey, str | None]]:
        """(key, weights fingerprint) of every done unit (None: recorded without one)."""
        if "weights" not in self._columns("results"):
            return []
        rows = self.conn.execute(
            "SELECT subject, item, distortion, level, seed, weights FROM results WHERE run_id=? AND status='done'", (run_id,))
        return [(tuple(r[:5]), r[5]) for r in rows]

    def invalidate(self, run_id: str, keys: Iterable[UnitKey], reason: str) -> int:
        """Mark done units failed with ``reason`` so they run again (the one way a done row is given up, on
        an explicit request: ``--rerun-changed``). Returns how many rows changed."""
        with self._tx():
            cur = self.conn.executemany(
                "UPDATE results SET status='failed', error=? WHERE run_id=? AND subject=? AND item=? AND distortion=? "
                "AND level=? AND seed=? AND status='done'", ((reason, run_id, *k) for k in keys))
            return cur.rowcount

    def hash_cache(self) -> dict:
        """The file hash cache (:data:`embeval.provenance.HashCache`)."""
        return {tuple(r[:4]): r[4] for r in self.conn.execute("SELECT path, size, mtime_ns, inode, sha256 FROM file_hashes")}

    def save_hash_cache(self, entries: dict) -> None:
        if entries:
            with self._tx():
                self.conn.executemany("INSERT OR REPLACE INTO file_hashes(path, size, mtime_ns, inode, sha256) VALUES(?, ?, ?, ?, ?)",
                                      ((*k, v) for k, v in entries.items()))

    def counts(self, run_id: str) -> dict[str, int]:
        rows = self.conn.execute("SELECT status, count(*) FROM results WHERE run_id=? GROUP BY status", (run_id,))
        out = {"done": 0, "failed": 0}
        out.update(dict(rows.fetchall()))
        return out

    def rows(self, run_id: str, status: str | None = None) -> list[dict[str, Any]]:
        """Result rows as dicts (``outputs`` parsed), ordered by key."""
        weights = ", weights" if "weights" in self._columns("results") else ", NULL AS weights"
        q = ("SELECT run_id, subject, item, distortion, level, seed, group_key, status, attempts, error, outputs, unit_seed,"
             f" spec_hash, code_version, worker, started, finished, duration_s{weights} FROM results WHERE run_id=?")
        args: list[Any] = [run_id]
        if status:
            q += " AND status=?"
            args.append(status)
        cur = self.conn.execute(q + " ORDER BY " + ", ".join(KEY_FIELDS), args)
        cols = [c[0] for c in cur.description]
        out = []
        for r in cur:
            d = dict(zip(cols, r))
            d["outputs"] = None if d["outputs"] is None else json.loads(d["outputs"])
            out.append(d)
        return out

    def results(self, run_id: str) -> dict[UnitKey, Any]:
        """Key -> outputs of every done unit (what two runs are compared by)."""
        rows = self.conn.execute(
            "SELECT subject, item, distortion, level, seed, outputs FROM results WHERE run_id=? AND status='done'", (run_id,))
        return {tuple(r[:5]): json.loads(r[5]) for r in rows}

    def merge_from(self, other: str | os.PathLike) -> dict[str, int]:
        """Copy another store's runs, plan, sessions and results into this one (e.g. shards run on
        machines without a shared disk). The same rules as for live writes hold: a done row is
        never overwritten; a failed row is replaced by the other store's row. Returns counts."""
        other = Path(other)
        if not other.is_file():
            raise MissingFileError(f"no results store at {other}")
        with ResultsStore(other, create=False) as o:
            theirs = set(o.run_ids())
        mine = set(self.run_ids())
        if mine and theirs - mine:
            raise ConfigError(f"{other} holds run(s) {', '.join(sorted(theirs - mine))}, this store {', '.join(sorted(mine))}: "
                              "merge only stores of the same run spec")
        cols = ("run_id, subject, item, distortion, level, seed, group_key, status, attempts, error, outputs, unit_seed,"
                " spec_hash, code_version, worker, started, finished, duration_s")
        before = self.conn.execute("SELECT count(*) FROM results WHERE status='done'").fetchone()[0]
        self.conn.execute("ATTACH DATABASE ? AS src", (str(other),))
        try:
            theirs_w = "weights" if "weights" in self._columns("results", "src") else "NULL"  # a schema-1 source
            with self._tx():
                self.conn.execute("INSERT OR IGNORE INTO runs SELECT * FROM src.runs")
                self.conn.execute("INSERT OR IGNORE INTO plan SELECT * FROM src.plan")
                self.conn.execute("INSERT INTO sessions(run_id, shard_index, num_shards, backend, host, pid, code_version, started)"
                                  " SELECT run_id, shard_index, num_shards, backend, host, pid, code_version, started FROM src.sessions s"
                                  " WHERE NOT EXISTS (SELECT 1 FROM sessions m WHERE m.run_id = s.run_id AND m.host IS s.host"
                                  " AND m.pid IS s.pid AND m.started IS s.started)")
                self.conn.execute(
                    f"INSERT INTO results({cols}, weights) SELECT {cols}, {theirs_w} FROM src.results WHERE true "
                    "ON CONFLICT(run_id, subject, item, distortion, level, seed) DO UPDATE SET "
                    "status=excluded.status, attempts=results.attempts + excluded.attempts, error=excluded.error, "
                    "outputs=excluded.outputs, unit_seed=excluded.unit_seed, spec_hash=excluded.spec_hash, "
                    "code_version=excluded.code_version, worker=excluded.worker, started=excluded.started, "
                    "finished=excluded.finished, duration_s=excluded.duration_s, weights=excluded.weights "
                    "WHERE results.status != 'done'")
        finally:
            self.conn.execute("DETACH DATABASE src")
        after = self.conn.execute("SELECT count(*) FROM results WHERE status='done'").fetchone()[0]
        return {"new_done": after - before, "done": after}

    # ----------------------------------------------------------- status
    def shard_status(self, run_id: str, num_shards: int | None = None, window: int = 200) -> list[dict[str, Any]]:
        """Per shard: done/failed/total and the recent rate (units/s over the last ``window``
        finished units of that shard). ``num_shards`` defaults to the last session's."""
        if num_shards is None:
            row = self.conn.execute("SELECT num_shards FROM sessions WHERE run_id=? ORDER BY id DESC LIMIT 1", (run_id,)).fetchone()
            num_shards = int(row[0]) if row and row[0] else 1
        plan = self.plan(run_id)
        shard_of_group = assign_shards((g for _, g in plan), num_shards)
        shard_of_key = {k: shard_of_group[g] for k, g in plan}
        # shards beyond the number of groups are empty (groups are dealt one each): not listed, so a huge
        # --num-shards costs nothing here
        shown = min(num_shards, max(1, len(shard_of_group)))
        stats = [{"shard": i, "num_shards": num_shards, "done": 0, "failed": 0, "total": 0, "finished": []} for i in range(shown)]
        for k in shard_of_key.values():
            stats[k]["total"] += 1
        for r in self.conn.execute(
                "SELECT subject, item, distortion, level, seed, status, finished FROM results WHERE run_id=?", (run_id,)):
            s = stats[shard_of_key.get(tuple(r[:5]), 0)]
            s[r[5]] += 1
            if r[5] == "done" and r[6]:
                s["finished"].append(r[6])
        for s in stats:
            fin = sorted(s.pop("finished"))[-window:]
            s["rate_per_s"] = (len(fin) - 1) / (fin[-1] - fin[0]) if len(fin) > 1 and fin[-1] > fin[0] else None
            s["last_finished"] = fin[-1] if fin else None
        return stats


def _full(exc: BaseException | None) -> bool:
    """Whether ``exc`` says the disk (or the quota) is full."""
    import errno

    return (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or (
        isinstance(exc, sqlite3.OperationalError) and "full" in str(exc).lower())


class _Transaction:
    """One write transaction; a full disk becomes one :class:`ConfigError` naming the store's folder (the rows of
    the transaction are rolled back, the ones committed before are kept)."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self.conn, self.path = conn, path

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        try:
            self.conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
        except sqlite3.OperationalError as e:  # COMMIT on a full disk; ROLLBACK after SQLite rolled back itself
            if not _full(e) and not _full(exc):
                raise
            exc = exc if _full(exc) else e
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        if _full(exc):
            raise ConfigError(f"the disk holding {self.path.parent} is full (writing {self.path.name}): free space "
                              f"there, then `embeval resume {self.path.parent}` continues (finished units are kept)") from None
