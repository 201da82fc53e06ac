"""Serve any embeval policy under OpenVLA's REST protocol, so tools written for OpenVLA can drive it.

``POST /act``: JSON ``{"image": uint8 HxWx3 (json_numpy dict or nested list), "instruction": str,
"unnorm_key": str (accepted, ignored: our policies act in embeval units)}`` or ``{"encoded": "<that
JSON as a string>"}``. OpenVLA-OFT's form is accepted too: ``full_image`` for ``image``, further
``*image*`` fields become cameras named by their key, ``state`` / ``proprio`` go to ``Observation.state``. Reply: the 7-DoF action as a json_numpy float32 array (as OpenVLA's
deploy.py answers), in embeval's convention converted to ``gripper`` (default ``open1``, which is
also OpenVLA's raw convention). The policy is reset whenever the instruction changes, and by
``POST /reset {"instruction": ...}``. Errors answer HTTP 4xx/5xx with ``{"error": message}``.
"""
import json
import threading
from typing import Any

import numpy as np

from embeval.action import Observation, check_image
from embeval.errors import EmbevalError, InvalidInputError
from embeval.subjects.adapters.numpy_json import decode_array, encode_array
from embeval.subjects.conventions import check_gripper, gripper_from_embeval


def decode_act_payload(payload: Any) -> tuple[np.ndarray, str, dict[str, Any]]:
    """(image, instruction, other fields) from an /act body in either of OpenVLA's forms."""
    if not isinstance(payload, dict):
        raise InvalidInputError("the /act body must be a JSON object with 'image' and 'instruction'")
    if "encoded" in payload:
        if len(payload) != 1:
            raise InvalidInputError("an 'encoded' /act body must have no other keys")
        try:
            payload = json.loads(payload["encoded"])
        except (TypeError, ValueError):
            raise InvalidInputError("'encoded' must be a JSON string of the /act payload") from None
    image_key = "image" if "image" in payload else "full_image"  # OpenVLA-OFT names it full_image
    missing = [k for k in (image_key, "instruction") if k not in payload]
    if missing:
        named = ["image (or full_image, as OpenVLA-OFT sends it)" if k == "full_image" else k for k in missing]
        raise InvalidInputError(f"the /act body misses {', '.join(named)}")
    image = _as_image(decode_array(payload[image_key]), image_key)
    rest = {k: v for k, v in payload.items() if k not in (image_key, "instruction")}
    return image, str(payload["instruction"]), rest


def _as_image(image: np.ndarray, name: str) -> np.ndarray:
    if image.dtype != np.uint8 and image.size and np.issubdtype(image.dtype, np.integer) and image.min() >= 0 and image.max() <= 255:
        image = image.astype(np.uint8)
    return check_image(image, name)


def observation_from_payload(image: np.ndarray, instruction: str, rest: dict[str, Any], camera: str) -> Observation:
    """The Observation for an /act body: the main image as ``camera``; other ``*image*`` fields as cameras
    named by their key; ``state`` / ``proprio`` arrays in ``Observation.state`` under their key."""
    images = {camera: image}
    state = {}
    for key, value in rest.items():
        if "image" in key:
            images[key] = _as_image(decode_array(value), key)
        elif key in ("state", "proprio"):
            state[key] = np.asarray(decode_array(value), dtype=np.float64)
    return Observation(images=images, instruction=instruction, state=state)


def create_app(policy: Any, camera: str = "third_person", gripper: str = "open1"):
    """A FastAPI app serving ``policy`` (an embeval Policy) under the OpenVLA REST protocol."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    check_gripper(gripper)
    lock = threading.Lock()
    state = {"instruction": None, "calls": 0}
    app = FastAPI(title=f"embeval OpenVLA-protocol server: {policy.id}")

    @app.get("/health")
    def health():
        return {"status": "ok", "subject": policy.id, "calls": state["calls"]}

    @app.post("/reset")
    async def reset(request: Request):
        body = await request.json() if await request.body() else {}
        with lock:
            state["instruction"] = str(body.get("instruction", ""))
            policy.reset(state["instruction"])
        return {"status": "reset", "instruction": state["instruction"]}

    @app.post("/act")
    async def act(request: Request):
        try:
            payload = await request.json()
        except ValueError:
            return JSONResponse(status_code=400, content={"error": "request body is not JSON"})
        try:
            image, instruction, rest = decode_act_payload(payload)
            obs = observation_from_payload(image, instruction, rest, camera)
            with lock:
                if instruction != state["instruction"]:
                    policy.reset(instruction)
                    state["instruction"] = instruction
                action = policy.act(obs)
                state["calls"] += 1
        except InvalidInputError as exc:
            return JSONResponse(status_code=400 if "policy output" not in str(exc) else 500, content={"error": str(exc)})
        except EmbevalError as exc:
            return JSONResponse(status_code=503, content={"error": str(exc)})
        except Exception as exc:  # a model failure: answer it, keep serving
            return JSONResponse(status_code=500, content={"error": f"{type(exc).__name__}: {exc}"})
        v = np.asarray(action.vector, dtype=np.float64).copy()
        v[6] = gripper_from_embeval(v[6], gripper)
        return JSONResponse(encode_array(v.astype(np.float32)))

    return app
