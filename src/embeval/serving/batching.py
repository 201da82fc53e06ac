"""Batching for the model servers: concurrent requests answered by one batched model call.

:class:`BatchQueue` replaces :class:`~embeval.serving.limits.ModelQueue` when a server is started with
``max_batch_size > 1``. Requests wait in one FIFO; a worker thread takes up to ``max_batch_size`` of them
(waiting at most ``max_wait_s`` after the oldest arrived for the batch to fill) and calls the batch
function once for all of them. The queue bound is the same as ModelQueue's: at most ``size`` requests
wait or run (the batch being computed included); one more is 503 ``queue_full`` with ``Retry-After``.
So a server holds the decoded observations of at most ``size`` requests in the queue plus those being
parsed (bounded by the pixel budget).

Each request has a *key* (its episode): a batch holds at most one request per key, so an episode advances
one step per model call, in arrival order; a later request of the same key waits for the next batch.
*Solo* calls (e.g. ``/reset``) run alone, in their place in the order.
"""
from __future__ import annotations

import asyncio
import collections
import math
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from embeval import checks
from embeval.errors import ConfigError
from embeval.serving.limits import ApiError

#: the largest ``--max-batch-size``
MAX_BATCH_SIZE = 1024
#: the longest ``--max-wait-ms`` (milliseconds)
MAX_WAIT_MS = 10_000.0


def check_batching(max_batch_size: Any, max_wait_ms: Any, queue_size: int) -> tuple[int, float]:
    """``(max_batch_size, max_wait_ms)`` checked: a whole number in 1..MAX_BATCH_SIZE, at most the queue
    bound, and a finite number of milliseconds in [0, MAX_WAIT_MS]; :class:`ConfigError` naming the flag."""
    b = checks.integer(max_batch_size, "--max-batch-size", 1, MAX_BATCH_SIZE)
    if b > queue_size:
        raise ConfigError(f"--max-batch-size {b} is larger than the queue bound (--queue-size {queue_size}); a batch is "
                          "taken from the queue: give --queue-size of at least the batch size")
    w = checks.number(max_wait_ms, "--max-wait-ms", 0, MAX_WAIT_MS, unit="ms")
    return b, w


class _Item:
    """One queued request; ``future`` is an asyncio future of the event loop ``loop`` that submitted it."""
    __slots__ = ("arg", "drop", "future", "key", "loop", "solo")

    def __init__(self, arg: Any, key: Hashable, solo: Callable[[Any], Any] | None, drop: Callable[[], None] | None):
        self.arg, self.key, self.solo, self.drop = arg, key, solo, drop
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future = self.loop.create_future()


def _deliver(items: list[_Item], results: list[Any]) -> None:
    """On the event loop: each request's result or exception (a request cancelled meanwhile is skipped)."""
    for item, res in zip(items, results):
        if item.future.done():
            continue
        if isinstance(res, BaseException):
            item.future.set_exception(res)
        else:
            item.future.set_result(res)


class BatchQueue:
    """One worker thread answering queued requests in batches (see the module docstring).

    ``batch_fn(args) -> results``: one result per argument, in order; a result that is an exception is
    raised to that request alone. ``size``: requests waiting or running at most; ``max_batch``: requests per
    call; ``max_wait_s``: seconds the worker waits after the oldest request for a batch to fill.
    Counters (``/health``): queued, served, rejected, batches, mean batch size and call time.
    """

    def __init__(self, batch_fn: Callable[[list[Any]], Sequence[Any]], size: int, max_batch: int, max_wait_s: float,
                 name: str = "model"):
        self.batch_fn, self.size, self.max_batch, self.max_wait_s = batch_fn, int(size), int(max_batch), float(max_wait_s)
        self._items: collections.deque[_Item] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self.pending = 0  # requests waiting or in the running batch
        self.served = 0
        self.rejected = 0
        self.batches = 0
        self.largest_batch = 0
        self.peak_pending = 0
        self._mean_s = 0.0  # seconds per model call (a batch)
        self._mean_batch = 0.0
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"embeval-{name}-batcher")
        self._thread.start()

    # -- the event loop's side -----------------------------------------------------------------
    def _retry_after(self) -> int:
        return max(1, math.ceil(self.pending / self.max_batch * self._mean_s))

    def submit(self, arg: Any, key: Hashable = None, solo: Callable[[Any], Any] | None = None,
               drop: Callable[[], None] | None = None) -> asyncio.Future:
        """Queue ``arg`` (a batch member under ``key``, or a solo call ``solo(arg)``) from the event loop; the
        returned asyncio future gets its result. :class:`ApiError` 503 when the queue is full. ``drop()`` runs
        when the request is cancelled before it runs. (Results are handed back once per batch and event loop.)"""
        item = _Item(arg, key, solo, drop)
        with self._cond:
            if self._closed:
                raise ApiError(503, "the server is shutting down", type="server_error", code="server_busy")
            if self.pending >= self.size:
                self.rejected += 1
                raise ApiError(503, f"the model queue is full ({self.size} calls waiting or running); retry later",
                               type="server_error", code="queue_full", headers={"Retry-After": str(self._retry_after())})
            self.pending += 1
            self.peak_pending = max(self.peak_pending, self.pending)
            self._items.append(item)
            self._cond.notify()
        return item.future

    async def run(self, arg: Any, key: Hashable = None) -> Any:
        """The result of ``arg`` computed in a batch (see :meth:`submit`)."""
        return await self.submit(arg, key)

    async def run_solo(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` run alone on the model thread, in its place in the queue (as ModelQueue.run)."""
        return await self.submit(args, solo=lambda a: fn(*a))

    # -- the worker's side ----------------------------------------------------------------------
    def _eligible(self) -> list[_Item]:
        """The next batch (FIFO, one item per key, up to max_batch, stopping at a solo call); under the lock."""
        batch: list[_Item] = []
        keys: set = set()
        for item in self._items:
            if item.solo is not None:
                return batch or [item]
            if item.key in keys:
                continue
            keys.add(item.key)
            batch.append(item)
            if len(batch) >= self.max_batch:
                break
        return batch

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                deadline = time.monotonic() + self.max_wait_s
                while True:
                    batch = self._eligible()
                    if len(batch) >= self.max_batch or batch[0].solo is not None or self._closed:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._closed:
                    return
                chosen = {id(i) for i in batch}
                self._items = collections.deque(i for i in self._items if id(i) not in chosen)
            self._run(batch)

    def _finish(self, n: int) -> None:
        with self._cond:
            self.pending -= n

    def _run(self, batch: list[_Item]) -> None:
        live = []
        for item in batch:
            if not item.future.done():  # done already: cancelled (the client went away) before its turn
                live.append(item)
            elif item.drop is not None:
                item.drop()
        if len(live) < len(batch):
            self._finish(len(batch) - len(live))
        if not live:
            return
        t0 = time.perf_counter()
        try:
            if live[0].solo is not None:
                try:
                    results = [live[0].solo(live[0].arg)]
                except Exception as exc:  # noqa: BLE001 - handed to the request
                    results = [exc]
            else:
                try:
                    results = list(self.batch_fn([i.arg for i in live]))
                    if len(results) != len(live):
                        raise RuntimeError(f"batch function gave {len(results)} results for {len(live)} requests")
                except Exception as exc:  # noqa: BLE001 - every request of the batch gets it
                    results = [exc] * len(live)
        finally:
            dt = time.perf_counter() - t0
            with self._cond:
                self.batches += 1
                self.served += len(live)
                self.pending -= len(live)
                self.largest_batch = max(self.largest_batch, len(live))
                a = 1.0 if self.batches == 1 else 0.1
                self._mean_s = (1 - a) * self._mean_s + a * dt
                self._mean_batch = (1 - a) * self._mean_batch + a * len(live)
        by_loop: dict[int, tuple[Any, list, list]] = {}
        for item, res in zip(live, results):
            entry = by_loop.setdefault(id(item.loop), (item.loop, [], []))
            entry[1].append(item)
            entry[2].append(res)
        for loop, items, res in by_loop.values():
            try:
                loop.call_soon_threadsafe(_deliver, items, res)
            except RuntimeError:  # the loop is closed: nobody waits for these answers
                pass

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {"queued": self.pending, "queue_size": self.size, "served": self.served, "rejected": self.rejected,
                    "mean_call_ms": round(self._mean_s * 1000.0, 3), "max_batch_size": self.max_batch,
                    "max_wait_ms": round(self.max_wait_s * 1000.0, 3), "batches": self.batches,
                    "mean_batch_size": round(self._mean_batch, 3), "largest_batch": self.largest_batch,
                    "peak_queued": self.peak_pending}

    def shutdown(self) -> None:
        """Stop the worker; requests that never started are cancelled."""
        with self._cond:
            self._closed = True
            left, self._items = list(self._items), collections.deque()
            self._cond.notify_all()
        for item in left:
            if item.drop is not None:
                item.drop()
            try:
                item.loop.call_soon_threadsafe(item.future.cancel)
            except RuntimeError:  # its loop is closed
                pass
        self._finish(len(left))
