"""Serve any embeval LLM or VLM subject as an OpenAI-compatible chat endpoint.

``POST /v1/chat/completions`` (non-streaming), ``GET /v1/models``, ``GET /health``. Image parts
(``image_url`` with a base64 data URL) go to the subject's ``generate``; text-only requests go to
``chat`` (with ``response_format``'s JSON schema) when the subject has one, else to ``generate``
with no image. Calls to the subject are serialised (models are rarely thread-safe).
"""

import threading
import time
import uuid
from typing import Any, Mapping

from embeval.errors import EmbevalError, InvalidInputError
from embeval.subjects.adapters.openai_chat import decode_data_url


def _schema_from_response_format(rf: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if not rf:
        return None
    if rf.get("type") == "json_schema":
        js = rf.get("json_schema") or {}
        return js.get("schema", js)
    if rf.get("type") == "json_object":
        return rf.get("schema") or {"type": "object"}
    return None


def split_messages(messages: list[Mapping[str, Any]]) -> tuple[list[Any], list[dict[str, str]]]:
    """(decoded images, messages with text-only content) from OpenAI-style messages."""
    images: list[Any] = []
    flat: list[dict[str, str]] = []
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise InvalidInputError("'messages' must be a list of {\"role\": ..., \"content\": ...} objects")
    for m in messages:
        content = m.get("content", "")
        if isinstance(content, str):
            flat.append({"role": m.get("role", "user"), "content": content})
            continue
        texts = []
        content = [] if content is None else content
        if not isinstance(content, list) or not all(isinstance(part, Mapping) for part in content):
            raise InvalidInputError("message 'content' must be a string or a list of {\"type\": \"text\" | \"image_url\", ...} parts")
        for part in content or []:
            if part.get("type") == "text":
                texts.append(part.get("text", ""))
            elif part.get("type") == "image_url":
                iu = part.get("image_url")
                images.append(decode_data_url(iu["url"] if isinstance(iu, Mapping) else str(iu)))
            else:
                raise InvalidInputError(f"unsupported content part type {part.get('type')!r}")
        flat.append({"role": m.get("role", "user"), "content": "\n".join(texts)})
    return images, flat


def create_app(subject: Any, model_name: str | None = None):
    """A FastAPI app serving ``subject`` (an LLM and/or VLM) under the OpenAI chat protocol."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    name = model_name or subject.id
    lock = threading.Lock()
    app = FastAPI(title=f"embeval OpenAI-compatible server: {name}")

    def error(status: int, message: str, typ: str) -> JSONResponse:
        return JSONResponse(status_code=status, content={"error": {"message": message, "type": typ}})

    @app.get("/health")
    def health():
        return {"status": "ok", "subject": subject.id}

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "embeval"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            body = await request.json()
        except ValueError:
            return error(400, "request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return error(400, "request body must be a JSON object with 'messages'", "invalid_request_error")
        if body.get("stream"):
            return error(400, "streaming is not supported by this server; send stream=false", "invalid_request_error")
        try:
            images, flat = split_messages(body.get("messages") or [])
            schema = _schema_from_response_format(body.get("response_format"))
            gen = {k: body[k] for k in ("temperature", "max_tokens") if body.get(k) is not None}
            prompt = flat[-1]["content"] if flat else ""
            with lock:
                if images or not hasattr(subject, "chat"):
                    if not hasattr(subject, "generate"):
                        raise InvalidInputError(f"subject {subject.id} is a text-only LLM; it cannot take images")
                    text = subject.generate(images, prompt, **gen)
                else:
                    text = subject.chat(flat, json_schema=schema, **gen)
        except InvalidInputError as exc:
            return error(400, str(exc), "invalid_request_error")
        except EmbevalError as exc:
            return error(503, str(exc), "server_error")
        except Exception as exc:  # a model failure: answer it, keep serving
            return error(500, f"{type(exc).__name__}: {exc}", "server_error")
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    return app
