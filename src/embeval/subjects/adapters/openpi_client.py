"""``adapter: openpi``: evaluate a policy served by an openpi policy server (π0 / π0-FAST / π0.5's
``serve_policy.py``, or ``embeval serve openpi``) over openpi's WebSocket protocol
(:mod:`embeval.subjects.adapters.openpi_protocol`).

Spec::

    id: pi05-libero
    kind: policy
    adapter: openpi
    url: ws://127.0.0.1:8000
    params:
      layout: libero          # openpi example layout of the observation map: libero | droid | aloha
      convention: libero_osc  # what the server's actions mean (default: the layout's; droid/aloha must say)
      action_horizon: 5       # actions used from each chunk before asking again (openpi's replan_steps; default all)
      image_size: 224         # side the images are resized to (default: the layout's, 224)
      api_key: null           # sent as 'Authorization: Api-Key KEY'
      timeout: 30             # seconds for the connection and each reply

Every observation (cameras ``third_person`` / ``wrist``, state ``tcp_pose`` / ``gripper`` / ``joint_positions``) is
sent in the layout's keys; the reply's ``actions`` ``(H, D)`` chunk (or one ``(D,)`` action) is queued and used
one action per step as openpi's ``ActionChunkBroker`` does (the first ``action_horizon`` rows, then a new request),
each converted from the convention to embeval's 7-DoF action. ``reset`` clears the queue (openpi sends nothing).
A text frame from the server is its error (``InvalidInputError`` with its first line); a closed or silent server is
``ServerUnavailableError`` naming the url.
"""
from __future__ import annotations

import collections
from typing import Any

import numpy as np

from embeval import checks
from embeval.action import Action, Observation, check_image
from embeval.conventions import convention as resolve_convention
from embeval.conventions import model_image, tcp_pose_of, to_embeval
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError
from embeval.subjects.adapters.openpi_protocol import LAYOUTS, observation_map, pack, unpack
from embeval.subjects.adapters.vla_eval_protocol import DecodeLimits, ProtocolError


class OpenPiPolicy:
    """A policy served by an openpi policy server (module docstring)."""

    def __init__(self, id: str = "openpi", url: str = "ws://127.0.0.1:8000", layout: str = "libero",
                 convention: Any = None, action_horizon: int | None = None, image_size: int | None = None,
                 api_key: str | None = None, timeout: float = 30.0, connect_retries: int = 2, backoff: float = 0.5,
                 max_message_mb: float = 16.0):
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            raise ConfigError(f"field 'url' must be the WebSocket address ws://host:port of an openpi policy server, "
                              f"got {url!r}")
        self.layout = LAYOUTS.get(layout, "params.layout")
        conv = convention if convention is not None else self.layout.convention
        if conv is None:
            raise ConfigError(f"field 'params.convention': the {layout} layout's policies answer joint-space actions, "
                              "which embeval's arm does not take; give the convention of this server's actions "
                              "(e.g. embeval, libero_osc) or use layout: libero")
        self.convention = resolve_convention(conv)
        if action_horizon is not None:
            checks.integer(action_horizon, "field 'params.action_horizon'", 1)
        self.action_horizon = action_horizon
        side = self.layout.image_size if image_size is None else checks.integer(image_size, "field 'params.image_size'", 8)
        self.image_size = (int(side), int(side))
        for name, v, above in (("timeout", timeout, True), ("max_message_mb", max_message_mb, True), ("backoff", backoff, False)):
            checks.number(v, f"field 'params.{name}'", 0, lo_open=above)
        checks.integer(connect_retries, "field 'params.connect_retries'", 0)
        self.id, self.url, self.api_key = id, url.rstrip("/"), api_key
        self.timeout, self.connect_retries, self.backoff = float(timeout), connect_retries, float(backoff)
        self.max_message_bytes = int(max_message_mb * 2 ** 20)
        self.action_spec = self.convention.action_spec()
        self.instruction = ""
        self.server_metadata: dict[str, Any] = {}
        self.requests = 0
        self._queue: collections.deque[np.ndarray] = collections.deque()
        self._ws: Any = None

    # -- connection ---------------------------------------------------------------------------------
    def _unreachable(self, why: str) -> ServerUnavailableError:
        return ServerUnavailableError(
            f"openpi policy server at {self.url} is not reachable ({why}); start one (openpi's "
            "`scripts/serve_policy.py`, or any embeval policy: `embeval serve openpi SPEC --port 8000`) or fix 'url'")

    def _recv(self, what: str) -> Any:
        from embeval.subjects.adapters.vla_eval_client import recv_frame

        frame = recv_frame(self._ws, self.timeout, self._drop, self._unreachable,
                           f"openpi policy server at {self.url} sent no {what} within {self.timeout:g} s (params.timeout)")
        if isinstance(frame, str):  # openpi's error: the traceback as text, then close 1011
            self._drop()
            last = [ln for ln in frame.strip().splitlines() if ln.strip()][-1:] or [""]
            raise InvalidInputError(f"openpi policy server at {self.url} failed on the observation: {last[0][:400]}")
        try:
            return unpack(frame, DecodeLimits(max_bytes=self.max_message_bytes))[0]
        except ProtocolError as exc:
            raise InvalidInputError(f"openpi policy server at {self.url} sent an unreadable {what}: {exc}") from None

    def connect(self) -> None:
        """Open the connection and read the server's metadata (retrying ``connect_retries`` times)."""
        if self._ws is not None:
            return
        from embeval.subjects.adapters.vla_eval_client import open_websocket

        headers = {"Authorization": f"Api-Key {self.api_key}"} if self.api_key else None
        self._ws = open_websocket(self.url, self.timeout, self.max_message_bytes, self.connect_retries, self.backoff,
                                  self._unreachable, headers)
        meta = self._recv("metadata")
        if not isinstance(meta, dict):
            self._drop()
            raise InvalidInputError(f"openpi policy server at {self.url} sent metadata that is not a map "
                                    f"({type(meta).__name__}); is it an openpi server?")
        self.server_metadata = meta

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # already closed
                pass

    def close(self) -> None:
        self._queue.clear()
        self._drop()

    def __del__(self):  # pragma: no cover - best effort
        try:
            self._drop()
        except Exception:  # interpreter shutdown
            pass

    def fork(self) -> OpenPiPolicy:
        """An unconnected copy with the same settings (its own connection)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._queue, new._ws, new.server_metadata, new.requests = collections.deque(), None, {}, 0
        return new

    # -- Policy protocol ------------------------------------------------------------------------------
    def reset(self, instruction: str) -> None:
        self.instruction = instruction
        self._queue.clear()

    def payload(self, observation: Observation) -> dict[str, Any]:
        """``observation`` as an openpi observation map in the layout."""
        images = {}
        for cam in self.layout.images.values():
            if cam not in observation.images:
                raise InvalidInputError(f"the {self.layout.name} layout needs camera {cam!r}; the observation has "
                                        f"{sorted(observation.images)}")
            images[cam] = model_image(check_image(observation.images[cam], f"images[{cam!r}]"), self.convention,
                                      self.image_size)
        return observation_map(self.layout, images, observation.state, observation.instruction or self.instruction)

    def request(self, observation: Observation) -> np.ndarray:
        """One observation -> the server's raw ``(H, D)`` action chunk."""
        from websockets.exceptions import ConnectionClosed

        body = pack(self.payload(observation))
        self.connect()
        try:
            self._ws.send(body)
        except (ConnectionClosed, OSError) as exc:
            self._drop()
            raise self._unreachable(f"the connection closed: {exc}") from None
        reply = self._recv("action chunk")
        self.requests += 1
        acts = reply.get("actions") if isinstance(reply, dict) else None
        where = f"openpi policy server at {self.url}"
        if not isinstance(acts, np.ndarray) or acts.ndim not in (1, 2) or acts.dtype.kind not in "iuf":
            raise InvalidInputError(f"{where} answered without an 'actions' array (H, D): "
                                    f"{type(acts).__name__ if not isinstance(acts, np.ndarray) else acts.shape}")
        acts = np.atleast_2d(acts.astype(np.float64))
        if acts.shape[0] < 1 or acts.shape[1] < self.convention.size or not np.all(np.isfinite(acts)):
            raise InvalidInputError(f"{where} answered actions of shape {acts.shape}; convention {self.convention.name} "
                                    f"needs (H >= 1, {self.convention.size}) finite numbers")
        return acts[:, :self.convention.size]

    def act(self, observation: Observation) -> Action:
        if not self._queue:
            chunk = self.request(observation)
            self._queue.extend(chunk[: self.action_horizon or len(chunk)])
        return to_embeval(self._queue.popleft(), self.convention, tcp_pose_of(observation, self.convention))
