"""llama.cpp GGUF adapter on the embedded Gemma 3 270M (loaded once per module; tiny prompts),
and llama-cpp-python's own OpenAI-compatible server as a counterpart for the OpenAI client."""
from __future__ import annotations

import json

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")

from embeval.errors import InvalidInputError, MissingWeightsError  # noqa: E402
from embeval.subjects import load_subject  # noqa: E402
from embeval.subjects.adapters.llama_cpp import LlamaCppLLM, embedded_gguf_path  # noqa: E402

pytestmark = pytest.mark.slow

SCHEMA = {"type": "object", "properties": {"verb": {"enum": ["pick", "place", "push"]}, "ok": {"type": "boolean"}},
          "required": ["verb", "ok"]}


@pytest.fixture(scope="module")
def gemma():
    llm = load_subject({"kind": "llm", "adapter": "llama_cpp", "params": {"n_ctx": 256, "max_tokens": 20}})
    _ = llm.model  # load once
    return llm


def test_embedded_file_is_cached(gemma):
    p = embedded_gguf_path()
    assert p.is_file() and p.stat().st_size > 100e6 and embedded_gguf_path() == p


def test_json_schema_constrained_output(gemma):
    out = gemma.chat([{"role": "user", "content": "Robot verb for lifting a cup, as JSON."}], json_schema=SCHEMA)
    value = json.loads(out)
    assert value["verb"] in {"pick", "place", "push"} and isinstance(value["ok"], bool)
    assert gemma.chat([{"role": "user", "content": "Say hi."}], max_tokens=3).strip() != ""


def test_loglikelihood_matches_full_forward_and_choose(gemma):
    llm = gemma.model
    prompt, cont = "The capital of France is", " Paris"
    ll, n = gemma.loglikelihood(prompt, cont)
    # independent computation: one forward pass with logits for every position
    toks = llm.tokenize((prompt + cont).encode(), add_bos=True, special=False)
    ptoks = llm.tokenize(prompt.encode(), add_bos=True, special=False)
    k = next(i for i in range(len(toks)) if i >= len(ptoks) or toks[i] != ptoks[i])
    ref = llama_cpp.Llama(model_path=str(embedded_gguf_path()), n_ctx=32, n_threads=1, logits_all=True, verbose=False)
    ref.eval(toks)
    logits = np.asarray(ref.scores[: len(toks)], dtype=np.float64)
    logp = logits - logits.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    want = sum(logp[i - 1, toks[i]] for i in range(k, len(toks)))
    assert n == len(toks) - k and ll == pytest.approx(want, abs=1e-3)
    assert ll > gemma.loglikelihood(prompt, " Banana")[0]
    assert gemma.choose("The capital of France is", ["Paris", "Banana"]) == "Paris"
    with pytest.raises(InvalidInputError):
        gemma.choose("x", [])


def test_missing_gguf(tmp_path):
    with pytest.raises(MissingWeightsError, match="does not exist"):
        LlamaCppLLM(path=str(tmp_path / "nope.gguf"))


def test_openai_client_against_llama_cpp_python_server():
    """A third-party OpenAI-compatible server (llama-cpp-python's) serving the embedded GGUF."""
    pytest.importorskip("llama_cpp.server.app", exc_type=ImportError)
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    from embeval.errors import ServerUnavailableError
    from embeval.serving.runner import serve_in_thread
    from embeval.subjects.adapters.openai_chat import OpenAIChatLLM

    app = create_app(server_settings=ServerSettings(host="127.0.0.1", port=0),
                     model_settings=[ModelSettings(model=str(embedded_gguf_path()), model_alias="gemma", n_ctx=256,
                                                   n_threads=1, chat_format="gemma", verbose=False)])
    with serve_in_thread(app) as srv:
        llm = OpenAIChatLLM(url=srv.url + "/v1", model="gemma", max_tokens=20, json_mode="json_object", max_retries=0)
        value = json.loads(llm.chat([{"role": "user", "content": "Robot verb for lifting a cup, as JSON."}], json_schema=SCHEMA))
        assert value["verb"] in {"pick", "place", "push"}
        strict = OpenAIChatLLM(url=srv.url + "/v1", model="gemma", max_tokens=4, max_retries=0)  # json_schema type: unknown there
        with pytest.raises(ServerUnavailableError, match="json_mode"):
            strict.chat([{"role": "user", "content": "x"}], json_schema=SCHEMA)


def test_context_window_in_process_and_served(gemma):
    """n_ctx=256: an over-long prompt is a ContextLengthError in process (llama.cpp's own check) and a 400
    ``context_length_exceeded`` from ``embeval serve openai`` (checked with the model's tokenizer before the call)."""
    import openai
    from embeval.errors import ContextLengthError
    from embeval.serving.openai_server import create_app
    from embeval.serving.runner import serve_in_thread

    long = "pick up the red cube and place it in the bowl. " * 40  # about 480 tokens
    assert gemma.context_window == 256 and gemma.count_tokens(long) > 256
    with pytest.raises(ContextLengthError, match="context window"):
        gemma.chat([{"role": "user", "content": long}])
    with serve_in_thread(create_app(gemma)) as srv, \
            openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as ei:
            client.chat.completions.create(model="gemma", messages=[{"role": "user", "content": long}])
        assert ei.value.code == "context_length_exceeded" and "256" in ei.value.message
        r = client.chat.completions.create(model="gemma", max_tokens=3, messages=[{"role": "user", "content": "Say hi."}])
        assert r.choices[0].message.content.strip() and r.usage.prompt_tokens == gemma.count_tokens("Say hi.")
