"""Client policy for the OpenVLA REST protocol (``vla-scripts/deploy.py`` and its many forks).

Request: ``POST {url}/act`` with JSON ``{"image": <uint8 HxWx3 in json_numpy form>, "instruction":
str, "unnorm_key": str}`` (``image_key`` renames ``image``, e.g. ``full_image`` for OpenVLA-OFT's server;
``extra_cameras`` and ``state_fields`` add more images / proprioception) (or, with ``encoded: true``, the same payload JSON-encoded as a string
under the single key ``"encoded"``, for servers that expect that). Reply: the action as a
json_numpy array, a plain list, or ``{"action": ...}``; shape (K,) or an action chunk (N, K), K the
convention's raw size (7 for Euler angles or a rotation vector, 8 for a quaternion), which is queued and
returned one action per :meth:`act`. Each action is converted from the server's convention (``convention``
and the older ``gripper`` / ``frame``, see :mod:`embeval.conventions`) to embeval's, an absolute one
against the observation's ``state['tcp_pose']`` at the step it is used.

Images: the camera is ``camera``, else the convention's first camera, else the observation's first; it is
centre-cropped to the convention's ``crop`` and resized (Lanczos) to ``image_size``, else the convention's
``image_size`` (else sent at the camera's size).
"""
from __future__ import annotations

import collections
import json
from typing import Any, Sequence

import numpy as np

from embeval.action import Action, Observation, check_image
from embeval.errors import ConfigError, InvalidInputError, ServerUnavailableError
from embeval.resize import resize
from embeval.subjects.adapters.http_client import (
    HttpClient,
    RetriesExhausted,
    RetryPolicy,
)
from embeval.subjects.adapters.numpy_json import decode_array, encode_array
from embeval.conventions import (
    camera_image,
    input_size,
    main_camera,
    model_image,
    tcp_pose_of,
    to_embeval,
)
from embeval.conventions import convention as resolve_convention


def resize_image(img: np.ndarray, size: int | Sequence[int] | None) -> np.ndarray:
    """Resize an RGB uint8 image to ``size`` (int: square; (H, W)) with Lanczos (:func:`embeval.resize.resize`,
    ``pil_lanczos``: what OpenVLA's own preprocessing uses); None: unchanged."""
    if size is None:
        return img
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    return resize(img, h, w, "pil_lanczos")


def parse_action_reply(data: Any, source: str, width: int = 7) -> np.ndarray:
    """The (N, ``width``) float array in an /act reply (json_numpy, list, or {"action": ...}); ``width``: the
    convention's raw size."""
    if isinstance(data, str):
        raise ServerUnavailableError(f"{source} answered {data[:200]!r} instead of an action; see the server's log")
    if isinstance(data, dict) and "__numpy__" not in data:
        for key in ("action", "actions"):
            if key in data:
                data = data[key]
                break
        else:
            raise InvalidInputError(f"{source} answered a JSON object without 'action': keys {sorted(data)[:8]}")
    arr = np.asarray(decode_array(data), dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != width or arr.shape[0] == 0:
        raise InvalidInputError(f"{source} returned an action of shape {arr.shape}; expected ({width},) or (N, {width}) "
                                "(the convention's raw size; set params.convention to the server's)")
    if not np.all(np.isfinite(arr)):
        raise InvalidInputError(f"{source} returned a NaN or inf action {arr.tolist()[:2]}; the policy output is invalid")
    return arr


class OpenVLARestPolicy:
    """A policy served over OpenVLA's REST protocol (see module docstring)."""

    def __init__(self, id: str = "openvla-rest", url: str = "http://127.0.0.1:8000", unnorm_key: str | None = "bridge_orig",
                 camera: str | None = None, image_size: int | list[int] | None = None, gripper: str | None = None,
                 encoded: bool = False, frame: str | None = None, chunk_size: int | None = None, timeout: float = 30.0,
                 max_retries: int = 2, backoff: float = 0.5, extra_fields: dict[str, Any] | None = None,
                 image_key: str = "image", extra_cameras: dict[str, str] | None = None,
                 state_fields: dict[str, str] | None = None, convention: Any = None):
        if not url:
            raise ConfigError("field 'url' is required: the OpenVLA server's address, e.g. http://127.0.0.1:8000")
        self.id = id
        self.url = url.rstrip("/")
        if self.url.endswith("/act"):
            self.url = self.url[: -len("/act")]
        self.unnorm_key = unnorm_key
        self.convention = resolve_convention(convention, gripper=gripper, frame=frame, chunk_size=chunk_size)
        self.camera, self._camera_field = main_camera(camera, self.convention)
        self.image_size = input_size(image_size, self.convention)
        self.gripper = self.convention.gripper
        self.encoded = bool(encoded)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.http = HttpClient(self.timeout, RetryPolicy(max_retries=self.max_retries, backoff_s=self.backoff))
        self.extra_fields = dict(extra_fields or {})
        self.image_key = image_key
        self.extra_cameras = dict(extra_cameras or {})
        self.state_fields = dict(state_fields or {})
        self.action_spec = self.convention.action_spec()
        self.instruction = ""
        self._queue: collections.deque[np.ndarray] = collections.deque()

    def reset(self, instruction: str) -> None:
        self.instruction = instruction
        self._queue.clear()

    def payload(self, observation: Observation) -> dict[str, Any]:
        """The JSON body for ``observation`` (what OpenVLA's deploy.py clients send)."""
        img = model_image(camera_image(observation, self.camera, "OpenVLA", self._camera_field)[1], self.convention,
                          self.image_size)
        body: dict[str, Any] = {self.image_key: encode_array(img), "instruction": observation.instruction or self.instruction}
        for key, cam in self.extra_cameras.items():  # e.g. OpenVLA-OFT: wrist_image
            if cam not in observation.images:
                raise InvalidInputError(f"params.extra_cameras wants camera {cam!r} for {key!r}; the observation has {sorted(observation.images)}")
            body[key] = encode_array(model_image(check_image(observation.images[cam], f"images[{cam!r}]"), self.convention,
                                                 self.image_size))
        for key, name in self.state_fields.items():  # e.g. OpenVLA-OFT: state <- joint_positions
            if name not in observation.state:
                raise InvalidInputError(f"params.state_fields wants observation.state[{name!r}] for {key!r}; it has {sorted(observation.state)}")
            body[key] = encode_array(np.asarray(observation.state[name], dtype=np.float64))
        if self.unnorm_key:
            body["unnorm_key"] = self.unnorm_key
        body.update(self.extra_fields)
        if self.encoded:
            return {"encoded": json.dumps(body)}
        return body

    def request(self, observation: Observation) -> np.ndarray:
        """One round trip: the raw (N, K) action array in the server's convention."""
        endpoint = f"{self.url}/act"
        body = self.payload(observation)
        try:
            r = self.http.post_json(endpoint, body)  # retries per embeval.subjects.adapters.http_client
        except RetriesExhausted as exc:
            raise ServerUnavailableError(
                f"OpenVLA server at {self.url} is not reachable ({exc.last}); start it (OpenVLA: `python vla-scripts/deploy.py`; "
                "any embeval policy: `embeval serve openvla --subject SPEC --port 8000`) or fix 'url' in the subject spec"
            ) from None
        if r.status_code >= 400:
            raise ServerUnavailableError(f"{endpoint} failed (HTTP {r.status_code}): {r.text[:300]}")
        try:
            data = r.json()
        except ValueError:
            raise InvalidInputError(f"{endpoint} answered non-JSON: {r.text[:200]!r}") from None
        return parse_action_reply(data, endpoint, self.convention.size)

    def act(self, observation: Observation) -> Action:
        if not self._queue:
            for row in self.request(observation):
                self._queue.append(row)
        return to_embeval(self._queue.popleft(), self.convention, tcp_pose_of(observation, self.convention))

    def close(self) -> None:
        self.http.close()
