"""Embedded models: inference latency and training throughput, as ratios against baselines
measured in the same run (a simulator step with rendering; one torch thread)."""
from __future__ import annotations

import numpy as np

from bench.timing import per_call, restores_torch_threads


@restores_torch_threads
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
    rows.append(_a2a_train_row(quick, base, "tiny-vlm-a2a-cell"))
    rows += _choice_vla_rows(quick, base)
    return rows


def _a2a_train_row(quick: bool, vla_step: float, name: str = "tiny-vlm-a2a") -> dict:
    """Training throughput of ``name`` (tiny-vlm-a2a, tiny-vlm-a2a-cell) at its recipe's configuration: real procedural items,
    one training step = batch_size items in both layouts (2 x batch_size answered pairs), 1 thread.
    ``ratio``: step time / the tiny-vla b64 train step above."""
    import torch

    from embeval.act2answer.choice_training import choice_arrays, train_choice_vlm
    from embeval.subjects.embedded.choice import ChoiceVLMConfig
    from embeval.subjects.embedded.population import vlm_recipe
    from embeval.subjects.embedded.training import TrainConfig

    r = vlm_recipe(name)
    cfg = ChoiceVLMConfig.from_dict({**ChoiceVLMConfig().to_dict(), **r.arch})
    data = choice_arrays(20, seed=1, card_size=cfg.card_size)
    steps = 10 if quick else 60
    tc = TrainConfig(**{**TrainConfig().__dict__, **r.train, "steps": steps, "log_every": steps})
    _, res = train_choice_vlm(data, cfg, tc, seed=0, instructions=r.instructions, augment=r.augment or None)
    torch.set_num_threads(1)
    per_step = res.seconds / steps
    return {"case": f"{name} train step b{tc.batch_size} x 2 layouts (1 thread): "
                    f"{2 * tc.batch_size / per_step:.0f} items/s", "ms": 1000 * per_step, "ratio": per_step / vla_step}


def _choice_vla_rows(quick: bool, vla_step: float) -> list[dict]:
    """Training throughput of the VLM -> VLA recipes (tiny-vla-a2a-frozen / -full) at their recipe's
    configuration on demonstration-shaped frames (random pixels: the cost depends on shapes only;
    360 episodes, 20 frames each, as the shipped demonstrations), 1 thread, and one closed-loop
    step of the policy (prefix cached). ``ratio``: step time / the tiny-vla b64 train step."""
    import torch

    from embeval.act2answer.choice_vla_training import ChoiceDemos, train_choice_vla
    from embeval.subjects.embedded.choice_vla import ChoiceVLAConfig
    from embeval.subjects.embedded.population import a2a_vla_recipe
    from embeval.subjects.embedded.training import TrainConfig
    from embeval.subjects.embedded.zoo import load_vlm

    rng = np.random.default_rng(0)
    base = ChoiceVLAConfig()
    e, f = 360, 20
    state = rng.random((e * f, 4), np.float32)
    state[f - 1::f, :2] = np.asarray(base.card_xy, np.float32)[np.arange(e) % 2]  # each carry ends on a card
    demos = ChoiceDemos(rng.integers(0, 255, (e, 48, 48, 3), dtype=np.uint8), rng.integers(0, 255, (e, 48, 48, 3), dtype=np.uint8),
                        np.arange(e) % 8, [f"put the cube on the card number {k}" for k in range(8)], np.zeros(e, np.int64),
                        rng.integers(0, 255, (e * f, *base.scene_size, 3), dtype=np.uint8), state,
                        rng.normal(0, 0.02, (e * f, 7)), np.repeat(np.arange(e), f))
    vlm = load_vlm("tiny-vlm-a2a-cell")
    rows, steps = [], 5 if quick else 30
    for name in ("tiny-vla-a2a-frozen", "tiny-vla-a2a-full"):
        r = a2a_vla_recipe(name)
        cfg = ChoiceVLAConfig.from_dict({**base.to_dict(), **r.arch})  # the recipe's architecture
        tc = TrainConfig(**{**TrainConfig().__dict__, **r.train, "steps": steps, "log_every": steps})
        pol, res = train_choice_vla(demos, vlm, cfg, r, tc)
        torch.set_num_threads(1)
        per_step = res.seconds / steps
        rows.append({"case": f"{name} train step b{tc.batch_size} (1 thread): {tc.batch_size / per_step:.0f} frames/s",
                     "ms": 1000 * per_step, "ratio": per_step / vla_step})
    from embeval.action import Observation

    ob = Observation(images={"third_person": rng.integers(0, 255, (*cfg.image_size, 3), dtype=np.uint8)}, instruction="",
                     state={"ee_pos": np.array([0.4, 0.0, 0.3]), "gripper": np.array([1.0])})
    pol.reset("put the cube on the sad face")
    first = per_call(lambda: (pol.reset("put the cube on the sad face"), pol.act(ob)), 3 if quick else 20)
    pol.act(ob)
    later = per_call(lambda: pol.act(ob), 3 if quick else 20)
    rows.append({"case": "tiny-vla-a2a-* act: first step (card crops + VLM prefix)", "ms": 1000 * first, "ratio": first / vla_step})
    rows.append({"case": "tiny-vla-a2a-* act: later steps (prefix cached)", "ms": 1000 * later, "ratio": later / vla_step})
    return rows
