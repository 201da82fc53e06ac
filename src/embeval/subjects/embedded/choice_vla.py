"""A VLA built on the two-card VLM (:mod:`embeval.subjects.embedded.choice`): its backbone plus an action expert.

Network (:class:`ChoiceVLANet`), module names shared with :class:`~embeval.subjects.embedded.choice.TinyChoiceNet`
so the VLM's weights load as they are:

* **VLM backbone** (initialised from a trained two-card VLM): ``text_proj`` (instruction embedding
  -> 128-d), ``encoder`` (the card CNN, FiLM on the text, shared by both cards), ``backbone`` (the
  fusion MLP over [left card, right card, text]: the 128-d "answer features") and ``head`` (the
  VLM's left/right answer logits: used only by co-training, never by the action path);
* **control pathway**: ``encoders.third_person`` (the tiny VLA's scene CNN on the third-person view
  at ``scene_size``, FiLM on the text) and the proprioceptive state; with ``control_text`` False no FiLM and no
  text input to the expert: the instruction reaches the actions only through the VLM prefix; with
  ``answer_gate`` the expert reads the prefix only while the gripper is closed (reach and grasp see no answer);
* **action expert** ``action_expert`` (MLP over [answer features, scene features, text, state]; with
  ``answer_commit`` the head's left/right decision, one-hot, instead of the answer features) and
  ``action_out`` -> 7 outputs: normalised ``[dx, dy, dz, droll, dpitch, dyaw]`` deltas (frame base,
  metres, radians) and the gripper logit (sigmoid = open).

Preprocessing of :class:`ChoiceVLAPolicy` (the policy declares ``image_size`` = the third-person
render it needs, [H, W]): each card is read through a region-of-interest crop at the episode's card
zones: the four corners of the card (centres ``card_xy``, edge ``card_size``, top face at
``card_z``; metres, frame base) are projected with the calibrated third-person camera
(:class:`~embeval.subjects.embedded.card_crop.PinholeCamera`) and rectified to the VLM's
``card_size`` pixels (:func:`cv2.warpPerspective`). The scene view is the same image resized to
``scene_size``. The VLM prefix (card crops -> answer features) is computed once per episode, on the
first observation after :meth:`~ChoiceVLAPolicy.reset` (the cards are fixed and not yet occluded by
the arm) and cached, as VLAs cache their prefix; the action expert runs every step.

Hidden states (probing): ``encoder.blocks.<i>`` (two rows: left, right card), ``backbone.<i>``
(VLM fusion), ``encoders.third_person.blocks.<i>`` and ``action_expert.<i>``, each at the given
observation (the full forward, prefix included). With ``answer_gate`` the observation is taken with the gripper
reported closed (opening 0): the action expert reads the answer only while the cube is held, so that is where
a probe of it asks whether the answer is there (at the open-gripper first step it is absent by construction).

Batched episodes (:meth:`ChoiceVLAPolicy.act_slots`): each slot keeps its instruction and its cached prefix;
one call computes the prefixes of the slots at their first step together, then the action expert for all.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embeval import checks
from embeval.action import GRIPPER_CLOSED_BELOW, Action, ActionSpec, Observation
from embeval.errors import ConfigError, InvalidInputError
from embeval.subjects.embedded.card_crop import PinholeCamera, rectify_card
from embeval.subjects.embedded.checkpoint import load_model, save_checkpoint
from embeval.subjects.embedded.device import resolve_device
from embeval.subjects.embedded.choice import ChoiceVLMConfig
from embeval.subjects.embedded.policy import workspace_floor
from embeval.subjects.embedded.preprocess import resize_image, state_vector
from embeval.subjects.embedded.text_encoder import TextEncoder, shared_text_encoder
from embeval.subjects.hidden import HiddenStateMixin
from embeval.subjects.protocols import Slot, check_slots, no_episode

#: checkpoint ``family`` of this policy (``config.json``); the tiny VLAs have none
FAMILY = "choice-vla"
SCENE_CAMERA = "third_person"


@dataclass
class ChoiceVLAConfig:
    """Architecture and preprocessing (see the module docstring). ``image_size``: the third-person
    render the policy reads, [H, W] pixels; ``scene_size``: the control pathway's view, [H, W]."""

    vlm: dict = field(default_factory=lambda: ChoiceVLMConfig().to_dict())
    image_size: list[int] = field(default_factory=lambda: [240, 320])
    scene_size: list[int] = field(default_factory=lambda: [48, 64])
    scene_vision: dict = field(default_factory=lambda: {"width": 16, "depth": 3, "pool": "spatial_softmax", "film": True})
    camera: dict = field(default_factory=lambda: PinholeCamera.third_person().to_dict())
    card_xy: list[list[float]] = field(default_factory=lambda: [[0.55, 0.15], [0.55, -0.15]])  # left, right card centre
    card_size: float = 0.12  # m
    card_z: float = 0.003  # m, the cards' top face
    state_keys: list[str] = field(default_factory=lambda: ["ee_pos", "gripper"])
    state_dim: int = 4
    expert_dims: list[int] = field(default_factory=lambda: [256, 128])
    #: the control pathway reads the instruction directly (FiLM in the scene encoder, text input of the action
    #: expert); False: only through the VLM prefix, as an action expert reading its VLM's features
    control_text: bool = True
    #: the action expert reads the answer features only while the gripper is closed (the state's last entry, the
    #: gripper opening, < 0.5): reaching and grasping cannot depend on the cards or the question
    answer_gate: bool = False
    #: the action expert reads the VLM head's left/right decision (one-hot) instead of the answer features, so the
    #: carry goes to one card or the other, never between; trained straight-through (the forward pass uses the
    #: one-hot, the gradient that of the softmax), so the full recipe still trains every weight on the action loss
    answer_commit: bool = False
    cameras: list[str] = field(default_factory=lambda: [SCENE_CAMERA])

    def __post_init__(self):
        for name in ("control_text", "answer_gate", "answer_commit"):  # a checkpoint's config.json is outside input
            checks.flag(getattr(self, name), f"choice VLA config {name}")
        if self.answer_gate and (not self.state_keys or self.state_keys[-1] != "gripper"):
            raise ConfigError(f"choice VLA config answer_gate reads the gripper as the state's last entry; put 'gripper' "
                              f"last in state_keys (got {self.state_keys!r})")

    @classmethod
    def from_dict(cls, d: dict) -> ChoiceVLAConfig:
        from embeval.config import check_keys

        check_keys(d, list(cls.__dataclass_fields__), "choice VLA config")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def vlm_config(self) -> ChoiceVLMConfig:
        return ChoiceVLMConfig.from_dict(self.vlm)


def _torch_net():
    import torch
    from torch import nn

    from embeval.subjects.embedded.nets import VisionConfig, VisionEncoder, _mlp_layers

    class ChoiceVLANet(nn.Module):
        """(left card, right card, scene view, instruction embedding, state) -> (B, 7) action outputs
        and (B, 2) answer logits [left, right]."""

        def __init__(self, cfg: ChoiceVLAConfig):
            super().__init__()
            self.cfg = cfg
            v = cfg.vlm_config
            self.text_proj = nn.Sequential(nn.Linear(v.text_dim, v.text_width), nn.GELU())
            self.encoder = VisionEncoder(VisionConfig(**v.vision), v.text_width)
            self.backbone = _mlp_layers(2 * self.encoder.out_dim + v.text_width, v.backbone_dims)
            self.head = nn.Linear(v.backbone_dims[-1], 2)
            scene_cfg = {**cfg.scene_vision, "film": cfg.scene_vision.get("film", True) and cfg.control_text}
            self.encoders = nn.ModuleDict({SCENE_CAMERA: VisionEncoder(VisionConfig(**scene_cfg), v.text_width)})
            din = ((2 if cfg.answer_commit else v.backbone_dims[-1]) + self.encoders[SCENE_CAMERA].out_dim
                   + (v.text_width if cfg.control_text else 0) + cfg.state_dim)
            self.action_expert = _mlp_layers(din, cfg.expert_dims)
            self.action_out = nn.Linear(cfg.expert_dims[-1], 7)

        def vlm_modules(self) -> list[nn.Module]:
            """The parts initialised from the VLM (frozen by the ``frozen`` recipe)."""
            return [self.text_proj, self.encoder, self.backbone, self.head]

        def prefix(self, left: torch.Tensor, right: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            """(B, 128) answer features of the cards under projected text ``t``."""
            b = left.shape[0]
            f = self.encoder(torch.cat([left, right]), torch.cat([t, t]))
            x = torch.cat([f[:b], f[b:], t], dim=-1)
            for layer in self.backbone:
                x = layer(x)
            return x

        def expert(self, prefix: torch.Tensor, scene: torch.Tensor, t: torch.Tensor, state: torch.Tensor,
                   side: torch.Tensor | None = None) -> torch.Tensor:
            """(B, 7) action outputs. ``side`` (training only, with ``answer_commit``): (B,) the demonstrated card,
            0 = left, 1 = right, -1 = none; where given it replaces the head's decision (teacher forcing)."""
            if self.cfg.answer_commit:  # the head's decision, one-hot [left, right]; straight-through gradient
                soft = self.head(prefix).softmax(-1)
                pick = soft.argmax(-1) if side is None else torch.where(side >= 0, side, soft.argmax(-1))
                hard = torch.nn.functional.one_hot(pick, 2).to(soft.dtype)
                prefix = hard + soft - soft.detach()
            if self.cfg.answer_gate:  # the answer features count once the cube is held
                prefix = prefix * (state[:, -1:] < GRIPPER_CLOSED_BELOW).to(prefix.dtype)
            parts = [prefix, self.encoders[SCENE_CAMERA](scene, t)] + ([t] if self.cfg.control_text else []) + [state]
            x = torch.cat(parts, dim=-1)
            for layer in self.action_expert:
                x = layer(x)
            return self.action_out(x)

        def forward(self, left, right, scene, text, state, with_answer: bool = False):
            t = self.text_proj(text)
            p = self.prefix(left, right, t)
            out = self.expert(p, scene, t, state)
            return (out, self.head(p)) if with_answer else out

    return ChoiceVLANet


def build_net(cfg: ChoiceVLAConfig):
    return _torch_net()(cfg)


def init_from_vlm(net, vlm) -> None:
    """Copy a :class:`~embeval.subjects.embedded.choice.TinyChoiceVLM`'s weights into ``net``'s VLM parts."""
    own = net.state_dict()
    src = vlm.net.state_dict()
    missing = [k for k in src if k not in own or own[k].shape != src[k].shape]
    if missing:
        raise ConfigError(f"the VLM {vlm.id!r} does not fit this VLA's backbone (mismatched {missing[:3]}); "
                          "build the VLA with that VLM's config (ChoiceVLAConfig.vlm)")
    own.update(src)
    net.load_state_dict(own)


def card_crops(cfg: ChoiceVLAConfig, image: np.ndarray, camera: PinholeCamera | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) card crops of a third-person image, rectified to the VLM's card size (uint8)."""
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise InvalidInputError(f"the {SCENE_CAMERA} image must be (H, W, 3) RGB, got shape {img.shape}")
    cam = camera or PinholeCamera.from_dict(cfg.camera)
    s = cfg.vlm_config.card_size
    return tuple(rectify_card(img, cam, xy, cfg.card_size, s, cfg.card_z) for xy in cfg.card_xy)  # type: ignore[return-value]


def scene_view(cfg: ChoiceVLAConfig, image: np.ndarray) -> np.ndarray:
    """The control pathway's view: the third-person image resized to ``cfg.scene_size``."""
    return resize_image(np.asarray(image), cfg.scene_size)


class ChoiceVLAPolicy(HiddenStateMixin):
    """A :class:`ChoiceVLANet` as a :class:`~embeval.subjects.protocols.Policy` (7-DoF deltas, frame base,
    gripper 1 = open; see the module docstring for its preprocessing). ``action_mean``/``action_std``
    un-normalise the six deltas; the gripper logit's sigmoid is thresholded at 0.5 (``binary_gripper=False``: the
    opening probability as is). Workspace floor as
    :class:`~embeval.subjects.embedded.policy.TinyVLAPolicy` (``min_tcp_z``, metres); ``device`` as there.
    Episode state (batch 1 and per slot): the instruction embedding and the prefix cached at the first step."""

    action_spec = ActionSpec(frame="base", chunk_size=1)

    def __init__(self, net, action_mean, action_std, id: str = "tiny-vla-a2a-frozen", meta: dict | None = None,
                 text_encoder: TextEncoder | None = None, min_tcp_z: float | None = 0.02, device: str = "cpu",
                 binary_gripper: bool = True):
        import torch

        self.device = resolve_device(device)
        self.net = net.eval().to(self.device)
        self.cfg = net.cfg
        self.id = id
        self.meta = dict(meta or {})
        self.action_mean = np.asarray(action_mean, dtype=np.float32)
        self.action_std = np.asarray(action_std, dtype=np.float32)
        self.min_tcp_z = min_tcp_z
        self.binary_gripper = binary_gripper
        self._camera = PinholeCamera.from_dict(self.cfg.camera)
        self._text = text_encoder or shared_text_encoder()
        self._ep: _Episode | None = None  # the batch-1 episode (reset / act)
        self._slots: dict[Slot, _Episode] = {}
        self._torch = torch

    def fork(self) -> ChoiceVLAPolicy:
        """A policy sharing this one's network and encoder, with its own episode state."""
        return type(self)(self.net, self.action_mean, self.action_std, id=self.id, meta=self.meta, text_encoder=self._text,
                          min_tcp_z=self.min_tcp_z, device=self.device, binary_gripper=self.binary_gripper)

    # -- preprocessing ---------------------------------------------------------------------
    def card_crops(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(left, right) card crops of a third-person image (:func:`card_crops`)."""
        return card_crops(self.cfg, image, self._camera)

    def scene_view(self, image: np.ndarray) -> np.ndarray:
        return scene_view(self.cfg, image)

    def _image(self, ob: Observation) -> np.ndarray:
        if SCENE_CAMERA not in ob.images:
            raise InvalidInputError(f"{self.id} needs camera {SCENE_CAMERA!r}; observation has {sorted(ob.images)}")
        return ob.images[SCENE_CAMERA]

    def _t(self, x: np.ndarray):
        return self._torch.from_numpy(np.ascontiguousarray(x)).to(self.device).permute(0, 3, 1, 2).float().div_(255.0)

    # -- Policy protocol -------------------------------------------------------------------
    def reset(self, instruction: str) -> None:
        self._ep = _Episode(self._torch.from_numpy(self._text.encode([instruction])))

    def act(self, observation: Observation) -> Action:
        if self._ep is None:
            if not observation.instruction:
                raise InvalidInputError(f"{self.id}: call reset(instruction) before act(), or set observation.instruction")
            self.reset(observation.instruction)
        return self._step([self._ep], [observation])[0]

    # -- batched episodes (BatchedPolicy) ---------------------------------------------------
    def reset_slots(self, slots, instructions) -> None:
        """Start an episode with ``instructions[i]`` in ``slots[i]`` (restarting a slot in use: its prefix is dropped)."""
        slots = check_slots(self.id, slots, instructions, "instructions")
        embs = self._text.encode([str(i) for i in instructions])
        for k, slot in enumerate(slots):
            self._slots[slot] = _Episode(self._torch.from_numpy(embs[k:k + 1]))

    def act_slots(self, slots, observations) -> list[Action]:
        """One action per slot: the prefixes of the slots at their first step in one pass, the expert in one pass."""
        slots = check_slots(self.id, slots, observations, "observations")
        missing = next((s for s in slots if s not in self._slots), None)
        if missing is not None:
            raise no_episode(self.id, missing)
        return self._step([self._slots[s] for s in slots], list(observations)) if slots else []

    def end_slots(self, slots) -> None:
        for s in slots:
            self._slots.pop(s, None)

    def _step(self, eps: list[_Episode], observations: list[Observation]) -> list[Action]:
        torch = self._torch
        imgs = [self._image(ob) for ob in observations]
        with torch.no_grad():
            t = self.net.text_proj(torch.cat([e.temb for e in eps]).to(self.device))
            new = [i for i, e in enumerate(eps) if e.prefix is None]
            if new:
                crops = [self.card_crops(imgs[i]) for i in new]
                p = self.net.prefix(self._t(np.stack([c[0] for c in crops])), self._t(np.stack([c[1] for c in crops])), t[new])
                for k, i in enumerate(new):
                    eps[i].prefix = p[k:k + 1]
            prefix = torch.cat([e.prefix for e in eps])
            state = torch.from_numpy(np.stack([state_vector(ob.state, self.cfg.state_keys) for ob in observations]))
            scene = self._t(np.stack([self.scene_view(im) for im in imgs]))
            out = self.net.expert(prefix, scene, t, state.to(self.device)).cpu().numpy()
        return [Action(self._decode(o, ob)) for o, ob in zip(out, observations)]

    def _decode(self, out: np.ndarray, ob: Observation) -> np.ndarray:
        a = np.empty(7)
        a[:6] = np.asarray(out[:6], dtype=np.float64) * self.action_std + self.action_mean
        p_open = 1.0 / (1.0 + np.exp(-float(out[6])))
        a[6] = float(p_open >= GRIPPER_CLOSED_BELOW) if self.binary_gripper else p_open
        return workspace_floor(a, ob, self.min_tcp_z)

    # -- probing ---------------------------------------------------------------------------
    def _hidden_module(self):
        return self.net

    def _hidden_forward(self, observation: Observation):
        torch = self._torch
        if self._ep is None:
            self.reset(observation.instruction)
        img = self._image(observation)
        left, right = self.card_crops(img)
        st = dict(observation.state)
        if self.cfg.answer_gate:  # probed as during the carry, the only phase whose actions read the answer
            st["gripper"] = np.zeros(1, dtype=np.float32)
        state = torch.from_numpy(state_vector(st, self.cfg.state_keys)[None]).to(self.device)
        with torch.no_grad():
            return self.net(self._t(left[None]), self._t(right[None]), self._t(self.scene_view(img)[None]),
                            self._ep.temb.to(self.device), state)

    # -- persistence -----------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        extra = {"id": self.id, "family": FAMILY, "action_mean": self.action_mean.tolist(),
                 "action_std": self.action_std.tolist(), "min_tcp_z": self.min_tcp_z, "meta": self.meta}
        return save_checkpoint(path, "vla", self.cfg.to_dict(), self.net.state_dict(), extra)

    @classmethod
    def load(cls, path: str | Path, id: str | None = None, **kw: Any) -> ChoiceVLAPolicy:
        doc, net = load_model(path, "vla", lambda c: build_net(ChoiceVLAConfig.from_dict(c)), family=FAMILY)
        kw.setdefault("min_tcp_z", doc.get("min_tcp_z", 0.02))
        return cls(net, doc["action_mean"], doc["action_std"], id=id or doc.get("id", Path(path).name),
                   meta=doc.get("meta"), **kw)


@dataclass
class _Episode:
    """One episode's state: the instruction embedding (1, 384) on the CPU and the cached prefix (1, 128) or None."""

    temb: Any
    prefix: Any = None


@dataclass
class ChoiceVLARecipe:
    """Everything ``embeval train vla --recipe NAME`` needs to rebuild a choice VLA from a seed.

    ``mode``: what the action fine-tune preserves: ``"frozen"`` (the VLM parts get no gradient: only
    the control pathway and the action expert train), ``"full"`` (everything trains on the action
    loss alone, from the VLM init), ``"cotrain"`` (as full, plus the VLM's own answer loss on its
    training items of all categories, weight ``answer_weight``)."""

    name: str = "tiny-vla-a2a-frozen"
    mode: str = "frozen"
    seed: int = 0
    vlm: str = "tiny-vlm-a2a-cell"  # the shipped VLM whose backbone initialises the VLA
    #: knowledge categories of the answer demonstrations (the rest are never demonstrated)
    demo_categories: list[str] = field(default_factory=lambda: ["color", "shape", "counting", "traffic"])
    demo_items: int = 40  # training items per demonstrated category (both layouts each), stream DEMO_STREAM
    pickplace_episodes: int = 40  # ordinary Pick/Place expert demonstrations (generated scenes)
    #: side-named placements in the card cell ("put the cube on the left picture"): items per category,
    #: all categories, stream SIDE_STREAM, the side drawn independently of the item's answer (0 = none)
    side_items: int = 0
    arch: dict = field(default_factory=dict)  # ChoiceVLAConfig overrides
    train: dict = field(default_factory=lambda: {"steps": 2000, "batch_size": 64, "lr": 1e-3})
    answer_weight: float = 0.5  # cotrain: weight of the VLM answer loss
    #: with ``arch["answer_commit"]``: during training the action expert reads the card each demonstration carries
    #: to (teacher forcing) instead of the head's decision, so it learns to execute a decision rather than to hedge
    #: where the head disagrees with the demonstration; at evaluation it reads the head as always
    teacher_side: bool = False
    answer_per_category: int = 300  # cotrain: VLM items per category (all categories, the VLM's stream)
    eval_per_category: int = 20  # held-out Act2Answer suite in the cell: items per category (0 = skip)
    eval_seed: int = 0
    #: how the Act2Answer episodes of its answer demonstrations and its evaluation start (EpisodeSpec ``start``:
    #: ``grasped``, the reference protocol's, or ``table``; a report written without this field is ``table``)
    start: str = "grasped"

    def __post_init__(self):
        if self.start not in ("grasped", "table"):
            raise ConfigError(f"choice VLA recipe start must be 'grasped' or 'table', got {self.start!r}")
        if self.mode not in ("frozen", "full", "cotrain"):
            raise ConfigError(f"choice VLA recipe mode must be 'frozen', 'full' or 'cotrain', got {self.mode!r}")
        checks.flag(self.teacher_side, "choice VLA recipe teacher_side")
        if self.teacher_side and not self.arch.get("answer_commit"):
            raise ConfigError("choice VLA recipe teacher_side forces the head's left/right decision, which only an "
                              "answer_commit expert reads; set arch answer_commit: true or drop teacher_side")
