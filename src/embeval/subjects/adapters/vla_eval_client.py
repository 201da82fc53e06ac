"""Client policy for vla-evaluation-harness model servers ("vla-eval": WebSocket + msgpack, see
:mod:`embeval.subjects.adapters.vla_eval_protocol`), so embeval can evaluate any model such a server already serves.

Subject spec::

    kind: policy
    adapter: vla-eval
    url: ws://127.0.0.1:8000
    params: {image_format: raw, gripper: open1, timeout: 30}

One connection per policy; a :meth:`fork` opens its own, and the batched calls (:meth:`reset_slots`,
:meth:`act_slots`, :meth:`end_slots`) give each slot its own connection and send all observations before
reading any answer, so a batching server (``embeval serve vla-eval --max-batch-size N``) answers a vectorised
run's episodes in one batch. :meth:`reset` sends ``episode_end`` for the running
episode and ``episode_start`` (``{"task": {"name": instruction}}``); :meth:`act` sends ``observation``
``{"images": camera -> HWC uint8, "task_description": instruction, "state": ...}`` and waits at most
``timeout`` seconds for the ``action`` with the same ``seq``. ``cameras`` renames cameras (the policy's
name -> the server's; default: the convention's ``cameras`` under their own names, else every camera), each image
centre-cropped to the convention's ``crop`` and resized (Lanczos) to ``image_size``, else the convention's, else
sent as is; ``state_keys`` sends the named ``Observation.state`` entries concatenated as one
vector under ``state_field`` (LIBERO-style servers read ``states``; default: the state map as is). The
reply ``{"actions": (K,) or (N, K)}`` (K: the convention's raw size, 7 for Euler angles) is converted from the
server's convention (``convention``, with the older ``gripper`` / ``frame`` overriding it), an absolute one against
the observation's ``state['tcp_pose']`` at the step it is used; a chunk is queued and returned one action per
:meth:`act`.
"""
from __future__ import annotations

import collections
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from embeval import checks
from embeval.action import Action, Observation, check_image
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError
from embeval.subjects.adapters.openvla_rest import parse_action_reply
from embeval.subjects.adapters.vla_eval_protocol import (
    ACTION,
    EPISODE_END,
    EPISODE_START,
    ERROR,
    HELLO,
    IMAGE_FORMATS,
    OBSERVATION,
    DecodeLimits,
    ProtocolError,
    pack,
    unpack,
)
from embeval.conventions import convention as resolve_convention
from embeval.conventions import camera_names, input_size, model_image, tcp_pose_of, to_embeval
from embeval.subjects.protocols import check_slots, no_episode

#: error codes of a server that is busy, not of a bad observation (embeval's servers send them)
_BUSY = ("queue_full", "server_busy", "too_many_connections", "subject_unavailable")


class VlaEvalPolicy:
    """A policy served by a vla-eval model server (see the module docstring)."""

    def __init__(self, id: str = "vla-eval", url: str = "ws://127.0.0.1:8000", cameras: Mapping[str, str] | None = None,
                 state_keys: Sequence[str] | None = None, state_field: str = "state", image_format: str = "raw",
                 image_size: int | list[int] | None = None, gripper: str | None = None, frame: str | None = None,
                 chunk_size: int | None = None, timeout: float = 30.0, connect_retries: int = 2, backoff: float = 0.5,
                 max_message_mb: float = 16.0, task: Mapping[str, Any] | None = None, convention: Any = None):
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            raise ConfigError(f"field 'url' must be a WebSocket address ws://host:port of a vla-eval model server, "
                              f"got {url!r}")
        if image_format not in IMAGE_FORMATS:
            raise ConfigError(f"field 'params.image_format': {image_format!r} is not one of {', '.join(IMAGE_FORMATS)}")
        for name, v, above in (("timeout", timeout, True), ("max_message_mb", max_message_mb, True), ("backoff", backoff, False)):
            checks.number(v, f"field 'params.{name}'", 0, lo_open=above)
        checks.integer(connect_retries, "field 'params.connect_retries'", 0)
        self.id, self.url = id, url.rstrip("/")
        self.state_keys = list(state_keys) if state_keys is not None else None
        self.state_field, self.image_format = state_field, image_format
        self.convention = resolve_convention(convention, gripper=gripper, frame=frame, chunk_size=chunk_size)
        self.cameras = camera_names(cameras, self.convention)
        self.image_size = input_size(image_size, self.convention)
        self.gripper = self.convention.gripper
        self.timeout, self.connect_retries, self.backoff = float(timeout), connect_retries, float(backoff)
        self.max_message_bytes = int(max_message_mb * 2 ** 20)
        self.task = dict(task or {})
        self.action_spec = self.convention.action_spec()
        self.instruction = ""
        self.server_info: dict[str, Any] = {}
        self._queue: collections.deque[np.ndarray] = collections.deque()
        self._ws: Any = None
        self._seq = 0
        self._in_episode = False
        self._slots: dict[Any, VlaEvalPolicy] = {}  # slot -> the connection (a fork) of its episode
        self._free: list[VlaEvalPolicy] = []  # forks of ended slots, reused by new ones

    # -- connection -------------------------------------------------------------------------------
    def _unreachable(self, why: str) -> ServerUnavailableError:
        return ServerUnavailableError(
            f"vla-eval model server at {self.url} is not reachable ({why}); start one (any embeval policy: "
            "`embeval serve vla-eval SPEC --port 8000`; or a vla-evaluation-harness model server) or fix 'url' in "
            "the subject spec")

    def _send(self, type: str, payload: dict) -> int:
        from websockets.exceptions import ConnectionClosed

        self._seq += 1
        try:
            self._ws.send(pack(type, payload, self._seq, image_format=self.image_format))
        except (ConnectionClosed, OSError) as exc:
            self._drop()
            raise self._unreachable(f"the connection closed: {exc}") from None
        return self._seq

    def _recv(self, what: str):
        frame = recv_frame(self._ws, self.timeout, self._drop, self._unreachable,
                           f"vla-eval model server at {self.url} sent no {what} within {self.timeout:g} s "
                           "(params.timeout); is it overloaded?")
        try:
            return unpack(frame, DecodeLimits(max_bytes=self.max_message_bytes))
        except ProtocolError as exc:
            raise InvalidInputError(f"vla-eval model server at {self.url} sent an unreadable {what}: {exc}") from None

    def connect(self) -> None:
        """Open the connection and exchange ``hello`` (retrying ``connect_retries`` times with backoff)."""
        if self._ws is not None:
            return
        self._ws = open_websocket(self.url, self.timeout, self.max_message_bytes, self.connect_retries, self.backoff,
                                  self._unreachable)
        seq = self._send(HELLO, {"protocol_version": 1, "client": "embeval"})
        reply = self._recv("hello reply")
        if reply.type != HELLO:
            self.close()
            raise ServerUnavailableError(f"{self.url} answered hello with {reply.type!r} "
                                         f"({str(reply.payload)[:200]}); is it a vla-eval model server?")
        if reply.seq != seq:
            self.close()
            raise InvalidInputError(f"{self.url} answered hello #{seq} with seq {reply.seq}")
        self.server_info = reply.payload

    def _drop(self) -> None:
        ws, self._ws, self._in_episode = self._ws, None, False
        if ws is not None:
            try:
                ws.close()
            except Exception:  # already closed
                pass

    def close(self) -> None:
        """End the running episodes and close the connections (this policy's and its slots')."""
        for pol in [*self._slots.values(), *self._free]:
            pol.close()
        self._slots.clear()
        self._free.clear()
        self.end_episode()
        self._drop()

    def __del__(self):  # pragma: no cover - best effort
        try:
            self._drop()
        except Exception:  # interpreter shutdown: nothing to close
            pass

    # -- Policy protocol ------------------------------------------------------------------------------
    def fork(self) -> VlaEvalPolicy:
        """An unconnected copy with the same settings (its own connection, so its own session)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._queue, new._ws, new._seq, new._in_episode, new.server_info = collections.deque(), None, 0, False, {}
        new._slots, new._free = {}, []
        return new

    def reset(self, instruction: str) -> None:
        self.connect()
        if self._in_episode:
            self._send(EPISODE_END, {})
        self._send(EPISODE_START, {"task": {"name": instruction, **self.task}})
        self._in_episode = True
        self.instruction = instruction
        self._queue.clear()

    def payload(self, observation: Observation) -> dict[str, Any]:
        """The ``observation`` payload (RLinf / vla-eval convention)."""
        if not observation.images:
            raise InvalidInputError("the observation has no camera image; a vla-eval server expects 'images'")
        names = self.cameras or {c: c for c in observation.images}
        images = {}
        for cam, wire in names.items():
            if cam not in observation.images:
                raise InvalidInputError(f"params.cameras (default: params.convention.cameras) wants camera {cam!r}; the observation has {sorted(observation.images)}")
            images[wire] = model_image(check_image(observation.images[cam], f"images[{cam!r}]"), self.convention,
                                       self.image_size)
        body: dict[str, Any] = {"images": images, "task_description": observation.instruction or self.instruction}
        if self.state_keys is not None:
            missing = [k for k in self.state_keys if k not in observation.state]
            if missing:
                raise InvalidInputError(f"params.state_keys wants observation.state {missing}; it has {sorted(observation.state)}")
            body[self.state_field] = np.concatenate(
                [np.asarray(observation.state[k], dtype=np.float64).reshape(-1) for k in self.state_keys])
        elif observation.state:
            body[self.state_field] = {k: np.asarray(v, dtype=np.float64) for k, v in observation.state.items()}
        return body

    def send_observation(self, observation: Observation) -> int:
        """Send ``observation`` (opening the connection and an episode when needed); its ``seq``."""
        self.connect()
        if not self._in_episode:
            self.reset(observation.instruction or self.instruction)
        return self._send(OBSERVATION, self.payload(observation))

    def receive_action(self, seq: int) -> np.ndarray:
        """The raw (N, K) action array answering observation ``seq`` (answers to earlier ones are skipped)."""
        while True:
            reply = self._recv("action")
            if reply.seq < seq and reply.type in (ACTION, ERROR):
                continue  # a late answer to an earlier observation (an act_slots call that failed midway)
            if reply.type == ERROR:
                text, code = reply.payload.get("error", reply.payload), reply.payload.get("code")
                err = ServerUnavailableError if code in _BUSY else InvalidInputError
                raise err(f"vla-eval model server at {self.url} refused the observation: {str(text)[:400]}")
            if reply.type == ACTION and reply.seq == seq:
                return parse_action_reply(reply.payload, f"vla-eval model server at {self.url}", self.convention.size)
            raise InvalidInputError(f"vla-eval model server at {self.url} answered observation #{seq} with "
                                    f"{reply.type!r} #{reply.seq}")

    def request(self, observation: Observation) -> np.ndarray:
        """One observation -> the raw (N, K) action array in the server's convention."""
        return self.receive_action(self.send_observation(observation))

    def _next(self, observation: Observation | None = None) -> Action:
        """The next queued raw action in embeval's convention (an absolute one against ``observation``'s TCP pose)."""
        return to_embeval(self._queue.popleft(), self.convention, tcp_pose_of(observation, self.convention))

    # -- batched episodes (BatchedPolicy): one connection per slot, all observations sent before any answer is read
    def reset_slots(self, slots: Sequence[Any], instructions: Sequence[str]) -> None:
        """Start an episode in each slot, each on its own connection (connections of ended slots are reused)."""
        for slot, instruction in zip(check_slots(self.id, slots, instructions, "instructions"), instructions):
            pol = self._slots.get(slot)
            if pol is None:
                pol = self._free.pop() if self._free else self.fork()
                self._slots[slot] = pol
            pol.reset(instruction)

    def act_slots(self, slots: Sequence[Any], observations: Sequence[Observation]) -> list[Action]:
        """One action per slot: every slot's observation is sent first, then the answers are read, so a
        batching server answers them together."""
        slots = check_slots(self.id, slots, observations, "observations")
        missing = next((s for s in slots if s not in self._slots), None)
        if missing is not None:
            raise no_episode(self.id, missing)
        pols = [self._slots[s] for s in slots]
        seqs = [None if pol._queue else pol.send_observation(ob) for pol, ob in zip(pols, observations)]
        out = []
        for pol, seq, ob in zip(pols, seqs, observations):
            if seq is not None:
                pol._queue.extend(pol.receive_action(seq))
            out.append(pol._next(ob))
        return out

    def end_slots(self, slots: Sequence[Any]) -> None:
        """End the slots' episodes (``episode_end``); their connections stay open for new slots."""
        for slot in slots:
            pol = self._slots.pop(slot, None)
            if pol is not None:
                pol.end_episode()
                self._free.append(pol)

    def end_episode(self) -> None:
        """Send ``episode_end`` for the running episode (the connection stays open)."""
        if self._ws is not None and self._in_episode:
            try:
                self._send(EPISODE_END, {})
            except ServerUnavailableError:
                pass
        self._in_episode = False
        self._queue.clear()

    def act(self, observation: Observation) -> Action:
        if not self._queue:
            self._queue.extend(self.request(observation))
        return self._next(observation)


def open_websocket(url: str, timeout: float, max_bytes: int, retries: int, backoff: float, unreachable,
                   headers: Mapping[str, str] | None = None):
    """A sync WebSocket connection to ``url`` held across calls, tried ``retries`` more times with doubling
    ``backoff`` seconds; ``unreachable(why)`` makes the error raised when every attempt fails."""
    import inspect

    from websockets.exceptions import InvalidHandshake, InvalidURI
    from websockets.sync.client import connect

    # a connection held across calls (not a `with` block): websockets >= 17.1 asks for legacy=True then
    direct = {"legacy": True} if "legacy" in inspect.signature(connect).parameters else {}
    last = "no attempt made"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        try:
            return connect(url, open_timeout=timeout, close_timeout=2, compression=None, max_size=max_bytes,
                           ping_interval=None, proxy=None, additional_headers=headers, **direct)
        except InvalidURI as exc:
            raise ConfigError(f"field 'url': {exc}") from None
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            last = f"{type(exc).__name__}: {exc}"
    raise unreachable(last)


def recv_frame(ws, timeout: float, drop, unreachable, late: str):
    """One frame from the connection ``ws`` within ``timeout`` seconds. On a timeout: ``drop()``, then
    :class:`ServerUnavailableError` saying ``late``; on a closed connection: ``drop()``, then ``unreachable(why)``."""
    from websockets.exceptions import ConnectionClosed

    try:
        return ws.recv(timeout=timeout)
    except TimeoutError:
        drop()
        raise ServerUnavailableError(late) from None
    except (ConnectionClosed, OSError) as exc:
        drop()
        raise unreachable(f"the connection closed: {exc}") from None
