"""``adapter: lerobot-server``: evaluate a policy served by LeRobot's async-inference policy server
(``python -m lerobot.async_inference.policy_server --host 127.0.0.1 --port 8080``), over its gRPC service
(``transport.AsyncInference``, LeRobot's own generated stubs).

Spec::

    id: act-remote
    kind: policy
    adapter: lerobot-server
    url: 127.0.0.1:8080                 # host:port of the policy server
    params:
      policy_type: act                  # act | smolvla | diffusion | pi0 | pi05 | groot | ... (the server's list)
      pretrained_name_or_path: /models/act/pretrained_model   # as the SERVER sees it (a path there, or a hub id)
      camera_map: {observation.images.top: third_person}       # policy image feature -> embeval camera
      state_key: [tcp_pose, gripper]    # observation.state: these state entries concatenated
      actions_per_chunk: 50             # actions used from each chunk before asking again (LeRobot's client: 50)

The session, as LeRobot's robot client opens it: ``Ready``, then ``SendPolicyInstructions`` with a
``RemotePolicyConfig`` (the server loads the policy: ``load_timeout``); then per chunk ``SendObservations`` (a
``TimedObservation`` with ``must_go``, so the server never drops it as "similar") and ``GetActions``: the reply's
``TimedAction`` list is queued and used one action per step. The raw observation holds one float per state value
(``observation.state`` names ``<entry>.<i>``), each camera's HWC uint8 image under its feature's short name (the
server resizes it to the policy's input without antialiasing: render at the input size), and ``task``. Actions
convert as in ``adapter: lerobot`` (``action_indices``, ``action_scale``, ``gripper``, ``frame``, ``absolute``,
``convention``).

LeRobot's wire format is Python pickle. Its requests are built here from LeRobot's own classes; its replies are
untrusted: read by an allow-list unpickler (``TimedAction``, tensors, their storages through ``torch.load(...,
weights_only=True)``) that refuses every other global (docs/security.md), within ``max_message_mb``.
"""
from __future__ import annotations

import collections
import io
import pickle  # nosec: requests are built here; replies go through _ReplyUnpickler only
import time
from typing import Any

import numpy as np

from embeval import checks
from embeval.action import Action, Observation, check_image
from embeval.conventions import tcp_pose_of
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError
from embeval.subjects.adapters.lerobot_policy import LeRobotParams, concat_state, raw_to_action


def _storage_from_bytes(data: bytes):
    """A tensor storage from a reply, read by torch's weights-only loader (no code runs)."""
    import torch

    if not isinstance(data, (bytes, bytearray)):
        raise pickle.UnpicklingError("a storage that is not bytes")
    return torch.load(io.BytesIO(bytes(data)), weights_only=True)


class _ReplyUnpickler(pickle.Unpickler):
    """Only what a policy server's action reply holds: LeRobot's ``TimedAction`` and CPU tensors."""

    def find_class(self, module: str, name: str):
        import collections as _collections

        import torch._utils

        from lerobot.async_inference.helpers import TimedAction

        allowed = {("lerobot.async_inference.helpers", "TimedAction"): TimedAction,
                   ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
                   ("torch.storage", "_load_from_bytes"): _storage_from_bytes,
                   ("collections", "OrderedDict"): _collections.OrderedDict}
        if (module, name) not in allowed:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a policy server's reply")
        return allowed[(module, name)]


def read_reply(data: bytes) -> list[np.ndarray]:
    """A ``GetActions`` reply's pickled ``TimedAction`` list -> its actions (float64 vectors) in timestep order;
    :class:`InvalidInputError` naming what is wrong."""
    from lerobot.async_inference.helpers import TimedAction

    try:
        chunk = _ReplyUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # a refused global, a truncated or corrupt pickle
        raise InvalidInputError(f"the policy server's action reply is not a LeRobot action chunk: {exc}") from None
    if not isinstance(chunk, list) or not chunk or not all(isinstance(a, TimedAction) for a in chunk):
        raise InvalidInputError("the policy server's action reply must be a non-empty list of TimedAction, got "
                                f"{type(chunk).__name__}")
    out = []
    for a in sorted(chunk, key=lambda t: t.timestep if isinstance(t.timestep, int) else 0):
        v = np.asarray(a.action.numpy() if hasattr(a.action, "numpy") else a.action, dtype=np.float64).reshape(-1)
        if v.size == 0 or not np.all(np.isfinite(v)):
            raise InvalidInputError(f"the policy server answered a non-finite or empty action {v.tolist()[:8]}")
        out.append(v)
    if len({v.size for v in out}) != 1:
        raise InvalidInputError("the policy server's action chunk mixes action sizes "
                                f"{sorted({v.size for v in out})}")
    return out


class LeRobotServerPolicy:
    """A policy served by LeRobot's async-inference policy server (module docstring)."""

    def __init__(self, id: str = "lerobot-server", url: str = "127.0.0.1:8080", policy_type: str = "act",
                 pretrained_name_or_path: str = "", camera_map: dict[str, str] | None = None,
                 state_key: str | list[str] = "joint_positions", actions_per_chunk: int = 50,
                 action_indices: list[int] | None = None, action_scale: Any = None, gripper: str | None = None,
                 frame: str | None = None, absolute: bool | None = None, device: str = "cpu",
                 rename_map: dict[str, str] | None = None, convention: Any = None, timeout: float = 30.0,
                 load_timeout: float = 300.0, max_message_mb: float = 16.0):
        if not isinstance(url, str) or not url or "://" in url or ":" not in url:
            raise ConfigError(f"field 'url' must be host:port of a LeRobot policy server (e.g. 127.0.0.1:8080), got {url!r}")
        if not camera_map:
            raise ConfigError("field 'params.camera_map' must map each of the served policy's image features to an "
                              "embeval camera, e.g. {observation.images.top: third_person} (the server matches them "
                              "by name)")
        p = LeRobotParams.check(camera_map, state_key, False, None, action_indices, action_scale, gripper, frame,
                                absolute, device, 0, 1)
        for feat in p.camera_map:
            if not feat.startswith("observation.images."):
                raise ConfigError(f"field 'params.camera_map': {feat!r} is not a LeRobot image feature "
                                  "(observation.images.NAME)")
        for name, v in (("policy_type", policy_type), ("pretrained_name_or_path", pretrained_name_or_path)):
            if not isinstance(v, str) or not v.strip():
                raise ConfigError(f"field 'params.{name}' must be given (the policy the server loads), got {v!r}")
        if rename_map is not None and (not isinstance(rename_map, dict) or any(
                not isinstance(k, str) or not isinstance(v, str) for k, v in rename_map.items())):
            raise ConfigError(f"field 'params.rename_map' must map feature names to feature names, got {rename_map!r}")
        checks.integer(actions_per_chunk, "field 'params.actions_per_chunk'", 1)
        for name, v in (("timeout", timeout), ("load_timeout", load_timeout), ("max_message_mb", max_message_mb)):
            checks.number(v, f"field 'params.{name}'", 0, lo_open=True)
        self.id, self.url, self.params = id, url, p
        self.policy_type, self.pretrained = policy_type, pretrained_name_or_path
        self.rename_map = dict(rename_map or {})
        self.actions_per_chunk = int(actions_per_chunk)
        self.timeout, self.load_timeout = float(timeout), float(load_timeout)
        self.max_message_bytes = int(max_message_mb * 2 ** 20)
        self.convention = p.convention(convention)
        k = self.convention.size
        self.action_indices = list(range(k)) if p.action_indices is None else list(p.action_indices)
        if len(self.action_indices) != k or min(self.action_indices) < 0:
            raise ConfigError(f"field 'params.action_indices' must list {k} indices (the convention's raw size) into "
                              f"the policy's action, got {self.action_indices}")
        from dataclasses import replace

        self.convention = replace(self.convention, chunk_size=self.actions_per_chunk)
        self.action_spec = self.convention.action_spec()
        self.instruction = ""
        self.requests = 0
        self._timestep = 0
        self._queue: collections.deque[np.ndarray] = collections.deque()
        self._channel: Any = None
        self._stub: Any = None
        self._features: dict[str, dict] | None = None

    # -- connection -------------------------------------------------------------------------------
    def _unreachable(self, why: str) -> ServerUnavailableError:
        return ServerUnavailableError(
            f"LeRobot policy server at {self.url} is not reachable ({why}); start one (`python -m "
            "lerobot.async_inference.policy_server --host 127.0.0.1 --port 8080`) or fix 'url'")

    def _call(self, what: str, fn, request, timeout: float):
        import grpc

        try:
            return fn(request, timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            detail = (exc.details() if callable(getattr(exc, "details", None)) else str(exc)) or ""
            self._drop()
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise self._unreachable(f"{what}: {code.name.lower()}, {detail[:200]}") from None
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise InvalidInputError(f"LeRobot policy server at {self.url}: {what} exceeds the message limit "
                                        f"({detail[:200]}); raise params.max_message_mb if that is expected") from None
            raise InvalidInputError(f"LeRobot policy server at {self.url} failed on {what}: "
                                    f"{getattr(code, 'name', 'error')} {detail[:300]}") from None

    def connect(self, observation: Observation) -> None:
        """Open the channel and the session (``Ready``, ``SendPolicyInstructions``) for ``observation``'s layout."""
        if self._stub is not None:
            return
        import grpc
        from lerobot.async_inference.helpers import RemotePolicyConfig
        from lerobot.transport import services_pb2, services_pb2_grpc

        features = self._lerobot_features(observation)
        limit = self.max_message_bytes
        self._channel = grpc.insecure_channel(self.url, options=[("grpc.max_receive_message_length", limit),
                                                                 ("grpc.max_send_message_length", limit)])
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.timeout)
        except grpc.FutureTimeoutError:
            self._drop()
            raise self._unreachable(f"no connection within {self.timeout:g} s (params.timeout)") from None
        self._stub = services_pb2_grpc.AsyncInferenceStub(self._channel)
        self._call("Ready", self._stub.Ready, services_pb2.Empty(), self.timeout)
        cfg = RemotePolicyConfig(policy_type=self.policy_type, pretrained_name_or_path=self.pretrained,
                                 lerobot_features=features, actions_per_chunk=self.actions_per_chunk,
                                 device=self.params.device, rename_map=self.rename_map)
        self._call("SendPolicyInstructions (loading the policy)", self._stub.SendPolicyInstructions,
                   services_pb2.PolicySetup(data=pickle.dumps(cfg)), self.load_timeout)
        self._features = features

    def _drop(self) -> None:
        ch, self._channel, self._stub, self._features = self._channel, None, None, None
        if ch is not None:
            try:
                ch.close()
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

    def fork(self):
        raise ConfigError(f"policy {self.id!r}: LeRobot's policy server serves one robot client at a time (a second "
                          "client's Ready resets the first one's session); run it one episode at a time "
                          "(batch size 1), or start one server per concurrent episode")

    # -- observation ------------------------------------------------------------------------------
    def _state(self, observation: Observation) -> tuple[np.ndarray, list[str]]:
        s, parts = concat_state(observation.state, self.params.state_key, "observation.state", "state_key")
        names = [f"{k}.{i}" for k, part in zip(self.params.state_key, parts) for i in range(part.size)]
        return s, names

    def _lerobot_features(self, observation: Observation) -> dict[str, dict]:
        """The ``lerobot_features`` of the session (LeRobot's dataset-feature layout), from the first observation."""
        _, names = self._state(observation)
        feats: dict[str, dict] = {"observation.state": {"dtype": "float32", "shape": (len(names),), "names": names}}
        for feat, cam in self.params.camera_map.items():
            img = self._image(observation, feat, cam)
            feats[feat] = {"dtype": "image", "shape": tuple(img.shape), "names": ["height", "width", "channels"]}
        return feats

    def _image(self, observation: Observation, feat: str, cam: str) -> np.ndarray:
        if cam not in observation.images:
            raise InvalidInputError(f"policy input {feat!r} needs camera {cam!r} (params.camera_map); the observation "
                                    f"has {sorted(observation.images)}")
        return check_image(observation.images[cam], f"images[{cam!r}]")

    def raw_observation(self, observation: Observation) -> dict[str, Any]:
        """``observation`` as the robot-side dict LeRobot's server reads (module docstring)."""
        s, names = self._state(observation)
        want = self._features["observation.state"]["names"] if self._features else names
        if names != want:
            raise InvalidInputError(f"observation.state has {len(names)} values ({', '.join(self.params.state_key)}), "
                                    f"the session was opened with {len(want)}: every observation must carry the same state")
        raw: dict[str, Any] = {n: float(v) for n, v in zip(names, s)}
        for feat, cam in self.params.camera_map.items():
            img = self._image(observation, feat, cam)
            shape = self._features[feat]["shape"] if self._features else img.shape
            if tuple(img.shape) != tuple(shape):
                raise InvalidInputError(f"camera {cam!r} gives {img.shape[1]}x{img.shape[0]} px images, the session was "
                                        f"opened with {shape[1]}x{shape[0]}: keep the camera size fixed")
            raw[feat.removeprefix("observation.images.")] = np.ascontiguousarray(img)
        raw["task"] = observation.instruction or self.instruction
        return raw

    # -- Policy protocol --------------------------------------------------------------------------
    def reset(self, instruction: str) -> None:
        self.instruction = instruction
        self._queue.clear()

    def request(self, observation: Observation) -> list[np.ndarray]:
        """One observation -> the served policy's next chunk of raw actions (float64 vectors)."""
        from lerobot.async_inference.helpers import TimedObservation
        from lerobot.transport import services_pb2
        from lerobot.transport.utils import send_bytes_in_chunks

        self.connect(observation)
        self._timestep += 1
        obs = TimedObservation(timestamp=time.time(), timestep=self._timestep,
                               observation=self.raw_observation(observation), must_go=True)
        blob = pickle.dumps(obs)
        if len(blob) > self.max_message_bytes:
            raise InvalidInputError(f"the observation is {len(blob) / 2 ** 20:.1f} MiB pickled, over params.max_message_mb")
        self._call("SendObservations", self._stub.SendObservations,
                   send_bytes_in_chunks(blob, services_pb2.Observation), self.timeout)
        reply = self._call("GetActions", self._stub.GetActions, services_pb2.Empty(), self.timeout)
        self.requests += 1
        if not getattr(reply, "data", b""):
            raise InvalidInputError(f"LeRobot policy server at {self.url} produced no actions for the observation (its "
                                    "log says why: a policy input the observation lacks, a wrong policy_type or path)")
        actions = read_reply(reply.data)
        adim = actions[0].size
        if max(self.action_indices) >= adim:
            raise InvalidInputError(f"field 'params.action_indices' {self.action_indices} reach past the served policy's "
                                    f"{adim}-dim action")
        return actions

    def act(self, observation: Observation) -> Action:
        if not self._queue:
            self._queue.extend(self.request(observation)[: self.actions_per_chunk])
        return raw_to_action(self._queue.popleft(), self.convention, self.action_indices, 1, self.id,
                             tcp_pose_of(observation, self.convention))
