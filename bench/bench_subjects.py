"""Subject adapters: protocol overhead (HTTP round trip vs in-process call) and the call cache.

Speeds are ratios against a baseline measured in the same run: the in-process call of the same
subject (for the servers) and the uncached call (for the cache)."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench.timing import per_call


def run(quick: bool) -> list[dict]:
    from embeval.action import Observation
    from embeval.serving import openai_server, openvla_server
    from embeval.serving.runner import serve_in_thread
    from embeval.subjects.adapters.openai_chat import OpenAIChatVLM
    from embeval.subjects.adapters.openvla_rest import OpenVLARestPolicy
    from embeval.subjects.cache import CachedVLM
    from embeval.subjects.scripted import ImageStatsPolicy, ScriptedVLM

    n = 10 if quick else 50
    rows = []
    for size in ([224] if quick else [224, 480]):
        img = np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8)
        policy = ImageStatsPolicy()
        obs = Observation(images={"cam": img}, instruction="pick")
        base = per_call(lambda: policy.act(obs), n)
        with serve_in_thread(openvla_server.create_app(policy)) as srv:
            rest = OpenVLARestPolicy(url=srv.url)
            t = per_call(lambda: rest.act(obs), n)
        rows.append({"case": f"openvla_rest act {size}px", "ms_per_call": t * 1e3, "baseline": "in-process act",
                     "baseline_ms": base * 1e3, "ratio": t / base})
        vlm = ScriptedVLM()
        base = per_call(lambda: vlm.generate([img], "pick"), n)
        with serve_in_thread(openai_server.create_app(vlm)) as srv:
            client = OpenAIChatVLM(url=srv.url + "/v1")
            t = per_call(lambda: client.generate([img], "pick"), n)
        rows.append({"case": f"openai VLM generate {size}px (PNG)", "ms_per_call": t * 1e3, "baseline": "in-process generate",
                     "baseline_ms": base * 1e3, "ratio": t / base})

    class SlowVLM(ScriptedVLM):  # stands in for a model: 20 ms per answer
        def generate(self, images, prompt, **gen):
            time.sleep(0.02)
            return super().generate(images, prompt, **gen)

    rows.append(_health_under_load(SlowVLM(id="slow-vlm"), 50 if quick else 200))

    img = np.random.default_rng(1).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    with tempfile.TemporaryDirectory() as d:
        cached = CachedVLM(SlowVLM(), Path(d) / "c.sqlite")
        miss = per_call(lambda: SlowVLM().generate([img], "pick"), max(3, n // 5))
        hit = per_call(lambda: cached.generate([img], "pick"), n)
    rows.append({"case": "CachedVLM hit (224px, 20 ms model)", "ms_per_call": hit * 1e3, "baseline": "uncached call",
                 "baseline_ms": miss * 1e3, "ratio": hit / miss})
    return rows


def _health_under_load(subject, n: int) -> dict:
    """``/health`` latency (median, worst of 20 probes) while ``n`` chat calls to a 20 ms model queue,
    against the same probes on the idle server."""
    import asyncio

    import httpx

    from embeval.serving import openai_server
    from embeval.serving.runner import serve_in_thread

    app = openai_server.create_app(subject)
    with serve_in_thread(app) as srv:
        async def probes(c) -> list[float]:
            out = []
            for _ in range(20):
                t0 = time.perf_counter()
                (await c.get(srv.url + "/health")).raise_for_status()
                out.append(time.perf_counter() - t0)
                await asyncio.sleep(0.01)
            return out

        async def main():
            limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
            async with httpx.AsyncClient(limits=limits, timeout=120) as c:
                idle = await probes(c)
                body = {"messages": [{"role": "user", "content": "pick"}]}
                tasks = [asyncio.create_task(c.post(srv.url + "/v1/chat/completions", json=body)) for _ in range(n)]
                while app.state.queue.pending < n // 2:
                    await asyncio.sleep(0.005)
                loaded = await probes(c)
                queued = app.state.queue.pending
                replies = await asyncio.gather(*tasks)
                assert all(r.status_code == 200 for r in replies)
                return idle, loaded, queued

        idle, loaded, queued = asyncio.run(main())
    return {"case": f"/health with {queued}+ chat calls queued (20 ms model), median / worst of 20",
            "ms_per_call": float(np.median(loaded)) * 1e3, "worst_ms": max(loaded) * 1e3, "baseline": "/health idle",
            "baseline_ms": float(np.median(idle)) * 1e3, "ratio": float(np.median(loaded) / np.median(idle))}
