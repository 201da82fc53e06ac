"""vla-eval 0.8.0's own code against embeval, both ways: its ``Connection`` (the client its benchmarks use) against
``embeval serve vla-eval``, and one of its ``PredictModelServer``s (served by ``vla_eval.model_servers.serve``)
against ``adapter: vla-eval`` in a full pybullet episode with a Decision score."""
from __future__ import annotations

import threading
from pathlib import Path

import anyio
import httpx
import numpy as np
import pytest

pytest.importorskip("vla_eval")
from vla_eval.connection import Connection  # noqa: E402
from vla_eval.model_servers.predict import PredictModelServer  # noqa: E402
from vla_eval.model_servers.serve import serve_async  # noqa: E402
from vla_eval.specs import GRIPPER_01, IMAGE_RGB, LANGUAGE, POSITION_DELTA, ROTATION_EULER  # noqa: E402

from embeval.serving.runner import app_from_spec  # noqa: E402
from embeval.serving.vla_eval_server import serve_in_thread  # noqa: E402
from embeval.subjects.registry import load_subject  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
STATS = ROOT / "config/subjects/image_stats_policy.yaml"


def test_vla_eval_connection_against_embeval_serve():
    img = np.full((16, 16, 3), 200, np.uint8)

    async def session(url: str) -> list:
        conn = Connection(url, timeout=10, max_retries=1)
        await conn.connect(benchmark="embeval-test")
        info = dict(conn.server_info)
        await conn.start_episode({"task": {"name": "pick"}})
        a = await conn.act({"images": {"third_person": img}, "task_description": "pick"})
        b = await conn.act({"images": {"third_person": img[::2, ::2].copy() // 2}, "task_description": "pick"})
        await conn.end_episode({"success": False})
        await conn.reconnect()  # its reconnect path: a new connection and hello
        await conn.start_episode({"task": {"name": "pick"}})
        c = await conn.act({"images": {"third_person": img}, "task_description": "pick"})
        await conn.close()
        return [info, a, b, c]

    with serve_in_thread(app_from_spec(STATS, "vla-eval")) as running:
        info, a, b, c = anyio.run(session, running.url)
        h = httpx.get(running.http_url + "/health", timeout=5).json()
    assert info["protocol_version"] == 1 and info["model_server"] == "embeval:image-stats-policy"
    assert info["action_spec"]["gripper"]["format"] == "continuous_01"
    for r in (a, b, c):
        assert r["actions"].shape == (7,) and r["actions"].dtype == np.float32
    assert a["actions"][0] == pytest.approx(0.1 * (200 / 255 - 0.5), abs=1e-6)
    assert b["actions"][0] == pytest.approx(0.1 * (100 / 255 - 0.5), abs=1e-6)
    assert np.array_equal(a["actions"], c["actions"])  # repeatable across episodes and connections
    assert (h["actions"], h["episodes"]) == (3, 2)


class _MeanChunkServer(PredictModelServer):
    """A vla-eval model server answering 2-action chunks: x = 0.2 * (mean image - 0.5), then 0; gripper 1."""

    def __init__(self):
        super().__init__(chunk_size=2)
        self.calls = 0

    def predict(self, obs, ctx=None):
        self.calls += 1
        img = next(iter(obs["images"].values()))
        x = 0.2 * (float(np.mean(img)) / 255.0 - 0.5)
        return {"actions": np.array([[x, 0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0, 1]], dtype=np.float32)}

    def get_action_spec(self):
        return {"position": POSITION_DELTA, "rotation": ROTATION_EULER, "gripper": GRIPPER_01}

    def get_observation_spec(self):
        return {"image": IMAGE_RGB, "language": LANGUAGE}


def test_adapter_runs_an_episode_against_a_vla_eval_model_server():
    from embeval.sim.backends import make_episode_env, score_episode

    model = _MeanChunkServer()
    stop, port = threading.Event(), []

    async def main():
        async with anyio.create_task_group() as tg:
            port.append(await tg.start(serve_async, model, "127.0.0.1", 0))
            while not stop.is_set():
                await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    thread = threading.Thread(target=anyio.run, args=(main,), daemon=True)
    thread.start()
    for _ in range(200):  # bounded wait for the bound port
        if port:
            break
        threading.Event().wait(0.05)
    env = make_episode_env({"backend": "pybullet", "env": "Pick", "width": 48, "height": 32, "max_steps": 4})
    try:
        url = f"ws://127.0.0.1:{port[0]}"
        assert httpx.get(f"http://127.0.0.1:{port[0]}/health", timeout=5).status_code == 200
        remote = load_subject({"id": "peer", "kind": "policy", "adapter": "vla-eval", "url": url,
                               "params": {"chunk_size": 2}})
        sc, ref, dis = score_episode(env, remote, 1, ("darken", 4, 9))
        assert ref.outcome.n_actions == dis.outcome.n_actions == 4
        assert model.calls == 4  # two episodes of 4 steps, one predict per 2-action chunk
        mean = float(np.mean(ref.first_observation.images["third_person"])) / 255.0
        assert ref.first_action.vector[0] == pytest.approx(0.2 * (mean - 0.5), abs=1e-6)
        assert dis.first_action.vector[0] < ref.first_action.vector[0]  # darkened: a smaller mean
        assert 0.0 <= sc.decision < 1.0
        assert remote.server_info["action_spec"]["gripper"]["format"] == "continuous_01"
        remote.close()
    finally:
        env.close()
        stop.set()
        thread.join(10)
