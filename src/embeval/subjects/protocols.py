"""The small protocols every subject (model) implements. Nothing in the core knows
which model it is talking to: real models enter through adapters.

Batched calls (:class:`BatchedPolicy`, :class:`BatchedVLM`) serve many episodes or items per model
call; :func:`batched` and :func:`generate_batch` give them to every subject (a loop where the model
has no batched forward of its own).

The vocabulary they speak (images, :class:`~embeval.action.Action`, :class:`~embeval.action.ActionSpec`,
:class:`~embeval.action.Observation`) lives in :mod:`embeval.action`.
"""
from __future__ import annotations

import collections
import copy
from typing import Any, Hashable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from embeval.action import Action, ActionSpec, Observation
from embeval.errors import ConfigError, InvalidInputError


@runtime_checkable
class VLM(Protocol):
    """A vision-language model: images + prompt -> text."""

    id: str

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str: ...


@runtime_checkable
class Policy(Protocol):
    """A vision-language-action policy."""

    id: str
    action_spec: ActionSpec

    def reset(self, instruction: str) -> None: ...

    def act(self, observation: Observation) -> Action: ...


@runtime_checkable
class LLM(Protocol):
    """A text model with chat and choice."""

    id: str

    def chat(self, messages: Sequence[Mapping[str, str]], json_schema: Mapping | None = None, **gen: Any) -> str: ...

    def choose(self, prompt: str, options: Sequence[str]) -> str: ...


# --------------------------------------------------------------------------- batched calls
#: An episode's handle in batched calls: any hashable (a runner's environment index, a unit id).
Slot = Hashable


@runtime_checkable
class BatchedPolicy(Protocol):
    """A policy that serves many episodes in one call (one model forward for the whole batch).

    Each episode lives in a *slot*; the policy keeps every slot's episode state (instruction, history,
    cached prefix, pending action chunk) apart. Episodes start and end at different steps: a slot can be
    restarted with :meth:`reset_slots` while the others go on. A slot's actions equal those a batch-1
    copy of the policy would give for the same episode (``reset(instruction)``, then ``act`` per step).
    Every :class:`Policy` gets these calls from :func:`batched` (one copy per slot, called in turn);
    models with a real batched forward implement them themselves.
    """

    id: str
    action_spec: ActionSpec

    def reset_slots(self, slots: Sequence[Slot], instructions: Sequence[str]) -> None:
        """Start a new episode in each slot (a slot in use is restarted: its old state is dropped)."""
        ...

    def act_slots(self, slots: Sequence[Slot], observations: Sequence[Observation]) -> list[Action]:
        """One action per slot, in order; each slot must have been started by :meth:`reset_slots`."""
        ...

    def end_slots(self, slots: Sequence[Slot]) -> None:
        """Forget the episodes of these slots (frees their state); unknown slots are ignored."""
        ...


@runtime_checkable
class BatchedVLM(Protocol):
    """A VLM that answers many (images, prompt) items in one call; :func:`generate_batch` loops for the others."""

    id: str

    def generate_batch(self, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str], **gen: Any) -> list[str]:
        """``[generate(images, prompt) for images, prompt in zip(image_lists, prompts)]``, as one batch."""
        ...


def check_slots(owner: str, slots: Sequence[Slot], items: Sequence[Any], what: str) -> list[Slot]:
    """``slots`` as a list after checking it pairs one-to-one with ``items`` (named ``what``) and holds no
    slot twice; :class:`InvalidInputError` naming ``owner`` otherwise."""
    slots = list(slots)
    if len(slots) != len(items):
        raise InvalidInputError(f"{owner}: {len(slots)} slots for {len(items)} {what}; give one slot per {what[:-1]}")
    try:
        distinct = len(set(slots)) == len(slots)
    except TypeError:
        raise InvalidInputError(f"{owner}: slots must be hashable (an int or str per episode), got "
                                f"{[type(s).__name__ for s in slots][:4]}") from None
    if not distinct:
        seen: set = set()
        dup = next(s for s in slots if s in seen or seen.add(s))
        raise InvalidInputError(f"{owner}: slot {dup!r} appears twice in one call; one episode per slot")
    return slots


def no_episode(owner: str, slot: Slot) -> InvalidInputError:
    """The error for acting in a slot that has no episode."""
    return InvalidInputError(f"{owner}: slot {slot!r} has no episode; call reset_slots([{slot!r}], [instruction]) first")


def started_slots(owner: str, slots: Sequence[Slot], observations: Sequence[Any], episodes: Mapping) -> list[Slot]:
    """:func:`check_slots` for an ``act_slots`` call, and every slot has an episode in ``episodes``
    (:func:`no_episode` otherwise)."""
    slots = check_slots(owner, slots, observations, "observations")
    missing = next((s for s in slots if s not in episodes), None)
    if missing is not None:
        raise no_episode(owner, missing)
    return slots


_SHARED_TYPE_MODULES = ("httpx", "httpcore", "requests", "urllib3", "socket", "ssl", "_ssl", "select", "selectors",
                        "concurrent", "multiprocessing", "subprocess", "queue", "asyncio", "_io", "io", "sqlite3",
                        "tokenizers", "_thread", "threading")


def _shared_memo(root: Any, limit: int = 500_000) -> dict[int, Any]:
    """A :func:`copy.deepcopy` memo that makes copies of ``root`` share its weights and resources: the
    parameters and buffers of every torch module reachable from ``root`` and objects of resource types
    (locks, HTTP clients, sockets, files, modules). Walks at most ``limit`` objects."""
    import sys
    import types

    torch = sys.modules.get("torch")
    memo: dict[int, Any] = {}
    seen: set[int] = set()
    stack = [root]
    atoms = (str, bytes, bytearray, int, float, complex, bool, type(None), type, types.FunctionType,
             types.BuiltinFunctionType, np.ndarray, np.generic)
    while stack and len(seen) < limit:
        x = stack.pop()
        if id(x) in seen or isinstance(x, atoms):
            continue
        seen.add(id(x))
        mod = type(x).__module__ or ""
        if isinstance(x, types.ModuleType) or mod.split(".")[0] in _SHARED_TYPE_MODULES:
            memo[id(x)] = x
            continue
        if torch is not None:
            if isinstance(x, torch.Tensor):
                continue  # a tensor that is not a module's weight is copied (it may be episode state)
            if isinstance(x, torch.nn.Module):
                for t in (*x.parameters(), *x.buffers()):
                    memo[id(t)] = t
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple, set, frozenset, collections.deque)):
            stack.extend(x)
        else:
            d = getattr(x, "__dict__", None)
            if isinstance(d, dict):
                stack.extend(d.values())
            for cls in type(x).__mro__:
                names = cls.__dict__.get("__slots__", ())
                for name in (names,) if isinstance(names, str) else names:
                    if name not in ("__dict__", "__weakref__") and hasattr(x, name):
                        stack.append(getattr(x, name))
    return memo


def fork_policy(policy: Policy) -> Policy:
    """An independent copy of ``policy`` for one more concurrent episode: ``policy.fork()`` when the policy
    defines it, else a deep copy that shares the weights (torch parameters and buffers) and resources (locks,
    clients) and copies everything else (instruction, history, action queues). :class:`ConfigError` in one
    line when the policy cannot be copied."""
    fork = getattr(policy, "fork", None)
    if callable(fork):
        return fork()
    try:
        return copy.deepcopy(policy, _shared_memo(policy))
    except Exception as exc:  # an attribute deepcopy cannot handle (a C handle, a generator)
        raise ConfigError(f"policy {getattr(policy, 'id', type(policy).__name__)!r} cannot be copied per episode for "
                          f"batched calls ({type(exc).__name__}: {str(exc)[:120]}); give its class a fork() method "
                          "(a copy sharing the weights) or reset_slots/act_slots/end_slots") from None


class LoopSlots:
    """:class:`BatchedPolicy` for any batch-1 :class:`Policy`: one copy per slot (:func:`fork_policy`),
    each asked in turn, so every slot's actions equal a batch-1 run's exactly. Copies of ended slots are
    reused by new ones (as many copies as episodes ever ran at once); ``policy`` itself is never stepped."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.id = policy.id
        self.action_spec = policy.action_spec
        self._active: dict[Slot, Policy] = {}
        self._free: list[Policy] = []

    def reset_slots(self, slots: Sequence[Slot], instructions: Sequence[str]) -> None:
        for slot, instruction in zip(check_slots(self.id, slots, instructions, "instructions"), instructions):
            pol = self._active.get(slot)
            if pol is None:
                pol = self._free.pop() if self._free else fork_policy(self.policy)
                self._active[slot] = pol
            pol.reset(instruction)

    def act_slots(self, slots: Sequence[Slot], observations: Sequence[Observation]) -> list[Action]:
        slots = started_slots(self.id, slots, observations, self._active)
        return [self._active[s].act(ob) for s, ob in zip(slots, observations)]

    def end_slots(self, slots: Sequence[Slot]) -> None:
        for s in slots:
            pol = self._active.pop(s, None)
            if pol is not None:
                self._free.append(pol)

    @property
    def copies(self) -> int:
        """Copies made so far (active + free)."""
        return len(self._active) + len(self._free)


def batched(policy: Policy) -> BatchedPolicy:
    """``policy`` itself when it has its own batched calls (:class:`BatchedPolicy`), else :class:`LoopSlots`."""
    if all(callable(getattr(policy, m, None)) for m in ("reset_slots", "act_slots", "end_slots")):
        return policy  # type: ignore[return-value]
    return LoopSlots(policy)


def generate_batch(vlm: VLM, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str], **gen: Any) -> list[str]:
    """One answer per (images, prompt) item: ``vlm.generate_batch`` when the VLM has it, else one
    ``generate`` per item. :class:`InvalidInputError` when the two lists differ in length."""
    if len(image_lists) != len(prompts):
        raise InvalidInputError(f"{getattr(vlm, 'id', 'vlm')}: {len(image_lists)} image lists for {len(prompts)} prompts")
    fn = getattr(vlm, "generate_batch", None)
    if callable(fn):
        return list(fn(image_lists, prompts, **gen))
    return [vlm.generate(list(ims), p, **gen) for ims, p in zip(image_lists, prompts)]
