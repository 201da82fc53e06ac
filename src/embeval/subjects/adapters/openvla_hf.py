"""OpenVLA from a local checkpoint through transformers (its own model code runs only with ``params.trust_remote_code: true``).

``path`` is the downloaded ``openvla/openvla-7b`` folder (or a fine-tune). The model's own
``predict_action(**inputs, unnorm_key=..., do_sample=False)`` is used when the checkpoint's code
provides it; otherwise the adapter generates ``action_dim`` tokens greedily and decodes them the
way OpenVLA does (:func:`decode_action_tokens`: the last 256 vocabulary ids are 256 uniform bins
over [-1, 1]; un-normalised with the dataset's q01/q99 where the mask is set).

OpenVLA's prompt: ``"In: What action should the robot take to {instruction}?\\nOut:"`` (instruction
lower-cased). Its gripper is [0, 1] with 1 = open (``gripper: open1``), deltas in the robot's base
frame for BridgeData V2 (``unnorm_key: bridge_orig``). The image is the camera ``camera``, else the
convention's first camera, else the observation's first; centre-cropped to the convention's ``crop`` and
resized (Lanczos) to ``image_size``, else the convention's ``image_size``, else 224 px (:data:`IMAGE_SIZE`).

Batched episodes (:meth:`OpenVLAHFPolicy.act_slots`): each slot keeps its instruction; on the generic path
all slots' prompts are left-padded into one ``generate`` call and each row's ``action_dim`` tokens are
decoded (equal to batch-1 actions up to float rounding). A checkpoint whose own ``predict_action`` is used
is asked once per slot (OpenVLA's ``predict_action`` decodes the first row of a batch only).
"""
from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

import numpy as np

from embeval import checks
from embeval.action import Action, Observation
from embeval.errors import ConfigError, InvalidInputError
from embeval.subjects.adapters.hf_vlm import load_auto, model_inputs, tokenizer_of
from embeval.subjects.adapters.local_weights import require_hf_dir
from embeval.conventions import (
    camera_image,
    input_size,
    main_camera,
    model_image,
    tcp_pose_of,
    to_embeval,
)
from embeval.conventions import convention as resolve_convention
from embeval.subjects.hidden import HiddenStateMixin
from embeval.subjects.protocols import Slot, check_slots, started_slots

OPENVLA_PROMPT = "In: What action should the robot take to {instruction}?\nOut:"
#: ``params.cache``: ``dynamic`` (transformers' default: the key/value cache grows per token) or ``static`` (one
#: pre-allocated cache; on CUDA transformers then compiles the decode step with ``torch.compile``: the fast batch-1
#: path of a robot's policy node; ``params.compile: false`` keeps the static cache without compiling)
CACHES = ("dynamic", "static")
#: the most warm-up calls ``params.warmup`` may ask for at load
MAX_WARMUP = 16
#: pixels (side) OpenVLA's vision backbone reads, when neither params.image_size nor the convention names a size
IMAGE_SIZE = 224


def decode_action_tokens(token_ids: Sequence[int], vocab_size: int, stats: Mapping[str, Any] | None = None,
                         n_bins: int = 256) -> np.ndarray:
    """OpenVLA's action de-tokenisation: token id -> bin centre in [-1, 1] -> dataset units.

    ``vocab_size`` is the tokenizer's vocabulary size without padding (32000 for Llama 2);
    ``stats`` is ``norm_stats[unnorm_key]["action"]`` (``q01``, ``q99``, optional ``mask``);
    without stats the normalised values are returned.
    """
    ids = np.asarray(token_ids, dtype=np.int64)
    bins = np.linspace(-1.0, 1.0, n_bins)
    centers = (bins[:-1] + bins[1:]) / 2.0
    idx = np.clip(vocab_size - ids - 1, 0, centers.shape[0] - 1)
    norm = centers[idx]
    if stats is None:
        return norm
    lo = np.asarray(stats["q01"], dtype=np.float64)
    hi = np.asarray(stats["q99"], dtype=np.float64)
    mask = np.asarray(stats.get("mask", np.ones_like(lo, dtype=bool)), dtype=bool)
    if lo.shape != norm.shape:
        raise InvalidInputError(f"action statistics have {lo.shape[0]} dims, the model produced {norm.shape[0]} action tokens")
    return np.where(mask, 0.5 * (norm + 1.0) * (hi - lo) + lo, norm)


class OpenVLAHFPolicy(HiddenStateMixin):
    """A local OpenVLA checkpoint as an embeval Policy (see module docstring)."""

    def __init__(self, id: str = "openvla-hf", path: str | None = None, unnorm_key: str | None = "bridge_orig",
                 camera: str | None = None, image_size: int | list[int] | None = None, dtype: str = "float32", device: str = "cpu",
                 gripper: str | None = None, frame: str | None = None, prompt_template: str = OPENVLA_PROMPT,
                 trust_remote_code: bool = False, model_class: str = "auto", n_bins: int = 256,
                 vocab_size: int | None = None, cache: str = "dynamic", compile: bool | None = None,
                 warmup: int | None = None, convention: Any = None):
        path = require_hf_dir(path, "OpenVLA checkpoint")
        processor, model = load_auto(path, model_class, dtype, device, trust_remote_code)
        self._configure(processor, model, id=id, path=path, unnorm_key=unnorm_key, camera=camera, image_size=image_size,
                        device=device, gripper=gripper, frame=frame, prompt_template=prompt_template, n_bins=n_bins,
                        vocab_size=vocab_size, cache=cache, compile=compile, warmup=warmup, convention=convention)

    @classmethod
    def from_loaded(cls, processor, model, device: str = "cpu", **params) -> "OpenVLAHFPolicy":
        """The policy around a processor and model already in memory (e.g. built from a config with random
        weights, as ``bench/gpu_throughput.py`` does for a 7B model); ``params`` as for the constructor."""
        self = cls.__new__(cls)
        self._configure(processor, model, device=device, **params)
        return self

    def _configure(self, processor, model, id: str = "openvla-hf", path: Any = None, unnorm_key: str | None = "bridge_orig",
                   camera: str | None = None, image_size: int | list[int] | None = None, device: str = "cpu", gripper: str | None = None,
                   frame: str | None = None, prompt_template: str = OPENVLA_PROMPT, n_bins: int = 256,
                   vocab_size: int | None = None, cache: str = "dynamic", compile: bool | None = None,
                   warmup: int | None = None, convention: Any = None) -> None:
        self.id = id
        self.path = path
        self.processor, self.model = processor, model
        self.unnorm_key = unnorm_key
        self.device = device
        self.convention = resolve_convention(convention, gripper=gripper, frame=frame)
        self.camera, self._camera_field = main_camera(camera, self.convention)
        self.image_size = input_size(image_size, self.convention, fallback=IMAGE_SIZE)
        self.gripper = self.convention.gripper
        self.prompt_template = prompt_template
        self.n_bins = int(n_bins)
        self._lock = threading.Lock()
        if cache not in CACHES:
            raise ConfigError(f"field 'params.cache': {cache!r} is not a cache; choose from {', '.join(CACHES)}")
        if compile is not None and not isinstance(compile, bool):
            raise ConfigError(f"field 'params.compile': must be true, false or null (transformers' choice), got {compile!r}")
        self.cache, self.compile = cache, compile
        tok = tokenizer_of(self.processor)
        cfg = self.model.config
        if vocab_size is None and getattr(cfg, "pad_to_multiple_of", None) and hasattr(cfg, "text_config"):
            vocab_size = cfg.text_config.vocab_size - cfg.pad_to_multiple_of  # OpenVLA: 32064 - 64 = 32000
        self.vocab_size = int(vocab_size or len(tok))
        self.norm_stats = getattr(self.model.config, "norm_stats", None) or {}
        if self.unnorm_key and self.norm_stats and self.unnorm_key not in self.norm_stats:
            raise ConfigError(f"field 'params.unnorm_key': {self.unnorm_key!r} is not in the checkpoint's norm_stats; "
                              f"choose from {', '.join(sorted(self.norm_stats))}")
        self.action_spec = self.convention.action_spec()
        self.instruction = ""
        self._slots: dict[Slot, str] = {}
        n = (2 if cache == "static" else 0) if warmup is None else warmup
        self.warm_up(checks.integer(n, "field 'params.warmup'", 0, MAX_WARMUP, why="calls"))

    def warm_up(self, calls: int = 2) -> float:
        """Answer ``calls`` batch-1 requests on a grey frame now, so that the first real action does not pay for
        CUDA kernels being loaded or ``torch.compile`` tracing the decode step; returns the seconds spent."""
        import time

        t0 = time.perf_counter()
        frame = Observation(images={self.camera or "camera": np.full(self.image_size + (3,), 128, np.uint8)},
                            instruction="pick up the cube")
        for _ in range(calls):
            self.raw_actions([frame], [""])
        return time.perf_counter() - t0

    def generate_options(self) -> dict[str, Any]:
        """Keyword arguments of ``generate`` that choose the decode path (see :data:`CACHES`)."""
        out: dict[str, Any] = {}
        if self.cache == "static":
            out["cache_implementation"] = "static"
        if self.compile is False:
            out["disable_compile"] = True
        elif self.compile is True and self.cache == "static":
            from transformers import CompileConfig

            out["compile_config"] = CompileConfig(fullgraph=False)
            out["compile_config"]._compile_all_devices = True  # also on the CPU (transformers compiles on CUDA only)
        return out

    def reset(self, instruction: str) -> None:
        self.instruction = instruction

    def inputs(self, observation: Observation) -> dict[str, Any]:
        return self.batch_inputs([observation], [self.instruction])

    def batch_inputs(self, observations: Sequence[Observation], instructions: Sequence[str]) -> dict[str, Any]:
        """The model inputs for many observations, one row each (its own instruction when it carries one, else
        ``instructions[i]``), left-padded to one length."""
        from PIL import Image

        texts, images = [], []
        for observation, instruction in zip(observations, instructions):
            arr = model_image(camera_image(observation, self.camera, "OpenVLA", self._camera_field)[1], self.convention,
                              self.image_size)
            images.append(Image.fromarray(arr))
            texts.append(self.prompt_template.format(instruction=(observation.instruction or instruction).lower()))
        return model_inputs(self.processor, self.model, self.device, texts, images)

    def _stats(self) -> Mapping[str, Any] | None:
        return self.norm_stats.get(self.unnorm_key, {}).get("action") if self.unnorm_key else None

    def raw_action(self, observation: Observation) -> np.ndarray:
        """The model's action in its dataset units (before the gripper conversion)."""
        return self.raw_actions([observation], [self.instruction])[0]

    def raw_actions(self, observations: Sequence[Observation], instructions: Sequence[str]) -> list[np.ndarray]:
        """:meth:`raw_action` for many observations: one left-padded ``generate`` call on the generic path,
        ``action_dim`` new tokens decoded per row; one ``predict_action`` per row where the checkpoint has it."""
        import torch

        with self._lock, torch.no_grad():
            if hasattr(self.model, "predict_action"):
                return [np.asarray(self.model.predict_action(**self.batch_inputs([ob], [ins]), unnorm_key=self.unnorm_key,
                                                             do_sample=False), dtype=np.float64)
                        for ob, ins in zip(observations, instructions)]
            batch = self.batch_inputs(observations, instructions)
            stats = self._stats()
            dim = len(stats["q01"]) if stats else 7
            extra = {"pad_token_id": tokenizer_of(self.processor).pad_token_id} if len(observations) > 1 else {}
            out = self.model.generate(**batch, max_new_tokens=dim, min_new_tokens=dim, do_sample=False, **extra,
                                      **self.generate_options())
            tokens = out[:, batch["input_ids"].shape[1]:].cpu().numpy()
        return [decode_action_tokens(row, self.vocab_size, stats, self.n_bins) for row in tokens]

    def to_action(self, raw: np.ndarray, tcp_pose=None) -> Action:
        """An embeval :class:`Action` from the model's raw action (its first ``convention.size`` values, converted by
        :func:`embeval.conventions.to_embeval`; an absolute convention against ``tcp_pose``)."""
        a = np.asarray(raw).reshape(-1)
        n = self.convention.size
        if a.shape[0] < n:
            raise InvalidInputError(f"{self.id} produced {a.shape[0]} action values; expected {n}")
        if not np.all(np.isfinite(a)):
            raise InvalidInputError(f"{self.id} returned a NaN or inf action {a.tolist()}; the policy output is invalid")
        return to_embeval(a[:n], self.convention, tcp_pose)

    def act(self, observation: Observation) -> Action:
        return self.to_action(self.raw_action(observation), tcp_pose_of(observation, self.convention))

    # -- batched episodes (BatchedPolicy) ---------------------------------------------------
    def reset_slots(self, slots: Sequence[Slot], instructions: Sequence[str]) -> None:
        """Start an episode with ``instructions[i]`` in ``slots[i]`` (restarting a slot in use)."""
        for slot, instruction in zip(check_slots(self.id, slots, instructions, "instructions"), instructions):
            self._slots[slot] = str(instruction)

    def act_slots(self, slots: Sequence[Slot], observations: Sequence[Observation]) -> list[Action]:
        """One action per slot, all slots in one ``generate`` call (see module docstring)."""
        slots = started_slots(self.id, slots, observations, self._slots)
        if not slots:
            return []
        return [self.to_action(r, tcp_pose_of(ob, self.convention)) for r, ob in
                zip(self.raw_actions(list(observations), [self._slots[s] for s in slots]), observations)]

    def end_slots(self, slots: Sequence[Slot]) -> None:
        for s in slots:
            self._slots.pop(s, None)

    def _hidden_module(self):
        return self.model

    def _hidden_forward(self, observation: Observation) -> Any:
        return self.model(**self.inputs(observation))
