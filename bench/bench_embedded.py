"""Embedded models: inference latency and training throughput, as ratios against baselines
measured in the same run (a simulator step with rendering; one torch thread)."""
from __future__ import annotations

import numpy as np

from bench.timing import per_call


def run(quick: bool = False) -> list[dict]:
    import torch

    from embeval.sim.env import SimEnv
    from embeval.subjects.embedded import zoo
    from embeval.subjects.embedded.nets import TinyVLANet, VLAConfig

    n = 5 if quick else 30
    rows = []
    with SimEnv() as env:
        obs = env.reset(seed=0, task="Pick")
        expert = env.expert()
        sim_step = per_call(lambda: env.step(np.zeros(7) + [0, 0, 0, 0, 0, 0, 1]), n)
        rows.append({"case": "sim step (physics + 2 renders 128x96), baseline", "ms": 1000 * sim_step, "ratio": 1.0})
        expert_t = per_call(lambda: expert.act(obs), n)
        rows.append({"case": "scripted expert act", "ms": 1000 * expert_t, "ratio": expert_t / sim_step})
    torch.set_num_threads(1)
    vla = zoo.load_vla("tiny-vla")
    vla.reset("pick up the red cube")
    t = per_call(lambda: vla.act(obs), n)
    rows.append({"case": "tiny-vla act (1 thread)", "ms": 1000 * t, "ratio": t / sim_step})
    tb = per_call(lambda: vla.act_batch([obs] * 32), max(2, n // 5)) / 32
    rows.append({"case": "tiny-vla act_batch x32, per obs", "ms": 1000 * tb, "ratio": tb / sim_step})
    vlm = zoo.load_vlm("tiny-vlm")
    img = obs.images["third_person"]
    tv = per_call(lambda: vlm.generate([img], "pick up the red cube"), n)
    rows.append({"case": "tiny-vlm generate", "ms": 1000 * tv, "ratio": tv / sim_step})

    # training step throughput: 1 vs 2 torch threads (batch 64, both cameras)
    net = TinyVLANet(VLAConfig())
    x = {c: torch.rand(64, 3, 48, 64) for c in ("third_person", "wrist")}
    txt, st = torch.rand(64, 384), torch.rand(64, 4)

    def step():
        out = net(x, txt, st)
        out.sum().backward()

    base = None
    for threads in (1, 2):
        torch.set_num_threads(threads)
        ts = per_call(step, 3 if quick else 10)
        base = base or ts
        rows.append({"case": f"tiny-vla train step b64 ({threads} thread{'s' if threads > 1 else ''})",
                     "ms": 1000 * ts, "ratio": ts / base})
    torch.set_num_threads(1)
    rows.append(_a2a_train_row(quick, base))
    return rows


def _a2a_train_row(quick: bool, vla_step: float) -> dict:
    """Training throughput of tiny-vlm-a2a at its recipe's configuration: real procedural items,
    one training step = batch_size items in both layouts (2 x batch_size answered pairs), 1 thread.
    ``ratio``: step time / the tiny-vla b64 train step above."""
    import torch

    from embeval.act2answer.choice_training import choice_arrays, train_choice_vlm
    from embeval.subjects.embedded.choice import ChoiceVLMConfig
    from embeval.subjects.embedded.population import vlm_recipe
    from embeval.subjects.embedded.training import TrainConfig

    r = vlm_recipe("tiny-vlm-a2a")
    cfg = ChoiceVLMConfig.from_dict({**ChoiceVLMConfig().to_dict(), **r.arch})
    data = choice_arrays(20, seed=1, card_size=cfg.card_size)
    steps = 10 if quick else 60
    tc = TrainConfig(**{**TrainConfig().__dict__, **r.train, "steps": steps, "log_every": steps})
    _, res = train_choice_vlm(data, cfg, tc, seed=0)
    torch.set_num_threads(1)
    per_step = res.seconds / steps
    return {"case": f"tiny-vlm-a2a train step b{tc.batch_size} x 2 layouts (1 thread): "
                    f"{2 * tc.batch_size / per_step:.0f} items/s", "ms": 1000 * per_step, "ratio": per_step / vla_step}
