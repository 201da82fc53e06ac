"""A fast synthetic stand-in for demonstrations (tests and development only, no simulator):
two coloured squares on a grey table; the instruction names one colour; the expert action moves a
2-D end effector (z fixed) 20% of the way toward that square, closing the gripper when near; the
waypoint is the square's position (pointing down)."""
from __future__ import annotations

import numpy as np

from embeval.subjects.embedded.training import DemoArrays, VQAArrays

COLORS = {"red": (220, 30, 30), "blue": (30, 60, 220), "green": (30, 180, 60)}


def _scene(rng, size):
    names = rng.choice(list(COLORS), size=2, replace=False)
    pos = rng.uniform(-0.8, 0.8, size=(2, 2))
    while np.linalg.norm(pos[0] - pos[1]) < 0.5:
        pos[1] = rng.uniform(-0.8, 0.8, size=2)
    img = np.full((size, size, 3), 128, dtype=np.uint8)
    r = max(2, size // 10)
    for n, p in zip(names, pos):
        cx, cy = ((p + 1) / 2 * (size - 1)).astype(int)
        img[max(0, cy - r):cy + r, max(0, cx - r):cx + r] = COLORS[n]
    return names, pos, img


def synthetic_demos(n_episodes: int = 8, steps: int = 10, size: int = 32, seed: int = 0) -> DemoArrays:
    rng = np.random.default_rng(seed)
    tasks = [f"pick the {c} block" for c in COLORS]
    imgs, states, acts, tidx, eidx, wps = [], [], [], [], [], []
    for ep in range(n_episodes):
        names, pos, img = _scene(rng, size)
        target = pos[0]
        ee = rng.uniform(-0.9, 0.9, size=2)
        for _ in range(steps):
            d = 0.2 * (target - ee)
            near = np.linalg.norm(target - ee) < 0.1
            imgs.append(img)
            states.append([ee[0], ee[1], 0.0, 1.0])
            acts.append([d[0], d[1], 0, 0, 0, 0, 0.0 if near else 1.0])
            tidx.append(tasks.index(f"pick the {names[0]} block"))
            eidx.append(ep)
            wps.append([target[0], target[1], 0.0, np.pi, 0.0, 0.0])
            ee = ee + d
    return DemoArrays({"third_person": np.stack(imgs)}, np.asarray(states, np.float32), np.asarray(acts),
                      np.asarray(tidx), tasks, np.asarray(eidx), waypoint=np.asarray(wps))


def synthetic_vqa(n: int = 64, size: int = 32, seed: int = 0) -> VQAArrays:
    rng = np.random.default_rng(seed)
    prompts = [f"how do I pick the {c} block?" for c in COLORS]
    sides = ["left", "right"]
    imgs, pidx, side = [], [], []
    for _ in range(n):
        names, pos, img = _scene(rng, size)
        imgs.append(img)
        pidx.append(prompts.index(f"how do I pick the {names[0]} block?"))
        side.append(0 if pos[0][0] < 0 else 1)
    return VQAArrays(np.stack(imgs), np.asarray(pidx), prompts, {"side": np.asarray(side)}, {"side": sides},
                     "reach to the {side} and grasp the block", scene_index=np.arange(n))
