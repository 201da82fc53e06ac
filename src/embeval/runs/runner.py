"""Run, resume and inspect runs: the run folder, sharding, retries and progress.

A run folder holds ``spec.yaml`` (the normalised spec), ``run.json`` (spec hash, base folder of
relative paths, code version at creation) and ``results.sqlite`` (:mod:`embeval.runs.store`).
Running a spec into a folder that already holds it continues where it stopped: finished units
are skipped and failed ones retried; a different spec in the same folder is refused.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from embeval.errors import ConfigError, MissingFileError, load_yaml, read_json
from embeval.provenance import code_version
from embeval.progress import Progress
from embeval.runs.backends import get_backend
from embeval.runs.execute import with_video_dir
from embeval.runs.lock import LOCK_DIR, RunLock
from embeval.runs.plan import Plan, plan_run
from embeval.runs.spec import RunSpec, check_unit_timeout, load_spec, parse_spec, with_backend
from embeval.runs.store import STORE_NAME, ResultsStore
from embeval.runs.trackers import RunTrackers
from embeval.runs.units import select_shard
from embeval.runs.weights import check_weights, fingerprints


@dataclass
class RunSummary:
    """What one run/resume invocation did (counts are of this shard's units)."""

    run_dir: Path
    run_id: str
    shard_index: int
    num_shards: int
    backend: str
    total: int  # units in this shard
    skipped: int  # already done before this invocation
    done: int  # done by this invocation
    failed: int  # still failed at the end of this invocation
    elapsed_s: float
    errors: list[str] = field(default_factory=list)  # a few distinct error messages

    @property
    def complete(self) -> bool:
        return self.skipped + self.done == self.total

    @property
    def rate_per_s(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0


def read_run_json(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """``RUN/run.json`` (None when there is none); ConfigError in one line when it is damaged."""
    meta = Path(run_dir) / "run.json"
    if not meta.is_file():
        return None
    info = read_json(meta, "run metadata", "the run folder is damaged: choose another --out")
    if not isinstance(info.get("spec_hash"), str):
        raise ConfigError(f"{meta} is damaged (no spec_hash); it is not a run folder embeval can continue: choose another --out")
    return info


def check_run_dir(spec: RunSpec, d: Path) -> None:
    """A run folder that holds a different spec is a ConfigError (nothing is written)."""
    old = read_run_json(d)
    if old is not None and old.get("spec_hash") != spec.hash:
        raise ConfigError(
            f"{d} already holds run {old.get('spec_hash')} from a different spec (this spec's hash is {spec.hash}); "
            "resume it with `embeval resume`, or choose another output folder (--out)"
        )


def prepare_run_dir(spec: RunSpec, run_dir: str | os.PathLike | None = None) -> Path:
    """Create (or check) the run folder: a different spec already there is a ConfigError."""
    d = Path(run_dir) if run_dir is not None else spec.default_run_dir()
    meta = d / "run.json"
    check_run_dir(spec, d)
    if meta.is_file():
        return d
    import yaml

    d.mkdir(parents=True, exist_ok=True)
    _atomic_write(d / "spec.yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False))
    _atomic_write(meta, json.dumps({"spec_hash": spec.hash, "base_dir": spec.base_dir, "evaluator": spec.evaluator,
                                    "name": spec.name, "code_version": code_version(), "created": time.time()}, indent=2))
    return d


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def load_run_spec(run_dir: str | os.PathLike) -> RunSpec:
    """The spec a run folder was made from (paths resolve against its original base folder)."""
    d = Path(run_dir)
    meta, spec_file = d / "run.json", d / "spec.yaml"
    if not meta.is_file() or not spec_file.is_file():
        raise MissingFileError(f"{d} is not a run folder (no run.json/spec.yaml); start one with `embeval run SPEC.yaml`")
    info = read_run_json(d)
    data = load_yaml(spec_file, "run spec", fix="was it edited? start a new run folder")
    spec = parse_spec(data, base_dir=info.get("base_dir", d))
    if spec.hash != info.get("spec_hash"):
        raise ConfigError(f"{spec_file} was edited: its hash {spec.hash} differs from the run's {info.get('spec_hash')}; "
                          "start a new run folder for a changed spec")
    return spec


def run(spec: RunSpec | str | os.PathLike, run_dir: str | os.PathLike | None = None, *, shard_index: int = 0,
        num_shards: int = 1, backend: str | None = None, progress: bool | None = None,
        unit_timeout_s: float | None | str = "spec", rerun_changed: bool = False,
        on_start: Callable[[RunSpec, Path], None] | None = None) -> RunSummary:
    """Run (or continue) ``spec``'s units of one shard; returns a :class:`RunSummary`.

    Everything is validated before any work starts. Each unit's record is committed as it
    finishes; failed units are retried ``spec.backend.retries`` times here and again on resume.
    ``backend``/``progress``/``unit_timeout_s`` override the spec's backend settings. Another live
    process on an overlapping shard of the folder is refused (:mod:`embeval.runs.lock`); so are
    stored results of a subject whose weights changed since, unless ``rerun_changed`` (then they
    run again; :mod:`embeval.runs.weights`). ``on_start(spec, run_dir)`` is called once everything is
    validated, before the folder is created (e.g. to print how to resume).
    """
    if not isinstance(spec, RunSpec):
        spec = load_spec(spec)
    changes: dict[str, Any] = {}
    if backend is not None:
        changes["name"] = backend
    if progress is not None:
        changes["progress"] = progress
    if unit_timeout_s != "spec":  # bounded like backend.unit_timeout_s (0 or None: no watchdog)
        changes["unit_timeout_s"] = check_unit_timeout(unit_timeout_s, "unit_timeout_s")
    if changes:
        spec = with_backend(spec, **changes)
    plan = plan_run(spec)
    units = select_shard(plan.units, shard_index, num_shards)  # validates the shard arguments
    backend_impl = get_backend(spec.backend.name)
    if hasattr(backend_impl, "check"):
        backend_impl.check(spec)
    d = Path(run_dir) if run_dir is not None else spec.default_run_dir()
    check_run_dir(spec, d)
    if on_start is not None:
        on_start(spec, d)
    d.mkdir(parents=True, exist_ok=True)
    with RunLock(d, shard_index, num_shards):  # a second process on the same shard is refused, naming this one
        prepare_run_dir(spec, d)
        with ResultsStore(d / STORE_NAME) as store:
            trackers = RunTrackers(spec, d, shard_index, num_shards)  # none unless spec.trackers
            try:
                summary = _execute(plan, units, store, d, backend_impl, shard_index, num_shards, rerun_changed, trackers)
            except BaseException:
                trackers.close()  # what was logged stays readable
                raise
            trackers.finish(store, spec.run_id)
            return summary


def resume(run_dir: str | os.PathLike, **kwargs: Any) -> RunSummary:
    """Continue the run in ``run_dir`` (same keyword arguments as :func:`run`)."""
    d = Path(run_dir)
    if not (d / "run.json").is_file() and (d / LOCK_DIR).is_dir():  # a run just starting there: name it, not "no run"
        with RunLock(d, kwargs.get("shard_index", 0), kwargs.get("num_shards", 1)):
            pass
    return run(load_run_spec(d), d, **kwargs)


def _execute(plan: Plan, units, store: ResultsStore, run_dir: Path, backend_impl, shard_index: int, num_shards: int,
             rerun_changed: bool = False, trackers: RunTrackers | None = None) -> RunSummary:
    spec = plan.spec
    cv = code_version()
    run_id, h = spec.run_id, spec.hash
    store.register_run(run_id, h, spec.evaluator, spec.name, spec.to_dict(), spec.base_dir, cv, plan.units)
    plan = dataclasses.replace(plan, spec=with_video_dir(spec, run_dir))  # record_video: the workers' absolute folder
    weights = fingerprints(spec, plan.subjects.values(), store)
    rerun = check_weights(store, run_id, units, weights, spec, plan.subjects, rerun_changed)
    if rerun:
        print(f"weights changed: {rerun} stored unit(s) of this shard run again with the new weights (--rerun-changed)",
              file=sys.stderr, flush=True)
    store.start_session(run_id, shard_index, num_shards, spec.backend.name, cv)
    already = store.done_keys(run_id)
    skipped = sum(1 for u in units if u.key in already)
    t0 = time.perf_counter()
    done = 0
    errors: dict[str, int] = {}
    bar = _progress(spec, len(units), skipped, shard_index, num_shards)
    step_of = {u.key: i for i, u in enumerate(plan.units)} if trackers else {}
    try:
        for attempt in range(spec.backend.retries + 1):
            finished = store.done_keys(run_id)
            pending = [u for u in units if u.key not in finished]
            if not pending:
                break
            failed_keys: set = set()

            def on_results(rows, attempt=attempt) -> None:
                nonlocal done
                store.record_many(run_id, [(u, r, u.unit_seed(spec.evaluator)) for u, r in rows], spec_hash=h, code_version=cv,
                                  weights=weights)
                for u, r in rows:
                    if r.ok:
                        done += 1
                        failed_keys.discard(u.key)
                        if trackers:
                            trackers.unit_done(step_of[u.key], u.subject, r.outputs)
                    else:
                        failed_keys.add(u.key)
                        msg = (r.error or "").split(" [at ")[0][:200]
                        errors[msg] = errors.get(msg, 0) + 1
                if bar is not None:
                    bar.update(sum(r.ok for _, r in rows), failed=len(failed_keys))

            backend_impl.execute(plan, pending, on_results)
            if not failed_keys:
                break
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t0
    final = store.done_keys(run_id)
    failed = sum(1 for u in units if u.key not in final)
    return RunSummary(run_dir, run_id, shard_index, num_shards, spec.backend.name, len(units), skipped, done, failed,
                      elapsed, errors=sorted(errors, key=errors.get, reverse=True)[:5])


def _progress(spec: RunSpec, total: int, initial: int, shard_index: int, num_shards: int) -> Progress | None:
    """A bar on a terminal, a line every 10 s otherwise (:mod:`embeval.progress`); None with progress off."""
    if not spec.backend.progress:
        return None
    desc = f"{spec.name or spec.evaluator} [{spec.hash[:8]}]" + (f" shard {shard_index}/{num_shards}" if num_shards > 1 else "")
    return Progress(total, desc, "units", initial=initial)


def open_store(run_dir: str | os.PathLike) -> ResultsStore:
    """The results store of an existing run folder (MissingFileError if there is none)."""
    d = Path(run_dir)
    if d.is_file() and d.suffix not in (".sqlite", ".db"):
        raise MissingFileError(f"{d} is a file, not a run folder; give the folder made by `embeval run` (or its {STORE_NAME})")
    return ResultsStore(d / STORE_NAME if d.is_dir() else d, create=False)


def status(run_dir: str | os.PathLike, num_shards: int | None = None) -> dict[str, Any]:
    """Done/failed/total per shard with recent rates, plus the run's identity."""
    with open_store(run_dir) as store:
        info = store.run_info()
        shards = store.shard_status(info["run_id"], num_shards)
        counts = store.counts(info["run_id"])
        sessions = store.sessions(info["run_id"])
    from embeval.runs.lock import live_holders

    d = Path(run_dir)
    running = live_holders(d) if d.is_dir() else []
    return {"run_id": info["run_id"], "name": info["name"], "evaluator": info["evaluator"], "total": info["total"],
            "done": counts.get("done", 0), "failed": counts.get("failed", 0), "code_version": info["code_version"],
            "shards": shards, "sessions": len(sessions), "running": running,
            "started": sessions[-1]["started"] if sessions else info["created"]}


def watch(run_dir: str | os.PathLike, every_s: float = 5.0, emit: Callable[[str], None] = print,
          sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time) -> int:
    """Follow a run from another process: every ``every_s`` seconds re-read its store (read-only) and ``emit`` one
    line, ``name [hash8]: done/total units, elapsed, ETA, failed N``, until every unit is done (returns 0) or no
    process runs it any more (returns 1: some units are failed or missing). The ETA is the units left over the
    store's recent rate (summed over shards); elapsed counts from the start of the latest session.
    A folder whose run is still starting (its lock held, its store not written yet) is waited for."""
    from embeval.progress import progress_line
    from embeval.runs.lock import live_holders

    d = Path(run_dir)
    while True:
        try:
            st = status(d)
        except (ConfigError, MissingFileError):
            if not live_holders(d):
                raise
            sleep(every_s)  # a run starting there: its store and tables are not written yet
            continue
        rate = sum(s["rate_per_s"] or 0.0 for s in st["shards"])
        left = st["total"] - st["done"]
        eta = left / rate if rate > 0 else None
        desc = f"{st['name'] or st['evaluator']} [{st['run_id'][:8]}]"
        last = max((s["last_finished"] or 0.0 for s in st["shards"]), default=0.0)
        end = last if left <= 0 and last else clock()  # a finished run: "done in" its own time, not until now
        line = progress_line(desc, st["done"], st["total"], "units", max(0.0, end - st["started"]),
                             postfix={"failed": st["failed"]} if st["failed"] else None, eta=eta)
        if left <= 0:
            emit(line)
            return 0
        if not st["running"]:
            emit(f"{line}; no process runs it now: continue with `embeval resume {d}`")
            return 1
        emit(line)
        sleep(every_s)


def merge(run_dir: str | os.PathLike, sources: list[str | os.PathLike]) -> dict[str, int]:
    """Merge other run folders of the same spec (shards run on other machines) into ``run_dir``
    (created from the first source when missing). Done units are never overwritten or duplicated."""
    import shutil

    d = Path(run_dir)
    for src in map(Path, sources):  # before anything is created or locked
        if _same_folder(src, d):  # its store would wait on its own write lock ("database is locked" after 60 s)
            raise ConfigError(f"{src} is the run folder being merged into ({d}); a run cannot be merged into itself: "
                              "give the other run folders (shards) as SOURCE")
    for src in map(Path, sources):
        if not (src / "run.json").is_file():
            raise MissingFileError(f"{src} is not a run folder (no run.json); give folders made by `embeval run`")
        if not (d / "run.json").is_file():
            d.mkdir(parents=True, exist_ok=True)
            for name in ("spec.yaml", "run.json"):
                shutil.copy2(src / name, d / name)
        elif read_run_json(src)["spec_hash"] != read_run_json(d)["spec_hash"]:
            raise ConfigError(f"{src} holds a different run spec than {d}; merge only shards of the same spec")
    out: dict[str, int] = {"new_done": 0, "done": 0}
    with RunLock(d), ResultsStore(d / STORE_NAME) as store:  # the whole run: no shard may run into it meanwhile
        for src in sources:
            r = store.merge_from(Path(src) / STORE_NAME)
            out = {"new_done": out["new_done"] + r["new_done"], "done": r["done"]}
    return out


def _same_folder(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name the same folder (or the same results store): through a symlink, a relative
    path or a hard link, not only the same spelling."""
    a_store, b_store = a / STORE_NAME, b / STORE_NAME
    try:
        if a_store.exists() and b_store.exists():
            return os.path.samefile(a_store, b_store)
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()
