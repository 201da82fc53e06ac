"""Fine-tune the tiny VLA on Act2Answer episodes (behaviour cloning of the privileged expert).

This makes the embedded demo's policy a real Act2Answer subject: it learns, from demonstrations
on *training* items (a seed disjoint from the evaluation items), to carry the cube to the card
the instruction names. What it then gets right on new items, per category, is what it learned to
ground; where it sits at chance is knowledge it did not acquire.

Demonstrations: the scripted expert (:class:`~embeval.act2answer.reference_policies.ExpertPolicy`)
on every training item in both layouts, observations rendered at the policy's input size; the
auxiliary target is the task geometry (cube start, correct card centre; metres, frame base).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np

from embeval.act2answer.items import BinaryItem
from embeval.act2answer.scene import EpisodeSpec


def record_demos(items: Iterable[BinaryItem], spec: EpisodeSpec | None = None, seed: int = 0, image_size=(48, 64),
                 cameras=("third_person", "wrist"), max_steps: int = 30):
    """Expert demonstrations as :class:`embeval.subjects.embedded.training.DemoArrays`
    (``image_size`` [H, W]; successful episodes only)."""
    from embeval.act2answer.episode import Termination, grasp_in_hand, held, sim_config
    from embeval.act2answer.reference_policies import ExpertPolicy
    from embeval.act2answer.scene import build_scene
    from embeval.provenance import derive_seed
    from embeval.sim import SimEnv
    from embeval.subjects.embedded.preprocess import resize_image, state_vector
    from embeval.subjects.embedded.training import DemoArrays

    spec = spec or EpisodeSpec()
    lift_rule = replace(spec, termination="release_after_lift")  # a demonstration always ends at the release
    h, w = image_size
    imgs: dict[str, list] = {c: [] for c in cameras}
    state, action, task_idx, ep_idx, aux, tasks = [], [], [], [], [], []
    with SimEnv(sim_config(w, h)) as env:
        expert = ExpertPolicy(env, "answer", spec)
        for k, (item, layout) in enumerate((it, lay) for it in items for lay in ("original", "swapped")):
            scene, task = build_scene(item, layout, spec)
            obs = env.reset(derive_seed(seed, "demo", item.id, layout), task, scene)
            if spec.start == "grasped":
                obs = grasp_in_hand(env)
            expert.reset(task.instruction)
            if task.instruction not in tasks:
                tasks.append(task.instruction)
            geo = np.r_[spec.cube_xy, spec.cube_size / 2, task.goal, 0.0].astype(np.float32)
            frames, rule = [], Termination(lift_rule, float(env.cell.object_pose("cube")[0][2]),
                                               lifted=spec.start == "grasped")
            for _ in range(max_steps):  # until the gripper opens after a lift (max_steps is this function's cap)
                a = expert.act(obs)
                frames.append(({c: resize_image(obs.images[c], image_size) for c in cameras},
                               state_vector(obs.state, ["ee_pos", "gripper"]), a.vector.copy()))
                obs = env.step(held(a, len(frames) - 1, spec)).observation
                if rule.update(float(env.cell.object_pose("cube")[0][2]), env.cell.gripper):
                    break
            pos = env.cell.object_pose("cube")[0]
            if np.hypot(pos[0] - task.goal[0], pos[1] - task.goal[1]) > spec.eps:
                continue  # keep successful demonstrations only
            for im, st, ac in frames:
                for c in cameras:
                    imgs[c].append(im[c])
                state.append(st)
                action.append(ac)
                task_idx.append(tasks.index(task.instruction))
                ep_idx.append(k)
                aux.append(geo)
    return DemoArrays({c: np.stack(v) for c, v in imgs.items()}, np.stack(state).astype(np.float32), np.stack(action),
                      np.array(task_idx), tasks, np.array(ep_idx), np.stack(aux))


def finetune_tiny_vla(items: Iterable[BinaryItem], out: str | Path | None = None, steps: int = 1500, seed: int = 0,
                      spec: EpisodeSpec | None = None, id: str = "tiny-vla-a2a", log: Callable[[str], None] | None = None,
                      threads: int = 2):
    """Train a tiny VLA on expert demonstrations of ``items``; saves to ``out`` when given.
    ``threads``: torch intra-op threads while training. Returns ``(policy, n_frames)``."""
    from embeval.subjects.embedded.nets import VLAConfig
    from embeval.subjects.embedded.training import TrainConfig, train_vla

    cfg = VLAConfig()
    if hasattr(cfg, "action_mode"):
        cfg.action_mode = "delta"  # the demonstrations carry the expert's 7-DoF deltas
    data = record_demos(items, spec, seed, cfg.image_size if not isinstance(cfg.image_size, int) else (cfg.image_size,) * 2)
    if log:
        log(f"{id}: {len(data)} demonstration frames from {len(np.unique(data.episode_index))} expert episodes")
    policy, _ = train_vla(data, cfg, TrainConfig(steps=steps, log_every=max(1, steps // 5), threads=threads), seed=seed, id=id, log=log)
    if out is not None:
        policy.save(out)
    return policy, len(data)
