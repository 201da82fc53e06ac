"""Batching: what one batched policy call costs per observation against batch 1, measured in the
same run on one torch thread, and how far batched actions lie from batch-1 actions.

Rows:

* ``tiny-vla act_slots batch B``: model seconds per observation (preprocessing + one forward + decoding of the
  whole batch, divided by B) for B = 1, 8, 32 on rendered pybullet observations; ``ratio`` = that time / the
  batch-1 time (below 1: batching pays). The same for ``tiny-vla-a2a-frozen`` (the choice VLA at later steps,
  its VLM prefix cached per slot; 240x320 frames) and for the looping default any batch-1 policy gets
  (:class:`~embeval.subjects.protocols.LoopSlots`: one copy per slot, no gain expected).
* ``max |batched - batch-1|``: the largest action difference over an episode schedule in which slots start,
  restart and end at different steps, each episode replayed on a batch-1 copy; target < 1e-5.
* ``act2answer <policy> ...``: Act2Answer episodes/s of today's sequential path (``run_items``: one environment,
  ``act`` per step), of today's per-unit workers (2 processes, each the sequential path on half the items; full
  mode) and of vectorised environments (:mod:`embeval.act2answer.vector`: N environments in worker processes, one
  batched policy call per step, continuous batching), on the same items and seeds, after a warm-up; each path runs
  twice interleaved with the others (full mode) and keeps its fastest run. ``ratio``: episodes/s / the sequential
  path's (target >= 2); worker start-up is its own column (``startup_s``, paid once per run).
  ``cpu_ms_per_episode``: CPU time of all processes of the path per episode; ``idle_estimate_ratio``: the
  sequential CPU time / the CPU time on the path's critical path (lockstep: the workers' CPU split over the
  workers plus the calling process's; shards: the busier shard), i.e. the ratio an otherwise idle machine with a
  core per worker would give. ``records_equal``: every record (actions, cube position, zone, steps) identical to
  the sequential run's; ``scores_equal``: zone, choice, success, steps and end reason identical; ``exact``: the
  policy asked through its batch-1 path per environment (LoopSlots), else its own batched forward;
  ``load_1min``: the machine's load average then (2 cores; other sessions' work counts).
* ``serve openvla ... --max-batch-size B``: the OpenVLA-protocol server's requests/s for the tiny VLA with 16
  concurrent clients (raw HTTP/1.1 keep-alive connections, each its own ``episode``, two 224x224 cameras) at
  B = 1 and 16 (``--max-wait-ms 10``), the two servers ``embeval serve`` processes (one torch thread) measured
  interleaved, best run each; ``ratio`` = requests/s / batch 1's (target >= 1.5); ``max_abs_diff_vs_batch1``:
  the answers' largest difference. Quick mode: servers in threads of this process (checks the path, not a speed).
* ``... one vectorised step``: where a step's time goes (ms per batched step): wall, model (the batched call),
  simulation and rendering CPU summed over the step's environments, transport (pickling, both sides),
  ``env_bound_ms`` = (simulation + rendering) / worker processes (the environments' least wall time per step) and
  its share of the wall time, measured and on an idle machine (``env_share_if_idle``: env_bound / (env_bound +
  model + transport)).
"""
from __future__ import annotations

import numpy as np

from bench.timing import per_call, restores_torch_threads

BATCHES = (1, 8, 32)
TARGET_DIFF = 1e-5
INSTRUCTIONS = ["pick up the red cube", "put the cube on the left picture", "place the blue block on the plate",
                "pick the green cylinder", "push the yellow cube"]


def _rendered_observations(n: int) -> list:
    """``n`` observations of the pybullet cell: episodes of seeds 0.. driven by the scripted expert, 4 steps each."""
    from embeval.sim.env import SimEnv

    out = []
    with SimEnv() as env:
        seed = 0
        while len(out) < n:
            ob = env.reset(seed=seed, task="Pick" if seed % 2 == 0 else "Place")
            expert = env.expert()
            for _ in range(4):
                out.append(ob)
                ob = env.step(expert.act(ob)).observation
            seed += 1
    return out[:n]


def _random_observations(n: int, shape: tuple[int, int], seed: int = 0) -> list:
    """``n`` observations with random ``shape`` frames (the cost depends on shapes only) and plausible state."""
    from embeval.action import Observation

    rng = np.random.default_rng(seed)
    return [Observation(images={"third_person": rng.integers(0, 256, (*shape, 3), dtype=np.uint8)},
                        state={"tcp_pose": np.r_[rng.uniform(0.35, 0.6), rng.uniform(-0.2, 0.2), rng.uniform(0.03, 0.3),
                                                 0, 0, 0, 1.0], "gripper": np.array([1.0])}) for _ in range(n)]


def _per_obs(policy, observations: list, batch: int, reps: int) -> float:
    """Seconds per observation of ``policy.act_slots`` over ``batch`` slots (episodes started, first step done)."""
    slots = list(range(batch))
    obs = [observations[i % len(observations)] for i in slots]
    policy.reset_slots(slots, [INSTRUCTIONS[i % len(INSTRUCTIONS)] for i in slots])
    policy.act_slots(slots, obs)  # the first step (the choice VLA's prefix) is not what is timed
    t = per_call(lambda: policy.act_slots(slots, obs), reps) / batch
    policy.end_slots(slots)
    return t


def _speed_rows(name: str, policy, observations: list, quick: bool) -> list[dict]:
    rows, base = [], None
    for b in BATCHES:
        reps = max(2, (24 if quick else 160) // b)
        t = _per_obs(policy, observations, b, reps)
        base = base or t
        rows.append({"case": f"{name} act_slots batch {b}, per observation", "ms": 1000 * t, "obs_per_s": 1.0 / t,
                     "ratio": t / base})
    return rows


def _max_difference(policy, observations: list) -> tuple[float, int]:
    """(largest |batched - batch-1| action component, actions compared) over a schedule of 6 slots and 10 steps in
    which slots start late, restart mid-way, end, and a freed slot takes a new episode."""
    from embeval.subjects.protocols import fork_policy

    events = {0: [0, 1, 2], 2: [3], 4: [1], 6: [4, 5], 7: [2]}  # step -> slots starting an episode there
    ends = {5: [2]}
    live: dict[int, int] = {}
    episodes: list[tuple[str, list, list]] = []
    k = 0
    for step in range(10):
        for s in ends.get(step, []):
            policy.end_slots([s])
            live.pop(s)
        starts = events.get(step, [])
        for s in starts:
            live[s] = len(episodes)
            episodes.append((INSTRUCTIONS[len(episodes) % len(INSTRUCTIONS)], [], []))
        if starts:
            policy.reset_slots(starts, [episodes[live[s]][0] for s in starts])
        slots = sorted(live)
        obs = []
        for _ in slots:
            obs.append(observations[k % len(observations)])
            k += 1
        for s, o, a in zip(slots, obs, policy.act_slots(slots, obs)):
            episodes[live[s]][1].append(o)
            episodes[live[s]][2].append(a.vector)
    policy.end_slots(list(live))
    worst, n = 0.0, 0
    for instruction, obs, acts in episodes:
        ref = fork_policy(policy)
        ref.reset(instruction)
        for o, a in zip(obs, acts):
            worst = max(worst, float(np.abs(ref.act(o).vector - a).max()))
            n += 1
    return worst, n


#: record fields that make an episode's score (zone -> success; steps and end reason: how it ended)
SCORE_FIELDS = ("zone", "choice", "success", "steps", "end_reason")


def _vector_row(name: str, seq: list, seq_wall: float, seq_cpu: float, vec: list, prof, total: float, label: str) -> dict:
    """One vectorised run's row against the sequential run ``seq`` (``seq_wall`` s, ``seq_cpu`` CPU s)."""
    import os

    n = len(seq)
    same, scores = _equal_counts(seq, vec)
    cpu = prof.parent_cpu_s + prof.worker_cpu_s
    # lockstep on an idle machine: the workers' CPU time split over the workers, then the calling process's
    idle = prof.worker_cpu_s / prof.workers + prof.parent_cpu_s
    return {"case": f"act2answer {name} vectorised {prof.num_envs} envs ({prof.workers} workers), {label}", "episodes": n,
            "episodes_per_s": n / prof.wall_s, "ratio": seq_wall / prof.wall_s, "cpu_ms_per_episode": 1e3 * cpu / n,
            "idle_estimate_ratio": seq_cpu / idle, "startup_s": prof.startup_s,
            "episodes_per_s_with_startup": n / total, "mean_batch": prof.actions / max(prof.steps, 1),
            "records_equal": same, "scores_equal": scores, "load_1min": os.getloadavg()[0]}


def _profile_row(name: str, prof) -> dict:
    """Where one batched step's time goes (ms per step) in ``prof``'s run."""
    import os

    ms = prof.per_step_ms()
    env_ms = ms["simulation_cpu"] + ms["rendering_cpu"]
    return {"case": f"act2answer {name} one vectorised step ({prof.num_envs} envs, {prof.workers} workers, "
                    f"{os.cpu_count()} CPUs), ms per batched step", "wall_ms": ms["wall"], "model_ms": ms["model"],
            "simulation_cpu_ms": ms["simulation_cpu"], "rendering_cpu_ms": ms["rendering_cpu"],
            "transport_ms": ms["transport"], "env_bound_ms": env_ms / prof.workers,
            "env_share_of_wall": env_ms / prof.workers / ms["wall"],
            "env_share_if_idle": env_ms / prof.workers / (env_ms / prof.workers + ms["model"] + ms["transport"])}


def _shard(args) -> tuple[float, float, float, list]:
    """One of today's per-unit workers (a run's shard): load ``name``, warm up, run ``items`` sequentially;
    returns (start, end, CPU seconds, records) with start/end on the shared wall clock (``time.time``)."""
    import time

    import torch

    from embeval.act2answer.episode import run_items
    from embeval.subjects.embedded.zoo import load_vla

    name, items, spec = args
    torch.set_num_threads(1)
    policy = load_vla(name)
    list(run_items(policy, items[:1], spec, seed=99, layouts=("original",)))
    t0, c0 = time.time(), time.process_time()
    recs = list(run_items(policy, items, spec))
    return t0, time.time(), time.process_time() - c0, recs


def _sharded(name: str, items: list, spec, order: list, shards: int = 2) -> tuple[float, list[float], list]:
    """Today's parallel path: ``shards`` processes, each the sequential path on every ``shards``-th item; returns
    (wall seconds from the first start to the last end, each shard's CPU seconds, the records in ``order``'s order)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    parts = [items[k::shards] for k in range(shards)]
    with ProcessPoolExecutor(shards, mp_context=mp.get_context("spawn")) as ex:
        out = list(ex.map(_shard, [(name, part, spec) for part in parts]))
    by_item = {(r.item, r.layout): r for o in out for r in o[3]}
    return max(o[1] for o in out) - min(o[0] for o in out), [o[2] for o in out], [by_item[(r.item, r.layout)]
                                                                                for r in order]


def _equal_counts(seq: list, other: list) -> tuple[str, str]:
    """(records_equal, scores_equal) cells: "yes", or how many of the records differ."""
    n = len(seq)
    same = sum(a.to_dict() == b.to_dict() for a, b in zip(seq, other)) if len(other) == n else 0
    scores = sum(all(getattr(a, k) == getattr(b, k) for k in SCORE_FIELDS) for a, b in zip(seq, other)) \
        if len(other) == n else 0
    return ("yes" if same == n else f"no ({n - same} of {n} differ)",
            "yes" if scores == n else f"no ({n - scores} of {n} differ)")


def _episode_rows(quick: bool) -> list[dict]:
    """Act2Answer episodes/s: sequential ``run_items`` vs vectorised environments + batched policy (same records?).

    Every path runs ``reps`` times, interleaved (sequential, then each other path, then again), and each row keeps
    its fastest run: on a machine shared with other work the fastest run is the one least disturbed, and the
    interleaving gives every path the same spread of moments."""
    import os
    import tempfile
    import time
    from pathlib import Path

    from embeval.act2answer.episode import run_items
    from embeval.act2answer.generator import CATEGORIES, generate_items
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.act2answer.vector import run_items_vector
    from embeval.sim.vector import VectorProfile
    from embeval.subjects.embedded.zoo import load_vla

    spec = EpisodeSpec()
    rows: list[dict] = []
    reps = 1 if quick else 2
    models = [("tiny-vla", 1)] if quick else [("tiny-vla", 2), ("tiny-vla-a2a-frozen", 1)]
    with tempfile.TemporaryDirectory(prefix="bench_vec_") as tmp:
        all_items = generate_items(Path(tmp), list(CATEGORIES)[:3] if quick else list(CATEGORIES), 1 if quick else 2,
                                   seed=0)
        for name, per_cat in models:
            items = [it for k, it in enumerate(all_items) if k % 2 < per_cat] if not quick else all_items
            policy = load_vla(name)
            list(run_items(policy, items[:1], spec, seed=99, layouts=("original",)))  # warm-up (text encoder, textures)
            if quick:
                runs = [(8, False, 1), (8, True, 1)]
            elif name == "tiny-vla":
                runs = [(8, False, 1), (8, True, 1), (8, False, 2), (4, False, 1), (16, False, 1)]
            else:
                runs = [(8, False, 1), (8, True, 1)]
            seq_best, shard_best, vec_best = None, None, {}
            for _ in range(reps):
                t0, c0 = time.perf_counter(), time.process_time()
                seq = list(run_items(policy, items, spec))
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                if seq_best is None or wall < seq_best[0]:
                    seq_best = (wall, cpu, seq, os.getloadavg()[0])
                if not quick:
                    got = _sharded(name, items, spec, seq)
                    if shard_best is None or got[0] < shard_best[0]:
                        shard_best = (*got, os.getloadavg()[0])
                for cfg in runs:
                    prof = VectorProfile()
                    t0 = time.perf_counter()
                    vec = list(run_items_vector(policy, items, spec, num_envs=cfg[0], exact=cfg[1], groups=cfg[2],
                                                profile=prof))
                    if cfg not in vec_best or prof.wall_s < vec_best[cfg][1].wall_s:
                        vec_best[cfg] = (vec, prof, time.perf_counter() - t0)
            seq_wall, seq_cpu, seq, load = seq_best
            n = len(seq)
            rows.append({"case": f"act2answer {name} sequential run_items (today: 1 env, act per step)", "episodes": n,
                         "episodes_per_s": n / seq_wall, "ratio": 1.0, "cpu_ms_per_episode": 1e3 * seq_cpu / n,
                         "idle_estimate_ratio": 1.0, "records_equal": "yes", "scores_equal": "yes", "load_1min": load})
            if shard_best is not None:
                wall, cpus, recs, load = shard_best
                same, scores = _equal_counts(seq, recs)
                rows.append({"case": f"act2answer {name} today's per-unit workers: 2 sequential shards (processes)",
                             "episodes": n, "episodes_per_s": n / wall, "ratio": seq_wall / wall,
                             "cpu_ms_per_episode": 1e3 * sum(cpus) / n, "idle_estimate_ratio": seq_cpu / max(cpus),
                             "records_equal": same, "scores_equal": scores, "load_1min": load})
            for (envs, exact, groups), (vec, prof, total) in vec_best.items():
                label = ("exact (batch-1 per env)" if exact else "batched forward") + (", 2 alternating halves"
                                                                                         if groups == 2 else "")
                rows.append(_vector_row(name, seq, seq_wall, seq_cpu, vec, prof, total, label))
            rows.append(_profile_row(name, vec_best[runs[0]][1]))
    return rows


SERVER_CLIENTS = 16
SERVER_BATCH = 16
SERVER_WAIT_MS = 10.0


def _act_bodies(n: int) -> list[bytes]:
    """``n`` OpenVLA /act bodies for the tiny VLA (two random 224x224 cameras, TCP pose, gripper), episode i each."""
    import json

    from embeval.subjects.adapters.numpy_json import encode_array

    rng = np.random.default_rng(7)

    def im():
        return encode_array(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8))

    return [json.dumps({"full_image": im(), "wrist_image": im(), "tcp_pose": [0.45, 0.02 * i - 0.1, 0.2, 0, 0, 0, 1.0],
                        "gripper": [1.0], "instruction": INSTRUCTIONS[i % len(INSTRUCTIONS)], "episode": i}).encode()
            for i in range(n)]


async def _hammer(port: int, bodies: list[bytes], per_client: int) -> tuple[float, list[bytes]]:
    """(requests/s, each client's last reply body): one keep-alive HTTP/1.1 connection per body, ``per_client``
    POST /act each, all at once. A lean client (no HTTP library) so the clients' CPU weighs little."""
    import asyncio
    import time

    async def client(body: bytes) -> bytes:
        req = b"POST /act HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" \
              % len(body) + body
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(per_client):
                writer.write(req)
                await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                reply = await reader.readexactly(length)
                status = head.split(b"\r\n", 1)[0]
                if b" 200 " not in status + b" ":
                    raise RuntimeError(f"server answered {status!r}: {reply[:200]!r}")
        finally:
            writer.close()
        return reply

    t0 = time.perf_counter()
    replies = await asyncio.gather(*(client(b) for b in bodies))
    return len(bodies) * per_client / (time.perf_counter() - t0), list(replies)


def _server_rows(quick: bool) -> list[dict]:
    """The batching model server: requests/s with 16 concurrent clients at --max-batch-size 1 vs 16."""
    import asyncio
    import json
    import os
    from pathlib import Path

    import httpx

    from embeval.subjects.adapters.numpy_json import decode_array

    spec = Path(__file__).resolve().parents[1] / "config/subjects/tiny_vla.yaml"
    bodies = _act_bodies(SERVER_CLIENTS)
    batches = (1, SERVER_BATCH)
    servers: dict[int, tuple[int, object]] = {}  # batch -> (port, process or RunningServer)
    try:
        if quick:
            from embeval.serving.runner import app_from_spec, serve_in_thread
            from embeval.subjects.registry import load_subject

            policy = load_subject(spec)
            for b in batches:
                srv = serve_in_thread(app_from_spec(spec, "openvla", subject=policy, max_batch_size=b,
                                                    max_wait_ms=SERVER_WAIT_MS))
                servers[b] = (int(srv.url.rsplit(":", 1)[1]), srv)
        else:
            from embeval.serving.runner import start_serve_process, wait_healthy

            for b in batches:  # both start (load their models) side by side, then both are waited for
                proc, url = start_serve_process(["openvla", "--subject", str(spec), "--max-batch-size", str(b),
                                                 "--max-wait-ms", str(SERVER_WAIT_MS)],
                                                env=dict(os.environ, OMP_NUM_THREADS="1"), wait=False)
                servers[b] = (int(url.rsplit(":", 1)[1]), proc)
            for b, (port, proc) in servers.items():
                wait_healthy(proc, f"http://127.0.0.1:{port}", timeout=180)
        for port, _ in servers.values():  # warm-up: every episode started, the text encoder loaded
            asyncio.run(_hammer(port, bodies, 2))
        best = {b: 0.0 for b in batches}
        replies: dict[int, list[bytes]] = {}
        for _ in range(1 if quick else 3):
            for b in batches:  # interleaved: both see the same spread of the machine's load
                rate, replies[b] = asyncio.run(_hammer(servers[b][0], bodies, 4 if quick else 40))
                best[b] = max(best[b], rate)
        stats = httpx.get(f"http://127.0.0.1:{servers[SERVER_BATCH][0]}/health", timeout=10).json()
    finally:
        for _, srv in servers.values():
            if hasattr(srv, "stop"):
                srv.stop()
            else:
                srv.terminate()
                srv.wait(30)
    acts = {b: np.array([decode_array(json.loads(r)) for r in rs]) for b, rs in replies.items()}
    diff = float(np.abs(acts[SERVER_BATCH] - acts[1]).max())
    where = "in-process threads, quick: not a speed" if quick else "embeval serve processes, 1 torch thread"
    rows = []
    for b in batches:
        row = {"case": f"serve openvla tiny-vla, {SERVER_CLIENTS} concurrent clients, --max-batch-size {b} "
                       f"--max-wait-ms {SERVER_WAIT_MS:g} ({where})",
               "req_per_s": best[b], "ratio": best[b] / best[1]}
        if b > 1:
            row.update({"mean_batch_size": stats["mean_batch_size"], "largest_batch": stats["largest_batch"],
                        "max_abs_diff_vs_batch1": diff, "target": ">= 1.5",
                        "met": "yes" if best[b] / best[1] >= 1.5 else "NO"})
        rows.append(row)
    return rows


@restores_torch_threads
def run(quick: bool = False) -> list[dict]:
    import torch

    from embeval.subjects.embedded.zoo import load_vla
    from embeval.subjects.protocols import LoopSlots

    torch.set_num_threads(1)
    rendered = _rendered_observations(32)
    vla = load_vla("tiny-vla")
    rows = _speed_rows("tiny-vla", vla, rendered, quick)
    choice = load_vla("tiny-vla-a2a-frozen")
    cards = _random_observations(32, tuple(choice.cfg.image_size))
    rows += _speed_rows("tiny-vla-a2a-frozen", choice, cards, quick)
    loop = LoopSlots(vla)  # what a policy without batched calls gets
    base = rows[0]["ms"] / 1000
    t = _per_obs(loop, rendered, 8, 3 if quick else 20)
    rows.append({"case": "tiny-vla through the looping default (LoopSlots), batch 8, per observation", "ms": 1000 * t,
                 "obs_per_s": 1.0 / t, "ratio": t / base})
    for name, pol, obs in (("tiny-vla", vla, rendered), ("tiny-vla-a2a-frozen", choice, cards)):
        diff, n = _max_difference(pol, obs)
        rows.append({"case": f"{name} max |batched - batch-1| over {n} actions (slots start, restart, end)",
                     "max_abs_diff": diff, "target": f"< {TARGET_DIFF:g}", "met": "yes" if diff < TARGET_DIFF else "NO"})
    return rows + _server_rows(quick) + _episode_rows(quick)
