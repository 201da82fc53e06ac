"""Torch networks of the embedded subjects (trained from scratch here, see ``training.py``).

Layer naming is part of the contract with the probing analysis (Act2Answer): hidden states are
captured with forward hooks (:mod:`embeval.subjects.hidden`) on the blocks of the module lists
``backbone`` (vision + language fusion) and, for the policy, ``action_expert`` (the action head),
plus the vision CNN blocks ``encoders.<camera>.blocks`` / ``encoder.blocks``.

Images enter as float tensors (B, 3, H, W) in [0, 1]; text as (B, 384) MiniLM embeddings.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import nn
import torch.nn.functional as F

from embeval.subjects.embedded.text_encoder import EMBED_DIM


class SpatialSoftmax(nn.Module):
    """Expected (x, y) image coordinates of each feature map (Levine et al. 2016); (B, 2C) in [-1, 1]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        attn = F.softmax(x.reshape(b, c, h * w), dim=-1).reshape(b, c, h, w)
        ys = torch.linspace(-1.0, 1.0, h, device=x.device, dtype=x.dtype)
        xs = torch.linspace(-1.0, 1.0, w, device=x.device, dtype=x.dtype)
        ex = (attn.sum(dim=2) * xs).sum(-1)
        ey = (attn.sum(dim=3) * ys).sum(-1)
        return torch.cat([ex, ey], dim=1)


class FiLMConv(nn.Module):
    """conv -> GroupNorm -> FiLM(text) -> ReLU."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, text_dim: int, film: bool):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2)
        self.norm = nn.GroupNorm(min(8, cout), cout)
        self.film = nn.Linear(text_dim, 2 * cout) if film else None

    def forward(self, x, t):
        x = self.norm(self.conv(x))
        if self.film is not None:
            g, b = self.film(t).chunk(2, dim=-1)
            x = x * (1 + g[..., None, None]) + b[..., None, None]
        return F.relu(x)


@dataclass
class VisionConfig:
    width: int = 16  # channels of the first conv block; later blocks use 2x
    depth: int = 3  # conv blocks
    pool: str = "spatial_softmax"  # "spatial_softmax", "avg" or "both" (concatenated: [spatial softmax, avg])
    film: bool = True  # condition conv features on the instruction


class VisionEncoder(nn.Module):
    """Small CNN trained from scratch; text-conditioned (FiLM) so the instruction picks what to look at."""

    def __init__(self, cfg: VisionConfig, text_dim: int, in_ch: int = 3):
        super().__init__()
        chans = [cfg.width] + [2 * cfg.width] * (cfg.depth - 1)
        blocks, cin = [], in_ch + 2  # + 2 CoordConv channels
        for i, c in enumerate(chans):
            blocks.append(FiLMConv(cin, c, 5 if i == 0 else 3, 2 if i < 2 else 1, text_dim, cfg.film))
            cin = c
        self.blocks = nn.ModuleList(blocks)
        self.pool = SpatialSoftmax() if cfg.pool in ("spatial_softmax", "both") else None
        self.avg = cfg.pool in ("avg", "both")
        self.out_dim = (2 * cin if self.pool is not None else 0) + (cin if self.avg else 0)

    def forward(self, img, t):
        b, _, h, w = img.shape
        ys = torch.linspace(-1, 1, h, device=img.device).view(1, 1, h, 1).expand(b, 1, h, w)
        xs = torch.linspace(-1, 1, w, device=img.device).view(1, 1, 1, w).expand(b, 1, h, w)
        x = torch.cat([img * 2 - 1, xs, ys], dim=1)
        for blk in self.blocks:
            x = blk(x, t)
        if self.pool is None:
            return x.mean(dim=(2, 3))
        return torch.cat([self.pool(x), x.mean(dim=(2, 3))], dim=1) if self.avg else self.pool(x)


def _mlp_layers(din: int, dims: list[int]) -> nn.ModuleList:
    layers = []
    for d in dims:
        layers.append(nn.Sequential(nn.Linear(din, d), nn.LayerNorm(d), nn.GELU()))
        din = d
    return nn.ModuleList(layers)


@dataclass
class VLAConfig:
    """Architecture of a tiny VLA. Images are resized to ``image_size`` (int: square, or [H, W])."""

    cameras: list[str] = field(default_factory=lambda: ["third_person", "wrist"])
    image_size: int | list[int] = field(default_factory=lambda: [48, 64])
    vision: VisionConfig = field(default_factory=VisionConfig)
    state_keys: list[str] = field(default_factory=lambda: ["ee_pos", "gripper"])
    state_dim: int = 4
    text_dim: int = EMBED_DIM
    backbone_dims: list[int] = field(default_factory=lambda: [256, 256])
    expert_dims: list[int] = field(default_factory=lambda: [256, 128])
    #: "waypoint": the action expert predicts the TCP pose to head for (xyz + 6-D rotation, frame
    #: base) and the gripper; the policy turns it into a clipped delta. "delta": it predicts the
    #: 7-DoF delta directly.
    action_mode: str = "waypoint"
    max_step: float = 0.05  # m, translation clip of a waypoint-mode step (the expert's step)
    max_rot: float = 0.3  # rad, rotation clip of a waypoint-mode step
    aux_dim: int = 6  # auxiliary head: task geometry (target + goal position), fed to the action expert; 0 = none

    @classmethod
    def from_dict(cls, d: dict) -> "VLAConfig":
        d = dict(d)
        d["vision"] = VisionConfig(**d.get("vision", {}))
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


class TinyVLANet(nn.Module):
    """Images + instruction embedding + proprio state -> action outputs (see ``VLAConfig.action_mode``).

    Waypoint mode: (B, 10) = normalised TCP target xyz, 6-D rotation (first two columns of the
    target rotation matrix), gripper logit (sigmoid = open). Delta mode: (B, 7) = normalised
    translation/rotation deltas and the gripper logit.
    """

    def __init__(self, cfg: VLAConfig):
        super().__init__()
        self.cfg = cfg
        self.text_proj = nn.Sequential(nn.Linear(cfg.text_dim, 128), nn.GELU())
        self.encoders = nn.ModuleDict({cam: VisionEncoder(cfg.vision, 128) for cam in cfg.cameras})
        fused = sum(e.out_dim for e in self.encoders.values()) + 128 + cfg.state_dim
        self.backbone = _mlp_layers(fused, cfg.backbone_dims)
        self.aux_head = nn.Linear(cfg.backbone_dims[-1], cfg.aux_dim) if cfg.aux_dim else None
        self.action_expert = _mlp_layers(cfg.backbone_dims[-1] + cfg.state_dim + cfg.aux_dim, cfg.expert_dims)
        self.action_out = nn.Linear(cfg.expert_dims[-1], self.output_dim)

    @property
    def output_dim(self) -> int:
        """10 (xyz, 6-D rotation, gripper logit) in waypoint mode, 7 in delta mode."""
        return 10 if self.cfg.action_mode == "waypoint" else 7

    def forward(self, images: dict[str, torch.Tensor], text: torch.Tensor, state: torch.Tensor, with_aux: bool = False):
        """(B, output_dim) action outputs (last = gripper logit); with ``with_aux`` also the (B, aux_dim) normalised task-geometry prediction."""
        t = self.text_proj(text)
        feats = [enc(images[cam], t) for cam, enc in self.encoders.items()]
        x = torch.cat(feats + [t, state], dim=-1)
        for layer in self.backbone:
            x = layer(x)
        aux = self.aux_head(x) if self.aux_head is not None else x[:, :0]
        x = torch.cat([x, state, aux], dim=-1)
        for layer in self.action_expert:
            x = layer(x)
        out = self.action_out(x)
        return (out, aux) if with_aux else out


@dataclass
class VLMConfig:
    """Architecture of a tiny VLM: image + question -> one categorical head per answer slot."""

    image_size: int | list[int] = field(default_factory=lambda: [72, 96])
    vision: VisionConfig = field(default_factory=lambda: VisionConfig(width=16))
    text_dim: int = EMBED_DIM
    backbone_dims: list[int] = field(default_factory=lambda: [128])
    slots: dict[str, list[str]] = field(default_factory=dict)  # slot name -> vocabulary

    @classmethod
    def from_dict(cls, d: dict) -> "VLMConfig":
        d = dict(d)
        d["vision"] = VisionConfig(**d.get("vision", {}))
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


class TinyVLMNet(nn.Module):
    """Image + prompt embedding -> logits per slot (a slot decoder fills the answer template)."""

    def __init__(self, cfg: VLMConfig):
        super().__init__()
        self.cfg = cfg
        self.text_proj = nn.Sequential(nn.Linear(cfg.text_dim, 128), nn.GELU())
        self.encoder = VisionEncoder(cfg.vision, 128)
        self.backbone = _mlp_layers(self.encoder.out_dim + 128, cfg.backbone_dims)
        self.heads = nn.ModuleDict({s: nn.Linear(cfg.backbone_dims[-1], len(v)) for s, v in cfg.slots.items()})

    def forward(self, image: torch.Tensor, text: torch.Tensor) -> dict[str, torch.Tensor]:
        t = self.text_proj(text)
        x = torch.cat([self.encoder(image, t), t], dim=-1)
        for layer in self.backbone:
            x = layer(x)
        return {s: h(x) for s, h in self.heads.items()}
