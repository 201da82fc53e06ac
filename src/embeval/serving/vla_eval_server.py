"""Serve any embeval policy as a vla-evaluation-harness model server (WebSocket + msgpack, "vla-eval").

``embeval serve vla-eval SPEC --port P``: the harness (or any client speaking its protocol,
:mod:`embeval.subjects.adapters.vla_eval_protocol`) connects to ``ws://127.0.0.1:P``; every connection is a session, its
episodes are slots of the policy (:class:`~embeval.subjects.protocols.BatchedPolicy`):

- ``hello`` is answered by ``hello`` (protocol version, server name, action and observation spec);
- ``episode_start`` ends the connection's previous episode (``end_slots``) and opens a new one; the
  slot is started (``reset_slots``) by its first observation, with that observation's instruction, and
  restarted when a later observation brings another instruction (as a batch-1 server resets on it);
- ``observation`` (payload ``images`` camera -> HWC uint8, ``task_description``, ``state`` or ``states``)
  is answered by ``action`` ``{"actions": float32 (7,)}`` with the observation's ``seq``. Observations
  of concurrent connections are answered by one ``act_slots`` call of up to ``max_batch_size`` of them
  (:class:`~embeval.serving.batching.BatchQueue`); an observation outside an episode opens one;
- ``episode_end`` (or the connection closing) ends the episode.

Cameras and state (:class:`VlaEvalMapping`, the spec's ``serve.vla_eval``): images keep their names
unless ``cameras`` maps them (wire name -> the policy's camera; then only mapped cameras are used and
each is required); a state *map* (name -> array) becomes ``Observation.state`` as is, a flat state
*vector* is cut into named pieces by ``state`` (name -> [start, stop]) or kept whole as ``state``.
The reply is embeval's action converted to the spec's ``serve.convention`` (a name or ``{base: NAME, FIELD:
value}``, see :mod:`embeval.conventions`; default ``embeval``: 7 numbers, gripper ``open1``) with ``gripper``
(``serve.gripper`` / ``--gripper``) overriding its gripper; an absolute convention answers the target pose from
the observation's ``tcp_pose`` state. ``hello`` describes the convention's layout.

Hostile input (limits from :class:`~embeval.serving.limits.ServerLimits`): a frame over
``max_body_bytes`` is refused by the WebSocket layer (close code 1009 naming the limit); a frame that is
not a message (not msgpack, a text frame, not a map with type/payload/seq/timestamp) gets an ``error``
and the connection is closed (1007; 1003 for text); a readable message with a bad payload (wrong types,
too many images or pixels, an unknown type, a full queue) gets an ``error`` carrying its ``seq`` and the
connection stays open, as the harness's servers do for failed observations. At most ``queue_size``
observations wait or run, their decoded pixels within ``max_inflight_pixels``; at most
``max_connections`` connections are served (one more gets an ``error`` and close code 1013). A connection that
sends nothing for ``hello_timeout_s`` after it opens, or for ``idle_timeout_s`` between two messages, gets an
``error`` (code ``idle_timeout``) and close code 1008, so idle sockets cannot hold every slot.
``GET /health`` on the same port answers JSON counters (batches, largest batch, queue) at once, also
while a batch runs.
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from embeval.action import Observation, check_image
from embeval.errors import ConfigError, InvalidInputError
from embeval.serving.batching import BatchQueue, check_batching
from embeval.serving.limits import ApiError, PixelBudget, ServerLimits, as_api_error
from embeval.serving.runner import LOCALHOST
from embeval.subjects.adapters.vla_eval_protocol import (
    ACTION,
    EPISODE_END,
    EPISODE_START,
    ERROR,
    HELLO,
    MESSAGE_TYPES,
    OBSERVATION,
    PROTOCOL_VERSION,
    DecodeLimits,
    Message,
    ProtocolError,
    error_message,
    pack,
    unpack,
)
from embeval.conventions import ROTATIONS
from embeval.serving.openvla_server import server_convention, wire_action

log = logging.getLogger("embeval.serving.vla_eval")
MAX_STATE_VALUES = 4096  # numbers in one proprioception array
#: embeval's gripper conventions as the harness's gripper formats (its specs' ``format`` strings)
GRIPPER_FORMATS = {"open1": "continuous_01", "close1": "binary_close_01", "signed_close_positive": "binary_close_positive",
                   "signed_open_positive": "binary_close_negative"}
#: the close code of a frame that is not a message, per ProtocolError code (default 1007: invalid data)
_CLOSE_CODES = {"text_frame": 1003}


@dataclass(frozen=True)
class VlaEvalMapping:
    """Payload -> :class:`~embeval.action.Observation`. ``cameras``: wire camera name -> the policy's camera
    (None: every image under its own name); ``state``: observation.state key -> ``(start, stop)`` slice of a
    flat state vector (None: a vector is ``state['state']``, a map is used as is)."""

    cameras: dict[str, str] | None = None
    state: dict[str, tuple[int, int]] | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None, where: str = "serve.vla_eval") -> VlaEvalMapping:
        """From a spec's ``serve.vla_eval`` mapping; :class:`ConfigError` naming the field."""
        data = dict(data or {})
        unknown = sorted(set(data) - {"cameras", "state"})
        if unknown:
            raise ConfigError(f"{where} has {', '.join(map(repr, unknown))}; known: cameras, state")
        cams = data.get("cameras")
        if cams is not None and (not isinstance(cams, Mapping) or not cams or not all(
                isinstance(k, str) and isinstance(v, str) and k and v for k, v in cams.items())):
            raise ConfigError(f"{where}.cameras must map the benchmark's camera names to the policy's, e.g. "
                              f"{{agentview: third_person, wrist: wrist}}; got {cams!r}")
        st = data.get("state")
        slices: dict[str, tuple[int, int]] | None = None
        if st is not None:
            if not isinstance(st, Mapping) or not st:
                raise ConfigError(f"{where}.state must map observation.state keys to [start, stop] slices of the "
                                  f"state vector, e.g. {{tcp_pose: [0, 7], gripper: [7, 8]}}; got {st!r}")
            slices = {}
            for k, v in st.items():
                ok = (isinstance(k, str) and k and isinstance(v, (list, tuple)) and len(v) == 2
                      and all(isinstance(i, int) and not isinstance(i, bool) for i in v) and 0 <= v[0] < v[1])
                if not ok:
                    raise ConfigError(f"{where}.state.{k}: must be [start, stop] with 0 <= start < stop, got {v!r}")
                slices[k] = (int(v[0]), int(v[1]))
        return cls(cameras=dict(cams) if cams is not None else None, state=slices)


def _bad(message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, code=code)


def _rgb(value: Any, name: str) -> np.ndarray:
    """A decoded camera image as RGB uint8 (gray repeated, alpha dropped)."""
    if not isinstance(value, np.ndarray):
        raise _bad(f"images[{name[:60]!r}] must be an image array (__ndarray__ or __image__ map), got "
                   f"{type(value).__name__}", "invalid_image")
    if value.ndim == 3 and value.dtype == np.uint8 and value.shape[2] in (1, 4):
        value = np.repeat(value, 3, axis=2) if value.shape[2] == 1 else value[:, :, :3]
    try:
        return check_image(value, f"images[{name[:60]!r}]")
    except InvalidInputError as exc:
        raise _bad(str(exc), "invalid_image") from None


def _state_array(value: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
    except (ValueError, TypeError, OverflowError):
        raise _bad(f"{name} must be an array of numbers (__ndarray__ or a list)", "invalid_type") from None
    if arr.size > MAX_STATE_VALUES or not np.all(np.isfinite(arr)):
        raise _bad(f"{name} must hold at most {MAX_STATE_VALUES} finite numbers, got {arr.size} (NaN/inf refused)")
    return arr


def observation_from_payload(payload: Mapping[str, Any], mapping: VlaEvalMapping | None = None) -> Observation:
    """The Observation of an ``observation`` payload under ``mapping``; :class:`ApiError` naming the field."""
    mapping = mapping or VlaEvalMapping()
    instruction = payload.get("task_description")
    if not isinstance(instruction, str):
        raise _bad("the observation misses 'task_description', the instruction (a string)" if instruction is None else
                   f"'task_description' must be a string, got {type(instruction).__name__}", "invalid_type")
    images = payload.get("images", {})
    if not isinstance(images, Mapping) or not all(isinstance(k, str) for k in images):
        raise _bad(f"'images' must be a map of camera name -> image, got {type(images).__name__}", "invalid_type")
    if mapping.cameras is None:
        cams = {k: _rgb(v, k) for k, v in images.items()}
    else:
        missing = [k for k in mapping.cameras if k not in images]
        if missing:
            raise _bad(f"the observation misses images {', '.join(missing)} (cameras "
                       f"{', '.join(mapping.cameras[k] for k in missing)} of this policy); it has {sorted(images)[:8]}",
                       "missing")
        cams = {cam: _rgb(images[k], k) for k, cam in mapping.cameras.items()}
    raw_state = payload.get("states", payload.get("state"))
    state: dict[str, np.ndarray] = {}
    if isinstance(raw_state, Mapping):
        state = {str(k): _state_array(v, f"state[{str(k)[:60]!r}]") for k, v in raw_state.items()}
    elif raw_state is not None:
        vec = _state_array(raw_state, "state")
        if mapping.state is None:
            state = {"state": vec}
        else:
            for key, (a, b) in mapping.state.items():
                if b > vec.size:
                    raise _bad(f"the state vector has {vec.size} numbers; serve.vla_eval.state.{key} wants [{a}, {b})")
                state[key] = vec[a:b]
    return Observation(images=cams, instruction=instruction, state=state)


@dataclass
class _Session:
    """One connection: its id and its current episode (the policy's slot ``(id, episode)``)."""

    id: int
    episode: int = 0

    @property
    def slot(self) -> tuple[int, int]:
        return (self.id, self.episode)


class VlaEvalServer:
    """A policy behind the vla-eval protocol (see the module docstring). Start it with :meth:`serve` (in a
    running event loop), :func:`serve_in_thread` or :func:`serve_forever`."""

    def __init__(self, policy: Any, gripper: str | None = None, vla_eval: Mapping[str, Any] | None = None,
                 limits: ServerLimits | None = None, max_batch_size: int = 1, max_wait_ms: float = 5.0,
                 max_connections: int = 64, convention: Any = None, hello_timeout_s: float = 30.0,
                 idle_timeout_s: float = 600.0):
        from embeval.subjects.protocols import batched

        self.convention = server_convention(convention, gripper)
        self.gripper = self.convention.gripper
        self.limits = limits or ServerLimits()
        self.mapping = VlaEvalMapping.from_mapping(vla_eval)
        check_batching(max_batch_size, max_wait_ms, self.limits.queue_size)
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
            raise ConfigError(f"--max-connections must be a whole number >= 1, got {max_connections!r}")
        self.policy, self.bp = policy, batched(policy)
        self.id = getattr(policy, "id", type(policy).__name__)
        self.max_connections = max_connections
        from embeval import checks

        self.hello_timeout_s = checks.number(hello_timeout_s, "hello_timeout_s", 0, 86400, lo_open=True, unit="s")
        self.idle_timeout_s = checks.number(idle_timeout_s, "idle_timeout_s", 0, 86400, lo_open=True, unit="s")
        self.queue = BatchQueue(self._step_batch, self.limits.queue_size, max_batch_size, max_wait_ms / 1000.0,
                                name="vla-eval")
        self.pixels = PixelBudget(self.limits.max_inflight_pixels)
        lim = self.limits
        self.decode_limits = DecodeLimits(max_bytes=lim.max_body_bytes, max_depth=lim.max_json_depth,
                                          max_images=lim.max_images, max_image_pixels=lim.max_image_pixels,
                                          max_pixels=lim.max_request_pixels)
        self._parse = ThreadPoolExecutor(max_workers=int(lim.parse_threads), thread_name_prefix="embeval-vla-eval-parse")
        self._live: dict = {}  # slot -> its instruction (touched on the model thread only)
        self._to_end: collections.deque = collections.deque()  # slots whose end could not be queued
        self._ids = itertools.count(1)
        self.connections = 0
        self.counts = {"actions": 0, "errors": 0, "episodes": 0, "connections_refused": 0, "idle_closed": 0}
        self._stop: asyncio.Event | None = None

    # -- the model thread -------------------------------------------------------------------------
    def _start(self, slots: list, observations: list) -> None:
        """Start (or restart, for a changed instruction) the episodes of ``slots`` that need it."""
        fresh = [(s, ob) for s, ob in zip(slots, observations) if self._live.get(s) != ob.instruction]
        if fresh:
            self.bp.reset_slots([s for s, _ in fresh], [ob.instruction for _, ob in fresh])
            for s, ob in fresh:
                self._live[s] = ob.instruction

    def _end(self, slots: list) -> None:
        slots = [s for s in slots if s in self._live]
        if slots:
            self.bp.end_slots(slots)
            for s in slots:
                del self._live[s]

    def _reply(self, action: Any, observation: Observation | None = None) -> np.ndarray:
        """An embeval Action as the reply's float32 vector in the server's convention (:func:`wire_action`)."""
        return wire_action(action, self.convention, observation)

    def _act(self, slots: list, observations: list) -> list:
        """One Action (or the exception it raised) per slot: one ``act_slots`` call for all, or, when that fails
        (one observation's bad input), one call per slot, each its own answer."""
        try:
            self._start(slots, observations)
            return list(self.bp.act_slots(slots, observations))
        except Exception:
            actions: list = []
            for s, ob in zip(slots, observations):
                try:
                    self._start([s], [ob])
                    actions.append(self.bp.act_slots([s], [ob])[0])
                except Exception as exc:
                    actions.append(exc)
            return actions

    def _step_batch(self, args: list) -> list:
        """BatchQueue's batch function: ``args`` are ``(slot, observation, held pixels)``."""
        try:
            while self._to_end:
                self._end([self._to_end.popleft()])
            slots, observations = [a[0] for a in args], [a[1] for a in args]
            actions = self._act(slots, observations)
            out: list = []
            for a, ob in zip(actions, observations):
                try:
                    out.append(a if isinstance(a, Exception) else self._reply(a, ob))
                except Exception as exc:  # not an Action
                    out.append(exc)
            return out
        finally:
            for a in args:
                a[2].release()

    # -- the event loop -----------------------------------------------------------------------------
    def _read(self, frame: Any) -> tuple[Message, Observation | None]:
        """A frame decoded (in a parse thread), with its Observation for an observation message."""
        msg = unpack(frame, self.decode_limits)
        obs = None
        if msg.type == OBSERVATION:
            try:
                obs = observation_from_payload(msg.payload, self.mapping)
            except ApiError as exc:
                raise ProtocolError(exc.message, exc.code or "invalid_value", msg.seq, fatal=False) from None
        return msg, obs

    async def _send_error(self, ws: Any, text: str, seq: int, code: str) -> None:
        self.counts["errors"] += 1
        await ws.send(error_message(text, seq, code))

    async def _end_episode(self, session: _Session) -> None:
        """End the session's episode on the model thread, in its place in the queue (later when the queue is full)."""
        slot = session.slot
        session.episode += 1
        try:
            await self.queue.run_solo(self._end, [slot])
        except ApiError:
            self._to_end.append(slot)

    def hello_payload(self) -> dict[str, Any]:
        """The ``hello`` reply: protocol version, server, action spec (embeval's 7-DoF action) and observation spec."""
        import embeval

        spec = getattr(self.policy, "action_spec", None)
        frame = getattr(spec, "frame", "base")
        c = self.convention
        frame = frame if c.frame == "base" else c.frame  # a convention in the tool frame answers in it
        units = {"m": "metres", "cm": "centimetres", "mm": "millimetres"}[c.translation_units]
        kind = "target" if c.absolute else "delta"
        scaled = "" if all(x == 1 for x in c.scale) else f", divided by scale {' '.join(f'{x:g}' for x in c.scale)}"
        rot_format = {"euler": f"euler_{c.order}", "quaternion": "quaternion_xyzw"}.get(c.rotation, c.rotation)
        rot_text = ("radians, roll-pitch-yaw delta, extrinsic x-y-z" if (c.rotation, c.order, c.rotation_units, c.absolute)
                    == ("euler", "xyz", "rad", False) else f"{c.rotation} {kind}"
                    + (f" ({c.rotation_units}, axes {c.order})" if c.rotation == "euler" else
                       f" ({c.rotation_units})" if c.rotation == "rotvec" else "") + f", convention {c.name}")
        action_spec = {
            "position": {"name": "position", "dims": 3, "format": f"{'absolute' if c.absolute else 'delta'}_xyz",
                         "description": f"{units}, frame {'base' if c.absolute else frame}{scaled}"},
            "rotation": {"name": "rotation", "dims": ROTATIONS[c.rotation], "format": rot_format, "description": rot_text},
            "gripper": {"name": "gripper", "dims": 1, "format": GRIPPER_FORMATS.get(self.gripper, "raw"),
                        "description": f"embeval gripper convention {self.gripper}"},
        }
        obs_spec = {"image": {"name": "image", "dims": 0, "format": "rgb_hwc_uint8"},
                    "language": {"name": "language", "dims": 0, "format": "language"}}
        return {"harness_version": f"embeval-{embeval.__version__}", "protocol_version": PROTOCOL_VERSION,
                "model_server": f"embeval:{self.id}", "capabilities": {"max_batch_size": self.queue.max_batch},
                "action_spec": action_spec, "observation_spec": obs_spec}

    async def _on_message(self, ws: Any, session: _Session, msg: Message, obs: Observation | None) -> None:
        if msg.type == HELLO:
            await ws.send(pack(HELLO, self.hello_payload(), msg.seq))
        elif msg.type == EPISODE_START:
            await self._end_episode(session)
            self.counts["episodes"] += 1
        elif msg.type == EPISODE_END:
            await self._end_episode(session)
        elif msg.type == OBSERVATION:
            held = None
            try:
                held = self.pixels.take(msg.pixels)
                future = self.queue.submit((session.slot, obs, held), session.slot, drop=held.release)
                del obs
                action = await future
            except Exception as exc:  # answered to the client
                if held is not None:
                    held.release()
                e = as_api_error(exc)
                await self._send_error(ws, f"observation_failed: {e.message}", msg.seq, e.code or e.type)
                return
            self.counts["actions"] += 1
            await ws.send(pack(ACTION, {"actions": action}, msg.seq))
        elif msg.type == ERROR:
            log.warning("client %d sent an error: %s", session.id, str(msg.payload)[:300])
        elif msg.type == ACTION:
            await self._send_error(ws, "a model server does not take 'action' messages; send 'observation'", msg.seq,
                                   "unexpected_type")
        else:
            await self._send_error(ws, f"unknown message type {msg.type[:40]!r}; known: {', '.join(MESSAGE_TYPES)}",
                                   msg.seq, "unknown_type")

    async def handle(self, ws: Any) -> None:
        """One connection (the websockets handler)."""
        from websockets.exceptions import ConnectionClosed

        if self.connections >= self.max_connections:
            self.counts["connections_refused"] += 1
            try:
                await self._send_error(ws, f"the server serves {self.max_connections} connections at most "
                                           "(--max-connections); retry later", 0, "too_many_connections")
                await ws.close(1013, "too many connections")
            except ConnectionClosed:
                pass
            return
        self.connections += 1
        session = _Session(next(self._ids))
        loop = asyncio.get_running_loop()
        try:
            first = True
            while True:
                wait = self.hello_timeout_s if first else self.idle_timeout_s
                try:
                    frame = await asyncio.wait_for(ws.recv(), wait)
                except (asyncio.TimeoutError, TimeoutError):
                    self.counts["idle_closed"] += 1
                    what = "after it opened" if first else "since its last message"
                    await self._send_error(ws, f"nothing received for {wait:g} s {what}; the connection is closed "
                                               "(reconnect when ready)", 0, "idle_timeout")
                    await ws.close(1008, "idle timeout")
                    break
                first = False
                try:
                    msg, obs = await loop.run_in_executor(self._parse, self._read, frame)
                except ProtocolError as exc:
                    await self._send_error(ws, str(exc), exc.seq, exc.code)
                    if exc.fatal:
                        await ws.close(_CLOSE_CODES.get(exc.code, 1007), str(exc)[:120])
                        break
                    continue
                finally:
                    del frame
                await self._on_message(ws, session, msg, obs)
                del msg, obs
        except ConnectionClosed:
            pass
        except Exception:  # e.g. the server is shutting down: this connection ends, the server stays
            log.exception("vla-eval connection %d failed", session.id)
            await ws.close(1011, "internal error; see the server's log")
        finally:
            self.connections -= 1
            await self._end_episode(session)

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "subject": self.id, "protocol": "vla-eval", "protocol_version": PROTOCOL_VERSION,
                "connections": self.connections, "max_connections": self.max_connections, "episodes_live": len(self._live),
                **self.counts, **self.queue.stats(), "image_pixels_held": self.pixels.held,
                "max_message_bytes": self.limits.max_body_bytes}

    def _process_request(self, connection: Any, request: Any) -> Any:
        """``GET /health``: JSON counters, answered before any WebSocket handshake."""

        if request.path.split("?", 1)[0] != "/health":
            return None
        return self._health_response(connection)

    def _health_response(self, connection: Any) -> Any:
        """:meth:`health` as a JSON HTTP response."""
        from http import HTTPStatus

        resp = connection.respond(HTTPStatus.OK, json.dumps(self.health()) + "\n")
        del resp.headers["Content-Type"]
        resp.headers["Content-Type"] = "application/json"
        resp.headers["Cache-Control"] = "no-store"
        return resp

    async def serve(self, sock: Any, ready: Any = None) -> None:
        """Serve on the bound socket ``sock`` until :meth:`stop`; ``ready()`` runs once it accepts connections."""
        from websockets.asyncio.server import serve

        self._stop = asyncio.Event()
        async with serve(self.handle, sock=sock, process_request=self._process_request,
                         max_size=self.limits.max_body_bytes, max_queue=1, compression=None, ping_interval=None,
                         open_timeout=self.limits.body_timeout_s, close_timeout=5):
            if ready is not None:
                ready()
            await self._stop.wait()

    def shutdown(self) -> None:
        """Stop the model worker and the parse threads (after the event loop stopped serving)."""
        self.queue.shutdown()
        self._parse.shutdown(wait=False, cancel_futures=True)


@dataclass
class RunningVlaEval:
    """A :class:`VlaEvalServer` serving in a daemon thread; ``url`` is ``ws://host:port``, ``http_url`` its
    ``http://host:port`` (for ``/health``). Stop with :meth:`stop` (or use it as a context manager)."""

    url: str
    http_url: str
    server: VlaEvalServer
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread

    def stop(self, timeout: float = 10.0) -> None:
        if self.server._stop is not None:
            self.loop.call_soon_threadsafe(self.server._stop.set)
        self.thread.join(timeout)
        self.server.shutdown()

    def __enter__(self) -> RunningVlaEval:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_in_thread(server: VlaEvalServer, host: str = LOCALHOST, port: int = 0,
                    startup_timeout: float = 20.0) -> RunningVlaEval:
    """Start ``server`` in a daemon thread with its own event loop; ``port=0`` picks a free port."""
    from embeval.errors import ServerUnavailableError
    from embeval.serving.runner import _bind

    sock = _bind(host, port)
    actual = sock.getsockname()[1]
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.serve(sock, started.set))
        except BaseException as exc:  # reported to the starter
            failed.append(exc)
            started.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, daemon=True, name=f"vla-eval-{actual}")
    thread.start()
    if not started.wait(startup_timeout) or failed:
        raise ServerUnavailableError(f"vla-eval server on {host}:{actual} did not start within {startup_timeout:g} s"
                                     + (f": {failed[0]}" if failed else ""))
    return RunningVlaEval(f"ws://{host}:{actual}", f"http://{host}:{actual}", server, loop, thread)


def serve_forever(server: VlaEvalServer, host: str = LOCALHOST, port: int = 8000, announce: Any = None) -> None:
    """Serve in the foreground until interrupted; ``announce(port)`` runs once the socket is bound."""
    from embeval.serving.runner import _bind

    sock = _bind(host, port)
    if announce is not None:
        announce(sock.getsockname()[1])
    try:
        asyncio.run(server.serve(sock))
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()


def create_server(policy: Any, **options: Any) -> VlaEvalServer:
    """The :class:`VlaEvalServer` of ``policy`` (``app_from_spec``'s factory for protocol ``vla-eval``)."""
    return VlaEvalServer(policy, **options)
