"""Serve any embeval policy under OpenVLA's REST protocol, so tools written for OpenVLA can drive it.

``POST /act``: JSON ``{"image": uint8 HxWx3 (json_numpy dict or nested list), "instruction": str,
"unnorm_key": str (accepted, ignored: our policies act in embeval units)}`` or ``{"encoded": "<that
JSON as a string>"}``. Reply: the action as a json_numpy float32 array (as OpenVLA's
deploy.py answers), embeval's action converted to ``convention`` (the subject spec's ``serve.convention``: a
name or ``{base: NAME, FIELD: value}``, see :mod:`embeval.conventions`; default ``embeval``, 7 numbers, gripper
``open1``, which is also OpenVLA's raw convention) by :func:`~embeval.conventions.from_embeval`, with ``gripper``
(``serve.gripper`` / ``--gripper``) overriding its gripper; an absolute convention answers the target pose from
the payload's ``tcp_pose`` state (a ``serve.state`` field mapped to ``tcp_pose``). The policy is reset whenever the instruction changes, and by
``POST /reset {"instruction": ...}``.

Cameras and proprioception (:class:`CameraMapping`): payload fields map to the policy's camera names
and ``Observation.state`` keys. By default ``image`` / ``full_image`` (OpenVLA-OFT's name) become
camera ``camera`` (``third_person``), any further ``*image*`` field a camera named by its key, and
``state`` / ``proprio`` go to ``Observation.state`` under their key. A multi-camera policy names its
own mapping, e.g. ``{"full_image": "third_person", "wrist_image": "wrist"}`` (the subject spec's
``serve.cameras``); then every mapped field is required and an unmapped image field is an error.

Errors answer 4xx (bad request) or 5xx (the policy failed) with OpenAI's error body
``{"error": {"message", "type", "param", "code"}}``; size, depth, image and queue limits as in
:mod:`.limits` (an /act body holds at most ``max_images`` images of ``max_request_pixels`` pixels in all;
the images of queued calls hold at most ``max_inflight_pixels``, more is 503). ``GET /health`` is
answered ahead of everything else.

Batching (``create_app(max_batch_size=N)``, ``embeval serve openvla --max-batch-size N``): concurrent /act
requests are answered N at a time by one batched policy call, each in its episode (:func:`episode_key`);
see :mod:`.batching`.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embeval.action import Observation, check_image
from embeval.errors import ConfigError, InvalidInputError
from embeval.serving.limits import (
    ApiError,
    HealthFirst,
    ModelQueue,
    PixelBudget,
    ServerLimits,
    error_response,
    install_error_handlers,
    parse_body,
    parse_json,
    parse_limiter,
    read_body,
    read_json,
)
from embeval.subjects.adapters.numpy_json import decode_array, encode_array
from embeval.conventions import convention as resolve_convention
from embeval.conventions import from_embeval, tcp_pose_of

MAX_STATE_VALUES = 4096  # numbers in one proprioception field


def _bad(param: str, message: str, code: str = "invalid_value") -> ApiError:
    param = param if len(param) <= 80 else param[:77] + "..."  # a field name is the client's: keep replies short
    return ApiError(400, f"{param}: {message}", param=param, code=code)


def _str_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and k and v
                                                 for k, v in value.items()):
        raise ConfigError(f"{where} must map payload field names to names, e.g. {{full_image: third_person}}; got {value!r}")
    return dict(value)


@dataclass(frozen=True)
class CameraMapping:
    """Payload fields -> the policy's inputs. ``cameras``: field -> camera name; ``state``: field ->
    ``Observation.state`` key. ``explicit``: the cameras were named by the user (every mapped field is
    required, unmapped ``*image*`` fields are refused); otherwise OpenVLA's defaults apply (module docstring)."""

    cameras: dict[str, str] = field(default_factory=lambda: {"image": "third_person", "full_image": "third_person"})
    state: dict[str, str] = field(default_factory=lambda: {"state": "state", "proprio": "proprio"})
    explicit: bool = False

    @classmethod
    def build(cls, camera: str = "third_person", cameras: Mapping[str, str] | None = None,
              state: Mapping[str, str] | None = None) -> "CameraMapping":
        """The default mapping with main camera ``camera``, or the explicit ``cameras`` / ``state`` maps."""
        st = _str_map(state, "serve.state") if state is not None else {"state": "state", "proprio": "proprio"}
        if cameras is None:
            return cls(cameras={"image": camera, "full_image": camera}, state=st)
        cams = _str_map(cameras, "serve.cameras")
        if not cams:
            raise ConfigError("serve.cameras is empty; map at least one payload field, e.g. {full_image: third_person}")
        clash = sorted(set(cams) & set(st))
        if clash:
            raise ConfigError(f"payload field(s) {', '.join(clash)} are mapped both as camera and as state")
        return cls(cameras=cams, state=st, explicit=True)


def _as_image(value: Any, name: str, max_pixels: int | None) -> np.ndarray:
    try:
        image = decode_array(value)
    except InvalidInputError as exc:
        raise ApiError(400, f"{name}: {exc}", param=name, code="invalid_image") from None
    if image.dtype != np.uint8 and image.size and np.issubdtype(image.dtype, np.integer) and image.min() >= 0 and image.max() <= 255:
        image = image.astype(np.uint8)
    try:
        check_image(image, name)
    except InvalidInputError as exc:
        raise ApiError(400, str(exc), param=name, code="invalid_image") from None
    if max_pixels is not None and image.shape[0] * image.shape[1] > max_pixels:
        raise _bad(name, f"image is {image.shape[1]}x{image.shape[0]} pixels, over the server's {max_pixels}", "invalid_image")
    return image


def _as_state(value: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(decode_array(value), dtype=np.float64).reshape(-1)
    except (InvalidInputError, ValueError, TypeError):
        raise _bad(name, "must be an array of numbers (json_numpy dict or list)", "invalid_type") from None
    except OverflowError:  # an integer such as 10**400 has no float
        raise _bad(name, "holds a number too large for a 64-bit float; send finite numbers below 1.8e308") from None
    if arr.size > MAX_STATE_VALUES or not np.all(np.isfinite(arr)):
        raise _bad(name, f"must hold at most {MAX_STATE_VALUES} finite numbers, got {arr.size} (NaN/inf refused)")
    return arr


def unwrap_payload(payload: Any, limits: ServerLimits | None = None) -> dict[str, Any]:
    """The /act body as a dict, the ``{"encoded": "<json>"}`` form unwrapped."""
    if not isinstance(payload, dict):
        raise ApiError(400, "the /act body must be a JSON object with 'image' and 'instruction'", code="invalid_type")
    if "encoded" in payload:
        if len(payload) != 1:
            raise _bad("encoded", "an 'encoded' /act body must have no other keys")
        if not isinstance(payload["encoded"], str):
            raise _bad("encoded", "must be a JSON string of the /act payload", "invalid_type")
        payload = parse_json(payload["encoded"], limits or ServerLimits())
        if not isinstance(payload, dict):
            raise _bad("encoded", "must encode a JSON object with 'image' and 'instruction'", "invalid_type")
    return payload


def observation_from_payload(payload: Any, mapping: CameraMapping | None = None,
                             limits: ServerLimits | None = None) -> Observation:
    """The Observation for an /act body (either OpenVLA form) under ``mapping``; :class:`ApiError` 400
    naming the offending field."""
    mapping = mapping or CameraMapping()
    limits = limits or ServerLimits()
    max_pixels = limits.max_image_pixels
    payload = unwrap_payload(payload, limits)
    instruction = payload.get("instruction")
    if not isinstance(instruction, str):
        if instruction is None:
            raise ApiError(400, "the /act body misses 'instruction', a string", param="instruction", code="missing")
        raise _bad("instruction", f"must be a string, got {type(instruction).__name__}", "invalid_type")
    images: dict[str, np.ndarray] = {}
    fields: list[str] = []  # the payload fields that held images
    state: dict[str, np.ndarray] = {}
    for key, value in payload.items():
        if key in mapping.cameras:
            cam = mapping.cameras[key]
            if cam in images:
                raise _bad(key, f"camera {cam!r} was already given by another field; send only one of "
                                f"{', '.join(k for k, c in mapping.cameras.items() if c == cam)}")
            images[cam] = _as_image(value, key, max_pixels)
        elif key in mapping.state:
            state[mapping.state[key]] = _as_state(value, key)
        elif "image" in key:
            if mapping.explicit:
                raise _bad(key, f"payload field {key!r} is not in the server's camera mapping "
                                f"({', '.join(f'{k} -> {c}' for k, c in mapping.cameras.items())}); add it under "
                                "serve.cameras in the subject spec or leave it out", "unmapped_camera")
            images[key] = _as_image(value, key, max_pixels)
        if len(images) > len(fields):
            fields.append(key)
        if len(images) > limits.max_images:
            raise _bad(key, f"more than {limits.max_images} images in one /act body, the server's limit; send fewer "
                            "(or raise serve.limits.max_images)", "too_many_images")
    pixels = sum(im.shape[0] * im.shape[1] for im in images.values())
    if pixels > limits.max_request_pixels:
        raise ApiError(400, f"the /act body's images hold {pixels} pixels, over the server's limit of "
                            f"{limits.max_request_pixels} per request; send smaller images (or raise "
                            "serve.limits.max_request_pixels)", param=fields[-1][:80], code="images_too_large")
    if mapping.explicit:
        missing = [k for k in mapping.cameras if k not in payload]
        if missing:
            raise ApiError(400, f"the /act body misses {', '.join(missing)} (cameras "
                                f"{', '.join(mapping.cameras[k] for k in missing)} of this policy)", param=missing[0], code="missing")
    elif not any(k in payload for k in mapping.cameras):
        raise ApiError(400, "the /act body misses 'image' (or 'full_image', as OpenVLA-OFT sends it)", param="image",
                       code="missing")
    return Observation(images=images, instruction=instruction, state=state)


MAX_EPISODE_CHARS = 256  # characters of an "episode" name


def episode_key(payload: Mapping[str, Any], instruction: str) -> tuple[str, Any]:
    """The episode an /act body belongs to in a batching server: its ``"episode"`` field (an embeval
    extension: a string of 1..256 characters or an integer) when given, else its instruction (one episode
    per instruction, as a batch-1 server that resets on a changed instruction keeps)."""
    ep = payload.get("episode")
    if ep is None:
        return ("instruction", instruction)
    if isinstance(ep, bool) or not isinstance(ep, (str, int)):
        raise _bad("episode", f"must be a string or an integer naming the client's episode, got {type(ep).__name__}",
                   "invalid_type")
    if isinstance(ep, str) and not 1 <= len(ep) <= MAX_EPISODE_CHARS:
        raise _bad("episode", f"must be 1..{MAX_EPISODE_CHARS} characters, got {len(ep)}")
    if isinstance(ep, int) and not -2 ** 63 <= ep < 2 ** 63:
        raise _bad("episode", "must be an integer that fits 64 bits (or a string)")
    return ("episode", ep)



def _hold_images(pixels: PixelBudget, obs: Observation):
    """Reserve the decoded pixels of ``obs``'s images in the server's budget (503 when they do not fit)."""
    return pixels.take(sum(im.shape[0] * im.shape[1] for im in obs.images.values()))


async def _reset_body(request: Any, limits: ServerLimits, limiter: Any) -> tuple[dict, str]:
    """The ``/reset`` body (a JSON object, or empty) and its ``instruction`` (a string, "" when absent); 400 otherwise."""
    body = await read_json(request, limits, empty={}, limiter=limiter)
    if not isinstance(body, dict):
        raise ApiError(400, "the /reset body must be a JSON object {\"instruction\": \"...\"} or empty",
                       code="invalid_type")
    instruction = body.get("instruction", "")
    if not isinstance(instruction, str):
        raise _bad("instruction", f"must be a string, got {type(instruction).__name__}", "invalid_type")
    return body, instruction


def server_convention(convention: Any = None, gripper: str | None = None):
    """The :class:`~embeval.conventions.ActionConvention` a server answers in: ``convention`` (``serve.convention``;
    None = ``embeval``) with ``gripper`` (``serve.gripper`` / ``--gripper``; None = the convention's) overriding its
    gripper. One-line :class:`ConfigError` naming the field."""
    return resolve_convention(convention, "serve.convention", gripper=gripper)


def wire_action(action: Any, conv: Any, obs: Observation | None = None) -> np.ndarray:
    """An embeval Action as the reply's float32 vector in ``conv`` (an absolute convention: the target pose the delta
    reaches from ``obs``'s ``state['tcp_pose']``; an observation without it is refused, 400)."""
    return from_embeval(action, conv, tcp_pose_of(obs, conv)).astype(np.float32)


def create_app(policy: Any, camera: str = "third_person", gripper: str | None = None,
               cameras: Mapping[str, str] | None = None, state: Mapping[str, str] | None = None,
               limits: ServerLimits | None = None, max_batch_size: int = 1, max_wait_ms: float = 5.0,
               max_episodes: int = 256, convention: Any = None):
    """A FastAPI app serving ``policy`` (an embeval Policy) under the OpenVLA REST protocol, its replies in
    :func:`server_convention` ``(convention, gripper)``.

    ``max_batch_size`` > 1: concurrent /act requests are answered in batches of up to that many by one
    batched policy call (:func:`~embeval.subjects.protocols.batched`), the batch waiting at most
    ``max_wait_ms`` milliseconds to fill; each request's episode (:func:`episode_key`) is a slot of the
    policy, at most ``max_episodes`` of them live (the least recently used one is ended for a new one).
    1 (the default): one ``policy.act`` per request, the policy reset whenever the instruction changes."""
    import anyio
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    conv = server_convention(convention, gripper)
    limits = limits or ServerLimits()
    mapping = CameraMapping.build(camera, cameras, state)
    from embeval.serving.batching import check_batching

    check_batching(max_batch_size, max_wait_ms, limits.queue_size)
    if max_batch_size != 1:
        if isinstance(max_episodes, bool) or not isinstance(max_episodes, int) or max_episodes < max_batch_size:
            raise ConfigError(f"serve.max_episodes must be a whole number >= --max-batch-size ({max_batch_size}), "
                              f"got {max_episodes!r}")
        return _batching_app(policy, conv, mapping, limits, max_batch_size, max_wait_ms, max_episodes)
    queue = ModelQueue(limits.queue_size, name="openvla")
    pixels = PixelBudget(limits.max_inflight_pixels)
    limiter = parse_limiter(limits)
    current = {"instruction": None, "calls": 0}
    app = FastAPI(title=f"embeval OpenVLA-protocol server: {policy.id}")
    app.state.queue, app.state.pixels = queue, pixels
    install_error_handlers(app, limits)
    # GET /health: answered by the outermost middleware, ahead of body limits, routing and parsing
    app.add_middleware(HealthFirst, payload=lambda: {
        "status": "ok", "subject": policy.id, "calls": current["calls"], "cameras": mapping.cameras,
        "state": mapping.state, **queue.stats(), "image_pixels_held": pixels.held})

    def do_reset(instruction: str) -> None:
        policy.reset(instruction)
        current["instruction"] = instruction

    @app.post("/reset")
    async def reset(request: Request):
        try:
            body, instruction = await _reset_body(request, limits, limiter)
            await queue.run(do_reset, instruction)
        except Exception as exc:
            return error_response(exc)
        return {"status": "reset", "instruction": instruction}

    def step(obs: Observation) -> np.ndarray:
        if obs.instruction != current["instruction"]:
            do_reset(obs.instruction)
        try:
            action = policy.act(obs)
        except InvalidInputError as exc:
            if "policy output" in str(exc):
                raise ApiError(500, str(exc), type="server_error", code="invalid_policy_output") from None
            raise
        current["calls"] += 1
        return wire_action(action, conv, obs)

    def step_and_release(obs: Observation, held) -> np.ndarray:
        try:
            return step(obs)
        finally:
            held.release()

    def parse_act(raw: bytes) -> Observation:
        return observation_from_payload(parse_body(raw, limits), mapping, limits)

    @app.post("/act")
    async def act(request: Request):
        held = None
        try:
            raw = await read_body(request, limits)
            # JSON parsing and image checks in one worker call, a few requests at a time
            obs = await anyio.to_thread.run_sync(parse_act, raw, limiter=limiter)
            del raw
            held = _hold_images(pixels, obs)
            action = await queue.run(step_and_release, obs, held, on_cancel=held.release)
        except Exception as exc:
            if held is not None:  # e.g. the queue was full (releasing twice does nothing)
                held.release()
            return error_response(exc)
        # cancelled (BaseException) once the pixels are held: the model worker releases them after the call, or
        # on_cancel when the call never ran (the client went away while it waited)
        return JSONResponse(encode_array(action))

    return app


def _batching_app(policy: Any, conv: Any, mapping: CameraMapping, limits: ServerLimits, max_batch_size: int,
                  max_wait_ms: float, max_episodes: int):
    """The OpenVLA-protocol app of :func:`create_app` with ``max_batch_size`` > 1."""
    import collections

    import anyio
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from embeval.serving.batching import BatchQueue
    from embeval.subjects.protocols import batched

    bp = batched(policy)
    live: collections.OrderedDict = collections.OrderedDict()  # episode key -> its instruction, least recent first
    calls = {"n": 0}

    def start(keys: list, observations: list) -> None:
        """Start (or restart, for a changed instruction) the episodes ``keys`` that need it; end the least
        recently used episodes beyond ``max_episodes``."""
        batch = set(keys)
        fresh = [(k, ob) for k, ob in zip(keys, observations) if live.get(k, None) != ob.instruction]
        over = len(live) + sum(k not in live for k, _ in fresh) - max_episodes
        if over > 0:
            old = [k for k in live if k not in batch][:over]
            bp.end_slots(old)
            for k in old:
                del live[k]
        if fresh:
            bp.reset_slots([k for k, _ in fresh], [ob.instruction for _, ob in fresh])
            for k, ob in fresh:
                live[k] = ob.instruction
        for k in keys:
            live.move_to_end(k)

    def one(key, obs: Observation):
        start([key], [obs])
        return bp.act_slots([key], [obs])[0]

    def step_batch(args: list) -> list:
        keys = [a[0] for a in args]
        observations = [a[1] for a in args]
        try:
            try:
                start(keys, observations)
                actions: list = bp.act_slots(keys, observations)
            except Exception:  # noqa: BLE001 - one request's bad input: each request alone, each its own answer
                actions = []
                for k, ob in zip(keys, observations):
                    try:
                        actions.append(one(k, ob))
                    except Exception as exc:  # noqa: BLE001
                        actions.append(exc)
            out: list = []
            for a, ob in zip(actions, observations):
                if isinstance(a, Exception):
                    if isinstance(a, InvalidInputError) and "policy output" in str(a):
                        a = ApiError(500, str(a), type="server_error", code="invalid_policy_output")
                    out.append(a)
                    continue
                try:
                    out.append(wire_action(a, conv, ob))
                    calls["n"] += 1
                except Exception as exc:  # noqa: BLE001
                    out.append(exc)
            return out
        finally:
            for a in args:
                a[2].release()

    queue = BatchQueue(step_batch, limits.queue_size, max_batch_size, max_wait_ms / 1000.0, name="openvla")
    pixels = PixelBudget(limits.max_inflight_pixels)
    limiter = parse_limiter(limits)
    app = FastAPI(title=f"embeval OpenVLA-protocol server: {policy.id} (batching)")
    app.state.queue, app.state.pixels = queue, pixels
    install_error_handlers(app, limits)
    app.add_middleware(HealthFirst, payload=lambda: {
        "status": "ok", "subject": policy.id, "calls": calls["n"], "cameras": mapping.cameras,
        "state": mapping.state, **queue.stats(), "episodes": len(live), "max_episodes": max_episodes,
        "image_pixels_held": pixels.held})

    def do_reset(instruction: str | None, episode) -> None:
        """End the episode ``episode`` (a key), or every episode with ``instruction``, or all when both are None;
        the next /act restarts it."""
        if episode is not None:
            keys = [episode] if episode in live else []
        elif instruction:
            keys = [k for k, ins in live.items() if ins == instruction]
        else:
            keys = list(live)
        bp.end_slots(keys)
        for k in keys:
            live.pop(k, None)

    @app.post("/reset")
    async def reset(request: Request):
        try:
            body, instruction = await _reset_body(request, limits, limiter)
            key = episode_key(body, instruction) if "episode" in body else None
            await queue.run_solo(do_reset, instruction, key)
        except Exception as exc:
            return error_response(exc)
        return {"status": "reset", "instruction": instruction}

    def parse_act(raw: bytes):
        payload = unwrap_payload(parse_body(raw, limits), limits)
        obs = observation_from_payload(payload, mapping, limits)
        return episode_key(payload, obs.instruction), obs

    @app.post("/act")
    async def act(request: Request):
        held = None
        try:
            raw = await read_body(request, limits)
            key, obs = await anyio.to_thread.run_sync(parse_act, raw, limiter=limiter)
            del raw
            held = _hold_images(pixels, obs)
            future = queue.submit((key, obs, held), key, drop=held.release)
            del obs
            action = await future
        except Exception as exc:
            if held is not None:  # e.g. the queue was full (releasing twice does nothing)
                held.release()
            return error_response(exc)
        return JSONResponse(encode_array(action))

    return app
