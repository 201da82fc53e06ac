"""OpenAI-compatible chat endpoint adapters (vLLM, Ollama, llama.cpp server, SGLang, OpenAI, ...).

``POST {base_url}/chat/completions``. The base URL and key come from the spec (``url``,
``params.api_key``) or from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``. Images travel as base64
data URLs (PNG by default: lossless, so the transport adds no distortion of its own). A JSON
schema becomes ``response_format={"type": "json_schema", ...}`` (``json_mode: json_object`` for
servers that only know the older form, ``none`` to rely on the prompt) and the reply is validated.
Transient failures (connection errors, timeouts, HTTP 429/502/503/504, empty, malformed or
schema-invalid replies) are retried by :mod:`embeval.subjects.adapters.http_client`'s one policy
(``Retry-After`` honoured, exponential backoff otherwise); when retries run out a :class:`ServerUnavailableError` names the URL and
the fix. An empty string is never returned.

Batches (:meth:`OpenAIChatVLM.generate_batch`): the items' requests are sent concurrently, at most
``max_concurrency`` (1..64, default 8) in flight, answers in the items' order; a request that fails fails
its own item only (:meth:`OpenAIChatVLM.generate_many` returns the others' answers next to its error).
"""
from __future__ import annotations

import base64
import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from embeval import checks
from embeval.action import check_image
from embeval.errors import ConfigError, EmbevalError, InvalidInputError, ServerUnavailableError
from embeval.subjects.adapters.http_client import HttpClient, HttpReply, RetriesExhausted, RetryPolicy, RetryReply
from embeval.subjects.json_output import parse_and_validate

JSON_MODES = ("json_schema", "json_object", "none")
MAX_CONCURRENCY = 64


def check_concurrency(value: Any) -> int:
    """``value`` as the number of requests a client may have in flight (a whole number 1..64); :class:`ConfigError`."""
    return checks.integer(value, "field 'params.max_concurrency'", 1, MAX_CONCURRENCY, why="requests in flight at once")


def map_bounded(fn: Callable[..., Any], items: Sequence[tuple], limit: int) -> list[Any]:
    """``[fn(*item) for item in items]`` on at most ``limit`` threads at once, in the items' order; an item whose
    call raises an :class:`EmbevalError` gets that error in its place (the other items still run)."""
    def one(item: tuple) -> Any:
        try:
            return fn(*item)
        except EmbevalError as exc:
            return exc

    if len(items) <= 1 or limit == 1:
        return [one(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(limit, len(items)), thread_name_prefix="openai-request") as pool:
        return list(pool.map(one, items))


def image_data_url(img: np.ndarray, fmt: str = "png", quality: int = 95) -> str:
    """``data:image/png;base64,...`` for an RGB uint8 image (``fmt``: png | jpeg)."""
    from PIL import Image

    check_image(img)
    buf = io.BytesIO()
    fmt = fmt.lower()
    if fmt in ("jpg", "jpeg"):
        Image.fromarray(img).save(buf, format="JPEG", quality=quality)
        mime = "jpeg"
    elif fmt == "png":
        Image.fromarray(img).save(buf, format="PNG")
        mime = "png"
    else:
        raise ConfigError(f"field 'params.image_format': {fmt!r} is not png or jpeg")
    return f"data:image/{mime};base64,{base64.b64encode(buf.getvalue()).decode()}"


def open_data_url(url: str, max_pixels: int | None = None):
    """The image in a base64 image data URL, opened lazily (a ``PIL.Image``: its header read and its size
    checked, no pixel decoded yet). :class:`InvalidInputError` for anything that is not a base64 image data
    URL holding a readable image of 1 to ``max_pixels`` pixels."""
    from PIL import Image

    if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
        raise InvalidInputError(f"expected a base64 image data URL (data:image/...;base64,...), got {str(url)[:40]!r}")
    try:
        raw = base64.b64decode(url.split(";base64,", 1)[1], validate=True)
    except ValueError:  # binascii.Error
        raise InvalidInputError("the image data URL's base64 part is not valid base64; encode the image file's "
                                "bytes with base64 (standard alphabet, padded)") from None
    try:
        im = Image.open(io.BytesIO(raw))
        w, h = im.size
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise InvalidInputError(f"the image data URL holds no readable image ({type(exc).__name__}: {exc}); "
                                "send a PNG or JPEG file") from None
    if w * h == 0 or (max_pixels is not None and w * h > max_pixels):
        raise InvalidInputError(f"the image is {w}x{h} pixels; send an image of 1 to {max_pixels or 'any number of'} pixels")
    return im


def image_to_rgb(im) -> np.ndarray:
    """Decode an image :func:`open_data_url` opened to an RGB uint8 array; :class:`InvalidInputError` for
    corrupt or truncated pixel data."""
    try:
        arr = np.asarray(im.convert("RGB"), dtype=np.uint8)
    except (OSError, ValueError, SyntaxError) as exc:  # truncated or corrupt pixel data
        raise InvalidInputError(f"the image in the data URL is corrupt ({type(exc).__name__}: {exc})") from None
    return check_image(arr)


def decode_data_url(url: str, max_pixels: int | None = None) -> np.ndarray:
    """Inverse of :func:`image_data_url`: an RGB uint8 array. :class:`InvalidInputError` for anything
    that is not a base64 image data URL holding a readable, non-empty image of at most ``max_pixels``."""
    return image_to_rgb(open_data_url(url, max_pixels))


class OpenAIChatClient:
    """A minimal, retrying client of ``/chat/completions`` (httpx)."""

    def __init__(self, url: str | None = None, model: str | None = None, api_key: str | None = None,
                 timeout: float = 120.0, max_retries: int = 3, backoff: float = 0.5,
                 json_mode: str = "json_schema", validate_json: bool = True,
                 extra_body: Mapping[str, Any] | None = None):
        base = url or os.environ.get("OPENAI_BASE_URL")
        if not base:
            raise ConfigError(
                "field 'url' is missing: set url: http://HOST:PORT/v1 in the subject spec or export "
                "OPENAI_BASE_URL (vLLM/llama.cpp default http://127.0.0.1:8000/v1, Ollama http://127.0.0.1:11434/v1)"
            )
        if json_mode not in JSON_MODES:
            raise ConfigError(f"field 'params.json_mode': {json_mode!r} is not one of {', '.join(JSON_MODES)}")
        self.base_url = base.rstrip("/")
        self.model = model or os.environ.get("OPENAI_MODEL") or "default"
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.json_mode = json_mode
        self.validate_json = validate_json
        self.extra_body = dict(extra_body or {})
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        self.client = HttpClient(self.timeout, RetryPolicy(max_retries=self.max_retries, backoff_s=self.backoff), headers)

    def _response_format(self, schema: Mapping[str, Any]) -> dict[str, Any] | None:
        if self.json_mode == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": "response", "schema": dict(schema), "strict": True}}
        if self.json_mode == "json_object":
            return {"type": "json_object", "schema": dict(schema)}
        return None

    def request(self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping | None = None, **gen: Any) -> dict[str, Any]:
        """Send a chat request; return the server's whole JSON reply (non-empty, schema-valid content)."""
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), **self.extra_body, **gen}
        if json_schema is not None:
            rf = self._response_format(json_schema)
            if rf is not None:
                body["response_format"] = rf
        endpoint = f"{self.base_url}/chat/completions"

        def parse(r: HttpReply) -> dict[str, Any]:
            if r.status_code in (401, 403):
                raise ServerUnavailableError(
                    f"{endpoint} refused the request (HTTP {r.status_code}): set params.api_key in the subject "
                    "spec or export OPENAI_API_KEY"
                )
            if r.status_code >= 400:
                raise ServerUnavailableError(
                    f"{endpoint} rejected the request (HTTP {r.status_code}): {r.text[:300]}; check params.model "
                    f"({self.model!r}) and that the server supports this request (images; response_format: set "
                    "params.json_mode to json_object for servers that reject type json_schema, e.g. llama-cpp-python's)"
                )
            try:
                data = r.json()
                text = data["choices"][0]["message"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                raise RetryReply(f"malformed reply {r.text[:200]!r}") from None
            if not text or not str(text).strip():
                raise RetryReply("empty reply")
            if json_schema is not None and self.validate_json:
                try:
                    parse_and_validate(text, json_schema, source=endpoint)
                except InvalidInputError as exc:
                    raise RetryReply(str(exc)) from None
            return data

        try:
            return self.client.post_json(endpoint, body, parse)
        except RetriesExhausted as exc:
            if exc.reached:
                raise ServerUnavailableError(
                    f"OpenAI-compatible server at {self.base_url} is running but failed {exc.attempts} times "
                    f"(last: {exc.last[:400]}); check the server's log, params.model ({self.model!r}), and params.json_mode "
                    "(json_object for servers that reject response_format type json_schema, e.g. llama-cpp-python's)"
                ) from None
            raise ServerUnavailableError(
                f"OpenAI-compatible server at {self.base_url} failed after {exc.attempts} attempts ({exc.last}); "
                "start the server (e.g. `vllm serve MODEL --port 8000`, `ollama serve`, `llama-server -m FILE.gguf`, "
                "or `embeval serve openai --subject SPEC`) or fix 'url' in the subject spec / OPENAI_BASE_URL"
            ) from None

    def complete(self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping | None = None, **gen: Any) -> str:
        """Send a chat request; return the assistant's non-empty text (validated JSON when a schema is given)."""
        return str(self.request(messages, json_schema, **gen)["choices"][0]["message"]["content"])

    def close(self) -> None:
        self.client.close()


def match_option(text: str, options: Sequence[str]) -> str | None:
    """The option a free-text reply names: exact, then case-insensitive, then the unique option it contains."""
    t = text.strip().strip('"').strip()
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict) and "answer" in parsed:
            t = str(parsed["answer"])
    except (ValueError, TypeError):
        pass
    for o in options:
        if t == o:
            return o
    low = t.lower().rstrip(".")
    for o in options:
        if low == o.lower():
            return o
    inside = [o for o in options if o.lower() in low]
    if len(inside) == 1:
        return inside[0]
    return None


CHOOSE_METHODS = ("schema", "logprobs")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class OpenAIChatLLM:
    """LLM subject over an OpenAI-compatible endpoint.

    ``choose_method``: ``schema`` (default) constrains the answer to the options with a JSON-schema
    enum; ``logprobs`` lists the options as letters and picks the letter with the highest
    log-probability as the first answer token (``logprobs``/``top_logprobs``, supported by OpenAI,
    vLLM and llama.cpp's server), falling back to ``schema`` when no letter is among the top tokens.
    """

    def __init__(self, id: str = "openai-llm", url: str | None = None, model: str | None = None,
                 api_key: str | None = None, temperature: float = 0.0, max_tokens: int = 512,
                 timeout: float = 120.0, max_retries: int = 3, backoff: float = 0.5,
                 json_mode: str = "json_schema", choose_method: str = "schema",
                 extra_body: Mapping[str, Any] | None = None):
        self.id = id
        self.client = OpenAIChatClient(url, model, api_key, timeout, max_retries, backoff, json_mode, True, extra_body)
        self.defaults = {"temperature": temperature, "max_tokens": max_tokens}
        if choose_method not in CHOOSE_METHODS:
            raise ConfigError(f"field 'params.choose_method': {choose_method!r} is not one of {', '.join(CHOOSE_METHODS)}")
        self.choose_method = choose_method
        self.last_choice_logprobs: dict[str, float] = {}

    def chat(self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping | None = None, **gen: Any) -> str:
        return self.client.complete(messages, json_schema, **{**self.defaults, **gen})

    def choose(self, prompt: str, options: Sequence[str]) -> str:
        options = list(options)
        if not options:
            raise InvalidInputError("choose() needs at least one option")
        if self.choose_method == "logprobs" and len(options) <= len(LETTERS):
            choice = self._choose_logprobs(prompt, options)
            if choice is not None:
                return choice
        schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": options}}, "required": ["answer"]}
        listing = "\n".join(f"- {o}" for o in options)
        msg = [{"role": "user", "content": f"{prompt}\n\nAnswer with exactly one of these options:\n{listing}\n"
                                           'Reply as JSON: {"answer": "<option>"}'}]
        text = self.chat(msg, json_schema=schema)
        choice = match_option(text, options)
        if choice is None:
            raise InvalidInputError(f"{self.client.base_url} answered {text[:200]!r}, which names none of the options {options}")
        return choice


    def _choose_logprobs(self, prompt: str, options: list[str]) -> str | None:
        """The option whose letter has the highest log-probability as the first answer token."""
        letters = LETTERS[: len(options)]
        listing = "\n".join(f"{l}. {o}" for l, o in zip(letters, options))
        msg = [{"role": "user", "content": f"{prompt}\n\n{listing}\n\nAnswer with the letter only."}]
        data = self.client.request(msg, None, temperature=0.0, max_tokens=1, logprobs=True, top_logprobs=min(20, 2 * len(options) + 5))
        try:
            top = data["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            return None  # the server does not return logprobs
        best: dict[str, float] = {}
        for entry in top:
            tok = str(entry.get("token", "")).strip().rstrip(".)").upper()
            if tok in letters and len(tok) == 1:
                best[tok] = max(best.get(tok, float("-inf")), float(entry["logprob"]))
        self.last_choice_logprobs = {options[letters.index(k)]: v for k, v in best.items()}
        if not best:
            return None
        return options[letters.index(max(best, key=best.get))]


class OpenAIChatVLM:
    """VLM subject over an OpenAI-compatible endpoint; images go as base64 data URLs before the prompt."""

    def __init__(self, id: str = "openai-vlm", url: str | None = None, model: str | None = None,
                 api_key: str | None = None, temperature: float = 0.0, max_tokens: int = 64,
                 image_format: str = "png", system_prompt: str | None = None, timeout: float = 120.0,
                 max_retries: int = 3, backoff: float = 0.5, json_mode: str = "json_schema",
                 extra_body: Mapping[str, Any] | None = None, max_concurrency: int = 8):
        self.id = id
        self.client = OpenAIChatClient(url, model, api_key, timeout, max_retries, backoff, json_mode, True, extra_body)
        self.max_concurrency = check_concurrency(max_concurrency)
        image_data_url(np.zeros((1, 1, 3), np.uint8), image_format)  # validate the format early
        self.image_format = image_format
        self.system_prompt = system_prompt
        self.defaults = {"temperature": temperature, "max_tokens": max_tokens}

    def messages(self, images: Sequence[np.ndarray], prompt: str) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": image_data_url(check_image(im, f"images[{i}]"), self.image_format)}}
            for i, im in enumerate(images)
        ]
        content.append({"type": "text", "text": prompt})
        msgs: list[dict[str, Any]] = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        msgs.append({"role": "user", "content": content})
        return msgs

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str:
        json_schema = gen.pop("json_schema", None)
        return self.client.complete(self.messages(images, prompt), json_schema, **{**self.defaults, **gen})

    def generate_many(self, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str],
                      **gen: Any) -> list[str | EmbevalError]:
        """:meth:`generate` for every item, ``max_concurrency`` requests in flight at once, in the items' order:
        each item's answer, or the error its own :meth:`generate` would raise (the other items are unaffected)."""
        if len(image_lists) != len(prompts):
            raise InvalidInputError(f"{self.id}: {len(image_lists)} image lists for {len(prompts)} prompts")
        return map_bounded(lambda ims, p: self.generate(ims, p, **gen), list(zip(image_lists, prompts)), self.max_concurrency)

    def generate_batch(self, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str], **gen: Any) -> list[str]:
        """:meth:`generate_many`, raising the first failed item's error once every request has ended."""
        out = self.generate_many(image_lists, prompts, **gen)
        failed = next((x for x in out if isinstance(x, EmbevalError)), None)
        if failed is not None:
            raise failed
        return out  # type: ignore[return-value]
