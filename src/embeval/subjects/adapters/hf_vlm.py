"""Hugging Face transformers VLMs (image-text-to-text) from a local folder.

``path`` is a folder with ``config.json``, the weights and the processor files, as
``huggingface-cli download ORG/NAME --local-dir DIR`` writes it (Qwen2.5-VL, Qwen3-VL, InternVL-HF,
LLaVA(-NeXT/-OneVision), Idefics3/SmolVLM, Gemma 3, PaliGemma, ...; each tested offline on a tiny checkpoint,
tests/core/subjects/test_subjects_families_hf.py). Loaded with ``AutoProcessor``
and ``AutoModelForImageTextToText`` (``model_class``: ``auto`` = the class a ``trust_remote_code``
checkpoint registers in its ``auto_map``, else image-text-to-text; or name an auto class). The prompt goes
through the processor's chat template with one image placeholder per image; without a template,
``prompt_template`` is used (``{prompt}``, ``{images}``: the processor's image token once per image; PaliGemma, whose
checkpoints have no template, gets ``{images}{prompt}`` by default, :data:`PROMPT_TEMPLATES`). Greedy
decoding by default; only the newly generated text is returned.

Batches (:meth:`HFVLM.generate_batch`, :meth:`HFVLM.hidden_states_batch`): the prompts are left-padded to
one length with an attention mask and answered by one ``generate`` (one forward) call; each item's answer
and hidden states equal its batch-1 ones (greedy decoding; float rounding of another batch size aside).
"""
from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embeval.action import check_image
from embeval.errors import ConfigError, ContextLengthError, InvalidInputError, MissingWeightsError
from embeval.subjects.adapters.local_weights import require_hf_dir, torch_dtype
from embeval.subjects.hidden import HiddenStateMixin, capture_hidden_states, pool_array

AUTO_CLASSES = ("AutoModelForImageTextToText", "AutoModelForVision2Seq", "AutoModelForCausalLM")

#: the prompt format of processors whose checkpoints ship no chat template, by processor class: PaliGemma is a
#: prefix LM without turns (its processor puts the begin-of-sequence token after the image tokens and ends the prefix
#: with a newline)
PROMPT_TEMPLATES = {"PaliGemmaProcessor": "{images}{prompt}"}


#: files a checkpoint folder needs besides config.json and the weights: (what they hold, any one of these names)
PROCESSOR_FILES = (("the image processor's settings", ("preprocessor_config.json", "processor_config.json")),
                   ("the tokenizer", ("tokenizer.json", "tokenizer.model", "vocab.json")))


def _has_file(path: Path, name: str) -> bool:
    """Whether ``path/name`` holds its part; transformers >= 5 saves the image processor's settings inside
    processor_config.json (key ``image_processor``) instead of a preprocessor_config.json of their own."""
    if not (path / name).is_file():
        return False
    if name != "processor_config.json":
        return True
    from embeval.subjects.model_files import read_json

    data = read_json(path / name)
    return isinstance(data, dict) and isinstance(data.get("image_processor"), dict)


def check_checkpoint(path: Path, config: dict[str, Any], trust_remote_code: bool) -> None:
    """A one-line error naming what a checkpoint folder lacks before transformers is asked (its errors point at
    the hub): a model type this transformers does not know (remote code not allowed, or its .py files missing), a
    processor file missing. ``config``: the folder's config.json."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    kind, auto_map = config.get("model_type"), config.get("auto_map") or {}
    fetch = "download the whole folder on a connected machine: huggingface-cli download ORG/NAME --local-dir DIR"
    if kind not in CONFIG_MAPPING_NAMES:
        if not auto_map:
            raise ConfigError(f"{path}/config.json: model_type {kind!r} is not known to transformers "
                              f"{transformers.__version__}; upgrade transformers or use a checkpoint of a supported family")
        refs = [r for v in auto_map.values() for r in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(r, str)]
        code = sorted({r.split("--")[-1].rsplit(".", 1)[0] + ".py" for r in refs})
        if not trust_remote_code:
            raise ConfigError(f"{path}/config.json: model_type {kind!r} is not in transformers {transformers.__version__}; "
                              f"the checkpoint ships its own model code ({', '.join(code)}): set params.trust_remote_code: "
                              "true to run it (those .py files then run as this user, with its rights), or use the checkpoint's transformers-format conversion (InternVL: the "
                              "ORG/NAME-hf repositories)")
        missing = [c for c in code if not (path / c).is_file()]
        if missing:
            raise MissingWeightsError(f"{path} lacks {', '.join(missing)} (the model code config.json's auto_map "
                                      f"names); {fetch}")
        return
    for what, names in PROCESSOR_FILES:
        if not any(_has_file(path, n) for n in names):
            raise MissingWeightsError(f"{path} has no {' or '.join(names)} ({what}); {fetch}")


#: attention implementations transformers knows (``params.attn_implementation``; None: its default, sdpa)
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


def check_processor_kwargs(processor, kwargs: dict[str, Any]) -> None:
    """:class:`ConfigError` naming a ``params.processor_kwargs`` key that no part of the loaded processor has (a typo
    transformers would ignore silently)."""
    parts = [processor] + [getattr(processor, a, None) for a in ("image_processor", "tokenizer", "video_processor")]

    def declared(part) -> set[str]:  # (transformers >= 5) the keys of the part's valid_kwargs TypedDict
        return set(getattr(getattr(part, "valid_kwargs", None), "__annotations__", None) or {})

    def knows(part, key: str) -> bool:
        return hasattr(part, key) or key in declared(part)

    for key in kwargs:
        if not any(p is not None and knows(p, key) for p in parts):
            image = getattr(processor, "image_processor", processor)
            known = sorted({k for k, v in vars(image).items()
                            if not k.startswith("_") and isinstance(v, (int, float, dict, list, bool))} | declared(image))
            raise ConfigError(f"field 'params.processor_kwargs.{key}': {type(processor).__name__} has no setting "
                              f"{key!r}; its image processor's settings: {', '.join(known)}")


def check_tokenizer_kind(path: Path, processor) -> None:
    """:class:`ConfigError` when the tokenizer transformers built is not the one the folder's tokenizer.json holds
    (a different model: WordLevel saved, BPE built). transformers >= 5 builds a family's tokenizer class from
    vocab.json / merges.txt, so a tokenizer saved by an older release under a class that did not match it would
    tokenize every prompt differently from how the model saw them."""
    tok = tokenizer_of(processor)
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None or not (path / "tokenizer.json").is_file():
        return
    try:
        from tokenizers import Tokenizer

        saved = type(Tokenizer.from_file(str(path / "tokenizer.json")).model).__name__
    except Exception:  # a file tokenizers cannot read: transformers has already loaded what it could
        return
    built = type(backend.model).__name__
    if saved != built:
        import transformers

        raise ConfigError(f"{path}/tokenizer.json holds a {saved} tokenizer, but transformers {transformers.__version__} "
                          f"builds {type(tok).__name__} there as {built} (from vocab.json/merges.txt), which would "
                          "tokenize prompts differently from how the model was trained: set \"tokenizer_class\": "
                          "\"PreTrainedTokenizerFast\" in its tokenizer_config.json to load tokenizer.json as saved")


def load_auto(path, model_class: str, dtype: str, device: str, trust_remote_code: bool,
              attn_implementation: str | None = None, processor_kwargs: dict[str, Any] | None = None):
    """(processor, model) from a local folder with the named transformers auto class; ``processor_kwargs`` override
    the processor's saved settings (e.g. Qwen-VL's ``max_pixels``), ``attn_implementation`` the model's attention."""
    import json

    import transformers

    if attn_implementation is not None and attn_implementation not in ATTN_IMPLEMENTATIONS:
        raise ConfigError(f"field 'params.attn_implementation': {attn_implementation!r}; choose from "
                          f"{', '.join(ATTN_IMPLEMENTATIONS)} or leave it out (transformers' default, sdpa)")
    if processor_kwargs is not None and not isinstance(processor_kwargs, dict):
        raise ConfigError(f"field 'params.processor_kwargs': a mapping of processor settings (e.g. {{max_pixels: "
                          f"1003520}}), got {type(processor_kwargs).__name__}")

    config = json.loads((Path(path) / "config.json").read_text())
    check_checkpoint(Path(path), config, trust_remote_code)
    if model_class == "auto":  # the class the checkpoint's remote code registers, else image-text-to-text
        auto_map = config.get("auto_map", {}) if trust_remote_code else {}
        model_class = next((c for c in AUTO_CLASSES if c in auto_map), "AutoModelForImageTextToText")
    if model_class not in AUTO_CLASSES or not hasattr(transformers, model_class):
        avail = [c for c in AUTO_CLASSES if hasattr(transformers, c)]
        raise ConfigError(f"field 'params.model_class': {model_class!r} is not available; choose from {', '.join(avail)}")
    try:
        processor = transformers.AutoProcessor.from_pretrained(str(path), trust_remote_code=trust_remote_code,
                                                               **(processor_kwargs or {}))
    except ImportError as e:  # a processor that needs a package (SmolVLM: num2words): transformers names it
        raise ConfigError(f"{path}: its processor cannot be loaded here: {str(e).strip().splitlines()[0]}") from None
    check_processor_kwargs(processor, processor_kwargs or {})
    check_tokenizer_kind(Path(path), processor)
    ensure_pad_token(processor)
    cls = getattr(transformers, model_class)
    from packaging.version import Version

    # transformers >= 4.56 names it dtype (torch_dtype is deprecated there); older versions only know torch_dtype
    key = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    try:
        model = cls.from_pretrained(str(path), trust_remote_code=trust_remote_code, **{key: torch_dtype(dtype)}, **extra)
    except ImportError as e:  # flash_attention_2 without the flash-attn package, ...
        fix = ("; install the flash-attn package (pip install flash-attn, CUDA machines) or leave the field out (sdpa)"
               if "flash" in str(attn_implementation) else "")
        raise ConfigError(f"field 'params.attn_implementation': {attn_implementation!r} cannot be used here: "
                          f"{str(e).strip().splitlines()[0]}{fix}") from None
    model.to(device).eval()
    return processor, model


def drop_unused_inputs(model, inputs: dict[str, Any]) -> dict[str, Any]:
    """Remove processor outputs the model's forward does not take (e.g. token_type_ids)."""
    params = inspect.signature(model.forward).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return {k: v for k, v in inputs.items() if k != "token_type_ids" or k in params}
    return {k: v for k, v in inputs.items() if k in params}


def tokenizer_of(processor):
    """The processor's tokenizer (the processor itself when it is one)."""
    return getattr(processor, "tokenizer", processor)


def ensure_pad_token(processor) -> None:
    """Give a tokenizer without a pad token its end-of-sequence token as one (left padding is masked, and a batched
    row is cut at its first end-of-sequence token, so the pad token's identity never reaches an answer)."""
    tok = tokenizer_of(processor)
    if getattr(tok, "pad_token_id", None) is None and getattr(tok, "eos_token", None) is not None:
        tok.pad_token = tok.eos_token


def model_inputs(processor, model, device: str, texts: list[str], images: list | None) -> dict[str, Any]:
    """The model inputs (tensors on ``device``) for ``texts`` (one per row) and ``images`` (None, or PIL images: one
    list per row, or all rows' images in one flat list): rows left-padded to one length with an ``attention_mask``
    (a single row is not padded), floating pixel values in the model's dtype, outputs the model does not take
    dropped. Per-row images go to the processor as one list per row, even for one row: Gemma 3 and Idefics3 pair
    them with the rows so, and LLaVA-OneVision tiles an image only when it is its row's only one."""
    if images and isinstance(images[0], (list, tuple)):
        images = [list(row) for row in images] if any(images) else None
    tok = tokenizer_of(processor)
    if len(texts) > 1 and getattr(tok, "pad_token_id", None) is None:
        raise ConfigError(f"the tokenizer of {type(model).__name__} has no pad or end-of-sequence token, so prompts of "
                          "different lengths cannot share a batch; set pad_token in the checkpoint's tokenizer_config.json "
                          "or ask one item at a time")
    kw: dict[str, Any] = {"text": texts if len(texts) > 1 else texts[0], "return_tensors": "pt"}
    if len(texts) > 1:
        kw["padding"] = True
    if images:
        kw["images"] = images
    side = getattr(tok, "padding_side", None)
    try:
        if side is not None:
            tok.padding_side = "left"  # new tokens follow every row's prompt directly
        batch = processor(**kw)
    finally:
        if side is not None:
            tok.padding_side = side
    batch = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in batch.items()}
    if batch.get("pixel_values") is not None and batch["pixel_values"].is_floating_point():
        batch["pixel_values"] = batch["pixel_values"].to(model.dtype)
    if "attention_mask" not in batch:
        import torch

        batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    return drop_unused_inputs(model, batch)


def vision_row_counts(batch: dict[str, Any], images: Sequence[int], image_token_id: int | None,
                     total: int) -> tuple[str, list[int]] | None:
    """How a vision-side layer output with ``total`` rows (its first axis) splits into items, as ``(kind, rows per
    item)``: the first of ``images`` (one per image), ``items`` (one row each), ``crops`` (the sub-images of a 5-D
    ``pixel_values``, (items or images, sub-images, C, H, W), that are not all-zero padding: Idefics3 / SmolVLM crops,
    LLaVA-OneVision any-resolution patches) and ``packed`` (rows in proportion to each item's image placeholder
    tokens, when that gives whole numbers: InternVL's patches, Qwen-VL's packed patch rows) that sums to ``total``;
    None when none does."""
    n = len(images)
    starts = np.concatenate([[0], np.cumsum(images)]).astype(int)
    options: list[tuple[str, list[int]]] = [("images", [int(c) for c in images]), ("items", [1] * n)]
    pv = batch.get("pixel_values")
    if pv is not None and getattr(pv, "ndim", 0) == 5:
        real = (pv.flatten(2) != 0).any(dim=2).sum(dim=1).tolist()  # non-padding sub-images per first-axis entry
        if len(real) == n:
            options.append(("crops", [int(r) for r in real]))
        elif len(real) == starts[-1]:
            options.append(("crops", [int(sum(real[starts[k]:starts[k + 1]])) for k in range(n)]))
    ids = batch.get("input_ids")
    if image_token_id is not None and ids is not None:
        tokens = [int(t) for t in (ids == image_token_id).sum(dim=1).tolist()]
        if sum(tokens) and all((t * total) % sum(tokens) == 0 for t in tokens):
            options.append(("packed", [t * total // sum(tokens) for t in tokens]))
    return next(((kind, rows) for kind, rows in options if sum(rows) == total), None)


def eos_ids(model) -> set[int]:
    """The token ids that end generation (the generation config's ``eos_token_id``, one or a list)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    return set() if eos is None else {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}


def new_tokens(out, prompt_len: int, eos: set[int]) -> list[Any]:
    """Per row of ``generate``'s output: the new token ids, cut after the row's first end-of-sequence token (what a
    batch-1 call returns; later positions of a batched row are padding)."""
    rows = []
    for row in out[:, prompt_len:]:
        ids = row.tolist()
        end = next((k for k, t in enumerate(ids) if t in eos), None)
        rows.append(row[: end + 1] if end is not None else row)
    return rows


@dataclass
class Generated:
    """One item's generation: its new token ids and, when asked for, the logits of each step (n_new, vocab)."""

    ids: list[int]
    text: str
    logits: Any = None


class HFVLM(HiddenStateMixin):
    """A local transformers VLM as an embeval VLM (see module docstring)."""

    def __init__(self, id: str = "hf-vlm", path: str | None = None, model_class: str = "auto",
                 dtype: str = "float32", device: str = "cpu", max_new_tokens: int = 32, do_sample: bool = False,
                 temperature: float = 1.0, system_prompt: str | None = None, prompt_template: str | None = None,
                 trust_remote_code: bool = False, seed: int = 0, attn_implementation: str | None = None,
                 processor_kwargs: dict[str, Any] | None = None):
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
        self.processor, self.model = load_auto(self.path, model_class, dtype, device, trust_remote_code,
                                               attn_implementation, processor_kwargs)
        if prompt_template is None and not getattr(self.processor, "chat_template", None):
            self.prompt_template = PROMPT_TEMPLATES.get(type(self.processor).__name__)
            if self.prompt_template is None:
                raise ConfigError(f"{self.path} has no chat template (chat_template.jinja, chat_template.json or "
                                  "tokenizer_config.json's chat_template); copy it from the downloaded folder, or "
                                  "set params.prompt_template (e.g. "
                                  "'{images}\\n{prompt}': {images} is the model's image token once per image)")
        if self.prompt_template is not None:
            try:
                self.prompt_template.format(prompt="", images="")
            except (KeyError, IndexError, ValueError) as e:
                raise ConfigError(f"field 'params.prompt_template': {self.prompt_template!r} is not a template with the "
                                  f"fields {{prompt}} and {{images}} ({type(e).__name__}: {e}); write literal braces as "
                                  "{{ and }}") from None

    @property
    def context_window(self) -> int | None:
        """The language model's maximum sequence length in tokens (prompt + answer), if the config states one."""
        cfg = self.model.config
        cfg = getattr(cfg, "text_config", None) or cfg
        n = getattr(cfg, "max_position_embeddings", None)
        return int(n) if n else None

    def prompt_text(self, n_images: int, prompt: str) -> str:
        if self.prompt_template is not None:
            return self.prompt_template.format(prompt=prompt, images=self.image_placeholder() * n_images)
        content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": prompt}]
        msgs = [{"role": "system", "content": [{"type": "text", "text": self.system_prompt}]}] if self.system_prompt else []
        msgs.append({"role": "user", "content": content})
        return self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)

    def image_placeholder(self) -> str:
        """What ``{images}`` of ``params.prompt_template`` becomes for one image: the processor's image token, inside
        the family's vision delimiters where its tokenizer has them (Qwen-VL: ``<|vision_start|>...<|vision_end|>``,
        which transformers >= 5 needs to place the image's rotary positions)."""
        token = getattr(self.processor, "image_token", None) or ""
        vocab = tokenizer_of(self.processor).get_vocab()
        if token and "<|vision_start|>" in vocab and "<|vision_end|>" in vocab:
            return f"<|vision_start|>{token}<|vision_end|>"
        return token

    def inputs(self, images: Sequence[np.ndarray], prompt: str) -> dict[str, Any]:
        """The model inputs (tensors on the device) for ``images`` and ``prompt``."""
        return self.batch_inputs([images], [prompt])

    def batch_inputs(self, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str]) -> dict[str, Any]:
        """The model inputs for many (images, prompt) items: one row each, left-padded (see :func:`model_inputs`)."""
        from PIL import Image

        if len(image_lists) != len(prompts) or not prompts:
            raise InvalidInputError(f"{self.id}: {len(image_lists)} image lists for {len(prompts)} prompts; give one "
                                    "image list per prompt, at least one")
        texts, pil = [], []
        for k, (images, prompt) in enumerate(zip(image_lists, prompts)):
            where = f"items[{k}]." if len(prompts) > 1 else ""
            pil.append([Image.fromarray(check_image(im, f"{where}images[{i}]")) for i, im in enumerate(images)])
            texts.append(self.prompt_text(len(images), prompt))
        return model_inputs(self.processor, self.model, self.device, texts, pil)

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
        return self.generate_ids([images], [prompt], **gen)[0].text

    def generate_batch(self, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str], **gen: Any) -> list[str]:
        """:meth:`generate` for many items in one left-padded ``generate`` call (same answers as one at a time)."""
        if len(image_lists) != len(prompts):
            raise InvalidInputError(f"{self.id}: {len(image_lists)} image lists for {len(prompts)} prompts")
        return [g.text for g in self.generate_ids(image_lists, prompts, **gen)] if prompts else []

    def generate_ids(self, image_lists: Sequence[Sequence[np.ndarray]], prompts: Sequence[str], logits: bool = False,
                     **gen: Any) -> list[Generated]:
        """One :class:`Generated` per item, all items in one ``generate`` call; ``logits``: keep each step's
        logits. :class:`ContextLengthError` naming the item whose prompt and answer exceed the context window."""
        import torch

        kwargs = self.generation_kwargs(gen)
        tok = tokenizer_of(self.processor)
        if getattr(tok, "pad_token_id", None) is not None:
            kwargs.setdefault("pad_token_id", tok.pad_token_id)
        if logits:
            kwargs.update(output_logits=True, return_dict_in_generate=True)
        with self._lock, torch.no_grad():
            torch.manual_seed(self.seed)
            batch = self.batch_inputs(image_lists, prompts)
            window, want = self.context_window, int(kwargs.get("max_new_tokens", 0))
            for k, n in enumerate(batch["attention_mask"].sum(dim=1).tolist()):
                if window and n + want > window:
                    item = f"item {k}: " if len(prompts) > 1 else ""
                    raise ContextLengthError(
                        f"{self.id}: {item}the prompt takes {n} tokens (images included) and {want} more were asked for, "
                        f"over the context window of {window}; shorten the prompt or lower max_tokens")
            out = self.model.generate(**batch, **kwargs)
        seqs = out.sequences if logits else out
        rows = new_tokens(seqs, int(batch["input_ids"].shape[1]), eos_ids(self.model))
        steps = torch.stack(out.logits, dim=1).float().cpu() if logits else None  # (rows, steps, vocab)
        return [Generated(ids=r.tolist(), text=self.processor.decode(r, skip_special_tokens=True).strip(),
                          logits=None if steps is None else steps[k, :len(r)].numpy()) for k, r in enumerate(rows)]

    def hidden_states(self, inputs: tuple[Sequence[np.ndarray], str], layers: Sequence[str] | str | None = None,
                      pool: str = "mean") -> dict[str, np.ndarray]:
        """``{layer name: array}`` for one ``(images, prompt)`` item (:meth:`hidden_states_batch` of one item)."""
        return self.hidden_states_batch([inputs], layers, pool)[0]

    def hidden_states_batch(self, items: Sequence[tuple[Sequence[np.ndarray], str]], layers: Sequence[str] | str | None = None,
                            pool: str = "mean") -> list[dict[str, np.ndarray]]:
        """:meth:`hidden_states` for many ``(images, prompt)`` items from one forward pass: each item's arrays
        are its own rows, then pooled: the language model's outputs without the padding positions (1, tokens, width);
        a vision layer's rows of the item's images, or of the crops / patches its images were cut into
        (:func:`vision_row_counts`); a vision layer that packs every patch of the batch along one axis (Qwen-VL's
        (patches, width)) gives the item's patches as one row (1, patches, width). Positions count from the padded
        row's start, which rotary position embeddings (relative) do not see. :class:`ConfigError` for a layer whose
        output has no per-item rows."""
        import torch

        items = list(items)
        with torch.no_grad():
            batch = self.batch_inputs([list(ims) for ims, _ in items], [p for _, p in items])
        raw = capture_hidden_states(self.model, lambda: self.model(**batch), layers, "none")
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        counts = [len(ims) for ims, _ in items]
        width, lm = int(batch["input_ids"].shape[1]), self._language_prefixes()
        image_token = self._image_token_id()
        out: list[dict[str, np.ndarray]] = [{} for _ in items]
        for name, x in raw.items():
            if any(name == p or name.startswith(p + ".") for p in lm) and x.ndim == 3 and x.shape[:2] == (len(items), width):
                for k in range(len(items)):  # the item's own tokens (left padding dropped)
                    out[k][name] = pool_array(x[k:k + 1, width - int(lengths[k]):], pool, self._hidden_seq_axis)
                continue
            found = vision_row_counts(batch, counts, image_token, int(x.shape[0]))
            if found is None:
                raise ConfigError(f"{self.id}: layer {name!r} gives shape {x.shape} for {len(items)} items with "
                                  f"{sum(counts)} images, no rows per item; ask hidden_states one item at a time")
            kind, rows = found
            starts = np.concatenate([[0], np.cumsum(rows)]).astype(int)
            for k in range(len(items)):
                row = x[starts[k]:starts[k + 1]]
                if kind == "packed" and row.ndim == 2:
                    row = row[None]  # (patches, width) -> one item of many patches
                out[k][name] = pool_array(row, pool, self._hidden_seq_axis)
        return out

    def _image_token_id(self) -> int | None:
        """The id of the image placeholder token the processor expands (None if neither processor nor config names one)."""
        for owner, key in ((self.processor, "image_token_id"), (self.model.config, "image_token_id"),
                           (self.model.config, "image_token_index")):
            v = getattr(owner, key, None)
            if isinstance(v, int):
                return v
        return None

    def _language_prefixes(self) -> list[str]:
        """Module names of the language model (its outputs run over the padded token sequence) and the LM head. Where
        ``get_decoder`` gives the whole multimodal model (Idefics3, SmolVLM), its ``text_model`` / ``language_model``."""
        names = {id(m): n for n, m in self.model.named_modules()}
        decoder = getattr(self.model, "get_decoder", lambda: None)()
        inner = [getattr(decoder, a, None) for a in ("language_model", "text_model")]
        decoder = next((m for m in inner if m is not None and id(m) in names), decoder)
        mods = [decoder, getattr(self.model, "get_output_embeddings", lambda: None)()]
        return [names[id(m)] for m in mods if m is not None and id(m) in names and names[id(m)]]

    def _hidden_module(self):
        return self.model

    def _hidden_forward(self, inputs: tuple[Sequence[np.ndarray], str]) -> Any:
        images, prompt = inputs
        return self.model(**self.inputs(images, prompt))
