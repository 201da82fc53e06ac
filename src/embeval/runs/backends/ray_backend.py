"""The Ray backend: the same units fan out over the cores and GPUs of a Ray cluster.

Each subject runs in Ray actors that set the subject up once (load the model) and then take
batches of that subject's units (``backend.batch_size`` per call where the evaluator batches);
at most ``backend.num_workers`` actors exist at a time, each reserving ``num_cpus_per_worker`` /
``num_gpus_per_worker``. Results come back to the driver, which writes them to the store as each
batch finishes, so the store has a single writer.

Watchdogs at two levels: inside the actor the per-unit watchdog of
:class:`~embeval.runs.execute.SubjectRunner`; in the driver an actor that does not answer within
``unit_timeout_s x batch + grace`` (a hang that holds the GIL, a dead node) is killed, its batches
are recorded as failed with the reason and a fresh actor takes over.

Model-actor split (``backend.model_actor: true``, :mod:`.model_actor`): a policy subject's model lives in ONE
actor (``num_gpus_per_model`` GPUs) that answers the episodes of all the subject's workers in batches; the
workers (``num_cpus_per_worker``, no GPU) step the episodes. A subject's workers start once its model has
loaded; a dead model actor fails the units that were running with the reason, is restarted once, then the
subject is given up. VLM subjects and subjects an evaluator builds itself keep the path above.

Without ``backend.address`` a local Ray instance is started on 127.0.0.1 (no dashboard, no usage
statistics) and shut down afterwards; an already initialised Ray session is used as it is.
"""
from __future__ import annotations

import itertools
import math
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from embeval.runs.units import Unit, UnitResult, batches

#: extra seconds the driver allows an actor beyond unit_timeout_s x batch size
DRIVER_GRACE_S = 30.0
#: extra seconds for an actor's first batch (it sets the subject up: model loading)
SETUP_GRACE_S = 600.0
#: an actor that dies this many times for one subject fails that subject's remaining units
MAX_ACTOR_DEATHS = 3
#: seconds to wait for results a lost actor had already sent
RESULT_GRACE_S = 2.0
#: batches queued per actor (one running, one waiting: no idle gap between calls)
INFLIGHT_PER_ACTOR = 2


class _SubjectWorker:
    """Ray actor body: one subject set up once, running batches of its units."""

    def __init__(self, evaluator_cls, spec, subject, timeout_s, model=None, owner: str = ""):
        from embeval.runs.backends.model_actor import standin_subject, worker_label
        from embeval.runs.execute import SubjectRunner
        from embeval.runs.registry import import_plugins

        import_plugins(spec)
        if model is not None:  # the model lives in the subject's model actor: load a stand-in that calls it
            subject = standin_subject(subject, model, owner, timeout_s)
        # the class travels with the call (by reference, or by value for classes defined in a
        # script), so evaluators registered at run time in the driver work in the actors too
        self.runner = SubjectRunner(evaluator_cls(), spec, subject, timeout_s, worker=worker_label())

    def run(self, units: list[Unit]) -> list[UnitResult]:
        return self.runner.run(units)

    def close(self) -> None:
        self.runner.close()


def ensure_ray(backend_spec) -> bool:
    """Initialise Ray if needed; True when this call started it (the caller shuts it down)."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    common: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if backend_spec.address:
        _check_reachable(backend_spec.address)
        try:
            ray.init(address=backend_spec.address, **common)
        except Exception as exc:  # noqa: BLE001 - Ray raises several types for an unreachable cluster
            from embeval.errors import ServerUnavailableError

            raise ServerUnavailableError(
                f"backend.address: cannot connect to the Ray cluster at {backend_spec.address!r}: {str(exc).splitlines()[0]}; "
                "start it (`ray start --head`) or leave address empty for a local instance") from None
    else:  # GPUs are detected, never invented (no num_gpus argument)
        cpus = backend_spec.num_workers * backend_spec.num_cpus_per_worker
        cpus += backend_spec.num_cpus_per_model if backend_spec.model_actor else 0.0
        # address "local": a new instance of our own, never a cluster another program started on this machine
        ray.init(address="local", num_cpus=max(1, math.ceil(cpus)), _node_ip_address="127.0.0.1", **common)
    return True


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a ``host:port`` (or ``ray://host:port``) nobody listens on; Ray itself retries for minutes."""
    import socket

    from embeval.errors import ServerUnavailableError

    hostport = address.split("://", 1)[-1]
    if address == "auto" or ":" not in hostport:
        return
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as exc:
        raise ServerUnavailableError(
            f"backend.address: nothing answers at {address!r} ({exc}); start the cluster (`ray start --head`) "
            "or leave address empty for a local instance") from None


def check_resources(backend_spec) -> None:
    """ConfigError when no node could ever host one actor (it would wait forever)."""
    import ray

    from embeval.errors import ConfigError

    have = ray.cluster_resources()
    for key, field, need in (("CPU", "num_cpus_per_worker", backend_spec.num_cpus_per_worker),
                             ("GPU", "num_gpus_per_worker", backend_spec.num_gpus_per_worker)):
        if need > have.get(key, 0):
            raise ConfigError(f"backend.{field}: each worker needs {need:g} {key}(s) but the Ray cluster has "
                              f"{have.get(key, 0):g}; lower it or add nodes")
    if backend_spec.model_actor:  # one actor: all of it on one node
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        for key, field, need in (("CPU", "num_cpus_per_model", backend_spec.num_cpus_per_model),
                                 ("GPU", "num_gpus_per_model", backend_spec.num_gpus_per_model)):
            most = max((r.get(key, 0) for r in nodes), default=0)
            if need > most:
                raise ConfigError(f"backend.{field}: the model actor needs {need:g} {key}(s) on one node but the "
                                  f"Ray cluster's largest node has {most:g}; lower it or add a node with "
                                  f"{need:g} {key}(s)")


@dataclass
class _Actor:
    subject: str
    handle: Any
    owner: str = ""  # the worker's id in its model actor's slots (model-actor split)
    inflight: deque = field(default_factory=deque)  # (ref, batch, submitted)
    last_done: float = 0.0
    calls: int = 0


class RayBackend:
    name = "ray"

    def check(self, spec) -> None:
        """Fail before any work starts when Ray is missing."""
        import importlib.util

        from embeval.errors import ConfigError

        if importlib.util.find_spec("ray") is None:
            raise ConfigError("backend.name: 'ray' needs the ray package: pip install 'ray[default]' (or use backend local)")

    def execute(self, plan, units, on_results) -> None:
        import ray

        spec = plan.spec
        started_here = ensure_ray(spec.backend)
        try:
            check_resources(spec.backend)
            self._execute(ray, plan, units, on_results)
        finally:
            if started_here:
                ray.shutdown()

    def _execute(self, ray, plan, units, on_results) -> None:
        from embeval.runs.backends.model_actor import ModelActors
        from embeval.runs.execute import units_per_call

        spec, b = plan.spec, plan.spec.backend
        size = units_per_call(plan.evaluator, b)  # batch_size; with num_envs > 1 a vectorised batch per actor call
        queues: dict[str, deque] = {sid: deque() for sid in plan.subjects}
        for batch in batches(list(units), size):
            queues[batch[0].subject].append(batch)
        worker_cls = ray.remote(_SubjectWorker)
        remote_cls = worker_cls.options(num_cpus=b.num_cpus_per_worker, num_gpus=b.num_gpus_per_worker, max_concurrency=1)
        env_cls = worker_cls.options(num_cpus=b.num_cpus_per_worker, num_gpus=0, max_concurrency=1)  # beside a model actor
        models = ModelActors(ray, plan) if b.model_actor else None
        actors: list[_Actor] = []
        deaths: dict[str, int] = {sid: 0 for sid in queues}
        owners = itertools.count()

        def fail(batch: list[Unit], reason: str) -> None:
            now = time.time()
            on_results([(u, UnitResult("failed", error=reason, started=now, finished=now, worker="ray-driver")) for u in batch])

        def give_up(sid: str, reason: str) -> None:
            while queues[sid]:
                fail(queues[sid].popleft(), reason)

        def drop(actor: _Actor, reason: str, count: bool = True) -> None:
            """Kill an actor. It ran its batches in order: those whose results arrive are kept, the
            first one without a result was running and fails with ``reason``, the ones after it never
            started and go back to the front of the subject's queue. ``count``: a death of the worker itself
            (a worker killed because its model actor died is not)."""
            ray.kill(actor.handle, no_restart=True)
            actors.remove(actor)
            if models is not None and actor.owner:
                models.forget(actor.subject, actor.owner)
            refs = [ref for ref, _, _ in actor.inflight]
            if refs:  # results already on their way to the driver
                ray.wait(refs, num_returns=len(refs), timeout=RESULT_GRACE_S)
            running_seen, requeue = False, []
            for ref, batch, _ in actor.inflight:
                try:
                    results = ray.get(ref, timeout=0)
                except Exception:  # noqa: BLE001 - lost with the worker
                    if running_seen:
                        requeue.append(batch)
                    else:
                        running_seen = True
                        fail(batch, reason)
                    continue
                on_results(list(zip(batch, results)))
            queues[actor.subject].extendleft(reversed(requeue))
            if not count:
                return
            deaths[actor.subject] += 1
            if deaths[actor.subject] >= MAX_ACTOR_DEATHS:
                give_up(actor.subject, f"{reason}; gave up on subject {actor.subject!r} after {MAX_ACTOR_DEATHS} worker failures")

        def start_worker(sid: str) -> bool:
            """Start one worker of ``sid``; False while its model actor is still loading."""
            if models is not None and models.wants(sid):
                models.start(sid)
                handle = models.ready(sid)
                if handle is None:
                    return False
                owner = f"w{next(owners)}"
                actors.append(_Actor(sid, env_cls.remote(type(plan.evaluator), spec, plan.subjects[sid], b.unit_timeout_s,
                                                         model=handle, owner=owner), owner=owner, last_done=time.time()))
                return True
            actors.append(_Actor(sid, remote_cls.remote(type(plan.evaluator), spec, plan.subjects[sid], b.unit_timeout_s),
                                 last_done=time.time()))
            return True

        def model_event(ref) -> None:
            sid, what, reason = models.event(ref)
            if what == "failed":  # the policy cannot be loaded: every unit of the subject fails with the reason
                give_up(sid, reason)
            elif what == "died":
                restarted = models.died(sid)  # first: the workers' episodes died with it (nothing to forget)
                for a in [a for a in actors if a.subject == sid]:
                    drop(a, reason, count=False)
                if not restarted:
                    give_up(sid, f"{reason}; gave up on subject {sid!r} after its model actor died "
                                 f"{models.deaths[sid]} times")

        try:
            while any(queues.values()) or actors:
                # start actors: share the slots among subjects that still have work
                waiting = [sid for sid, q in queues.items() if q]
                if waiting:
                    cap = max(1, b.num_workers // len(waiting))
                    for sid in waiting:
                        have = sum(a.subject == sid for a in actors)
                        while len(actors) < b.num_workers and have < min(cap, len(queues[sid])) and start_worker(sid):
                            have += 1
                # feed round-robin (every actor gets a batch before any gets a second), retire idle actors
                for depth in range(1, INFLIGHT_PER_ACTOR + 1):
                    for a in actors:
                        q = queues[a.subject]
                        if len(a.inflight) < depth and q:
                            batch = q.popleft()
                            a.inflight.append((a.handle.run.remote(batch), batch, time.time()))
                for a in list(actors):
                    if not a.inflight:
                        try:
                            ray.get(a.handle.close.remote(), timeout=30)
                        except Exception:  # noqa: BLE001 - closing is best effort
                            pass
                        ray.kill(a.handle, no_restart=True)
                        actors.remove(a)
                if models is not None:  # a model actor whose subject has no work and no worker left is stopped
                    for sid in list(models.models):
                        if not queues[sid] and not any(a.subject == sid for a in actors):
                            models.stop(sid)
                refs = {ref: a for a in actors for ref, _, _ in a.inflight}
                mrefs = models.refs() if models is not None else {}
                if not refs and not mrefs:
                    continue
                ready, _ = ray.wait([*refs, *mrefs], num_returns=1, timeout=0.5)
                for ref in ready:
                    if ref in mrefs:
                        model_event(ref)
                        continue
                    a = refs[ref]
                    if a not in actors:  # dropped meanwhile (its model actor died)
                        continue
                    entry = next(e for e in a.inflight if e[0] == ref)
                    try:
                        results = ray.get(ref)
                    except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
                        drop(a, f"ray worker died: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                        continue
                    except ray.exceptions.RayTaskError as exc:  # a bug outside the unit (the runner catches unit errors)
                        a.inflight.remove(entry)
                        fail(entry[1], f"ray task failed: {str(exc).splitlines()[0][:300]}")
                        continue
                    a.inflight.remove(entry)
                    a.last_done, a.calls = time.time(), a.calls + 1
                    on_results(list(zip(entry[1], results)))
                # the driver-level watchdog
                if b.unit_timeout_s is not None:
                    now = time.time()
                    for a in list(actors):
                        if not a.inflight:
                            continue
                        _, batch, submitted = a.inflight[0]
                        allowed = b.unit_timeout_s * len(batch) + DRIVER_GRACE_S + (SETUP_GRACE_S if a.calls == 0 else 0.0)
                        if now - max(submitted, a.last_done) > allowed:
                            drop(a, f"timeout: ray worker did not answer within {allowed:g} s (watchdog); killed, unit retried on resume")
        finally:
            if models is not None:
                models.stop_all()
