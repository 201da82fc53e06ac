"""Training loops of the embedded models (CPU, seeded, behaviour cloning / supervised slots).

Determinism: the same data, config and seed give the same weights on the same machine and
torch build (CPU kernels, fixed thread count); see :func:`seed_everything`.
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from embeval.action import GRIPPER_CLOSED_BELOW
from embeval.errors import InvalidInputError


@dataclass
class DemoArrays:
    """Demonstrations in memory, images already resized to the model's input size.

    ``images[cam]``: (N, S, S, 3) uint8; ``state``: (N, D) float32; ``action``: (N, 7) float64 in
    the embeval convention; ``task_index``: (N,) int into ``tasks`` (instruction strings);
    ``episode_index``: (N,) int.
    """

    images: dict[str, np.ndarray]
    state: np.ndarray
    action: np.ndarray
    task_index: np.ndarray
    tasks: list[str]
    episode_index: np.ndarray
    aux: np.ndarray | None = None  # (N, A) auxiliary targets (task geometry), optional
    waypoint: np.ndarray | None = None  # (N, 6) expert's target TCP pose [x,y,z,rx,ry,rz] (waypoint mode)
    phase: np.ndarray | None = None  # (N,) int, the expert's stage (index into embeval.datasets.demos.PHASES)

    def __len__(self) -> int:
        return len(self.action)


@dataclass
class TrainConfig:
    steps: int = 1500
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    shift_pixels: int = 4  # random-shift augmentation (pad + crop), 0 = off
    gripper_weight: float = 0.5
    gripper_switch_weight: float = 4.0  # extra weight of frames whose gripper label differs from the observed gripper
    close_radius: float = 0.015  # m, gripper relabelling: close/open within this xy distance of the grasp/release pose
    close_height: float = 0.01  # m, ... and this height difference (see gripper_targets)
    phase_balance: float = 0.0  # share of each batch drawn evenly over the expert's phases (0 = uniform over frames)
    aux_weight: float = 0.5  # weight of the auxiliary task-geometry loss (when the data has it)
    threads: int = 1  # torch CPU threads; 1 is fastest for these tiny nets on a busy machine
    log_every: int = 100


@dataclass
class TrainResult:
    losses: list[float] = field(default_factory=list)  # mean loss per log window
    seconds: float = 0.0
    steps: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def seed_everything(seed: int, threads: int = 2):
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(max(1, threads))
    return np.random.default_rng(seed)


@contextmanager
def deterministic(seed: int, threads: int = 2):
    """A block of seeded, reproducible training: :func:`seed_everything` (yields its numpy Generator)
    and ``torch.use_deterministic_algorithms(True)``, restored to the previous setting on leaving."""
    import torch

    rng = seed_everything(seed, threads)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield rng
    finally:
        torch.use_deterministic_algorithms(was)


def random_shift(x, pad: int, rng: np.random.Generator):
    """DrQ-style augmentation: replicate-pad by ``pad`` pixels, crop back at a random offset per sample."""
    import torch
    import torch.nn.functional as F

    if pad <= 0:
        return x
    b, c, h, w = x.shape
    xp = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    ox = rng.integers(0, 2 * pad + 1, size=b)
    oy = rng.integers(0, 2 * pad + 1, size=b)
    return torch.stack([xp[i, :, oy[i]:oy[i] + h, ox[i]:ox[i] + w] for i in range(b)])


def frames_source(images: np.ndarray):
    """The training frames as torch sees them: the (N, H, W, 3) uint8 array itself, shared, not copied
    (a channels-first copy of all frames doubled the training set's memory)."""
    import torch

    return torch.from_numpy(images)


def frames_batch(frames, idx):
    """Frames ``idx`` of :func:`frames_source` as a contiguous (B, 3, H, W) uint8 batch: the same tensor,
    values and layout, as indexing a channels-first copy of all frames."""
    return frames[idx].permute(0, 3, 1, 2).contiguous()


def action_stats(action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std (floored at 1e-3) of the continuous regression targets (columns of ``action``)."""
    a = np.asarray(action, dtype=np.float64)
    return a.mean(0).astype(np.float32), np.maximum(a.std(0), 1e-3).astype(np.float32)


def rot6d(rotvec: np.ndarray) -> np.ndarray:
    """(N, 3) rotation vectors -> (N, 6): the first two columns of each rotation matrix."""
    from embeval.rotations import rotvec_to_matrix

    m = rotvec_to_matrix(np.asarray(rotvec, dtype=np.float64).reshape(-1, 3))
    return np.concatenate([m[:, :, 0], m[:, :, 1]], axis=1)


def regression_targets(data: "DemoArrays", mode: str) -> np.ndarray:
    """The continuous targets of the action expert: waypoint xyz + 6-D rotation, or the 6 deltas."""
    if mode == "waypoint":
        if data.waypoint is None:
            raise InvalidInputError("waypoint-mode training needs the demonstrations' expert.waypoint feature; "
                                    "re-record them with `embeval train demos`")
        return np.concatenate([data.waypoint[:, :3], rot6d(data.waypoint[:, 3:6])], axis=1)
    return np.asarray(data.action, dtype=np.float64)[:, :6]


def gripper_targets(data: "DemoArrays", radius: float = 0.015, height: float = 0.01) -> np.ndarray:
    """(N,) gripper labels, 1 = open: the expert's command, except that while the expert descends to the
    grasp (lowers to the release) the label is already closed (open) once the TCP is within ``radius``
    metres (xy) and ``height`` metres (z) of that pose. The expert itself waits for 2 mm; a cloned
    policy that arrives a centimetre off should still close, as the gripper's tolerance allows
    (:meth:`embeval.sim.workcell.Workcell._graspable`)."""
    from embeval.datasets.demos import PHASES

    lab = (np.asarray(data.action)[:, 6] > 0.5).astype(np.float32)
    if data.phase is None or data.waypoint is None:
        return lab
    d = np.asarray(data.state)[:, :3] - np.asarray(data.waypoint)[:, :3]
    near = (np.linalg.norm(d[:, :2], axis=1) <= radius) & (np.abs(d[:, 2]) <= height)
    lab[near & (data.phase == PHASES.index("descend"))] = 0.0
    lab[near & (data.phase == PHASES.index("lower"))] = 1.0
    return lab


def sampling_weights(phase: np.ndarray | None, balance: float) -> np.ndarray | None:
    """Per-frame sampling probabilities: ``1 - balance`` uniform over frames plus ``balance`` spread
    evenly over the phases present (each phase's share split evenly over its frames), so that rare
    phases (the carry of a Place, the final centimetres of a descent) are seen as often as the long
    approach. None when ``balance`` is 0 or there are no phases."""
    if phase is None or balance <= 0:
        return None
    phase = np.asarray(phase)
    values, inverse, counts = np.unique(phase, return_inverse=True, return_counts=True)
    p = (1 - balance) / len(phase) + balance / (len(values) * counts[inverse])
    return p / p.sum()


def _loop(params, n: int, step_fn: Callable[[np.ndarray], "object"], cfg: TrainConfig, rng, log=None,
          weights: np.ndarray | None = None, desc: str = "train") -> TrainResult:
    """``cfg.steps`` optimiser steps on batches drawn with ``rng``; with ``log``, the mean loss every ``log_every``
    steps and live progress with an ETA on stderr (:mod:`embeval.progress`; it draws no random number)."""
    import torch

    from embeval.progress import Progress

    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) / cfg.steps)))
    res, window, t0 = TrainResult(), [], time.perf_counter()
    bar = Progress(cfg.steps, desc, "steps", mode=None if log else "off")
    for step in range(cfg.steps):
        idx = (rng.integers(0, n, size=min(cfg.batch_size, n)) if weights is None
               else rng.choice(n, size=min(cfg.batch_size, n), p=weights))
        loss = step_fn(idx)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        window.append(float(loss.detach()))
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            res.losses.append(float(np.mean(window)))
            window = []
            if log:
                log(f"step {step + 1}/{cfg.steps} loss {res.losses[-1]:.4f} ({time.perf_counter() - t0:.0f} s)")
            bar.set_postfix(loss=f"{res.losses[-1]:.4f}")
        bar.update(1)
    bar.close()
    res.seconds, res.steps = time.perf_counter() - t0, cfg.steps
    return res


def train_vla(data: DemoArrays, vla_cfg, train_cfg: TrainConfig, seed: int, id: str = "tiny-vla",
              log: Callable[[str], None] | None = None, text_encoder=None, init=None):
    """Behaviour cloning of a :class:`TinyVLANet` on ``data``; returns (TinyVLAPolicy, TrainResult).

    ``init``: a TinyVLAPolicy to fine-tune (its architecture and normalisation are kept)."""
    import torch
    import torch.nn.functional as F

    from embeval.subjects.embedded.nets import TinyVLANet
    from embeval.subjects.embedded.policy import TinyVLAPolicy
    from embeval.subjects.embedded.text_encoder import shared_text_encoder

    if len(data) == 0:
        raise InvalidInputError("no demonstration frames to train on; record some with `embeval train demos`")
    missing = [c for c in vla_cfg.cameras if c not in data.images]
    if missing:
        raise InvalidInputError(f"the demonstrations lack camera(s) {missing}; they have {sorted(data.images)}")
    rng = seed_everything(seed, train_cfg.threads)
    enc = text_encoder or shared_text_encoder()
    temb = torch.from_numpy(enc.encode(data.tasks))
    if init is not None:
        vla_cfg = init.cfg
    reg = regression_targets(data, vla_cfg.action_mode)
    mean, std = action_stats(reg)
    if vla_cfg.action_mode == "waypoint":  # the 6-D rotation is already O(1): leave it unscaled
        mean[3:], std[3:] = 0.0, 1.0
    if init is not None:
        mean, std = init.action_mean.copy(), init.action_std.copy()
    target = torch.from_numpy(((reg - mean) / std).astype(np.float32))
    n_reg = reg.shape[1]
    grip_np = gripper_targets(data, train_cfg.close_radius, train_cfg.close_height)
    grip = torch.from_numpy(grip_np)
    switch = (grip_np < GRIPPER_CLOSED_BELOW) != (np.asarray(data.state)[:, -1] < GRIPPER_CLOSED_BELOW)
    grip_w = torch.from_numpy(np.where(switch, train_cfg.gripper_switch_weight, 1.0).astype(np.float32))
    images = {c: frames_source(data.images[c]) for c in vla_cfg.cameras}
    state = torch.from_numpy(np.asarray(data.state, dtype=np.float32))
    task = torch.from_numpy(np.asarray(data.task_index, dtype=np.int64))
    vla_cfg.state_dim = state.shape[1]
    use_aux = data.aux is not None and vla_cfg.aux_dim == data.aux.shape[1]
    if not use_aux:
        vla_cfg.aux_dim = 0
    aux_t = None
    if use_aux:
        aux_t = torch.from_numpy(((data.aux - data.aux.mean(0)) / np.maximum(data.aux.std(0), 1e-3)).astype(np.float32))
    net = TinyVLANet(vla_cfg)
    if init is not None:
        net.load_state_dict(init.net.state_dict())
    net.train()

    def step_fn(idx):
        ii = torch.from_numpy(idx)
        imgs = {c: random_shift(frames_batch(v, ii).float().div_(255.0), train_cfg.shift_pixels, rng) for c, v in images.items()}
        out, aux = net(imgs, temb[task[ii]], state[ii], with_aux=True)
        loss = F.mse_loss(out[:, :n_reg], target[ii]) + train_cfg.gripper_weight * F.binary_cross_entropy_with_logits(out[:, -1], grip[ii], weight=grip_w[ii])
        if aux_t is not None:
            loss = loss + train_cfg.aux_weight * F.mse_loss(aux, aux_t[ii])
        return loss

    res = _loop(list(net.parameters()), len(data), step_fn, train_cfg, rng, log,
                weights=sampling_weights(data.phase, train_cfg.phase_balance), desc=f"train {id}")
    meta = {"seed": seed, "train": asdict(train_cfg), "frames": len(data),
            "episodes": int(len(np.unique(data.episode_index))), "final_loss": res.losses[-1]}
    return TinyVLAPolicy(net.eval(), mean, std, id=id, meta=meta, text_encoder=enc), res


@dataclass
class VQAArrays:
    """Supervision for the tiny VLM: ``images`` (N, S, S, 3) uint8, ``prompt_index`` (N,) into
    ``prompts``, ``labels[slot]`` (N,) int into ``slots[slot]`` (the slot's vocabulary), and the
    answer ``template`` (``str.format`` fields = slot names)."""

    images: np.ndarray
    prompt_index: np.ndarray
    prompts: list[str]
    labels: dict[str, np.ndarray]
    slots: dict[str, list[str]]
    template: str
    scene_index: np.ndarray | None = None  # (N,) scene id, for splits that keep a scene together

    def __len__(self) -> int:
        return len(self.images)

    def subset(self, keep: np.ndarray) -> "VQAArrays":
        return VQAArrays(self.images[keep], self.prompt_index[keep], self.prompts,
                         {k: v[keep] for k, v in self.labels.items()}, self.slots, self.template,
                         None if self.scene_index is None else self.scene_index[keep])


def train_vlm(data: VQAArrays, vlm_cfg, train_cfg: TrainConfig, seed: int, id: str = "tiny-vlm",
              log: Callable[[str], None] | None = None, text_encoder=None):
    """Supervised slot classification of a :class:`TinyVLMNet`; returns (TinyVLM, TrainResult)."""
    import torch
    import torch.nn.functional as F

    from embeval.subjects.embedded.nets import TinyVLMNet
    from embeval.subjects.embedded.text_encoder import shared_text_encoder
    from embeval.subjects.embedded.vlm import TinyVLM

    if len(data) == 0:
        raise InvalidInputError("no VQA examples to train the tiny VLM on")
    rng = seed_everything(seed, train_cfg.threads)
    enc = text_encoder or shared_text_encoder()
    temb = torch.from_numpy(enc.encode(data.prompts))
    vlm_cfg.slots = {k: list(v) for k, v in data.slots.items()}
    net = TinyVLMNet(vlm_cfg).train()
    images = torch.from_numpy(data.images).permute(0, 3, 1, 2).contiguous()
    pidx = torch.from_numpy(np.asarray(data.prompt_index, dtype=np.int64))
    labels = {k: torch.from_numpy(np.asarray(v, dtype=np.int64)) for k, v in data.labels.items()}

    def step_fn(idx):
        ii = torch.from_numpy(idx)
        x = random_shift(images[ii].float().div_(255.0), train_cfg.shift_pixels, rng)
        out = net(x, temb[pidx[ii]])
        return sum(F.cross_entropy(out[s], labels[s][ii]) for s in out) / len(out)

    res = _loop(list(net.parameters()), len(data), step_fn, train_cfg, rng, log, desc=f"train {id}")
    meta = {"seed": seed, "train": asdict(train_cfg), "examples": len(data), "final_loss": res.losses[-1]}
    return TinyVLM(net.eval(), data.template, id=id, meta=meta, text_encoder=enc), res
