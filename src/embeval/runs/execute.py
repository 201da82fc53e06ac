"""Running units on one worker: the subject's state, batching and the hung-unit watchdog.

Both backends use :class:`SubjectRunner`: the local backend in the main process, the Ray backend
inside each actor. A unit that raises is recorded as failed with its error; a unit that runs past
``unit_timeout_s`` is recorded as failed with the reason ``timeout`` (its thread is abandoned and
the subject is set up afresh, so a hung model cannot poison later units); no unit is dropped.

Episode videos (``record_video`` in the run spec): each runner holds an
:class:`~embeval.recording.video.EpisodeRecorder` writing into ``video_dir`` (the runner resolves the
default ``RUN/videos`` before the units run, :func:`with_video_dir`); an evaluator that records
(``records_video = True``) opens ``with unit_episode(unit) as ep:`` around a unit's episode. The
file is ``<subject>_<item>_<distortion><level>_seed<seed>.mp4``, which the report captions with that
unit. ``record_video: N`` keeps the first N units of each subject on each worker.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import queue
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from embeval.errors import ServerUnavailableError
from embeval.runs.units import Unit, UnitResult, outputs_json

#: the recorder of the runner whose unit runs in this thread (set around each evaluator call)
_UNIT_VIDEOS: contextvars.ContextVar = contextvars.ContextVar("embeval_unit_videos", default=None)


def unit_video_name(unit: Unit) -> str:
    """``tiny-vla_item00003_white_noise3_seed0``: every key field, as :class:`embeval.runs.report.UnitMatcher` reads them."""
    return f"{unit.subject}_{unit.item}_{unit.distortion}{int(unit.level)}_seed{int(unit.seed)}"


@contextlib.contextmanager
def unit_episode(unit: Unit) -> Iterator[Any]:
    """For evaluators: record the episode run inside the block as ``unit``'s video (yields the
    :class:`~embeval.recording.video.EpisodeVideo`, whose ``finish(success, outcome)`` the evaluator calls), or
    yields None when the run records no videos."""
    from embeval.recording.video import maybe_episode

    with maybe_episode(_UNIT_VIDEOS.get(), unit_video_name(unit)) as ep:
        yield ep


def unit_recorder():
    """The :class:`~embeval.recording.video.EpisodeRecorder` of the runner whose evaluator call runs in this thread
    (None: the run records no videos); for evaluators that record episodes elsewhere (vectorised workers)."""
    return _UNIT_VIDEOS.get()


#: units per call of an evaluator that vectorises its episodes, per environment (``backend.num_envs``): the
#: environments idle only in a call's last episodes, and each call's results reach the store when it ends
UNITS_PER_ENV = 4


def vectorised(evaluator, backend) -> bool:
    """Whether ``evaluator`` runs batches of units as vectorised episodes: it says so (``vectorises = True``) and
    ``backend.num_envs`` > 1."""
    return bool(getattr(evaluator, "vectorises", False)) and getattr(backend, "num_envs", 1) > 1


def units_per_call(evaluator, backend) -> int:
    """Units a backend hands one :meth:`SubjectRunner.run`: ``backend.batch_size`` where the evaluator batches, at
    least ``UNITS_PER_ENV x num_envs`` where it vectorises episodes, else 1."""
    if vectorised(evaluator, backend):
        return max(backend.batch_size, UNITS_PER_ENV * backend.num_envs)
    return backend.batch_size if evaluator.batches else 1


def with_video_dir(spec, run_dir: str | os.PathLike):
    """``spec`` with ``video_dir`` made absolute (default ``<run dir>/videos``) for the workers, checked writable
    (a one-line ConfigError otherwise); ``spec`` itself when it records no videos. Never stored: the run keeps the
    spec as written."""
    import dataclasses

    from embeval.errors import check_out_dir
    from embeval.recording.video import VideoPolicy

    if not VideoPolicy.parse(spec.record_video).enabled:
        return spec
    folder = Path(spec.video_dir) if spec.video_dir else Path(run_dir) / "videos"
    check_out_dir(folder, "spec.video_dir")
    return dataclasses.replace(spec, video_dir=str(folder.resolve()))


def _unit_recorder(spec):
    """The runner's recorder (None when ``spec.record_video`` is none)."""
    from embeval.recording.video import EpisodeRecorder, VideoPolicy

    policy = VideoPolicy.parse(getattr(spec, "record_video", "none"))
    return EpisodeRecorder(policy, spec.video_dir or "videos") if policy.enabled else None


class UnitTimeout(Exception):
    """A call ran past its watchdog deadline."""


class Watchdog:
    """Runs calls on a daemon worker thread and waits at most ``timeout_s`` for each.

    Python cannot kill a thread: a call that overruns is abandoned (its daemon thread keeps running
    until it returns or the process exits) and the next call gets a fresh thread.
    """

    def __init__(self) -> None:
        self._jobs: queue.Queue | None = None
        self.abandoned = 0

    def _start(self) -> queue.Queue:
        jobs: queue.Queue = queue.Queue()

        def loop() -> None:
            while True:
                job = jobs.get()
                if job is None:
                    return
                fn, box, done = job
                try:
                    box.append((True, fn()))
                except BaseException as exc:  # noqa: BLE001 - reported to the caller
                    box.append((False, exc))
                done.set()

        threading.Thread(target=loop, name="embeval-unit", daemon=True).start()
        return jobs

    def call(self, fn: Callable[[], Any], timeout_s: float | None) -> Any:
        if timeout_s is None:
            return fn()
        if self._jobs is None:
            self._jobs = self._start()
        box: list = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        if not done.wait(timeout_s):
            self._jobs.put(None)  # the worker exits once (if ever) the hung call returns
            self._jobs = None
            self.abandoned += 1
            raise UnitTimeout(f"timeout: the unit ran longer than unit_timeout_s={timeout_s:g} s (watchdog); "
                              "it is recorded as failed and retried on resume; raise backend.unit_timeout_s if it is just slow")
        ok, value = box[0]
        if ok:
            return value
        raise value

    def close(self) -> None:
        if self._jobs is not None:
            self._jobs.put(None)
            self._jobs = None


def seed_global_rngs(seed: int) -> None:
    """Seed the process-wide generators (``random``, NumPy's legacy global, torch when loaded) from
    the unit seed, so a model that samples without an explicit generator still gives the same
    output for a unit whatever ran before it, on whichever worker or backend."""
    import random
    import sys

    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % (2**32))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed % (2**63))


def format_error(exc: BaseException) -> str:
    """``Type: message`` plus the innermost frames (where it happened)."""
    if isinstance(exc, UnitTimeout):
        return str(exc)
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"{type(exc).__name__}: {exc}" + (f" [at {where}]" if where else "")


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


#: a subject whose server failed this many units in a row fails its next units at once (no retry wait each)
SERVER_DOWN_AFTER = 3
#: ... except one real attempt every this many seconds, which closes the breaker when the server is back
SERVER_PROBE_S = 30.0


class SubjectRunner:
    """One subject on one worker: set up once (lazily), then run units or batches of units.

    A model server that is down (:class:`~embeval.errors.ServerUnavailableError` on ``SERVER_DOWN_AFTER``
    units in a row) makes the following units fail at once with that error instead of each waiting
    through the client's retries; one unit every ``SERVER_PROBE_S`` seconds still tries the server.
    The failed units are recorded as usual and ``embeval resume`` runs them when the server is up."""

    def __init__(self, evaluator, spec, subject, timeout_s: float | None = None, worker: str | None = None):
        self.evaluator = evaluator
        self.spec = spec
        self.subject = subject
        self.timeout_s = timeout_s
        self.worker = worker or worker_name()
        self.watchdog = Watchdog()
        self._batch_fallbacks = 0  # batches that raised and were rerun one unit at a time
        self._state: Any = None
        self._ready = False
        self._setup_error: str | None = None
        self._server_failures = 0  # consecutive units failed by an unreachable server
        self._server_error = ""
        self._last_probe = 0.0
        self.videos = _unit_recorder(spec)

    def _recorded(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` with this runner's recorder visible to :func:`unit_episode` (in the calling thread)."""
        token = _UNIT_VIDEOS.set(self.videos)
        try:
            return fn(*args)
        finally:
            _UNIT_VIDEOS.reset(token)

    def _ensure_setup(self) -> None:
        if self._ready or self._setup_error:
            return
        try:
            self._state = self.evaluator.setup(self.spec, self.subject)
            self._ready = True
        except Exception as exc:  # noqa: BLE001 - every unit of this subject is recorded as failed
            self._setup_error = f"subject {self.subject.id!r} setup failed: {format_error(exc)}"

    def _reset_after_timeout(self) -> None:
        # the hung call still holds the old state: drop it and set the subject up again; an evaluator may free what
        # the hung call does not need (``abandon(state)``: e.g. stop its environment workers, which ends that call)
        abandon = getattr(self.evaluator, "abandon", None)
        if callable(abandon) and self._state is not None:
            try:
                abandon(self._state)
            except Exception:  # noqa: BLE001, S110 - best effort: the state is dropped either way
                pass
        self._state, self._ready = None, False

    def run(self, units: Sequence[Unit]) -> list[UnitResult]:
        """Run ``units`` (all of this subject); one result per unit, in order."""
        self._ensure_setup()
        if self._setup_error:
            now = time.time()
            return [UnitResult("failed", error=self._setup_error, started=now, finished=now, worker=self.worker) for _ in units]
        seeds = [u.unit_seed(self.spec.evaluator) for u in units]
        if len(units) > 1 and (self.evaluator.batches or vectorised(self.evaluator, self.spec.backend)):
            started = time.time()
            try:
                timeout = None if self.timeout_s is None else self.timeout_s * len(units)
                seed_global_rngs(seeds[0])  # a batch is seeded by its first unit
                outs = self.watchdog.call(lambda: self._recorded(self.evaluator.run_batch, self.spec, self._state, units, seeds),
                                          timeout)
                if len(outs) != len(units):
                    raise ValueError(f"run_batch returned {len(outs)} outputs for {len(units)} units")
                finished = time.time()
                return [self._finish(o, started, finished) for o in outs]
            except UnitTimeout:
                self._reset_after_timeout()
                self._ensure_setup()
            except Exception as exc:  # noqa: BLE001 - fall back to one by one, so each error lands on its unit
                self._batch_fallbacks += 1
                if self._batch_fallbacks == 1:  # said once per runner: a batch that keeps failing would flood the log
                    first = (str(exc).strip().splitlines() or [""])[0][:200]
                    print(f"warning: a batch of {len(units)} units of subject {self.subject.id!r} failed "
                          f"({type(exc).__name__}: {first}); running them one at a time (later batch failures of "
                          "this subject are not repeated here)", file=sys.stderr, flush=True)
        return [self.run_one(u, s) for u, s in zip(units, seeds)]

    def run_one(self, unit: Unit, unit_seed: int) -> UnitResult:
        self._ensure_setup()
        started = time.time()
        if self._setup_error:
            return UnitResult("failed", error=self._setup_error, started=started, finished=started, worker=self.worker)
        if self._server_failures >= SERVER_DOWN_AFTER and started - self._last_probe < SERVER_PROBE_S:
            return UnitResult("failed", error=f"not tried: the subject's server failed {self._server_failures} units in a "
                              f"row ({self._server_error}); start it, then `embeval resume`", started=started,
                              finished=started, worker=self.worker)
        self._last_probe = started
        state = self._state
        seed_global_rngs(unit_seed)
        try:
            out = self.watchdog.call(lambda: self._recorded(self.evaluator.run_unit, self.spec, state, unit, unit_seed),
                                     self.timeout_s)
        except UnitTimeout as exc:
            self._reset_after_timeout()
            return UnitResult("failed", error=str(exc), started=started, finished=time.time(), worker=self.worker)
        except ServerUnavailableError as exc:
            self._server_failures += 1
            self._server_error = f"{type(exc).__name__}: {exc}"
            return UnitResult("failed", error=format_error(exc), started=started, finished=time.time(), worker=self.worker)
        except Exception as exc:  # noqa: BLE001 - recorded as failed, retried on resume
            self._server_failures = 0
            return UnitResult("failed", error=format_error(exc), started=started, finished=time.time(), worker=self.worker)
        self._server_failures = 0
        return self._finish(out, started, time.time())

    def _finish(self, out: Any, started: float, finished: float) -> UnitResult:
        if not isinstance(out, dict):
            return UnitResult("failed", error=f"evaluator returned {type(out).__name__}, not a dict of outputs",
                              started=started, finished=finished, worker=self.worker)
        try:
            outputs_json(out)
        except (TypeError, ValueError) as exc:
            return UnitResult("failed", error=f"outputs are not JSON-serialisable: {exc}", started=started,
                              finished=finished, worker=self.worker)
        return UnitResult("done", outputs=out, started=started, finished=finished, worker=self.worker)

    def close(self) -> None:
        self.watchdog.close()
        if self._ready:
            try:
                self.evaluator.teardown(self._state)
            except Exception:  # noqa: BLE001 - teardown problems must not lose results
                pass
        self._state, self._ready = None, False
