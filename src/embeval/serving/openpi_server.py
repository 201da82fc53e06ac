"""Serve any embeval policy as an openpi policy server (``embeval serve openpi SPEC --port P``).

The protocol is openpi's (:mod:`embeval.subjects.adapters.openpi_protocol`): on connect the server sends its
metadata (policy, layout, ``action_horizon``, ``action_dim``, convention, observation keys); every observation map
in the spec's layout (``serve.openpi``: ``layout`` libero | droid | aloha, ``convention`` of the replies, default
the layout's; ``cameras`` wire key -> the policy's camera to replace the layout's) is answered by
``{"actions": float32 (H, D), "server_timing": {"infer_ms": ...}}``: ``H`` is the policy's chunk size
(``action_spec.chunk_size``, else 1; the policy is asked ``H`` times on the observation, so a chunking policy
answers its whole chunk), ``D`` the convention's numbers (7 for ``libero_osc``). An absolute convention's targets
are all computed from the observation's TCP pose.

Sessions and batching are :class:`~embeval.serving.vla_eval_server.VlaEvalServer`'s: each connection is one
episode of the policy (a slot), restarted when the prompt changes (openpi clients send no episode messages) and
ended when the connection closes; concurrent connections' observations are answered by one ``act_slots`` call of
up to ``max_batch_size``. Hostile input has the same limits (frame size: close 1009; images, pixels, nesting,
values, queue, connections); every refusal is a one-line text frame followed by close code 1011, as openpi's
server does for errors (it sends a traceback; embeval sends the one line, naming the problem). ``GET /healthz``
answers ``OK`` (openpi's), ``GET /health`` JSON counters.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from embeval.errors import ConfigError, InvalidInputError
from embeval.serving.limits import as_api_error
from embeval.serving.vla_eval_server import VlaEvalServer, _Session
from embeval.subjects.adapters.openpi_protocol import ERROR_CLOSE, LAYOUTS, PROMPT, pack, read_observation, unpack
from embeval.subjects.adapters.vla_eval_protocol import ProtocolError

log = logging.getLogger("embeval.serving.openpi")
OPENPI_KEYS = ("layout", "convention", "cameras")


class OpenPiServer(VlaEvalServer):
    """A policy behind openpi's protocol (module docstring); started like a :class:`VlaEvalServer`
    (:func:`~embeval.serving.vla_eval_server.serve_in_thread`, ``serve_forever``)."""

    def __init__(self, policy: Any, openpi: Mapping[str, Any] | None = None, **options: Any):
        cfg = dict(openpi or {})
        unknown = sorted(set(cfg) - set(OPENPI_KEYS))
        if unknown:
            raise ConfigError(f"serve.openpi has {', '.join(map(repr, unknown))}; known: {', '.join(OPENPI_KEYS)}")
        self.layout = LAYOUTS.get(cfg.get("layout", "libero"), "serve.openpi.layout")
        conv = cfg.get("convention", self.layout.convention)
        if conv is None:
            raise ConfigError(f"serve.openpi.convention: the {self.layout.name} layout's own actions are joint-space, "
                              "which an embeval policy does not produce; name the convention of the replies, e.g. "
                              "convention: embeval")
        cams = cfg.get("cameras")
        if cams is not None and (not isinstance(cams, Mapping) or not cams or not all(
                isinstance(k, str) and isinstance(v, str) and k and v for k, v in cams.items())):
            raise ConfigError(f"serve.openpi.cameras must map observation keys to the policy's cameras, e.g. "
                              f"{{observation/image: third_person}}; got {cams!r}")
        self.cameras = dict(cams) if cams is not None else None
        super().__init__(policy, convention=conv, **options)
        spec = getattr(policy, "action_spec", None)
        self.horizon = max(1, int(getattr(spec, "chunk_size", 1) or 1))

    # -- the model thread ---------------------------------------------------------------------------
    def _act(self, slots: list, observations: list) -> list:
        """``horizon`` actions per slot (a list, or the first exception of that slot)."""
        chunks: list[Any] = [[] for _ in slots]
        for _ in range(self.horizon):
            for i, a in enumerate(super()._act(slots, observations)):
                if isinstance(chunks[i], list):
                    chunks[i] = a if isinstance(a, Exception) else chunks[i] + [a]
        return chunks

    def _reply(self, actions: Any, observation=None) -> np.ndarray:
        """A chunk of embeval Actions as the reply's float32 (H, D) array in the server's convention."""
        return np.stack([super(OpenPiServer, self)._reply(a, observation) for a in actions])

    # -- the event loop -----------------------------------------------------------------------------
    def _read(self, frame: Any):
        raw, pixels = unpack(frame, self.decode_limits)
        try:
            return pixels, read_observation(self.layout, raw, self.cameras)
        except InvalidInputError as exc:
            raise ProtocolError(str(exc), "invalid_value") from None

    def metadata(self) -> dict[str, Any]:
        """The map sent on connect."""
        import embeval

        c = self.convention
        return {"server": f"embeval-{embeval.__version__}", "policy": self.id, "layout": self.layout.name,
                "action_horizon": self.horizon, "action_dim": c.size, "convention": c.name, "gripper": c.gripper,
                "image_size": self.layout.image_size, "image_keys": sorted(self.cameras or self.layout.images),
                "state_keys": list(self.layout.state_keys), "prompt_key": PROMPT, "max_batch_size": self.queue.max_batch}

    async def _refuse(self, ws: Any, text: str, code: int = ERROR_CLOSE) -> None:
        self.counts["errors"] += 1
        await ws.send(text)
        await ws.close(code, text[:120])

    async def handle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        if self.connections >= self.max_connections:
            self.counts["connections_refused"] += 1
            try:
                await self._refuse(ws, f"the server serves {self.max_connections} connections at most "
                                       "(--max-connections); retry later", 1013)
            except ConnectionClosed:
                pass
            return
        self.connections += 1
        session = _Session(next(self._ids))
        self.counts["episodes"] += 1
        loop = asyncio.get_running_loop()
        try:
            await ws.send(pack(self.metadata()))
            async for frame in ws:
                t0 = time.monotonic()
                held = None
                try:
                    pixels, obs = await loop.run_in_executor(self._parse, self._read, frame)
                    del frame
                    held = self.pixels.take(pixels)
                    chunk = await self.queue.submit((session.slot, obs, held), session.slot, drop=held.release)
                except Exception as exc:  # refused: one line, then close 1011
                    if held is not None:
                        held.release()
                    await self._refuse(ws, str(exc) if isinstance(exc, ProtocolError) else as_api_error(exc).message)
                    break
                self.counts["actions"] += 1
                await ws.send(pack({"actions": chunk, "server_timing": {"infer_ms": 1000 * (time.monotonic() - t0)}}))
        except ConnectionClosed:
            pass
        except Exception:  # e.g. the server is shutting down: this connection ends, the server stays
            log.exception("openpi connection %d failed", session.id)
            await ws.close(1011, "internal error; see the server's log")
        finally:
            self.connections -= 1
            await self._end_episode(session)

    def health(self) -> dict[str, Any]:
        return {**super().health(), "protocol": "openpi", "layout": self.layout.name, "action_horizon": self.horizon}

    def _process_request(self, connection: Any, request: Any) -> Any:
        """``GET /healthz`` (openpi's: ``OK``) and ``GET /health`` (JSON counters), before any handshake."""
        from http import HTTPStatus

        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            return connection.respond(HTTPStatus.OK, "OK\n")
        return self._health_response(connection) if path == "/health" else None


def create_server(policy: Any, **options: Any) -> OpenPiServer:
    """The :class:`OpenPiServer` of ``policy`` (``app_from_spec``'s factory for protocol ``openpi``)."""
    return OpenPiServer(policy, **options)
