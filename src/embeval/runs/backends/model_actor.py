"""The Ray backend's model-actor split (``backend.model_actor: true``): the model on one actor, episodes elsewhere.

Per policy subject ONE :class:`ModelActor` (reserving ``num_gpus_per_model`` GPUs and ``num_cpus_per_model``
CPUs) loads the policy once and answers the episodes of every environment worker: concurrent requests are
collected by a :class:`~embeval.serving.batching.BatchQueue` (up to ``model_max_batch`` per call, waiting at
most ``model_max_wait_ms`` for a batch to fill, one request per episode slot per call) and answered by one
``reset_slots`` / ``act_slots`` / ``end_slots`` call of the policy (:func:`~embeval.subjects.protocols.batched`:
a policy without batched calls of its own gets one copy per slot, so its actions equal batch-1 ones exactly).

Environment workers (``num_cpus_per_worker``, no GPU) run the units as before, with
:class:`ModelActorPolicy` in place of the model: a policy whose ``reset``/``act``/``close`` (and batched
calls) forward to the model actor. The driver (:mod:`.ray_backend`) starts a subject's workers once its model
actor has loaded, watches the model actor and, when it dies, fails the affected units with the reason and
restarts it once (:data:`MAX_MODEL_DEATHS`), then gives the subject up.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

log = logging.getLogger("embeval.runs")

#: the adapter name environment workers load in place of the model (registered inside those workers only)
ADAPTER = "ray_model_actor"
#: a model actor that dies this many times for one subject fails that subject's remaining units (1 restart)
MAX_MODEL_DEATHS = 2
#: requests waiting or running at most in one model actor (and its Ray max_concurrency, plus control calls)
MODEL_QUEUE_SIZE = 4096
#: seconds an environment worker waits for the model actor's description of the policy
INFO_TIMEOUT_S = 120.0


def uses_model_actor(subject) -> bool:
    """True for a subject the split applies to: a policy loaded through a registered policy adapter
    (not one an evaluator builds itself, such as sim-iqa's ``sim_expert``; VLMs and metrics keep the usual path)."""
    from embeval.subjects.registry import ADAPTERS

    return subject.kind == "policy" and subject.adapter in ADAPTERS["policy"]


def worker_label() -> str:
    """``ray:<host>:<node id, 12 hex>:<pid>``: nodes on one machine share a host name, so the Ray node id says
    which node ran a unit (UnitResult.worker)."""
    import ray

    return f"ray:{os.uname().nodename}:{ray.get_runtime_context().get_node_id()[:12]}:{os.getpid()}"


class ModelActor:
    """Ray actor body (async: many requests at once): one policy subject, loaded once, answered in batches."""

    def __init__(self, spec, subject, max_batch: int, max_wait_s: float):
        from embeval.serving.batching import BatchQueue

        self.spec, self.subject = spec, subject
        self.policy: Any = None  # batched(policy)
        self.raw: Any = None
        self.error: str | None = None
        self.loads = 0
        self.active: set = set()  # slots with an episode
        self.queue = BatchQueue(self._batch, MODEL_QUEUE_SIZE, max_batch, max_wait_s, name="model-actor")
        self._closed: asyncio.Event | None = None

    # -- on the model thread ---------------------------------------------------------------------
    def _load(self) -> None:
        if self.policy is not None or self.error is not None:
            return
        from embeval.runs.execute import format_error
        from embeval.runs.registry import import_plugins
        from embeval.subjects.protocols import batched
        from embeval.subjects.registry import SubjectSpec, load_subject

        try:
            import_plugins(self.spec)
            self.raw = load_subject(SubjectSpec.from_mapping(self.subject.to_subject_mapping(),
                                                             base_dir=Path(self.spec.base_dir)))
            self.loads += 1
            self.policy = batched(self.raw)
        except Exception as exc:  # noqa: BLE001 - every unit of the subject fails with it (as SubjectRunner's setup)
            self.error = f"subject {self.subject.id!r} setup failed: {format_error(exc)}"

    def _batch(self, args: list[tuple]) -> list[Any]:
        """``(op, slot, value)`` requests (op reset | act | end; one per slot) -> one result each: resets, ends
        and acts each in one policy call; a failing call is retried slot by slot so an error lands on its slot."""
        out: list[Any] = [None] * len(args)
        for op, call in (("reset", self._resets), ("end", self._ends), ("act", self._acts)):
            idx = [i for i, a in enumerate(args) if a[0] == op]
            if not idx:
                continue
            try:
                res = call([args[i][1] for i in idx], [args[i][2] for i in idx])
            except Exception as exc:  # noqa: BLE001
                if len(idx) == 1:
                    res = [exc]
                else:
                    res = []
                    for i in idx:
                        try:
                            res.extend(call([args[i][1]], [args[i][2]]))
                        except Exception as one:  # noqa: BLE001 - handed to that slot's request
                            res.append(one)
            for i, r in zip(idx, res):
                out[i] = r
        return out

    def _resets(self, slots: list, instructions: list) -> list[None]:
        self.policy.reset_slots(slots, instructions)
        self.active.update(slots)
        return [None] * len(slots)

    def _ends(self, slots: list, _: list) -> list[None]:
        self.policy.end_slots(slots)
        self.active.difference_update(slots)
        return [None] * len(slots)

    def _acts(self, slots: list, observations: list) -> list[Any]:
        return list(self.policy.act_slots(slots, observations))

    def _forget(self, owner: str) -> int:
        gone = [s for s in self.active if s[0] == owner]
        self._ends(gone, gone)
        return len(gone)

    def _teardown(self) -> None:
        close = getattr(self.raw, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self.policy = self.raw = None

    # -- remote methods --------------------------------------------------------------------------
    async def load(self) -> dict[str, Any]:
        """Load the policy (once); ``{"error": reason}`` when it cannot be loaded, else its description."""
        await self.queue.run_solo(self._load)
        if self.error is not None:
            return {"error": self.error}
        return await self.info()

    async def info(self) -> dict[str, Any]:
        if self.error is not None:
            raise RuntimeError(self.error)
        if self.policy is None:
            await self.queue.run_solo(self._load)
            return await self.info()
        return {"id": self.raw.id, "action_spec": self.raw.action_spec, "loads": self.loads, "pid": os.getpid()}

    async def call(self, op: str, slot: Any, value: Any) -> Any:
        """One request of an episode: ``reset`` (value: instruction), ``act`` (value: Observation) or ``end``."""
        res = await self.queue.run((op, slot, value), key=slot)
        if isinstance(res, BaseException):
            raise res
        return res

    async def forget(self, owner: str) -> int:
        """End every episode of one environment worker (it died or was killed); how many were open."""
        return await self.queue.run_solo(self._forget, owner)

    def stats(self) -> dict[str, Any]:
        return {**self.queue.stats(), "loads": self.loads, "open_slots": len(self.active)}

    async def wait_closed(self) -> bool:
        """Returns once :meth:`close` ran: the driver holds this call to learn when the actor dies."""
        if self._closed is None:
            self._closed = asyncio.Event()
        await self._closed.wait()
        return True

    async def close(self) -> dict[str, Any]:
        stats = self.stats()
        if self.policy is not None:
            await self.queue.run_solo(self._teardown)
        self.queue.shutdown()
        if self._closed is None:
            self._closed = asyncio.Event()
        self._closed.set()
        return stats


class ModelActorLost(RuntimeError):
    """The model actor of a subject died or did not answer."""


_STANDINS = itertools.count()


class ModelActorPolicy:
    """A policy inside an environment worker whose calls go to the subject's :class:`ModelActor`.

    Speaks :class:`~embeval.subjects.protocols.Policy` (one episode: ``reset``/``act``) and
    :class:`~embeval.subjects.protocols.BatchedPolicy` (its slots are sent concurrently, so the model actor
    answers them in one call). Slots are namespaced per worker and stand-in, so episodes never mix.
    ``timeout_s``: seconds to wait for one answer (None: no limit; the worker's watchdog still applies)."""

    def __init__(self, handle, owner: str, timeout_s: float | None, id: str = ""):
        self._h, self._owner, self._timeout = handle, owner, timeout_s
        self._tag = next(_STANDINS)
        self._slots: set = set()
        info = self._get([handle.info.remote()], INFO_TIMEOUT_S, id or "policy")[0]
        self.id = info["id"]
        self.action_spec = info["action_spec"]

    def _key(self, slot: Any) -> tuple:
        return (self._owner, self._tag, slot)

    def _get(self, refs: list, timeout_s: float | None, who: str | None = None) -> list[Any]:
        import ray

        who = who or self.id
        try:
            return ray.get(refs, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise ModelActorLost(f"the model actor of subject {who!r} did not answer within {timeout_s:g} s") from None
        except ray.exceptions.RayActorError as exc:
            raise ModelActorLost(f"the model actor of subject {who!r} died: {str(exc).splitlines()[0][:200]}") from None
        except ray.exceptions.RayTaskError as exc:  # the policy's own error, raised as itself
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise

    def _calls(self, op: str, slots: Sequence[Any], values: Sequence[Any]) -> list[Any]:
        from embeval.subjects.protocols import check_slots

        slots = check_slots(self.id, slots, values, "instructions" if op == "reset" else "observations"
                            if op == "act" else "slots")
        refs = [self._h.call.remote(op, self._key(s), v) for s, v in zip(slots, values)]
        return self._get(refs, self._timeout) if refs else []

    # -- BatchedPolicy ---------------------------------------------------------------------------
    def reset_slots(self, slots: Sequence[Any], instructions: Sequence[str]) -> None:
        self._calls("reset", slots, [str(i) for i in instructions])
        self._slots.update(slots)

    def act_slots(self, slots: Sequence[Any], observations: Sequence[Any]) -> list[Any]:
        return self._calls("act", slots, observations)

    def end_slots(self, slots: Sequence[Any]) -> None:
        slots = [s for s in slots if s in self._slots]
        self._calls("end", slots, slots)
        self._slots.difference_update(slots)

    # -- Policy (one episode in slot 0) ----------------------------------------------------------
    def reset(self, instruction: str) -> None:
        self.reset_slots([0], [instruction])

    def act(self, observation) -> Any:
        return self.act_slots([0], [observation])[0]

    def close(self) -> None:
        """End this stand-in's episodes on the model actor (best effort: the actor may be gone)."""
        try:
            self.end_slots(list(self._slots))
        except Exception:  # noqa: BLE001
            pass


def standin_subject(subject, handle, owner: str, timeout_s: float | None):
    """``subject`` as the environment worker loads it: the :data:`ADAPTER` bound to the model actor ``handle``
    (registered in this process), same id; the model's own path, url and params stay with the model actor."""
    from embeval.subjects.registry import register_adapter

    def factory(id: str = "") -> ModelActorPolicy:
        return ModelActorPolicy(handle, owner, timeout_s, id=id)

    register_adapter(ADAPTER, "policy", factory, description="a policy served by the Ray backend's model actor")
    return replace(subject, adapter=ADAPTER, path=None, url=None, params={}, cache=None)


@dataclass
class _Model:
    handle: Any
    load_ref: Any = None  # pending load call
    watch_ref: Any = None  # pending wait_closed call (raises when the actor dies)
    ready: bool = False
    workers: set = field(default_factory=set)  # owners (worker uids) that used it


class ModelActors:
    """The driver's side: one model actor per policy subject that needs one, started on demand, watched,
    restarted once after a death, stopped when the subject has no work left."""

    def __init__(self, ray, plan):
        self.ray, self.plan, b = ray, plan, plan.spec.backend
        self.remote_cls = ray.remote(ModelActor).options(num_cpus=b.num_cpus_per_model, num_gpus=b.num_gpus_per_model,
                                                         max_concurrency=MODEL_QUEUE_SIZE + 16)
        self.max_batch = b.model_max_batch or b.num_workers
        self.max_wait_s = b.model_max_wait_ms / 1000.0
        self.models: dict[str, _Model] = {}
        self.deaths: dict[str, int] = {}
        self.stats: dict[str, list[dict]] = {}  # subject -> stats of each closed model actor

    def wants(self, sid: str) -> bool:
        """The subject gets a model actor: a policy the evaluator loads through ``Evaluator.setup`` (an evaluator
        that loads its policies some other way sets the class attribute ``model_actor = False``)."""
        return getattr(self.plan.evaluator, "model_actor", True) is not False and uses_model_actor(self.plan.subjects[sid])

    def start(self, sid: str) -> None:
        if sid in self.models:
            return
        h = self.remote_cls.remote(self.plan.spec, self.plan.subjects[sid], self.max_batch, self.max_wait_s)
        self.models[sid] = _Model(h, load_ref=h.load.remote())

    def ready(self, sid: str) -> Any:
        """The model actor's handle once its policy has loaded, else None."""
        m = self.models.get(sid)
        return m.handle if m is not None and m.ready else None

    def refs(self) -> dict[Any, tuple[str, str]]:
        out = {}
        for sid, m in self.models.items():
            if m.load_ref is not None:
                out[m.load_ref] = (sid, "load")
            if m.watch_ref is not None:
                out[m.watch_ref] = (sid, "watch")
        return out

    def event(self, ref) -> tuple[str, str, str]:
        """What a finished model ref means: ``(sid, "ready" | "failed" | "died", reason)``."""
        ray = self.ray
        sid, what = self.refs()[ref]
        m = self.models[sid]
        try:
            value = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - the actor died (process gone, node lost, creation failed)
            return sid, "died", f"the model actor of subject {sid!r} died: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        if what == "load":
            m.load_ref = None
            if "error" in value:
                return sid, "failed", value["error"]
            m.ready, m.watch_ref = True, m.handle.wait_closed.remote()
            return sid, "ready", ""
        m.watch_ref = None  # closed by us
        return sid, "closed", ""

    def died(self, sid: str) -> bool:
        """Record a death of ``sid``'s model actor; True when it is restarted, False when the subject is given up."""
        m = self.models.pop(sid, None)
        if m is not None:
            self.ray.kill(m.handle, no_restart=True)
        self.deaths[sid] = self.deaths.get(sid, 0) + 1
        if self.deaths[sid] >= MAX_MODEL_DEATHS:
            return False
        self.start(sid)
        return True

    def forget(self, sid: str, owner: str) -> None:
        """End the episodes a lost worker left open on the model actor (fire and forget)."""
        m = self.models.get(sid)
        if m is not None and m.ready:
            m.handle.forget.remote(owner)

    def stop(self, sid: str, timeout_s: float = 30.0) -> None:
        m = self.models.pop(sid, None)
        if m is None:
            return
        try:
            st = self.ray.get(m.handle.close.remote(), timeout=timeout_s)
            self.stats.setdefault(sid, []).append(st)
            log.info("model actor of subject %r: loaded %d time(s); %d requests in %d model calls (largest batch %d)",
                     sid, st["loads"], st["served"], st["batches"], st["largest_batch"])
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        self.ray.kill(m.handle, no_restart=True)

    def stop_all(self) -> None:
        for sid in list(self.models):
            self.stop(sid)
