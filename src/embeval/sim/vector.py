"""Vectorised episodes with continuous batching: N environments in worker processes, one policy call per step.

:func:`run_vectorised` runs a list of *units* (one episode each) on ``num_envs`` environments that live in
worker processes (each worker holds several environments; pybullet and SAPIEN state is per process), while the
policy stays in the calling process, where the accelerator is. Each step the environments waiting for an action
are answered by ONE batched call (:meth:`~embeval.subjects.protocols.BatchedPolicy.act_slots`, slot = environment
index). When an episode ends its environment takes the next unit at once and joins the next call (continuous
batching: the model never waits for the slowest episode, only for the step in flight).

Records equal the sequential run's by construction: a worker runs the task's own episode function (for
Act2Answer the backend's ``run_episode``, unchanged) with a stand-in policy whose ``act`` sends the observation
to the calling process and returns the action the batched call gave for its slot; seeds are the units'. Each
record therefore equals the sequential one whenever the policy's batched actions equal its batch-1 actions bit for
bit (every policy through :class:`~embeval.subjects.protocols.LoopSlots`, scripted policies, the privileged
expert); a policy with its own batched forward (the tiny VLAs) may differ in float rounding of the batch size
(~1e-8 per action component on the CPU), see docs/scale.md.

A policy that reads the simulator (Act2Answer's privileged expert) runs inside the worker instead
(:meth:`EpisodeTask.local_policy`); the calling process then only hands out units.

Worker processes start with ``spawn`` by default (``forkserver`` works too; nothing relies on state inherited
by ``fork``): the task and its units must pickle. Workers ignore SIGINT: Ctrl-C reaches the calling process,
which stops them; a worker that dies is reported in one line naming the unit it was running.
"""
from __future__ import annotations

import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from embeval.errors import ConfigError, EmbevalError

#: the most environments one vectorised run may hold (``--num-envs``)
MAX_ENVS = 64
#: worker start methods that do not rely on state inherited by fork
START_METHODS = ("spawn", "forkserver", "fork")


class EpisodeTask(Protocol):
    """What a worker process runs; pickled to the worker (module-level classes, picklable fields).

    ``make_env()`` builds one environment; ``run(env, policy, unit)`` runs one episode of ``unit`` to its end
    (calling ``policy.reset(instruction)`` and ``policy.act(observation)``) and returns its record;
    ``local_policy(env)`` is a policy that must run next to ``env`` (it reads the simulator), or None for the
    calling process's policy; ``close(env)`` frees it; ``describe(unit)`` names a unit in errors."""

    def make_env(self) -> Any: ...

    def run(self, env, policy, unit) -> Any: ...

    def local_policy(self, env) -> Any: ...

    def close(self, env) -> None: ...

    def describe(self, unit) -> str: ...


def check_num_envs(value: Any, option: str = "num_envs") -> int:
    """``value`` as an int in 1..:data:`MAX_ENVS`; a one-line :class:`ConfigError` naming ``option`` otherwise."""
    from embeval import checks

    return checks.integer(value, option, 1, MAX_ENVS, why="environments stepped together")


@dataclass
class VectorProfile:
    """Where a vectorised run's time went (seconds; CPU seconds where named ``cpu``), summed over the run.

    ``steps``: batched policy calls; ``actions``: actions they returned; ``wall_s``: the whole run after the
    workers were ready (``startup_s``: starting them); ``model_s``: ``reset_slots`` + ``act_slots`` in the calling
    process; ``wait_s``: the calling process waiting for observations (the environments' wall time plus transport);
    ``transport_s``: pickling and unpickling in the calling process (CPU; blocking on a pipe counts as waiting); ``sim_cpu_s`` / ``render_cpu_s``:
    the environments' CPU time in ``step`` outside / inside rendering (``env.observe``), summed over all
    environments; ``worker_transport_cpu_s``: the workers' pickling and sending; ``parent_cpu_s``: the calling
    process's CPU time (all its threads) over ``wall_s``; ``worker_cpu_s``: the workers' CPU time over the same span,
    summed (on a shared machine, CPU seconds per episode are steadier than wall seconds)."""

    num_envs: int = 0
    workers: int = 0
    episodes: int = 0
    steps: int = 0
    actions: int = 0
    startup_s: float = 0.0
    wall_s: float = 0.0
    model_s: float = 0.0
    wait_s: float = 0.0
    transport_s: float = 0.0
    sim_cpu_s: float = 0.0
    render_cpu_s: float = 0.0
    worker_transport_cpu_s: float = 0.0
    parent_cpu_s: float = 0.0
    worker_cpu_s: float = 0.0

    def per_step_ms(self) -> dict[str, float]:
        """Milliseconds per batched step: wall, model, wait (environments + transport), simulation and rendering
        CPU summed over the step's environments, and transport (both sides)."""
        n = max(self.steps, 1)
        return {"wall": 1e3 * self.wall_s / n, "model": 1e3 * self.model_s / n, "wait": 1e3 * self.wait_s / n,
                "simulation_cpu": 1e3 * self.sim_cpu_s / n, "rendering_cpu": 1e3 * self.render_cpu_s / n,
                "transport": 1e3 * (self.transport_s + self.worker_transport_cpu_s) / n}


class _Stop(BaseException):
    """Raised inside a worker's episode when the calling process stops the run mid-episode."""


@dataclass
class _Timer:
    """CPU seconds (``time.thread_time``) of one environment thread, by part."""

    sim: float = 0.0
    render: float = 0.0

    def take(self) -> tuple[float, float]:
        """(simulation, rendering) CPU seconds since the last take."""
        out = (self.sim, self.render)
        self.sim = self.render = 0.0
        return out


class _SlotPolicy:
    """The stand-in policy inside a worker: ``act`` sends the observation to the calling process and waits for
    the slot's action. ``id`` and ``action_spec`` are the real policy's (records name the subject)."""

    def __init__(self, slot: int, ident: str, action_spec, send, inbox: queue.Queue, timer: _Timer | None):
        self.slot, self.id, self.action_spec = slot, ident, action_spec
        self._send, self._inbox, self._timer = send, inbox, timer
        self._instruction: str | None = None
        self.unit = -1
        self._mark = 0.0

    def begin(self, unit: int) -> None:
        self.unit, self._instruction = unit, None
        self._mark = time.thread_time()

    def reset(self, instruction: str) -> None:
        self._instruction = str(instruction)

    def act(self, observation):
        t = self._timer
        if t is not None:
            now = time.thread_time()
            t.sim += now - self._mark
        msg = ("obs", self.slot, self.unit, observation, self._instruction, t.take() if t is not None else None)
        self._instruction = None
        self._send(msg)
        cmd = self._inbox.get()
        if cmd[0] != "act":
            raise _Stop()
        if t is not None:
            self._mark = time.thread_time()
        return cmd[2]


def _timed_observe(env, timer: _Timer) -> None:
    """Count the CPU time of ``env.observe`` (rendering and state) as rendering, not simulation."""
    inner = getattr(env, "observe", None)
    if not callable(inner):
        return

    def observe(*a, **kw):
        t0 = time.thread_time()
        try:
            return inner(*a, **kw)
        finally:
            dt = time.thread_time() - t0
            timer.render += dt
            timer.sim -= dt

    try:
        env.observe = observe
    except AttributeError:  # a slotted env: not profiled by part
        pass


def _exc_payload(exc: BaseException) -> tuple:
    """(the exception itself if it pickles, its type name, its message, the traceback text)."""
    import pickle

    try:
        obj = pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001
        obj = None
    return obj, type(exc).__name__, str(exc), traceback.format_exc(limit=8)


def _env_thread(task, env, slot: int, policy, inbox: queue.Queue, send, timer: _Timer | None) -> None:
    """One environment's episodes, one unit per ``("run", slot, unit index, unit)`` command, until ``("stop",)``."""
    while True:
        cmd = inbox.get()
        if cmd[0] != "run":
            return
        _, _, index, unit = cmd
        if isinstance(policy, _SlotPolicy):
            policy.begin(index)
        t0 = time.thread_time()
        try:
            record = task.run(env, policy, unit)
        except _Stop:
            return
        except BaseException as exc:  # noqa: BLE001 - reported to the calling process, which raises it
            send(("error", slot, index, _exc_payload(exc), None))
            continue
        prof = None
        if timer is not None:
            if not isinstance(policy, _SlotPolicy):  # the whole episode ran here (a local policy)
                timer.sim += time.thread_time() - t0
            else:
                timer.sim += time.thread_time() - policy._mark
            prof = timer.take()
        send(("done", slot, index, record, prof))


def _worker_main(conn, task, slots: list[int], policy_id: str, action_spec, profile: bool) -> None:
    """A worker process: one environment (and one thread) per slot; runs the calling process's commands.

    The environment threads take turns (a baton): the main thread hands a command to one thread and waits until
    that thread has its message (an observation, the episode's record or its error) before handing out the next
    one. One environment steps at a time, as in a sequential run: no two threads contend for the GIL or race on
    shared files (texture caches). The messages of one batch of commands leave together, one pipe write per step
    and worker: ``(messages, this worker's pickling CPU seconds for the previous batch, its process CPU seconds)``."""
    import pickle

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the calling process's; it stops us
    turn = threading.Semaphore(0)
    timers: dict[int, _Timer] = {}
    outbox: list = []
    pickling = [0.0]

    def send(msg) -> None:  # called by the thread whose turn it is
        outbox.append(msg)
        turn.release()  # this thread's turn is over

    def flush() -> None:
        t0 = time.thread_time()
        data = pickle.dumps((list(outbox), pickling[0], time.process_time()), protocol=pickle.HIGHEST_PROTOCOL)
        pickling[0] = time.thread_time() - t0
        outbox.clear()
        conn.send_bytes(data)

    envs: list = []
    try:
        for _ in slots:
            envs.append(task.make_env())
        policies = [task.local_policy(env) for env in envs]
    except BaseException as exc:  # noqa: BLE001
        try:
            outbox.append(("fatal", -1, -1, _exc_payload(exc), None))
            flush()
        finally:
            for env in envs:
                try:
                    task.close(env)
                except Exception:  # noqa: BLE001, S110
                    pass
        return
    inboxes: dict[int, queue.Queue] = {}
    threads = []
    for slot, env, local in zip(slots, envs, policies):
        timer = _Timer() if profile else None
        if timer is not None:
            timers[slot] = timer
            _timed_observe(env, timer)
        inbox: queue.Queue = queue.Queue()
        inboxes[slot] = inbox
        if local is None:
            local = _SlotPolicy(slot, policy_id, action_spec, send, inbox, timer)
        th = threading.Thread(target=_env_thread, args=(task, env, slot, local, inbox, send, timer), daemon=True,
                              name=f"env-{slot}")
        th.start()
        threads.append(th)
    outbox.append(("ready", -1, -1, os.getpid(), None))
    flush()
    try:
        while True:
            try:
                msg = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                break
            if msg is None:
                break
            for cmd in msg:  # every command ends in exactly one message from its thread
                inboxes[cmd[1]].put(cmd)
                turn.acquire()
            flush()
    finally:
        for inbox in inboxes.values():
            inbox.put(("stop",))
        for th in threads:
            th.join(timeout=30)
        for env in envs:
            try:
                task.close(env)
            except Exception:  # noqa: BLE001, S110
                pass
        conn.close()


@dataclass
class _Worker:
    process: Any
    conn: Any
    slots: list[int]
    ready: bool = False
    pid: int = 0
    cpu0: float = 0.0  # the worker's process CPU seconds when it was ready, and at its latest message
    cpu: float = 0.0
    outbox: list = field(default_factory=list)


def _raise_from_worker(payload: tuple, where: str) -> None:
    """Raise the exception a worker reported: the same exception when it pickled (its message kept), else an
    :class:`EmbevalError` with its type, message and the worker's traceback tail."""
    obj, name, msg, tb = payload
    if isinstance(obj, BaseException) and not isinstance(obj, (SystemExit, KeyboardInterrupt)):
        raise obj
    last = tb.strip().splitlines()[-3:] if tb else []
    raise EmbevalError(f"{where}: {name}: {msg}" + (f" (worker traceback: {' | '.join(last)})" if last else ""))


def run_vectorised(policy, units: Sequence[Any], task: EpisodeTask, num_envs: int, workers: int | None = None,
                   start_method: str = "spawn", profile: VectorProfile | None = None,
                   startup_timeout_s: float = 600.0, groups: int = 1) -> Iterator[tuple[int, Any]]:
    """Run every unit of ``units`` on ``num_envs`` environments of ``task``; yields ``(index, record)`` in unit order.

    ``policy``: a :class:`~embeval.subjects.protocols.BatchedPolicy` (wrap others with
    :func:`~embeval.subjects.protocols.batched`), asked once per step for every environment waiting for an action;
    None when ``task.local_policy`` gives the workers their own. ``workers``: worker processes (default
    ``min(num_envs, CPU count)``); environments are dealt to them round-robin. ``profile``: filled in when given
    (costs two clock reads per step and environment). ``startup_timeout_s``: the longest a worker may take to build
    its environments. ``groups``: 1 (default) steps all environments in lockstep, one call per step for all; 2 splits
    them into two halves that alternate (the policy answers one half while the workers step the other: the model's
    time hides behind the environments' and back, at half the batch). Stops the workers when the caller stops
    iterating, on errors and on Ctrl-C. :class:`VectorPool` keeps the workers for several runs."""
    units = list(units)
    pool = VectorPool(task, check_num_envs(num_envs), workers, start_method, startup_timeout_s)
    pool.num_envs = max(1, min(pool.num_envs, len(units)))
    try:
        yield from pool.run(policy, units, profile, groups)
    finally:
        pool.close()


class VectorPool:
    """:func:`run_vectorised`'s environment workers, kept between runs: ``run(policy, units)`` starts them on its first
    call (``num_envs`` environments in ``min(num_envs, workers or CPU count)`` processes) and leaves them ready for the
    next call when every unit finished; a run that fails or is stopped early closes them (the next run starts fresh
    ones). ``option``: the setting named in errors that tell the user to change the number of environments
    (``--num-envs``, ``spec.backend.num_envs``). Call :meth:`close` when done (also safe from another thread: a run
    blocked on the workers then ends with an error)."""

    def __init__(self, task: EpisodeTask, num_envs: int, workers: int | None = None, start_method: str = "spawn",
                 startup_timeout_s: float = 600.0, option: str = "--num-envs"):
        self.num_envs = check_num_envs(num_envs, option)
        if start_method not in START_METHODS:
            raise ConfigError(f"start_method must be one of {', '.join(START_METHODS)}, got {start_method!r}")
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_ENVS):
            raise ConfigError(f"workers must be a whole number in 1..{MAX_ENVS} (worker processes) or None (one per CPU, "
                              f"at most num_envs), got {workers!r}"[:200])
        self.task, self.workers, self.start_method = task, workers, start_method
        self.startup_timeout_s, self.option = startup_timeout_s, option
        self._pool: list[_Worker] = []
        self._policy_key: tuple[str, Any] | None = None
        self.starts = 0  # times the workers were started (a run after a failed one starts them again)

    @property
    def running(self) -> bool:
        """Whether worker processes are up (kept from an earlier run)."""
        return bool(self._pool)

    def _start(self, policy, prof: VectorProfile | None) -> None:
        import multiprocessing as mp

        task, n_slots = self.task, self.num_envs
        n_workers = max(1, min(n_slots, self.workers or os.cpu_count() or 1))
        ctx = mp.get_context(self.start_method)
        if self.start_method == "forkserver":  # the server (started once per process) imports the task's module for every fork
            ctx.set_forkserver_preload([type(task).__module__])
        pid = str(getattr(policy, "id", "")) if policy is not None else ""
        spec = getattr(policy, "action_spec", None) if policy is not None else None
        self._policy_key = (pid, spec)
        self.starts += 1
        for w in range(n_workers):
            mine = list(range(w, n_slots, n_workers))
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_worker_main, args=(child, task, mine, pid, spec, prof is not None),
                               name=f"embeval-env-worker-{w}", daemon=True)
            try:
                proc.start()
            except Exception as exc:  # noqa: BLE001 - the task or the policy's spec does not pickle (spawn, forkserver)
                raise ConfigError(f"cannot start environment worker {w} ({type(exc).__name__}: {str(exc)[:160]}); the "
                                  "task and its backend must pickle: use a registered backend name, or num_envs 1"
                                  ) from None
            child.close()
            self._pool.append(_Worker(proc, parent, mine))

    def run(self, policy, units: Sequence[Any], profile: VectorProfile | None = None,
            groups: int = 1) -> Iterator[tuple[int, Any]]:
        """Every unit of ``units`` on the pool's environments, as :func:`run_vectorised` (same arguments); yields
        ``(index, record)`` in unit order. A policy with another id or action spec than the workers were started
        for restarts them (the workers' stand-in policies carry both)."""
        from multiprocessing.connection import wait

        if groups not in (1, 2) or isinstance(groups, bool):
            raise ConfigError(f"groups must be 1 (lockstep) or 2 (two alternating halves), got {groups!r}")
        units = list(units)
        if not units:
            return
        key = (str(getattr(policy, "id", "")) if policy is not None else "",
               getattr(policy, "action_spec", None) if policy is not None else None)
        if self._pool and key != self._policy_key:
            self.close()
        t_start = time.perf_counter()
        ok = False
        try:
            if not self._pool:
                self._start(policy, profile)
            if profile is not None:
                profile.num_envs, profile.workers = self.num_envs, len(self._pool)
            yield from _drive(policy, units, self.task, self._pool, self.num_envs, groups, profile,
                              self.startup_timeout_s, t_start, wait, self.option)
            ok = True
        finally:
            if not ok:  # a failed or abandoned run may leave episodes running in the workers: start afresh next time
                self.close()

    def close(self) -> None:
        """Stop the workers (ours, by pid); the next :meth:`run` starts new ones."""
        pool, self._pool = self._pool, []
        _shutdown(pool)


def _shutdown(pool: list[_Worker]) -> None:
    """Ask every worker to stop, then wait; a worker still running after 10 s is terminated (ours, by pid)."""
    import pickle

    for w in pool:
        try:
            w.conn.send_bytes(pickle.dumps(None))
        except (OSError, ValueError, BrokenPipeError):
            pass
    deadline = time.monotonic() + 10.0
    for w in pool:
        w.process.join(timeout=max(0.1, deadline - time.monotonic()))
        if w.process.is_alive():
            w.process.terminate()
            w.process.join(timeout=2.0)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout=2.0)
        try:
            w.conn.close()
        except OSError:
            pass


def _drive(policy, units, task, pool: list[_Worker], n_slots: int, groups: int, prof: VectorProfile | None,
           startup_timeout_s: float, t_start: float, wait, option: str = "--num-envs") -> Iterator[tuple[int, Any]]:
    """The calling process's loop: start the workers, hand out units, one batched policy call per step."""
    import pickle

    owner = {s: w for w in pool for s in w.slots}
    by_conn = {w.conn: w for w in pool}
    running: dict[int, int] = {}  # slot -> unit index in flight (awaiting a message)
    ready: dict[int, tuple[int, Any, str | None]] = {}  # slot -> (unit, observation, new instruction)
    started: set[int] = set()  # slots with an episode open in the policy
    done: dict[int, Any] = {}
    nxt, out = 0, 0
    transport = 0.0
    failed: list = []  # [(unit index, payload)] of the first failing unit: the records before it, then its error

    def describe(index: int) -> str:
        try:
            return task.describe(units[index])
        except Exception:  # noqa: BLE001
            return f"unit {index}"

    def recv(w: _Worker) -> list:
        """The messages of ``w``'s next batch (its CPU time and pickling noted); a one-line error if it died."""
        nonlocal transport
        try:
            data = w.conn.recv_bytes()
        except (EOFError, OSError):
            w.process.join(timeout=5.0)
            busy = [describe(running[s]) for s in w.slots if s in running]
            raise EmbevalError(f"environment worker {pool.index(w)} (pid {w.pid or w.process.pid}) exited (code "
                               f"{w.process.exitcode})" + (f" while running {', '.join(busy[:3])}" if busy else "")
                               + f"; rerun with {option} 1 to see the error in this process") from None
        t0 = time.thread_time()
        msgs, pickling, w.cpu = pickle.loads(data)
        transport += time.thread_time() - t0
        if prof is not None:
            prof.worker_transport_cpu_s += pickling
        for msg in msgs:
            if msg[0] == "fatal":
                _raise_from_worker(msg[3], f"environment worker {pool.index(w)} could not build its environments")
        return msgs

    def flush(w: _Worker) -> None:
        nonlocal transport
        if w.outbox:
            t0 = time.thread_time()
            data = pickle.dumps(w.outbox, protocol=pickle.HIGHEST_PROTOCOL)
            transport += time.thread_time() - t0
            w.conn.send_bytes(data)
            w.outbox = []

    def assign(slot: int) -> None:
        nonlocal nxt
        if nxt < len(units) and not failed:
            running[slot] = nxt
            owner[slot].outbox.append(("run", slot, nxt, units[nxt]))
            nxt += 1

    # -- start: every worker reports ready (or why not) ------------------------------------------------------
    deadline = time.monotonic() + startup_timeout_s
    while not all(w.ready for w in pool):
        left = deadline - time.monotonic()
        if left <= 0:
            late = [str(i) for i, w in enumerate(pool) if not w.ready]
            raise EmbevalError(f"environment worker(s) {', '.join(late)} not ready after {startup_timeout_s:.0f} s "
                               f"(building the environments); use fewer environments ({option})")
        for c in wait([w.conn for w in pool if not w.ready] + [w.process.sentinel for w in pool if not w.ready],
                      timeout=min(left, 1.0)):
            w = by_conn.get(c) or next(x for x in pool if x.process.sentinel == c)
            msg = recv(w)[0]  # ("ready", -1, -1, pid, None)
            w.ready, w.pid, w.cpu0 = True, msg[3], w.cpu
    for w in pool:  # CPU seconds of this run only (a kept pool ran earlier ones)
        w.cpu0 = w.cpu
    t0, c0 = time.perf_counter(), time.process_time()
    if prof is not None:
        prof.startup_s = t0 - t_start
    for s in range(n_slots):
        assign(s)
    for w in pool:
        flush(w)
    model = 0.0
    group = {s: (s // len(pool)) % groups for s in range(n_slots)}  # every worker holds slots of every group
    n_groups, g = groups, 0

    def serving() -> int | None:
        """The next group (from g on) none of whose slots is running and some of whose slots wait for an action."""
        busy = {group[s] for s in running}
        for k in range(n_groups):
            gr = (g + k) % n_groups
            if gr not in busy and any(group[s] == gr for s in ready):
                return gr
        return None

    try:
        while running or ready:
            # -- wait until a group's running slots have all reported: an observation, or their episode's end
            #    (then the next unit at once); the other groups' messages are kept for their turn
            tw = time.perf_counter()
            while running and serving() is None:
                conns = [w.conn for w in pool if any(s in running for s in w.slots)]
                sentinels = {w.process.sentinel: w for w in pool if w.conn in conns}
                for c in wait(conns + list(sentinels)):
                    w = by_conn.get(c) or sentinels[c]
                    for msg in recv(w):  # one batch: a message per command the worker ran
                        kind, slot, index = msg[0], msg[1], msg[2]
                        running.pop(slot, None)
                        if failed and index > failed[0][0]:  # an abandoned unit after the failing one
                            continue
                        if prof is not None and msg[-1] is not None:
                            sim, render = msg[-1]
                            prof.sim_cpu_s += sim
                            prof.render_cpu_s += render
                        if kind == "obs":
                            ready[slot] = (index, msg[3], msg[4])
                        elif kind == "done":
                            done[index] = msg[3]
                            if slot in started and policy is not None:
                                started.discard(slot)
                                tm = time.perf_counter()
                                policy.end_slots([slot])
                                model += time.perf_counter() - tm
                            assign(slot)
                        else:  # "error": the unit raised in the worker; finish the units before it first
                            if not failed or index < failed[0][0]:
                                failed[:] = [(index, msg[3])]
                            for s in [s for s, i in running.items() if i > index]:  # abandoned (stopped at the end)
                                running.pop(s)
                            for s in [s for s, r in ready.items() if r[0] > index]:
                                ready.pop(s)
                    flush(w)  # the next units of the slots whose episodes ended, at once
                while out in done:  # records in unit order, as soon as they are complete
                    rec = done.pop(out)
                    out += 1
                    yield out - 1, rec
            if prof is not None:
                prof.wait_s += time.perf_counter() - tw
            gr = serving()
            if gr is None:
                continue
            slots = sorted(s for s in ready if group[s] == gr)
            g = (gr + 1) % n_groups
            if policy is None:
                raise ConfigError("the task's episodes ask for actions but no policy was given to run_vectorised")
            # -- one batched policy call for every slot of the group waiting for an action ------------------
            tm = time.perf_counter()
            new = [s for s in slots if ready[s][2] is not None or s not in started]
            if new:
                policy.reset_slots(new, [ready[s][2] if ready[s][2] is not None else
                                         str(getattr(ready[s][1], "instruction", "") or "") for s in new])
                started.update(new)
            try:
                actions = policy.act_slots(slots, [ready[s][1] for s in slots])
            except EmbevalError as exc:
                names = ", ".join(describe(ready[s][0]) for s in slots[:3]) + (" ..." if len(slots) > 3 else "")
                raise type(exc)(f"{exc} (a step of {names})") from None
            model += time.perf_counter() - tm
            if len(actions) != len(slots):
                raise EmbevalError(f"policy {getattr(policy, 'id', '?')}: act_slots returned {len(actions)} actions for "
                                   f"{len(slots)} slots; it must return one action per slot")
            if prof is not None:
                prof.steps += 1
                prof.actions += len(slots)
            for s, a in zip(slots, actions):
                running[s] = ready.pop(s)[0]
                owner[s].outbox.append(("act", s, a))
            for w in pool:
                flush(w)
        while out in done:
            rec = done.pop(out)
            out += 1
            yield out - 1, rec
        if failed:
            _raise_from_worker(failed[0][1], describe(failed[0][0]))
    finally:
        if prof is not None:
            prof.wall_s += time.perf_counter() - t0
            prof.parent_cpu_s += time.process_time() - c0
            prof.worker_cpu_s += sum(w.cpu - w.cpu0 for w in pool)
            prof.model_s += model
            prof.transport_s += transport
            prof.episodes += out
        if policy is not None and started:
            try:
                policy.end_slots(sorted(started))
            except Exception:  # noqa: BLE001, S110
                pass
