"""LeRobot policies (ACT, Diffusion, SmolVLA, pi0, ...) from a local checkpoint directory.

The directory is what ``policy.save_pretrained`` (and ``lerobot-train``) writes: ``config.json`` +
``model.safetensors``, plus ``policy_preprocessor.json`` / ``policy_postprocessor.json`` with the
normalisation statistics (without them, inputs and outputs are not normalised).

Observation -> LeRobot batch:
- images: each of the policy's image features (``observation.images.*``) takes the camera named in
  ``camera_map`` (feature -> our camera name), default: our cameras in order; uint8 HWC becomes
  float CHW in [0, 1], resized to the feature's shape;
- state: ``observation.state`` = the observation's state entries named by ``state_key`` (one name, or a
  list concatenated in the declared order; default ``joint_positions``; ``[tcp_pose, gripper]`` for a policy
  trained on ``embeval train demos``), zero-padded/cut to the feature's size only when ``pad_state`` is set
  (with a warning naming what is padded);
- ``observation.environment_state`` (privileged simulator state, which LeRobot makes a policy input when a
  dataset has it): refused at load unless ``env_state_key`` names the observation's state entries to feed;
- ``task``: the instruction (language-conditioned policies: SmolVLA, pi0).

A camera image of another size than the policy's input is resized (bilinear, antialiased) with a warning, a
louder one when its aspect ratio differs (the image is then stretched). The spec's params are checked when the
subject is loaded (:class:`LeRobotParams`): unknown image features in ``camera_map``, wrong types, an unknown
frame or gripper convention are one :class:`~embeval.errors.ConfigError` naming the field.

Action -> embeval: the policy's action vector (after un-normalisation), ``action_indices`` picks the
K = ``convention.size`` entries ``[translation 3, rotation, gripper]`` (7 for Euler angles or a rotation
vector, 8 for a quaternion, 10 for rot6d; default the first K); a two-arm policy whose output is one such
K-vector per arm declares ``arms: 2`` and, unless ``action_indices`` is given, each step takes the arm with
the larger motion (:func:`embeval.action.arm_of_larger_motion`, judged on the arms' converted actions);
an absolute convention is converted against the observation's ``state['tcp_pose']``.

Cameras from the convention: without ``camera_map``, the convention's ``cameras`` feed the image features in
order; its ``crop`` centre-crops each image before the resize; its ``image_size``, when set, must equal the
checkpoint's image input size (the checkpoint decides; a different one is refused at load).

``action_scale`` multiplies them (e.g. 0.001 for millimetres), and the gripper is converted from
``gripper`` (see :mod:`embeval.conventions`). Declare what the numbers mean with
``frame`` and ``absolute``; the policy's own chunking (``n_action_steps``) is kept.

Batched episodes (:meth:`LeRobotPolicy.act_slots`): for the policy types in :data:`CHUNK_BATCHED` (ACT
without temporal ensembling) each slot keeps its own action-chunk queue in the adapter, and the slots whose
queue is empty get their next chunks from ONE ``predict_action_chunk`` call; slots start and end at any step.
Other types (observation history, temporal ensembling, sampled chunks) get one copy of the policy per slot
(shared weights, own queues: :class:`~embeval.subjects.protocols.LoopSlots`). Either way a slot's actions
equal a batch-1 run's for its episode (float rounding of another batch size aside).
"""
from __future__ import annotations

import collections
import copy
import math
import threading
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from embeval import checks
from embeval.action import Action, Observation, check_image
from embeval.errors import ConfigError, InvalidInputError, MissingWeightsError
from embeval.conventions import check_gripper, input_size, model_image, tcp_pose_of, to_embeval
from embeval.conventions import convention as resolve_convention
from embeval.subjects.hidden import HiddenStateMixin
from embeval.subjects.model_files import check_lerobot_processors
from embeval.subjects.protocols import (
    LoopSlots,
    Slot,
    check_slots,
    fork_policy,
    started_slots,
)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
#: frames the policy's translation/rotation may be in (``params.frame``; :class:`embeval.action.ActionSpec`)
FRAMES = ("base", "tool0")
#: relative aspect-ratio difference above which a resized camera image counts as stretched
ASPECT_TOLERANCE = 0.01


#: policy type -> the Hugging Face hub repos it loads beyond the checkpoint folder, each with what it is, read from
#: the policy's config (LeRobot 0.6.1): these types cannot be built offline until the repos are in the local cache.
#: ``c`` is the checkpoint's declared config (:func:`declared_config`: config.json over the config class's defaults).
HUB_NEEDS: dict[str, Callable[[Any], list[tuple[str, str]]]] = {
    "pi0": lambda c: [("google/paligemma-3b-pt-224", "the PaliGemma tokenizer its preprocessor loads")],
    "pi05": lambda c: [("google/paligemma-3b-pt-224", "the PaliGemma tokenizer its preprocessor loads")],
    "pi0_fast": lambda c: [(c.text_tokenizer_name, "the PaliGemma text tokenizer"),
                           (c.action_tokenizer_name, "the FAST action tokenizer")],
    "smolvla": lambda c: [(c.vlm_model_name, "the SmolVLM config and processor its backbone is built from")],
    "groot": lambda c: [(c.base_model_path or "nvidia/GR00T-N1.7-3B", "the GR00T N1.7 model and its sidecars"),
                        ("nvidia/Cosmos-Reason2-2B", "the Cosmos-Reason2 processor of its backbone")],
    "xvla": lambda c: [(c.tokenizer_name, "the BART tokenizer its preprocessor loads")],
    "wall_x": lambda c: [(c.pretrained_name_or_path, "the Qwen2.5-VL processor")]
    + ([(c.action_tokenizer_path, "the FAST action tokenizer")] if c.prediction_mode == "fast" else []),
    "eo1": lambda c: [(c.vlm_base, "the Qwen2.5-VL config, processor and weights of its backbone")],
    "evo1": lambda c: [(c.vlm_model_name, "the InternVL3 tokenizer and weights of its backbone")],
    "vla_jepa": lambda c: [(c.qwen_model_name, "the Qwen3-VL backbone"), (c.jepa_encoder_name, "the V-JEPA 2 encoder")],
    "molmoact2": lambda c: [(c.checkpoint_path, "the MolmoAct2 model"),
                            (c.discrete_action_tokenizer, "its FAST action tokenizer")],
    "multi_task_dit": lambda c: [(c.vision_encoder_name, "the CLIP vision encoder")]
    + ([(c.text_encoder_name, "the CLIP text encoder")] if c.text_encoder_name != c.vision_encoder_name else []),
    "fastwam": lambda c: [(c.model_id, "the Wan2.2 video model"), (c.tokenizer_model_id, "the UMT5 tokenizer"),
                          (c.text_encoder_model_id, "the Wan2.2 text encoder")]
    + ([(c.base_model_id, "the FastWAM base weights")] if c.base_model_id else []),
    "lingbot_va": lambda c: [(c.wan_pretrained_path, "the LingBot-VA base (Wan VAE, UMT5 text encoder, tokenizer)")],
}


def declared_config(doc: Mapping[str, Any]) -> Any:
    """The policy config a checkpoint's config.json declares, as attributes: its fields over the defaults of
    LeRobot's config class for ``doc["type"]``, without running the class (some, e.g. eo1, fetch hub files while
    they are built). None when this LeRobot does not know the type."""
    import dataclasses
    from types import SimpleNamespace

    import lerobot.policies  # noqa: F401  (registers the config choices)
    from lerobot.configs.policies import PreTrainedConfig

    try:
        cls = PreTrainedConfig.get_choice_class(doc["type"])
    except Exception:  # an unknown type: LeRobot's own error names it when the config is parsed
        return None
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    return SimpleNamespace(**{**defaults, **doc})


def _hub_offline() -> bool:
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def missing_hub_files(cfg: Any) -> list[tuple[str, str]]:
    """``(repo, what)`` of :data:`HUB_NEEDS` for ``cfg.type`` that are neither a local folder nor in the local
    Hugging Face cache (nothing is downloaded). ``cfg``: a LeRobot config or :func:`declared_config`."""
    needs = HUB_NEEDS.get(cfg.type)
    if needs is None:
        return []
    from huggingface_hub import snapshot_download

    out = []
    for repo, what in needs(cfg):
        if not isinstance(repo, str) or not repo.strip():  # a config.json field read before LeRobot type-checks it
            raise ConfigError(f"LeRobot policy type {cfg.type!r}: its config names {what} as {repo!r}; expected a hub "
                              "repo id or a local folder (a non-empty string): fix that field of config.json")
        if Path(repo).expanduser().is_dir():
            continue
        try:
            snapshot_download(repo, local_files_only=True)
        except Exception:  # LocalEntryNotFoundError, or a name the hub would refuse
            out.append((repo, what))
    return out


def hub_error(path: Path, cfg: Any, missing: list[tuple[str, str]]) -> MissingWeightsError:
    """The one-line error for a checkpoint of a type that needs hub files not on this machine (names them)."""
    names = "; ".join(f"{repo} ({what})" for repo, what in missing)
    fetch = " && ".join(f"hf download {repo}" for repo, _ in missing)
    return MissingWeightsError(f"{path}: LeRobot policy type {cfg.type!r} is built from Hugging Face hub files that are "
                               f"not in the local cache: {names}; fetch them once where the hub is reachable "
                               f"({fetch}; HF_HOME picks the cache) and load again")


def _names(value: Any, field_name: str) -> tuple[str, ...]:
    """A state-key param (one name or a list of names) as a tuple; :class:`ConfigError` naming ``field_name``."""
    names = [value] if isinstance(value, str) else value
    if (not isinstance(names, (list, tuple)) or not names or any(not isinstance(n, str) or not n.strip() for n in names)
            or len(set(names)) != len(names)):
        raise ConfigError(f"field 'params.{field_name}' must be a state entry name or a list of distinct names "
                          f"(e.g. [tcp_pose, gripper]), got {value!r}")
    return tuple(names)


@dataclass(frozen=True)
class LeRobotParams:
    """The spec's ``params`` for :class:`LeRobotPolicy`, checked on construction (see module docstring)."""

    camera_map: dict[str, str]
    state_key: tuple[str, ...]
    pad_state: bool
    env_state_key: tuple[str, ...] | None
    action_indices: tuple[int, ...] | None
    action_scale: np.ndarray | None  # (7,); None: the convention's scale
    gripper: str | None  # None: the convention's
    frame: str | None  # None: the convention's
    absolute: bool | None  # None: the convention's
    device: str
    seed: int
    arms: int

    @classmethod
    def check(cls, camera_map, state_key, pad_state, env_state_key, action_indices, action_scale, gripper, frame,
              absolute, device, seed, arms) -> "LeRobotParams":
        cmap = {} if camera_map is None else camera_map
        if not isinstance(cmap, dict) or any(not isinstance(k, str) or not isinstance(v, str) or not v for k, v in cmap.items()):
            raise ConfigError("field 'params.camera_map' must map policy image features to camera names, e.g. "
                              f"{{observation.images.top: third_person}}, got {camera_map!r}")
        for name, v in (("pad_state", pad_state), ("absolute", absolute)):
            if not isinstance(v, bool) and not (name == "absolute" and v is None):
                raise ConfigError(f"field 'params.{name}' must be true or false, got {v!r}")
        checks.seed(seed, "field 'params.seed'")
        checks.integer(arms, "field 'params.arms'", 1)
        if action_indices is not None and (not isinstance(action_indices, (list, tuple))
                                           or any(isinstance(i, bool) or not isinstance(i, int) for i in action_indices)):
            raise ConfigError(f"field 'params.action_indices' must list whole numbers, got {action_indices!r}")
        try:
            scale = None if action_scale is None else np.asarray(action_scale, dtype=np.float64).reshape(-1).copy()
        except (TypeError, ValueError):
            scale = False
        if scale is False or isinstance(action_scale, bool) or (scale is not None and (
                scale.size == 0 or not np.all(np.isfinite(scale)))):
            raise ConfigError(f"field 'params.action_scale' must be one finite number or one per raw action number (7 for "
                              f"Euler angles; the convention's size), got {action_scale!r}")
        if frame is not None and frame not in FRAMES:
            raise ConfigError(f"field 'params.frame' must be one of {', '.join(FRAMES)}, got {frame!r}")
        if not isinstance(device, str) or not device:
            raise ConfigError(f"field 'params.device' must be a torch device name (cpu, cuda, cuda:0, mps), got {device!r}")
        return cls(dict(cmap), _names(state_key, "state_key"), pad_state,
                   None if env_state_key is None else _names(env_state_key, "env_state_key"),
                   None if action_indices is None else tuple(action_indices), scale,
                   None if gripper is None else check_gripper(gripper), frame,
                   absolute, device, seed, arms)

    def convention(self, convention: Any = None):
        """The action convention these params declare (``gripper``, ``frame``, ``absolute``, ``action_scale`` over
        ``convention``'s; :func:`embeval.conventions.convention`)."""
        conv = resolve_convention(convention, gripper=self.gripper, frame=self.frame, absolute=self.absolute)
        if self.action_scale is not None:
            if self.action_scale.size not in (1, conv.size):
                raise ConfigError(f"field 'params.action_scale' must be one number or {conv.size} (one per raw "
                                  f"number of convention {conv.name!r}), got {self.action_scale.size}")
            conv = resolve_convention(conv, scale=self.action_scale.tolist())
        return conv


def concat_state(state: Mapping[str, Any], keys: Sequence[str], feature: str,
                 param: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """The entries ``keys`` of an observation's ``state`` flattened and concatenated in order (float32), and the
    parts; :class:`InvalidInputError` naming the missing entry and the fix (``params.<param>``)."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise InvalidInputError(f"policy input {feature!r} needs observation.state[{missing[0]!r}] (params.{param}: "
                                f"{list(keys)}); the observation has {sorted(state)}")
    parts = [np.asarray(state[k], dtype=np.float32).reshape(-1) for k in keys]
    return (np.concatenate(parts) if parts else np.zeros(0, np.float32)), parts


def raw_to_action(raw: Any, convention, indices: Sequence[int], arms: int, who: str, tcp_pose=None) -> Action:
    """An embeval :class:`Action` from one un-normalised LeRobot action vector: with ``arms`` > 1 the arm block
    with the larger motion, else the entries ``indices``, converted from ``convention`` (an absolute one against
    ``tcp_pose``, ``[x y z rx ry rz]``, m, rotation vector); a NaN or inf is :class:`InvalidInputError` naming ``who``."""
    a = np.asarray(raw, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(a)):
        raise InvalidInputError(f"policy {who} returned a NaN or inf action {a.tolist()}; the policy output is invalid")
    if arms > 1:  # the arm with the larger motion (Embodied-IQA), judged on the arms' converted actions
        from embeval.action import arm_of_larger_motion

        per_arm = [to_embeval(block, convention, tcp_pose) for block in a.reshape(arms, -1)]
        return per_arm[arm_of_larger_motion(np.concatenate([x.vector for x in per_arm]))]
    return to_embeval(a[list(indices)], convention, tcp_pose)


def assemble_state(state: Mapping[str, Any], keys: Sequence[str], size: int, feature: str, param: str,
                   pad: bool = False) -> tuple[np.ndarray, str]:
    """The entries ``keys`` of an observation's ``state`` flattened and concatenated in order, as float32 (``size``,);
    with ``pad``, zero-padded/cut to ``size`` and a note saying so (else ""). :class:`InvalidInputError` naming the
    missing entry, or the sizes, and the fix (``params.<param>``)."""
    s, parts = concat_state(state, keys, feature, param)
    if s.size == size:
        return s, ""
    sizes = " + ".join(f"{k} ({p.size})" for k, p in zip(keys, parts))
    if not pad:
        raise InvalidInputError(f"{feature}: observation.state {sizes} = {s.size} values, the policy expects {size}; "
                                f"list the entries it was trained on in params.{param} (a policy trained on "
                                "`embeval train demos`: [tcp_pose, gripper]), or set params.pad_state: true to zero-pad/cut")
    note = (f"{feature}: observation.state {sizes} = {s.size} values "
            + (f"zero-padded with {size - s.size} zeros" if s.size < size else f"cut to the first {size}")
            + f" to the policy's {size} (params.pad_state); a padded slot the policy reads (a gripper, say) gets 0")
    return np.concatenate([s, np.zeros(max(0, size - s.size), np.float32)])[:size], note

#: policy types whose ``select_action`` is "pop the queue; when it is empty, refill it with the first
#: ``n_action_steps`` of ``predict_action_chunk(batch)``" with no other episode state, given the config:
#: these batch their chunk predictions over slots in the adapter (see module docstring)
CHUNK_BATCHED: dict[str, Callable[[Any], bool]] = {
    "act": lambda cfg: getattr(cfg, "temporal_ensemble_coeff", None) is None,
}


@dataclass(frozen=True)
class InputSpec:
    """What the policy reads, for callers that render observations for it (:func:`embeval.act2answer.episode.
    obs_size_for` / ``obs_cameras_for``): its image input size [H, W] when all its image inputs share one, and the
    cameras it reads when ``camera_map`` names one for every image input (else None: any)."""

    image_size: tuple[int, int] | None
    cameras: tuple[str, ...] | None


@dataclass
class _Episode:
    """One slot's episode: its instruction and its pending actions (normalised, one tensor per step)."""

    instruction: str
    queue: collections.deque = field(default_factory=collections.deque)


def stack_batches(batches: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One preprocessed LeRobot batch from several one-row ones: tensors concatenated on the batch axis, lists
    joined, other values (equal in every row) kept. :class:`InvalidInputError` when rows cannot share a batch."""
    import torch

    out: dict[str, Any] = {}
    for key, first in batches[0].items():
        vals = [b[key] for b in batches]
        if isinstance(first, torch.Tensor):
            if any(v.shape[1:] != first.shape[1:] for v in vals):
                raise InvalidInputError(f"policy input {key!r} has shapes {[tuple(v.shape) for v in vals]} across the "
                                        "batch's observations; give every slot observations of the same form")
            out[key] = torch.cat(vals)
        elif isinstance(first, list):
            out[key] = [x for v in vals for x in v]
        else:
            out[key] = first
    return out


def check_checkpoint(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise MissingWeightsError(f"field 'path': LeRobot checkpoint folder {p} does not exist; copy the folder "
                                  "(config.json, model.safetensors, policy_*processor.json) there")
    if not (p / "config.json").is_file():
        raise MissingWeightsError(f"{p} has no config.json: point 'path' at the folder policy.save_pretrained() wrote "
                                  "(for lerobot-train outputs: checkpoints/<step>/pretrained_model)")
    if not any((p / w).is_file() for w in WEIGHT_FILES):
        raise MissingWeightsError(f"{p} has no weights ({' or '.join(WEIGHT_FILES)}); copy them from the trained checkpoint")
    check_config_json(p / "config.json")
    return p


def check_config_json(path: Path) -> dict:
    """The checkpoint's ``config.json`` as a mapping with a policy ``type``; :class:`ConfigError` in one line when it
    is empty, not UTF-8, not JSON or not a LeRobot policy config (a copy interrupted half-way, a wrong file)."""
    from embeval.errors import read_json

    fix = "copy it again from the trained checkpoint (policy.save_pretrained writes it)"
    doc = read_json(path, "LeRobot config", fix, max_bytes=4 << 20)
    if not isinstance(doc.get("type"), str):
        raise ConfigError(f"LeRobot config {path} is not a policy config (no 'type' field; expected e.g. \"type\": \"act\"); {fix}")
    return doc


def _checkpoint_call(path: Path, what: str, fn, *args):
    """``fn(*args)``; an error LeRobot raises on a checkpoint it cannot use (draccus parsing, feature validation, a
    torn weights file) becomes one :class:`ConfigError` line naming the folder, not a traceback."""
    try:
        return fn(*args)
    except ImportError:
        raise
    except Exception as exc:
        msg = (str(exc).strip().splitlines() or [""])[0][:300]
        where = path / what if what == "config.json" else path
        raise ConfigError(f"LeRobot cannot load {where} ({type(exc).__name__}: {msg}); copy the checkpoint again from "
                          "the trained run, or check the lerobot version it was saved with (scripts/install.sh installs "
                          "0.6.1; docs/subjects.md: checkpoints of older LeRobot releases)") from None


def image_to_tensor(img: np.ndarray, shape: Sequence[int]):
    """RGB uint8 (H, W, 3) -> float32 tensor (3, h, w) in [0, 1], resized (bilinear) to ``shape``."""
    import torch
    import torch.nn.functional as F

    t = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float().div_(255.0)
    c, h, w = shape
    if t.shape[1:] != (h, w):
        t = F.interpolate(t[None], size=(h, w), mode="bilinear", align_corners=False, antialias=True)[0]
    return t


class LeRobotPolicy(HiddenStateMixin):
    """A LeRobot policy checkpoint as an embeval Policy (see module docstring)."""

    #: where the sequence axis of 3-D layer outputs lies, by policy type (ACT: sequence-first
    #: transformer; Diffusion: (B, C, T) U-Net); others batch-first
    SEQ_AXIS = {"act": 0, "diffusion": 2}

    @property
    def _hidden_seq_axis(self) -> int:
        return self.SEQ_AXIS.get(self.config.type, 1)

    def __init__(self, id: str = "lerobot-policy", path: str = "", camera_map: dict[str, str] | None = None,
                 state_key: str | Sequence[str] = "joint_positions", pad_state: bool = False,
                 env_state_key: str | Sequence[str] | None = None, action_indices: Sequence[int] | None = None,
                 action_scale: float | Sequence[float] | None = None, gripper: str | None = None, frame: str | None = None,
                 absolute: bool | None = None, device: str = "cpu", seed: int = 0, arms: int = 1, convention: Any = None,
                 trust_remote_code: bool = False):
        self.id = id
        p = LeRobotParams.check(camera_map, state_key, pad_state, env_state_key, action_indices, action_scale, gripper,
                                frame, absolute, device, seed, arms)
        self.params = p
        self.convention = p.convention(convention)
        self.path = check_checkpoint(path)
        check_lerobot_processors(self.path, trust_remote_code)  # steps outside LeRobot's registry: refused unloaded
        self.camera_map, self.state_key, self.pad_state = p.camera_map, p.state_key, p.pad_state
        self.gripper, self.device, self.seed = self.convention.gripper, p.device, p.seed
        self._lock = threading.Lock()
        self._warned: set = set()
        self._load()
        conv = self.convention
        if camera_map is None and conv.cameras:  # the convention's cameras feed the image inputs in order
            self.camera_map = dict(zip(self.config.image_features, conv.cameras))
        self._check_inputs()
        adim = int(self.config.output_features["action"].shape[0])
        k, rot = self.convention.size, self.convention.rotation
        layout = f"[translation 3, {rot} rotation {k - 4}, gripper 1]"
        if arms > 1 and adim != k * arms:
            raise ConfigError(f"field 'params.arms' must be the number of {k}-value arm blocks {layout} in the policy's "
                              f"{adim}-dim action (1, or {adim // k} when it is one per arm), got {arms!r}")
        self.arms = 1 if action_indices is not None else arms
        idx = list(range(k)) if action_indices is None else list(p.action_indices)
        if len(idx) != k or any(not 0 <= i < adim for i in idx):
            raise ConfigError(f"field 'params.action_indices' must list {k} indices {layout} (the convention's raw size) "
                              f"into the policy's {adim}-dim action, got {action_indices if action_indices is not None else idx}")
        self.action_indices = idx
        self.convention = replace(self.convention, chunk_size=int(getattr(self.config, "n_action_steps", 1) or 1))
        self.action_spec = self.convention.action_spec()
        self.instruction = ""
        self._episodes: dict[Slot, _Episode] = {}
        self._loop: LoopSlots | None = None
        feats = self.config.image_features
        sizes = {tuple(int(x) for x in f.shape[1:]) for f in feats.values()}
        want = input_size(None, self.convention)
        if want is not None and sizes and sizes != {want}:
            raise ConfigError(f"field 'params.convention.image_size': {want[0]}x{want[1]} (H x W) is not the checkpoint's image "
                              f"input size {' / '.join(f'{h}x{w}' for h, w in sorted(sizes))}; {self.path} decides it: "
                              "leave image_size out of the convention or set it to that")
        self.cfg = InputSpec(next(iter(sizes)) if len(sizes) == 1 else None,
                             tuple(self.camera_map[k] for k in feats) if feats and set(feats) <= set(self.camera_map) else None)

    def _check_inputs(self) -> None:
        """The spec against the checkpoint's inputs: camera_map names only its image features; a policy that reads
        ``observation.environment_state`` needs ``env_state_key``."""
        feats = list(self.config.image_features)
        unknown = sorted(set(self.camera_map) - set(feats))
        if unknown:
            raise ConfigError(f"field 'params.camera_map': {unknown} are not image inputs of {self.path}; its image "
                              f"inputs are {feats}")
        env = self.config.env_state_feature
        if env is not None and self.params.env_state_key is None:
            raise ConfigError(
                f"{self.path} takes observation.environment_state ({env.shape[0]} values) as an input: LeRobot adds it "
                "whenever the training dataset has that feature (privileged simulator state in demos recorded before "
                "embeval 'privileged.task_geometry'). Re-record with `embeval train demos` (it keeps privileged fields "
                "out of observation.*) and retrain, or name the observation's state entries that hold it in "
                "params.env_state_key")

    def _warn_once(self, key: Any, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"{self.id}: {message}", stacklevel=3)

    @property
    def chunk_batched(self) -> bool:
        """Whether :meth:`act_slots` batches chunk predictions (:data:`CHUNK_BATCHED`), else one copy per slot."""
        ok = CHUNK_BATCHED.get(self.config.type)
        return ok is not None and ok(self.config) and hasattr(self.policy, "predict_action_chunk")

    def _load(self) -> None:
        try:
            from lerobot.configs.policies import PreTrainedConfig
            from lerobot.policies.factory import (
                get_policy_class,
                make_pre_post_processors,
            )
        except ImportError:
            raise ConfigError("lerobot is not installed: pip install lerobot (scripts/install.sh installs 0.6.1)") from None
        import torch

        if _hub_offline():  # before LeRobot parses the config (some config classes fetch hub files while built)
            declared = declared_config(check_config_json(self.path / "config.json"))
            missing = missing_hub_files(declared) if declared is not None else []
            if missing:
                raise hub_error(self.path, declared, missing)
        cfg = _checkpoint_call(self.path, "config.json", PreTrainedConfig.from_pretrained, str(self.path))
        cfg.device = self.device
        if hasattr(cfg, "pretrained_backbone_weights"):
            cfg.pretrained_backbone_weights = None  # the checkpoint holds the trained backbone; never download
        missing = missing_hub_files(cfg)
        if missing and _hub_offline():  # before building a model of billions of parameters that cannot finish
            raise hub_error(self.path, cfg, missing)
        torch.manual_seed(self.seed)
        try:
            policy = _checkpoint_call(self.path, "checkpoint",
                                      lambda: get_policy_class(cfg.type).from_pretrained(str(self.path), config=cfg))
            policy.eval()
            pretrained = (self.path / "policy_preprocessor.json").is_file()
            self.pre, self.post = _checkpoint_call(self.path, "checkpoint", lambda: make_pre_post_processors(
                cfg, pretrained_path=str(self.path)) if pretrained else make_pre_post_processors(cfg, dataset_stats=None))
        except ConfigError:
            missing = missing_hub_files(cfg)  # a download that failed (no network): name what it needed
            if missing:
                raise hub_error(self.path, cfg, missing) from None
            raise
        self.config = cfg
        self.policy = policy

    def reset(self, instruction: str) -> None:
        self.instruction = instruction
        self.policy.reset()

    def batch(self, observation: Observation, instruction: str | None = None) -> dict[str, Any]:
        """The LeRobot batch (before the preprocessor) for ``observation``; its task is the observation's
        instruction, else ``instruction`` (default: the one of :meth:`reset`)."""
        import torch

        out: dict[str, Any] = {}
        cams = list(observation.images)
        for i, (key, feat) in enumerate(self.config.image_features.items()):
            cam = self.camera_map.get(key) or (cams[i] if i < len(cams) else None)
            if cam is None or cam not in observation.images:
                raise InvalidInputError(f"policy input {key!r} needs a camera image: set params.camera_map {{{key}: CAMERA}}; "
                                        f"the observation has {cams}")
            img = check_image(observation.images[cam], f"images[{cam!r}]")
            img = model_image(img, self.convention, None)  # the convention's centre crop (resized below)
            self._check_size(key, cam, img.shape[:2], tuple(feat.shape[1:]))
            out[key] = image_to_tensor(img, feat.shape)
        state_feat = self.config.robot_state_feature
        if state_feat is not None:
            s, note = assemble_state(observation.state, self.state_key, int(state_feat.shape[0]), "observation.state",
                                     "state_key", self.pad_state)
            if note:
                self._warn_once(("pad", s.size), note)
            out["observation.state"] = torch.from_numpy(s)
        env = self.config.env_state_feature
        if env is not None:
            s, _ = assemble_state(observation.state, self.params.env_state_key, int(env.shape[0]),
                                  "observation.environment_state", "env_state_key")
            out["observation.environment_state"] = torch.from_numpy(s)
        out["task"] = observation.instruction or (self.instruction if instruction is None else instruction)
        return out

    def _check_size(self, key: str, cam: str, got: tuple[int, int], want: tuple[int, int]) -> None:
        """Warn (once per camera and size) when camera ``cam``'s (H, W) is not the policy input's: resized, and
        stretched when the aspect ratio differs too."""
        if got == want:
            return
        ratio = (got[1] / got[0]) / (want[1] / want[0])
        what = (f"camera {cam!r} gives {got[1]}x{got[0]} px images, policy input {key!r} was trained on {want[1]}x{want[0]}"
                " (W x H)")
        if abs(math.log(ratio)) > ASPECT_TOLERANCE:
            self._warn_once(("size", key, got), f"{what}: another aspect ratio ({got[1] / got[0]:.3f} vs {want[1] / want[0]:.3f}), "
                            "so the image is stretched as well as resized; render the cameras at the training size "
                            "(e.g. `--width/--height`) or crop them to its aspect ratio")
        else:
            self._warn_once(("size", key, got), f"{what}: resized to it (same aspect ratio)")

    def act(self, observation: Observation) -> Action:
        import torch

        with self._lock, torch.no_grad():
            batch = self.pre(self.batch(observation))
            raw = self.post(self.policy.select_action(batch))
        return self.to_action(raw.detach().cpu().numpy(), tcp_pose_of(observation, self.convention))

    def to_action(self, raw: np.ndarray, tcp_pose=None) -> Action:
        """An embeval :class:`Action` from one un-normalised policy action (see module docstring); an absolute
        convention is converted against ``tcp_pose`` (``[x y z rx ry rz]``, m, rotation vector)."""
        return raw_to_action(raw, self.convention, self.action_indices, self.arms, self.id, tcp_pose)

    # -- batched episodes (BatchedPolicy) ---------------------------------------------------
    def fork(self) -> "LeRobotPolicy":
        """A copy for one more concurrent episode: the same weights and processors, its own policy queues."""
        twin = copy.copy(self)
        twin.policy = fork_policy(self.policy)
        twin._lock, twin._episodes, twin._loop = threading.Lock(), {}, None
        return twin

    def _copies(self) -> LoopSlots:
        if self._loop is None:
            self._loop = LoopSlots(self)
        return self._loop

    def reset_slots(self, slots: Sequence[Slot], instructions: Sequence[str]) -> None:
        """Start an episode with ``instructions[i]`` in ``slots[i]`` (a slot in use drops its pending actions)."""
        if not self.chunk_batched:
            return self._copies().reset_slots(slots, instructions)
        for slot, instruction in zip(check_slots(self.id, slots, instructions, "instructions"), instructions):
            self._episodes[slot] = _Episode(str(instruction))

    def act_slots(self, slots: Sequence[Slot], observations: Sequence[Observation]) -> list[Action]:
        """One action per slot; the slots with no pending action get their chunks from one batched call."""
        import torch

        if not self.chunk_batched:
            return self._copies().act_slots(slots, observations)
        slots = started_slots(self.id, slots, observations, self._episodes)
        if not slots:
            return []
        eps = [self._episodes[s] for s in slots]
        with self._lock, torch.no_grad():
            need = [k for k, ep in enumerate(eps) if not ep.queue]
            if need:
                batch = stack_batches([self.pre(self.batch(observations[k], eps[k].instruction)) for k in need])
                chunks = self.policy.predict_action_chunk(batch)[:, : self.config.n_action_steps]
                for row, k in enumerate(need):
                    eps[k].queue.extend(chunks[row])
            raw = self.post(torch.stack([ep.queue.popleft() for ep in eps])).detach().cpu().numpy()
        return [self.to_action(r, tcp_pose_of(ob, self.convention)) for r, ob in zip(raw, observations)]

    def end_slots(self, slots: Sequence[Slot]) -> None:
        if self._loop is not None:
            self._loop.end_slots(slots)
        for s in slots:
            self._episodes.pop(s, None)

    # hidden states: one full inference of the underlying model on the observation. This resets the
    # policy's observation/action queues (as reset() does), so call it between episodes, not inside one.
    def _hidden_module(self):
        return self.policy

    def _hidden_forward(self, observation: Observation) -> Any:
        import torch

        with self._lock, torch.no_grad():
            batch = self.pre(self.batch(observation))
            self.policy.reset()
            out = self.policy.select_action(batch)
            self.policy.reset()
            return out
