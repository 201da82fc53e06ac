"""Registry, YAML specs, the OpenAI-compatible client against a real local server, the call cache,
and the scripted test double."""
from __future__ import annotations

import json
import threading

import jsonschema
import numpy as np
import pytest
from conftest import free_port

from embeval.errors import ConfigError, InvalidInputError, MissingFileError, ServerUnavailableError
from embeval.serving.openai_server import create_app
from embeval.serving.runner import serve_in_thread
from embeval.subjects import load_subject, register_adapter
from embeval.subjects.adapters.openai_chat import OpenAIChatLLM, OpenAIChatVLM, decode_data_url, image_data_url
from embeval.subjects.cache import CachedLLM, CachedVLM
from embeval.subjects.json_output import example_from_schema
from embeval.subjects.scripted import ScriptedLLM, ScriptedVLM

SCHEMA = {
    "type": "object",
    "properties": {
        "dimensions": {"type": "array", "items": {"type": "string", "minLength": 3}, "minItems": 2, "maxItems": 5},
        "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "label": {"enum": ["spatial", "semantic", "other"]},
        "confidence": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "done": {"type": "boolean"},
        "ref": {"$ref": "#/$defs/item"},
    },
    "required": ["dimensions", "score", "label", "confidence", "done", "ref"],
    "additionalProperties": False,
    "$defs": {"item": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
}


# --------------------------------------------------------------------------- registry / spec

def test_load_subject_from_yaml(tmp_path):
    spec = tmp_path / "judge.yaml"
    spec.write_text("kind: llm\nadapter: scripted\nparams:\n  rules:\n    - {match: capital, response: Paris}\n")
    llm = load_subject(spec)
    assert llm.id == "judge"  # default id: the file stem
    assert llm.chat([{"role": "user", "content": "The capital of France?"}]) == "Paris"


@pytest.mark.parametrize(
    "text, field",
    [
        ("adapter: scripted\n", "'kind'"),
        ("kind: robot\nadapter: scripted\n", "'kind'"),
        ("kind: llm\n", "'adapter'"),
        ("kind: llm\nadapter: nope\n", "'adapter'"),
        ("kind: llm\nadapter: scripted\nparms: {}\n", "subject.parms: unknown field; did you mean 'params'"),
        ("kind: llm\nadapter: scripted\nparams: {temprature: 0}\n", "params.temprature"),
        ("kind: llm\nadapter: scripted\nparams: [1, 2]\n", "'params'"),
        ("kind: llm\nadapter: openai\nparams: {url: x}\n", "'params'"),
        ("kind: policy\nadapter: openai\n", "adapter 'openai' exists for kind llm, vlm"),
        ("kind: llm\nadapter: scripted\nparams: {rules: [{match: '(', response: x}]}\n", "regular expression"),
        ("kind: [llm\n", "not valid YAML"),
    ],
)
def test_malformed_spec_names_the_field(tmp_path, text, field):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_subject(p)
    assert field in str(ei.value)


def test_missing_spec_file_and_missing_required_param(tmp_path, monkeypatch):
    with pytest.raises(MissingFileError):
        load_subject(tmp_path / "nope.yaml")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL"):
        load_subject({"kind": "llm", "adapter": "openai"})


def test_register_adapter_decorator_and_protocol_check():
    @register_adapter("echo_test", "llm")
    class Echo:
        def __init__(self, id: str, suffix: str = "!"):
            self.id, self.suffix = id, suffix

        def chat(self, messages, json_schema=None, **gen):
            return messages[-1]["content"] + self.suffix

        def choose(self, prompt, options):
            return options[0]

    llm = load_subject({"kind": "llm", "adapter": "echo_test", "params": {"suffix": "?"}})
    assert llm.chat([{"role": "user", "content": "hi"}]) == "hi?"
    register_adapter("not_a_vlm", "vlm", target=Echo)
    with pytest.raises(ConfigError, match="VLM protocol"):
        load_subject({"kind": "vlm", "adapter": "not_a_vlm"})


def test_shipped_config_examples_parse():
    from pathlib import Path

    from embeval.subjects.registry import adapter_kwargs, read_spec, resolve_adapter

    files = sorted((Path(__file__).resolve().parents[3] / "config" / "subjects").glob("*.yaml"))
    assert len(files) >= 8
    for f in files:
        spec = read_spec(f)
        factory = resolve_adapter(spec.kind, spec.adapter)
        adapter_kwargs(factory, spec)  # field names match the adapter's signature


# --------------------------------------------------------------------------- test double

def test_example_from_schema_is_valid_and_seeded():
    outs = [example_from_schema(SCHEMA, seed=s) for s in range(20)]
    for o in outs:
        jsonschema.validate(o, SCHEMA)
    assert len({json.dumps(o, sort_keys=True) for o in outs}) > 5
    assert example_from_schema(SCHEMA, seed=3) == example_from_schema(SCHEMA, seed=3)


def test_scripted_llm_rules_schema_and_choose():
    llm = ScriptedLLM(rules=[("propose", '{"dimensions": ["spatial", "color"], "score": 2, "label": "other", '
                                         '"confidence": 0.5, "done": true, "ref": {"name": "x"}}')])
    out = json.loads(llm.chat([{"role": "user", "content": "Propose dimensions"}], json_schema=SCHEMA))
    assert out["dimensions"] == ["spatial", "color"]
    # no rule: deterministic and valid
    a = llm.chat([{"role": "user", "content": "review these"}], json_schema=SCHEMA)
    assert a == llm.chat([{"role": "user", "content": "review these"}], json_schema=SCHEMA)
    jsonschema.validate(json.loads(a), SCHEMA)
    # a rule that violates the schema is an error, not a silent pass
    bad = ScriptedLLM(rules=[("x", '{"score": 9}')])
    with pytest.raises(InvalidInputError):
        bad.chat([{"role": "user", "content": "x"}], json_schema=SCHEMA)
    assert llm.chat([{"role": "user", "content": ""}]) != ""
    assert llm.choose("Which is red: the red cube or the blue ball?", ["blue ball", "red cube"]) in {"blue ball", "red cube"}
    assert llm.choose("Put it in the bowl", ["bowl", "plate"]) == "bowl"
    assert len(llm.calls) == 6


# --------------------------------------------------------------------------- OpenAI client <-> server

@pytest.fixture(scope="module")
def served():
    subject = ScriptedLLM(id="served-llm", rules=[("capital", "Paris")])
    with serve_in_thread(create_app(subject)) as srv:
        yield srv, subject


@pytest.fixture(scope="module")
def served_vlm():
    with serve_in_thread(create_app(ScriptedVLM(id="served-vlm"))) as srv:
        yield srv


def test_openai_llm_against_local_server(served, monkeypatch):
    srv, subject = served
    monkeypatch.setenv("OPENAI_BASE_URL", srv.url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    llm = load_subject({"kind": "llm", "adapter": "openai", "params": {"model": "m"}})
    assert llm.chat([{"role": "user", "content": "capital of France?"}]) == "Paris"
    out = llm.chat([{"role": "user", "content": "rate it"}], json_schema=SCHEMA)
    jsonschema.validate(json.loads(out), SCHEMA)
    assert subject.calls[-1]["json_schema"] == SCHEMA  # the schema travelled as response_format
    assert llm.choose("Is the sky blue? yes or no", ["no", "yes"]) in ("no", "yes")
    assert llm.client.client.headers["Authorization"] == "Bearer sk-test"


def test_openai_vlm_sends_lossless_images(served_vlm):
    img = np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    assert np.array_equal(decode_data_url(image_data_url(img)), img)
    vlm = OpenAIChatVLM(url=served_vlm.url + "/v1")
    bright = np.full((16, 16, 3), 250, np.uint8)
    dark = np.zeros((16, 16, 3), np.uint8)
    a = vlm.generate([bright], "Pick the cube")
    assert a == ScriptedVLM().generate([bright], "Pick the cube") and "bright white" in a
    assert "dark black" in vlm.generate([dark], "Pick the cube")


def test_server_down_raises_naming_url():
    port = free_port()
    llm = OpenAIChatLLM(url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff=0.01, timeout=2)
    with pytest.raises(ServerUnavailableError) as ei:
        llm.chat([{"role": "user", "content": "hi"}])
    assert f"127.0.0.1:{port}" in str(ei.value) and "start the server" in str(ei.value)


def test_retries_transient_failures_and_empty_replies():
    from fastapi import FastAPI

    app = FastAPI()
    state = {"n": 0}
    lock = threading.Lock()

    @app.post("/v1/chat/completions")
    def flaky():
        with lock:
            state["n"] += 1
            n = state["n"]
        from fastapi.responses import JSONResponse

        if n == 1:
            return JSONResponse(status_code=503, content={"error": "loading"})
        content = "" if n == 2 else "finally"
        return {"choices": [{"message": {"role": "assistant", "content": content}}]}

    with serve_in_thread(app) as srv:
        llm = OpenAIChatLLM(url=srv.url + "/v1", max_retries=3, backoff=0.01)
        assert llm.chat([{"role": "user", "content": "hi"}]) == "finally"
        assert state["n"] == 3
        state["n"] = 1  # next replies: empty forever -> error, never ""
        llm2 = OpenAIChatLLM(url=srv.url + "/v1", max_retries=0, backoff=0.01)
        with pytest.raises(ServerUnavailableError, match="empty reply"):
            llm2.chat([{"role": "user", "content": "hi"}])


# --------------------------------------------------------------------------- cache

def test_cached_llm_persists_across_instances(tmp_path):
    db = tmp_path / "cache.sqlite"
    inner = ScriptedLLM(id="s")
    c = CachedLLM(inner, db)
    msgs = [{"role": "user", "content": "rate"}]
    a = c.chat(msgs, json_schema=SCHEMA, temperature=0)
    assert c.chat(msgs, json_schema=SCHEMA, temperature=0) == a
    c.chat(msgs, json_schema=SCHEMA, temperature=0.5)  # different parameters: a new call
    assert (c.hits, c.misses, len(inner.calls)) == (1, 2, 2)
    c.choose("left or right", ["left", "right"])
    c2 = CachedLLM(ScriptedLLM(id="s", default="other"), db)
    assert c2.chat(msgs, json_schema=SCHEMA, temperature=0) == a and c2.hits == 1
    assert c2.choose("left or right", ["left", "right"]) == c.choose("left or right", ["left", "right"])
    assert len(c2.inner.calls) == 0
    # a different subject id never shares entries
    c3 = CachedLLM(ScriptedLLM(id="t"), db)
    c3.chat(msgs, json_schema=SCHEMA, temperature=0)
    assert c3.misses == 1


def test_cached_vlm_keys_images_and_spec_cache(tmp_path):
    vlm = CachedVLM(ScriptedVLM(), tmp_path / "v.sqlite")
    img = np.zeros((8, 8, 3), np.uint8)
    vlm.generate([img], "pick")
    img2 = img.copy()
    img2[0, 0, 0] = 1
    vlm.generate([img2], "pick")
    vlm.generate([img.copy()], "pick")
    assert (vlm.hits, vlm.misses) == (1, 2)
    spec = {"kind": "llm", "adapter": "scripted", "cache": str(tmp_path / "x.sqlite")}
    assert isinstance(load_subject(spec), CachedLLM)
    with pytest.raises(ConfigError, match="cache"):
        load_subject({"kind": "policy", "adapter": "scripted", "cache": str(tmp_path / "y.sqlite")})


# --------------------------------------------------------------------------- CLI

def test_cli_subjects_list_and_check(capsys):
    from pathlib import Path

    from embeval_cli import main

    assert main(["subjects", "list", "--kind", "policy"]) == 0
    out = capsys.readouterr().out
    assert "openvla_rest" in out and "lerobot" in out and "openai" not in out
    spec = Path(__file__).resolve().parents[3] / "config" / "subjects" / "scripted_llm.yaml"
    assert main(["subjects", "check", str(spec), "--prompt", "ready?"]) == 0
    assert "chat   -> 'yes'" in capsys.readouterr().out
    assert main(["subjects", "check", str(spec.with_name("nope.yaml"))]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_relative_paths_and_param_overrides(tmp_path):
    from embeval.subjects.registry import read_spec

    (tmp_path / "weights").mkdir()
    spec = tmp_path / "s.yaml"
    spec.write_text("kind: policy\nadapter: image_stats\npath: weights\n")
    assert read_spec(spec).path == str(tmp_path / "weights")  # exists next to the YAML
    spec.write_text("kind: policy\nadapter: image_stats\npath: tiny-vla\n")
    assert read_spec(spec).path == "tiny-vla"  # a name the adapter resolves
    spec.write_text("kind: policy\nadapter: image_stats\nparams: {scale: 0.1}\n")
    assert load_subject(spec, params={"scale": 0.5}).scale == 0.5
    assert load_subject(spec, scale=0.25).scale == 0.25


def test_cli_serve_openai_subprocess():
    """`embeval serve openai` in its own process, reached by the OpenAI client."""
    from pathlib import Path

    import httpx

    from embeval.serving.runner import start_serve_process

    spec = Path(__file__).resolve().parents[3] / "config" / "subjects" / "scripted_llm.yaml"
    proc, url = start_serve_process(["openai", "--subject", str(spec)])
    try:
        llm = OpenAIChatLLM(url=f"{url}/v1")
        assert llm.chat([{"role": "user", "content": "ready?"}]) == "yes"
        models = httpx.get(f"{url}/v1/models").json()
        assert models["data"][0]["id"] == "scripted-llm"
    finally:
        proc.terminate()
        proc.wait(10)


def test_choose_by_logprobs_and_fallback():
    from fastapi import FastAPI

    app = FastAPI()
    seen = []

    @app.post("/v1/chat/completions")
    async def chat(request: __import__("fastapi").Request):
        body = await request.json()
        seen.append(body)
        if body.get("logprobs"):
            top = [{"token": " B", "logprob": -0.2}, {"token": "A", "logprob": -1.9}, {"token": "C.", "logprob": -3.0},
                   {"token": "b", "logprob": -0.1}]  # lower-case b counts as B
            return {"choices": [{"message": {"role": "assistant", "content": "B"},
                                 "logprobs": {"content": [{"token": "B", "logprob": -0.2, "top_logprobs": top}]}}]}
        return {"choices": [{"message": {"role": "assistant", "content": '{"answer": "cat"}'}}]}

    with serve_in_thread(app) as srv:
        llm = OpenAIChatLLM(url=srv.url + "/v1", choose_method="logprobs")
        assert llm.choose("Which one purrs?", ["dog", "cat", "cow"]) == "cat"
        assert llm.last_choice_logprobs == {"dog": -1.9, "cat": -0.1, "cow": -3.0}
        assert seen[-1]["max_tokens"] == 1 and "B. cat" in seen[-1]["messages"][0]["content"]
        plain = OpenAIChatLLM(url=srv.url + "/v1")  # schema method
        assert plain.choose("Which one purrs?", ["dog", "cat"]) == "cat"
        assert seen[-1]["response_format"]["json_schema"]["schema"]["properties"]["answer"]["enum"] == ["dog", "cat"]
    with pytest.raises(ConfigError, match="choose_method"):
        OpenAIChatLLM(url="http://127.0.0.1:1/v1", choose_method="vibes")


# --------------------------------------------------------------------------- concurrent batches

@pytest.fixture(scope="module")
def slow_server():
    """A chat server that answers each request after ``delay`` seconds (``delay=S`` in the prompt, default 0.4)
    with the prompt echoed, 400 for a prompt containing "reject", and counts the requests in flight."""
    import asyncio
    import re

    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()
    state = {"in_flight": 0, "peak": 0}

    @app.post("/v1/chat/completions")
    async def chat(request: __import__("fastapi").Request):
        body = await request.json()
        prompt = next(c["text"] for c in body["messages"][-1]["content"] if c["type"] == "text")
        if "reject" in prompt:
            return JSONResponse(status_code=400, content={"error": "no such model"})
        state["in_flight"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        m = re.search(r"delay=([0-9.]+)", prompt)
        await asyncio.sleep(float(m.group(1)) if m else 0.4)
        state["in_flight"] -= 1
        return {"choices": [{"message": {"role": "assistant", "content": f"echo {prompt}"}}]}

    with serve_in_thread(app) as srv:
        yield srv, state


def _timed_batch(vlm, prompts, state):
    import time

    state["peak"] = 0
    img = np.zeros((4, 4, 3), np.uint8)
    t0 = time.perf_counter()
    out = vlm.generate_batch([[img]] * len(prompts), prompts)
    return out, time.perf_counter() - t0


def test_openai_vlm_batch_requests_overlap_up_to_max_concurrency(slow_server):
    """8 requests of 0.4-0.61 s each: with max_concurrency 8 all are in flight at once (about one latency, not 8), with
    2 at most two are; answers come back in the items' order whatever order the replies arrive in."""
    srv, state = slow_server
    prompts = [f"item {k} delay={0.4 + 0.03 * (7 - k):.2f}" for k in range(8)]  # later items reply first
    wide = OpenAIChatVLM(url=srv.url + "/v1", max_concurrency=8)
    out, wall8 = _timed_batch(wide, prompts, state)
    assert out == [f"echo {p}" for p in prompts]
    assert state["peak"] == 8
    assert wall8 < 2 * 0.61  # about the slowest item's latency (measured 0.65-0.72 s), one at a time takes 4.0 s
    narrow = OpenAIChatVLM(url=srv.url + "/v1", max_concurrency=2)
    out, wall2 = _timed_batch(narrow, prompts, state)
    assert out == [f"echo {p}" for p in prompts]
    assert state["peak"] == 2 and wall2 >= 4 * 0.4
    assert wall2 > 2 * wall8
    assert load_subject({"kind": "vlm", "adapter": "openai", "url": srv.url + "/v1"}).max_concurrency == 8  # default


def test_openai_vlm_batch_failure_stays_with_its_item(slow_server):
    """A rejected request (HTTP 400) and an invalid image fail their own items with generate()'s errors; the other
    items are answered; generate_batch raises the first item's error after all requests ended."""
    srv, state = slow_server
    vlm = OpenAIChatVLM(url=srv.url + "/v1", max_concurrency=4, max_retries=0)
    img = np.zeros((4, 4, 3), np.uint8)
    images = [[img], [img], [np.zeros((4, 4), np.uint8)], [img]]
    prompts = ["a delay=0.05", "reject this", "b delay=0.05", "c delay=0.05"]
    out = vlm.generate_many(images, prompts)
    assert out[0] == "echo a delay=0.05" and out[3] == "echo c delay=0.05"
    assert isinstance(out[1], ServerUnavailableError) and "HTTP 400" in str(out[1])
    with pytest.raises(ServerUnavailableError) as one:
        vlm.generate([img], "reject this")
    assert str(out[1]) == str(one.value)
    assert isinstance(out[2], InvalidInputError) and "images[0]" in str(out[2])
    with pytest.raises(ServerUnavailableError, match="HTTP 400"):
        vlm.generate_batch(images, prompts)
    with pytest.raises(InvalidInputError, match="2 image lists for 1 prompts"):
        vlm.generate_many([[img], [img]], ["x"])


@pytest.mark.parametrize("bad", [0, 65, -1, "8", 2.5, True])
def test_openai_vlm_max_concurrency_is_checked(bad):
    with pytest.raises(ConfigError, match=r"params.max_concurrency': must (lie in|be an integer in) 1\.\.64"):
        load_subject({"kind": "vlm", "adapter": "openai", "url": "http://127.0.0.1:1/v1", "params": {"max_concurrency": bad}})


def test_openai_vlm_batch_against_embeval_server_equals_batch1(served_vlm):
    """Through `embeval serve openai`'s app (a scripted VLM): the concurrent batch answers as one call per item."""
    vlm = OpenAIChatVLM(url=served_vlm.url + "/v1", max_concurrency=3)
    rng = np.random.default_rng(1)
    images = [[rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)] for _ in range(5)] + [[np.full((8, 8, 3), 250, np.uint8)]]
    prompts = [f"Pick the cube {k}" for k in range(6)]
    assert vlm.generate_batch(images, prompts) == [vlm.generate(i, p) for i, p in zip(images, prompts)]
    assert "bright white" in vlm.generate_batch(images, prompts)[5]
