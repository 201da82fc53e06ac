"""Serve any embeval LLM or VLM subject as an OpenAI-compatible chat endpoint.

``POST /v1/chat/completions`` (plain or ``stream: true``), ``GET /v1/models``, ``GET /health``.
Image parts (``image_url`` with a base64 data URL) go to the subject's ``generate``; text-only
requests go to ``chat`` (with ``response_format``'s JSON schema) when the subject has one, else to
``generate`` with no image.

Requests are validated before they reach the model: every client error is a 4xx with OpenAI's error
body ``{"error": {"message", "type", "param", "code"}}`` (see :mod:`.limits` for size, depth, image and
queue limits). Images are counted and their pixels summed from their headers before any is decoded
(``max_images``, ``max_image_pixels``, ``max_request_pixels``: 400), and their decoded pixels are
reserved against what all requests hold (``max_inflight_pixels``: 503) until the model call ends. A
``response_format`` schema must pass :func:`~embeval.subjects.json_output.check_output_schema` (400,
code ``invalid_schema``). Subjects that declare ``context_window`` (tokens) and ``count_tokens(text)`` have
prompts checked against it (400, code ``context_length_exceeded``). Model calls run one at a time in
a worker thread behind a bounded queue, so ``/health`` answers while calls wait.

Streaming follows OpenAI's server-sent events: ``data: <chat.completion.chunk JSON>`` lines (a first
chunk with the role, content chunks, a last chunk with ``finish_reason``, a usage chunk when
``stream_options.include_usage``), then ``data: [DONE]``. The subjects produce whole answers, so the
chunks are the finished answer cut at word boundaries; the call runs before the stream starts, so a
failed call is still an ordinary error reply.
"""

import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Mapping

from embeval.errors import ContextLengthError, InvalidInputError
from embeval.serving.limits import (
    ApiError,
    HealthFirst,
    Held,
    ModelQueue,
    PixelBudget,
    ServerLimits,
    error_response,
    install_error_handlers,
    parse_body,
    parse_limiter,
    read_body,
)
from embeval.subjects.adapters.openai_chat import image_to_rgb, open_data_url
from embeval.subjects.json_output import check_output_schema

ROLES = ("system", "developer", "user", "assistant", "tool")
RESPONSE_FORMATS = ("text", "json_object", "json_schema")
#: OpenAI request fields this server does not act on but accepts (vLLM does the same).
IGNORED = ("model", "user", "metadata", "store", "seed", "top_p", "presence_penalty", "frequency_penalty",
           "parallel_tool_calls", "service_tier", "reasoning_effort", "logit_bias", "top_logprobs", "stop")


def _bad(param: str, message: str, code: str | None = "invalid_value") -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code=code)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class ChatRequest:
    """A validated chat request: decoded images, text-only messages, the schema and generation options;
    ``held``: the images' pixels in the server's :class:`~.limits.PixelBudget`, given back by :meth:`free`."""

    images: list
    messages: list[dict[str, str]]
    schema: Mapping[str, Any] | None
    gen: dict[str, Any]
    stream: bool
    include_usage: bool
    held: Held

    def free(self) -> None:
        """Drop the decoded images and give their pixels back (once the model is done with them)."""
        self.images = []
        self.held.release()


def _checked_schema(schema: Any, param: str, limits: ServerLimits | None) -> Mapping[str, Any]:
    if not isinstance(schema, Mapping):
        raise _bad(param, "must be a JSON Schema object", "invalid_type")
    limits = limits or ServerLimits()
    try:
        check_output_schema(schema, max_bytes=limits.max_schema_bytes, max_depth=limits.max_schema_depth,
                            max_output=limits.max_schema_output)
    except InvalidInputError as exc:
        raise _bad(param, str(exc), "invalid_schema") from None
    return schema


def _schema_from_response_format(rf: Any, limits: ServerLimits | None = None) -> Mapping[str, Any] | None:
    if rf is None:
        return None
    if not isinstance(rf, Mapping):
        raise _bad("response_format", f"must be an object such as {{\"type\": \"json_object\"}}, got {json.dumps(rf)[:40]}",
                   "invalid_type")
    typ = rf.get("type")
    if typ not in RESPONSE_FORMATS:
        raise _bad("response_format.type", f"{typ!r} is not one of {', '.join(RESPONSE_FORMATS)}")
    if typ == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, Mapping):
            raise _bad("response_format.json_schema", "must be an object {\"name\": ..., \"schema\": {...}}", "invalid_type")
        return _checked_schema(js.get("schema", {}), "response_format.json_schema.schema", limits)
    if typ == "json_object":  # llama.cpp's server takes a schema here too
        return _checked_schema(rf.get("schema") or {"type": "object"}, "response_format.schema", limits)
    return None


def split_messages(messages: Any, max_pixels: int | None = None, limits: ServerLimits | None = None,
                   budget: PixelBudget | None = None) -> tuple[list[Any], list[dict[str, str]], Held]:
    """(decoded images, messages with text-only content, the images' pixels held in ``budget``) from
    OpenAI-style messages; :class:`ApiError` 400 naming the offending field (``messages[i].content[j]...``).
    With ``limits``, the images are counted (``max_images``) and their pixels summed
    (``max_request_pixels``) from their headers before any is decoded; with ``budget`` their pixels are
    reserved (503 when they do not fit) before decoding, and released again on any error here."""
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "must be a non-empty list of {\"role\": ..., \"content\": ...} objects", "invalid_type")
    max_images = limits.max_images if limits else None
    max_total = limits.max_request_pixels if limits else None
    if max_images is not None:  # counted before any image is opened
        n = 0
        for i, m in enumerate(messages):
            content = m.get("content") if isinstance(m, Mapping) else None
            for j, part in enumerate(content if isinstance(content, list) else []):
                n += isinstance(part, Mapping) and part.get("type") == "image_url"
                if n > max_images:
                    raise _bad(f"messages[{i}].content[{j}].image_url", f"more than {max_images} images in one request, "
                               "the server's limit; send fewer (or raise serve.limits.max_images)", "too_many_images")
    opened: list[tuple[str, Any]] = []  # (param, image opened lazily: header read, pixels not decoded)
    total = 0
    flat: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise _bad(where, "must be an object {\"role\": ..., \"content\": ...}", "invalid_type")
        role = m.get("role", "user")
        if role not in ROLES:
            raise _bad(f"{where}.role", f"{role!r:.40} is not one of {', '.join(ROLES)}")
        content = m.get("content")
        if content is None or isinstance(content, str):
            flat.append({"role": role, "content": content or ""})
            continue
        if not isinstance(content, list):
            raise _bad(f"{where}.content", "must be a string or a list of {\"type\": \"text\" | \"image_url\", ...} parts",
                       "invalid_type")
        texts = []
        for j, part in enumerate(content):
            pw = f"{where}.content[{j}]"
            if not isinstance(part, Mapping):
                raise _bad(pw, "must be an object {\"type\": \"text\" | \"image_url\", ...}", "invalid_type")
            typ = part.get("type")
            if typ == "text":
                if not isinstance(part.get("text"), str):
                    raise _bad(f"{pw}.text", "must be a string", "invalid_type")
                texts.append(part["text"])
            elif typ == "image_url":
                iu = part.get("image_url")
                url = iu.get("url") if isinstance(iu, Mapping) else iu
                if not isinstance(url, str):
                    raise _bad(f"{pw}.image_url", "must be {\"url\": \"data:image/png;base64,...\"}", "invalid_type")
                try:
                    im = open_data_url(url, max_pixels=max_pixels)
                except ValueError as exc:  # InvalidInputError
                    raise _bad(f"{pw}.image_url", str(exc), "invalid_image") from None
                total += im.size[0] * im.size[1]
                if max_total is not None and total > max_total:
                    raise _bad(f"{pw}.image_url", f"the request's images up to this one hold {total} pixels, over the "
                                                  f"server's limit of {max_total} per request; send fewer or smaller "
                                                  "images (or raise serve.limits.max_request_pixels)", "images_too_large")
                opened.append((f"{pw}.image_url", im))
            else:
                raise _bad(f"{pw}.type", f"unsupported content part type {str(typ)[:40]!r}; use text or image_url")
        flat.append({"role": role, "content": "\n".join(texts)})
    held = budget.take(total) if budget is not None else Held()
    images: list[Any] = []
    try:
        for param, im in opened:
            try:
                images.append(image_to_rgb(im))
            except ValueError as exc:  # InvalidInputError: corrupt pixel data
                raise _bad(param, str(exc), "invalid_image") from None
    except BaseException:
        held.release()
        raise
    return images, flat, held


def parse_chat_request(body: Any, limits: ServerLimits, budget: PixelBudget | None = None) -> ChatRequest:
    """Validate a ``/v1/chat/completions`` body (see module docstring); :class:`ApiError` 400 on any problem
    (503 when ``budget`` cannot hold the images' pixels now). The caller frees the request (:meth:`ChatRequest.free`)."""
    if not isinstance(body, Mapping):
        raise ApiError(400, "the request body must be a JSON object with 'messages'", code="invalid_type")
    for key in ("tools", "functions", "tool_choice", "function_call", "audio", "modalities", "prediction"):
        if body.get(key) not in (None, [], "none"):
            raise _bad(key, "is not supported by this server (no tool calls or audio); leave it out", "unsupported_parameter")
    if body.get("n") not in (None, 1):
        raise _bad("n", "only n=1 is supported; send one request per answer", "unsupported_value")
    if body.get("logprobs") not in (None, False):
        raise _bad("logprobs", "is not supported by this server; leave it out", "unsupported_parameter")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise _bad("stream", f"must be true or false, got {json.dumps(stream)[:40]}", "invalid_type")
    opts = body.get("stream_options")
    if opts is not None and (not isinstance(opts, Mapping) or not isinstance(opts.get("include_usage", False), bool)):
        raise _bad("stream_options", "must be an object {\"include_usage\": true | false}", "invalid_type")
    gen: dict[str, Any] = {}
    t = body.get("temperature")
    if t is not None:
        if not _is_number(t) or not 0 <= t <= 2:
            raise _bad("temperature", f"must be a number from 0 to 2, got {json.dumps(t)[:40]}")
        gen["temperature"] = float(t)
    for key in ("max_completion_tokens", "max_tokens"):
        v = body.get(key)
        if v is not None:
            if not _is_int(v) or not 1 <= v <= limits.max_tokens:
                raise _bad(key, f"must be an integer from 1 to {limits.max_tokens}, got {json.dumps(v)[:40]}")
            gen.setdefault("max_tokens", v)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad("model", "must be a string", "invalid_type")
    schema = _schema_from_response_format(body.get("response_format"), limits)
    images, flat, held = split_messages(body.get("messages"), max_pixels=limits.max_image_pixels, limits=limits,
                                        budget=budget)
    return ChatRequest(images=images, messages=flat, schema=schema, gen=gen, stream=bool(stream),
                       include_usage=bool(opts and opts.get("include_usage")), held=held)


def check_context(subject: Any, req: ChatRequest) -> int:
    """Prompt tokens by the subject's own count (0 when it has none, as ``usage`` then reports);
    :class:`ContextLengthError`
    when prompt + ``max_tokens`` exceed the subject's ``context_window``."""
    count = getattr(subject, "count_tokens", None)
    window = getattr(subject, "context_window", None)
    if count is None:
        return 0
    n = int(count("\n".join(m["content"] for m in req.messages)))
    want = int(req.gen.get("max_tokens", getattr(subject, "default_max_tokens", 0) or 0))
    if window and n + want > window:
        raise ContextLengthError(f"this model's context window is {window} tokens; the messages take {n} tokens and "
                                 f"{want} more were asked for; shorten the prompt or lower max_tokens")
    return n


def finish_reason(completion_tokens: int, max_tokens: int | None) -> str:
    """OpenAI's ``finish_reason``: ``"length"`` when the answer reached the token limit in effect (the request's
    ``max_tokens`` / ``max_completion_tokens``, else the subject's ``default_max_tokens``), by the subject's own
    token count; ``"stop"`` otherwise (a subject without ``count_tokens`` reports 0 tokens, so always ``"stop"``)."""
    return "length" if max_tokens and completion_tokens >= max_tokens else "stop"


def _chunks(text: str) -> list[str]:
    """``text`` cut after each run of whitespace (their concatenation is ``text``)."""
    return re.findall(r"\S*\s*", text)[:-1] or [text]


def create_app(subject: Any, model_name: str | None = None, limits: ServerLimits | None = None):
    """A FastAPI app serving ``subject`` (an LLM and/or VLM) under the OpenAI chat protocol."""
    import anyio
    from fastapi import FastAPI, Request
    from fastapi.responses import StreamingResponse

    limits = limits or ServerLimits()
    name = model_name or subject.id
    queue = ModelQueue(limits.queue_size, name="openai")
    pixels = PixelBudget(limits.max_inflight_pixels)
    limiter = parse_limiter(limits)
    app = FastAPI(title=f"embeval OpenAI-compatible server: {name}")
    app.state.queue, app.state.pixels = queue, pixels
    install_error_handlers(app, limits)
    # GET /health: answered by the outermost middleware, ahead of body limits, routing and parsing
    app.add_middleware(HealthFirst, payload=lambda: {"status": "ok", "subject": subject.id, **queue.stats(),
                                                     "image_pixels_held": pixels.held})

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "embeval"}]}

    def call(req: ChatRequest) -> tuple[str, int, int, str]:
        n_prompt = check_context(subject, req)
        if req.images or not hasattr(subject, "chat"):
            if not hasattr(subject, "generate"):
                raise ApiError(400, f"model {name} is a text-only LLM; it cannot take images", param="messages",
                               code="images_not_supported")
            text = subject.generate(req.images, req.messages[-1]["content"], **req.gen)
        else:
            text = subject.chat(req.messages, json_schema=req.schema, **req.gen)
        if not isinstance(text, str):
            raise TypeError(f"{subject.id} returned {type(text).__name__}, not text")
        n_out = int(subject.count_tokens(text)) if hasattr(subject, "count_tokens") else 0
        cap = req.gen.get("max_tokens") or getattr(subject, "default_max_tokens", None)
        return text, n_prompt, n_out, finish_reason(n_out, cap)

    def call_and_free(req: ChatRequest) -> tuple[str, int, int, str]:
        try:
            return call(req)
        finally:  # the images go as soon as the model is done, even when the client has gone
            req.free()

    def parse_into(box: list, raw: bytes) -> ChatRequest:
        box.append(parse_chat_request(parse_body(raw, limits), limits, pixels))  # in the box even if the task is cancelled
        return box[0]

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        box: list[ChatRequest] = []
        at_model = False
        try:
            raw = await read_body(request, limits)
            # JSON parsing, validation, schema checks and image decoding: off the loop, a few requests at a time
            req = await anyio.to_thread.run_sync(parse_into, box, raw, limiter=limiter)
            del raw
            at_model = True  # from here on the model worker frees the request (call_and_free)
            text, n_prompt, n_out, finish = await queue.run(call_and_free, req, on_cancel=req.free)
        except Exception as exc:
            for r in box:  # e.g. the queue was full: it never reached the model (freeing twice does nothing)
                r.free()
            return error_response(exc)
        except BaseException:  # cancelled: free what the model worker will not
            if not at_model:
                for r in box:
                    r.free()
            raise
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()), "model": name,
                "system_fingerprint": None}
        if not req.stream:
            return {**base, "object": "chat.completion", "usage": usage,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                                 "logprobs": None, "finish_reason": finish}]}

        def event(choices: list, **extra: Any) -> str:
            return f"data: {json.dumps({**base, 'object': 'chat.completion.chunk', 'choices': choices, **extra})}\n\n"

        def events():
            yield event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
            for piece in _chunks(text) if text else []:
                yield event([{"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": None}])
            yield event([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}])
            if req.include_usage:
                yield event([], usage=usage)
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return app
