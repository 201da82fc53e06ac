"""Demo stage ``subjects``: the adapter registry, both serving protocols end to end on 127.0.0.1,
the call cache, and the embedded Gemma 3 270M (JSON-constrained chat, log-likelihood choice)."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np


def _scene(seed: int, size: int = 96) -> np.ndarray:
    rng = np.random.default_rng(seed)
    img = np.full((size, size, 3), 170, np.uint8)
    x, y = rng.integers(10, size - 30, 2)
    img[y:y + 20, x:x + 20] = (200, 30, 30)
    return img


def _timed(fn, n: int = 5):
    out = fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return out, (time.perf_counter() - t0) / n * 1000.0


def run(ctx) -> None:
    from embeval.action import Observation
    from embeval.serving import openai_server, openvla_server
    from embeval.serving.runner import serve_in_thread
    from embeval.subjects.adapters.openai_chat import OpenAIChatVLM
    from embeval.subjects.adapters.openvla_rest import OpenVLARestPolicy
    from embeval.subjects.cache import CachedLLM
    from embeval.subjects.registry import list_adapters
    from embeval.subjects.scripted import ImageStatsPolicy, ScriptedVLM

    rows = list_adapters()
    print(f"{len(rows)} registered adapters:")
    print(f"  {'kind':<8}{'adapter':<14}")
    for kind, name, _ in rows:
        print(f"  {kind:<8}{name:<14}")

    latency: dict[str, float] = {}
    img = _scene(ctx.seed)
    dark = (img * 0.3).astype(np.uint8)

    # OpenAI-compatible protocol: a VLM served and called back over HTTP
    vlm = ScriptedVLM(id="scripted-vlm")
    with serve_in_thread(openai_server.create_app(vlm)) as srv:
        client = OpenAIChatVLM(url=srv.url + "/v1", model="scripted-vlm")
        ans, latency["openai VLM (HTTP)"] = _timed(lambda: client.generate([img], "Pick up the red cube."))
        ans_dark = client.generate([dark], "Pick up the red cube.")
    _, latency["VLM direct"] = _timed(lambda: vlm.generate([img], "Pick up the red cube."))
    print("\nOpenAI-compatible round trip (PNG data URLs, lossless):")
    print(f"  reference image -> {ans!r}\n  darkened image  -> {ans_dark!r}")

    # OpenVLA REST protocol: a policy served and called back
    policy = ImageStatsPolicy()
    obs = Observation(images={"third_person": img}, instruction="pick up the red cube")
    with serve_in_thread(openvla_server.create_app(policy)) as srv:
        rest = OpenVLARestPolicy(url=srv.url)
        rest.reset("pick up the red cube")
        a_rest, latency["openvla_rest policy (HTTP)"] = _timed(lambda: rest.act(obs))
    a_direct, latency["policy direct"] = _timed(lambda: policy.act(obs))
    diff = float(np.abs(a_rest.vector - a_direct.vector).max())
    print("\nOpenVLA REST round trip (json_numpy image, float32 action):")
    print("  action over REST  " + " ".join(f"{v:+.4f}" for v in a_rest.vector))
    print("  action in-process " + " ".join(f"{v:+.4f}" for v in a_direct.vector))
    print(f"  max |difference| = {diff:.2e}")

    # the embedded GGUF model + the call cache
    try:
        import llama_cpp  # noqa: F401
        have_llama = True
    except ImportError:
        have_llama = False
    if have_llama:
        from embeval.subjects.adapters.llama_cpp import LlamaCppLLM

        t0 = time.perf_counter()
        gemma = LlamaCppLLM(n_ctx=256, max_tokens=32)
        _ = gemma.model
        load_s = time.perf_counter() - t0
        schema = {"type": "object", "properties": {"verb": {"enum": ["pick", "place", "push", "pour"]}}, "required": ["verb"]}
        with tempfile.TemporaryDirectory() as d:
            cached = CachedLLM(gemma, Path(d) / "cache.sqlite")
            msgs = [{"role": "user", "content": "Which verb fits 'lift the cup'? Answer as JSON."}]
            t0 = time.perf_counter()
            out = cached.chat(msgs, json_schema=schema)
            latency["llama_cpp chat (miss)"] = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            cached.chat(msgs, json_schema=schema)
            latency["llama_cpp chat (cache hit)"] = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            choice = gemma.choose("The capital of France is", ["Paris", "Berlin", "Banana"])
            latency["llama_cpp choose (3 options)"] = (time.perf_counter() - t0) * 1000
        print(f"\nEmbedded Gemma 3 270M (GGUF, llama.cpp; loaded in {load_s:.1f} s; weak: plumbing only):")
        print(f"  JSON-constrained chat -> {out}")
        print(f"  choose('The capital of France is', [Paris, Berlin, Banana]) -> {choice!r}")
        print(f"  cache: {cached.hits} hit, {cached.misses} miss")
    else:
        print("\nEmbedded Gemma 3 270M: skipped (llama-cpp-python is not installed; run scripts/install.sh)")

    print("\nPer-call latency (ms; shared CPU, indicative only):")
    for k, v in latency.items():
        print(f"  {k:<32}{v:10.2f}")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.45 * len(latency) + 1))
    ax.barh(list(latency), list(latency.values()), color="tab:blue")
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds per call (log)")
    ax.set_title("Subject adapters: per-call latency")
    fig.tight_layout()
    Path(ctx.out_dir).mkdir(parents=True, exist_ok=True)
    out_png = Path(ctx.out_dir) / "subjects_latency.png"
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    print(f"  plot: {out_png}")
    ctx.shared["subjects_latency_ms"] = latency
