"""Live progress of long commands: a tqdm bar on a terminal, throttled one-line updates otherwise.

A bar redrawn with carriage returns is useless in a log file or a pipe (and tqdm's own "disable when not a
TTY" prints nothing for minutes), so when stderr is not a terminal :class:`Progress` prints a plain line at
most every ``interval_s`` seconds (10 by default), also while a single slow step is running::

    act2answer: 37/120 episodes, 1m12s elapsed, ETA 2m40s

Use it as a context manager or wrap an iterable::

    with Progress(total=len(units), desc="quality-smoke", unit="units") as bar:
        for u in units:
            ...
            bar.update(1, failed=0)
    for ep in track(episodes, desc="act2answer", unit="episodes"):
        ...

The mode is ``bar`` on a TTY, ``lines`` otherwise; the environment variable ``EMBEVAL_PROGRESS`` forces
``bar``, ``lines`` or ``off``, and ``EMBEVAL_PROGRESS_INTERVAL_S`` sets the seconds between lines. A command that
finishes before the first interval prints nothing in ``lines`` mode. Progress goes to stderr, so stdout (tables,
JSON) stays clean. Nothing here touches a random generator.
"""
from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO, TypeVar

from embeval.errors import ConfigError

T = TypeVar("T")

#: progress modes (``EMBEVAL_PROGRESS``): tqdm bar, throttled lines, nothing
MODES = ("bar", "lines", "off")
#: seconds between two lines in ``lines`` mode
DEFAULT_INTERVAL_S = 10.0
ENV_MODE, ENV_INTERVAL = "EMBEVAL_PROGRESS", "EMBEVAL_PROGRESS_INTERVAL_S"

__all__ = ["DEFAULT_INTERVAL_S", "MODES", "Progress", "format_duration", "progress_line", "resolve_mode", "track"]


def format_duration(seconds: float) -> str:
    """``seconds`` as ``45s``, ``1m12s`` or ``2h05m`` (rounded down to whole seconds)."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def eta_s(n: int, total: int | None, initial: int, elapsed_s: float) -> float | None:
    """Seconds left at the rate since start (steps done before start do not count); None when unknown."""
    done_now = n - initial
    if total is None or done_now <= 0 or elapsed_s <= 0:
        return None
    return max(0, total - n) * elapsed_s / done_now


def progress_line(desc: str, n: int, total: int | None, unit: str, elapsed_s: float, initial: int = 0,
                  postfix: dict[str, Any] | None = None, eta: float | None | str = "rate") -> str:
    """One progress line: ``act2answer: 37/120 episodes, 1m12s elapsed, ETA 2m40s`` (plus ``, failed 2``; zero values
    left out). ``eta``
    (seconds, None: unknown) replaces the estimate from the rate since start (:func:`eta_s`)."""
    count = f"{n}/{total}" if total is not None else f"{n}"
    parts = [f"{desc}: {count} {unit}", f"{format_duration(elapsed_s)} elapsed"]
    if total is not None and n >= total:
        parts[-1] = f"done in {format_duration(elapsed_s)}"
    else:
        left = eta_s(n, total, initial, elapsed_s) if eta == "rate" else eta
        if total is not None:
            parts.append(f"ETA {format_duration(left)}" if left is not None else "ETA ?")
    parts += [f"{k} {v}" for k, v in (postfix or {}).items() if v]  # "failed 0" says nothing
    return ", ".join(parts)


def resolve_mode(mode: str | None = None, file: TextIO | None = None) -> str:
    """``mode`` if given, else ``EMBEVAL_PROGRESS``, else ``bar`` when ``file`` (stderr) is a TTY and ``lines``
    otherwise. An unknown value is a ConfigError naming the modes."""
    mode = mode or os.environ.get(ENV_MODE, "").strip().lower() or None
    if mode is None:
        f = file if file is not None else sys.stderr
        isatty = getattr(f, "isatty", None)
        try:
            return "bar" if isatty is not None and isatty() else "lines"
        except (ValueError, OSError):  # a closed stream
            return "lines"
    if mode not in MODES:
        raise ConfigError(f"{ENV_MODE}={mode!r}: unknown progress mode; choose from {', '.join(MODES)}")
    return mode


def _interval(interval_s: float | None) -> float:
    if interval_s is not None:
        return float(interval_s)
    raw = os.environ.get(ENV_INTERVAL)
    if raw is None:
        return DEFAULT_INTERVAL_S
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise ConfigError(f"{ENV_INTERVAL}={raw!r}: must be a number of seconds > 0 (default {DEFAULT_INTERVAL_S:g})")
    return v


class Progress:
    """Progress of ``total`` steps (None: unknown) named ``desc``, counted in ``unit``; ``initial`` steps were
    done before (a resumed run): they show in the count but not in the rate.

    ``mode``: ``bar`` | ``lines`` | ``off`` | None (:func:`resolve_mode`). In ``lines`` mode a line goes to
    ``file`` (stderr) at most every ``interval_s`` seconds: on :meth:`update`, and from a heartbeat thread while
    no step finishes (``heartbeat=False`` turns the thread off); :meth:`close` prints a last line if any was
    printed. ``clock`` (seconds, monotonic) is for tests.
    """

    def __init__(self, total: int | None, desc: str, unit: str = "it", *, initial: int = 0, mode: str | None = None,
                 interval_s: float | None = None, file: TextIO | None = None, heartbeat: bool = True,
                 clock: Callable[[], float] = time.monotonic):
        self.total, self.desc, self.unit = total, desc, unit
        self.initial = self.n = int(initial)
        self.file = file if file is not None else sys.stderr
        self.mode = resolve_mode(mode, self.file)
        self.interval_s = _interval(interval_s)
        self.postfix: dict[str, Any] = {}
        self.lines_printed = 0
        self._clock = clock
        self._t0 = self._last = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self._bar = None
        if self.mode == "bar":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=self.file, dynamic_ncols=True,
                             smoothing=0.05)
        elif self.mode == "lines" and heartbeat:
            threading.Thread(target=self._beat, name="embeval-progress", daemon=True).start()

    # ------------------------------------------------------------------ updates
    def update(self, n: int = 1, **postfix: Any) -> None:
        """``n`` more steps done; ``postfix`` (e.g. ``failed=2``) is shown after the count."""
        with self._lock:
            self.n += n
            if postfix:
                self.postfix.update(postfix)
            if self._bar is not None:
                if postfix:
                    self._bar.set_postfix(self.postfix, refresh=False)
                self._bar.update(n)
            elif self.mode == "lines":
                self._maybe_print()

    def set_postfix(self, **postfix: Any) -> None:
        """Change the values shown after the count without counting a step."""
        self.update(0, **postfix)

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._t0

    def line(self) -> str:
        """The current progress line (what ``lines`` mode prints)."""
        return progress_line(self.desc, self.n, self.total, self.unit, self.elapsed_s, self.initial, self.postfix)

    def _emit(self) -> None:
        try:
            print(self.line(), file=self.file, flush=True)
        except (ValueError, OSError):  # stderr closed: progress is never worth an error
            return
        self.lines_printed += 1
        self._last = self._clock()

    def _maybe_print(self) -> None:
        if not self._closed and self._clock() - self._last >= self.interval_s:
            self._emit()

    def _beat(self) -> None:
        while not self._stop.wait(min(self.interval_s, 1.0)):
            with self._lock:
                self._maybe_print()

    # ------------------------------------------------------------------ end
    def close(self) -> None:
        """End the bar; in ``lines`` mode print the final count if any line was printed before."""
        with self._lock:
            if self._closed:
                return
            self._stop.set()
            if self._bar is not None:
                self._bar.close()
            elif self.mode == "lines" and self.lines_printed:
                self._emit()
            self._closed = True

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def track(iterable: Iterable[T], desc: str, unit: str = "it", total: int | None = None, **kwargs: Any) -> Iterator[T]:
    """Yield from ``iterable`` while showing progress (``total`` defaults to ``len(iterable)`` when it has one);
    keyword arguments go to :class:`Progress`."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with Progress(total, desc, unit, **kwargs) as bar:
        for x in iterable:
            yield x
            bar.update(1)
