"""Hugging Face transformers VLMs (image-text-to-text) from a local folder.

``path`` is a folder with ``config.json``, the weights and the processor files, as
``huggingface-cli download ORG/NAME --local-dir DIR`` writes it (Qwen2.5-VL, InternVL-HF,
LLaVA(-NeXT/-OneVision), Idefics3/SmolVLM, Gemma 3, PaliGemma, ...). Loaded with ``AutoProcessor``
and ``AutoModelForImageTextToText`` (``model_class``: ``auto`` = the class a ``trust_remote_code``
checkpoint registers in its ``auto_map``, else image-text-to-text; or name an auto class). The prompt goes
through the processor's chat template with one image placeholder per image; without a template,
``prompt_template`` is used (``{prompt}``; include the model's image token yourself). Greedy
decoding by default; only the newly generated text is returned.
"""
from __future__ import annotations

import inspect
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embeval.action import check_image
from embeval.errors import ConfigError, ContextLengthError
from embeval.subjects.adapters.local_weights import require_hf_dir, torch_dtype
from embeval.subjects.hidden import HiddenStateMixin

AUTO_CLASSES = ("AutoModelForImageTextToText", "AutoModelForVision2Seq", "AutoModelForCausalLM")


def load_auto(path, model_class: str, dtype: str, device: str, trust_remote_code: bool):
    """(processor, model) from a local folder with the named transformers auto class."""
    import json

    import transformers

    if model_class == "auto":  # the class the checkpoint's remote code registers, else image-text-to-text
        auto_map = json.loads((Path(path) / "config.json").read_text()).get("auto_map", {}) if trust_remote_code else {}
        model_class = next((c for c in AUTO_CLASSES if c in auto_map), "AutoModelForImageTextToText")
    if model_class not in AUTO_CLASSES or not hasattr(transformers, model_class):
        avail = [c for c in AUTO_CLASSES if hasattr(transformers, c)]
        raise ConfigError(f"field 'params.model_class': {model_class!r} is not available; choose from {', '.join(avail)}")
    processor = transformers.AutoProcessor.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    cls = getattr(transformers, model_class)
    from packaging.version import Version

    # transformers >= 4.56 names it dtype (torch_dtype is deprecated there); older versions only know torch_dtype
    key = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    model = cls.from_pretrained(str(path), trust_remote_code=trust_remote_code, **{key: torch_dtype(dtype)})
    model.to(device).eval()
    return processor, model


def drop_unused_inputs(model, inputs: dict[str, Any]) -> dict[str, Any]:
    """Remove processor outputs the model's forward does not take (e.g. token_type_ids)."""
    params = inspect.signature(model.forward).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return {k: v for k, v in inputs.items() if k != "token_type_ids" or k in params}
    return {k: v for k, v in inputs.items() if k in params}


class HFVLM(HiddenStateMixin):
    """A local transformers VLM as an embeval VLM (see module docstring)."""

    def __init__(self, id: str = "hf-vlm", path: str | None = None, model_class: str = "auto",
                 dtype: str = "float32", device: str = "cpu", max_new_tokens: int = 32, do_sample: bool = False,
                 temperature: float = 1.0, system_prompt: str | None = None, prompt_template: str | None = None,
                 trust_remote_code: bool = False, seed: int = 0):
        self.id = id
        self.path = require_hf_dir(path, "VLM")
        self.device = device
        self.gen = {"max_new_tokens": int(max_new_tokens), "do_sample": bool(do_sample)}
        if do_sample:
            self.gen["temperature"] = float(temperature)
        self.system_prompt = system_prompt
        self.prompt_template = prompt_template
        self.seed = int(seed)
        self._lock = threading.Lock()
        self.processor, self.model = load_auto(self.path, model_class, dtype, device, trust_remote_code)
        if prompt_template is None and not getattr(self.processor, "chat_template", None):
            raise ConfigError(f"{self.path} has no chat template; set params.prompt_template (e.g. '<image>\\n{{prompt}}')")

    @property
    def context_window(self) -> int | None:
        """The language model's maximum sequence length in tokens (prompt + answer), if the config states one."""
        cfg = self.model.config
        cfg = getattr(cfg, "text_config", None) or cfg
        n = getattr(cfg, "max_position_embeddings", None)
        return int(n) if n else None

    def prompt_text(self, n_images: int, prompt: str) -> str:
        if self.prompt_template is not None:
            return self.prompt_template.format(prompt=prompt)
        content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": prompt}]
        msgs = [{"role": "system", "content": [{"type": "text", "text": self.system_prompt}]}] if self.system_prompt else []
        msgs.append({"role": "user", "content": content})
        return self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)

    def inputs(self, images: Sequence[np.ndarray], prompt: str) -> dict[str, Any]:
        """The model inputs (tensors on the device) for ``images`` and ``prompt``."""
        from PIL import Image

        pil = [Image.fromarray(check_image(im, f"images[{i}]")) for i, im in enumerate(images)]
        kw: dict[str, Any] = {"text": self.prompt_text(len(pil), prompt), "return_tensors": "pt"}
        if pil:
            kw["images"] = pil
        batch = self.processor(**kw)
        batch = {k: (v.to(self.device) if hasattr(v, "to") else v) for k, v in batch.items()}
        if "pixel_values" in batch and batch["pixel_values"].is_floating_point():
            batch["pixel_values"] = batch["pixel_values"].to(self.model.dtype)
        return drop_unused_inputs(self.model, batch)

    def generation_kwargs(self, gen: dict[str, Any]) -> dict[str, Any]:
        """transformers generate() arguments: the defaults updated by ``gen``, where the OpenAI names
        ``max_tokens`` and ``temperature`` (0 = greedy) are translated."""
        out = dict(self.gen)
        gen = dict(gen)
        gen.pop("json_schema", None)  # no constrained decoding here; the caller validates
        if "max_tokens" in gen:
            out["max_new_tokens"] = int(gen.pop("max_tokens"))
        if "temperature" in gen:
            t = float(gen.pop("temperature"))
            out["do_sample"] = t > 0
            if t > 0:
                out["temperature"] = t
            else:
                out.pop("temperature", None)
        out.update(gen)
        return out

    def generate(self, images: Sequence[np.ndarray], prompt: str, **gen: Any) -> str:
        import torch

        kwargs = self.generation_kwargs(gen)
        with self._lock, torch.no_grad():
            torch.manual_seed(self.seed)
            batch = self.inputs(images, prompt)
            n, window = int(batch["input_ids"].shape[1]), self.context_window
            if window and n + int(kwargs.get("max_new_tokens", 0)) > window:
                raise ContextLengthError(
                    f"{self.id}: the prompt takes {n} tokens (images included) and {kwargs.get('max_new_tokens', 0)} "
                    f"more were asked for, over the context window of {window}; shorten the prompt or lower max_tokens")
            out = self.model.generate(**batch, **kwargs)
        new = out[0, batch["input_ids"].shape[1]:]
        return self.processor.decode(new, skip_special_tokens=True).strip()

    def _hidden_module(self):
        return self.model

    def _hidden_forward(self, inputs: tuple[Sequence[np.ndarray], str]) -> Any:
        images, prompt = inputs
        return self.model(**self.inputs(images, prompt))
