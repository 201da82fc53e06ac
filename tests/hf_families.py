"""Tiny random-weight checkpoints of the transformers VLM families embeval users bring, built offline.

Each builder makes the family's own config classes (hidden size 32, one or two layers), a word-level
tokenizer of the family's tokenizer class with the family's special tokens, the family's own processor
(its image processor + that tokenizer + a chat template in the family's format), and saves model and
processor into one folder (``save_pretrained``), the layout ``huggingface-cli download ORG/NAME
--local-dir DIR`` gives. Nothing is downloaded. ``FAMILIES`` names them; :func:`build_family` builds one.

The chat templates are short but render the family's real turn format (role markers, image
placeholder, generation prompt); the real checkpoints ship their own, which the adapter uses as is.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

#: words every tiny tokenizer knows (the prompts of the tests, the Embodied-IQA tasks, left / right)
WORDS = ("pick up the red cube place move push a an on in to it is and left right which picture answers question "
         "reply with one word or two pictures lie table of what colour do you see blue green gripper arm robot "
         "where object describe scene image grasp open close user assistant system model User: Assistant:".split())


@dataclass(frozen=True)
class Family:
    """One VLM family: how to build a tiny checkpoint of it, and what a real checkpoint looks like."""

    name: str
    model_class: str  # the transformers class AutoModelForImageTextToText resolves to
    hub: str  # a real checkpoint on the Hugging Face hub
    build: Callable[[Path], tuple[Any, Any]]  # folder -> (model, processor), both saved there
    image_size: int  # side (px) of the tiny processor's tiles / largest resized image


def word_tokenizer(cls_name: str, specials: dict[str, str], extra: list[str], **kw):
    """A word-level tokenizer of transformers class ``cls_name`` (a fast tokenizer class): ``specials`` are the
    bos/eos/unk/pad roles, ``extra`` the family's added special tokens (image placeholders, turn markers)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    base = list(dict.fromkeys(list(specials.values()) + list(WORDS)))
    vocab = {w: i for i, w in enumerate(base)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token=specials["unk_token"]))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##")
    tok = getattr(transformers, cls_name)(tokenizer_object=tk, model_input_names=["input_ids", "attention_mask"],
                                          **specials, **kw)
    tok.add_tokens([t for t in extra if t not in vocab], special_tokens=True)
    return tok


def _seeded(make):
    import torch

    torch.manual_seed(0)
    return make().eval()


def keep_tokenizer_as_saved(d: Path) -> None:
    """Mark the folder's word-level tokenizer.json to be loaded as saved: transformers >= 5 would otherwise rebuild
    the family's tokenizer class (a BPE) from vocab.json and tokenize differently (the adapter refuses that)."""
    import json

    conf = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**conf, "tokenizer_class": "PreTrainedTokenizerFast"}))


def _save(d: Path, model, proc):
    model.save_pretrained(d)
    proc.save_pretrained(d)
    keep_tokenizer_as_saved(d)
    return model, proc


LLAMA_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


# ---------------------------------------------------------------------------------------------- Qwen2.5-VL / Qwen3-VL
QWEN_SPECIALS = {"bos_token": None, "eos_token": "<|im_end|>", "unk_token": "<unk>", "pad_token": "<|endoftext|>"}
QWEN_EXTRA = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _qwen_tokenizer():
    specials = {k: v for k, v in QWEN_SPECIALS.items() if v is not None}
    return word_tokenizer("Qwen2TokenizerFast", specials, QWEN_EXTRA)


def _qwen_ids(tok) -> dict[str, int]:
    return {"image_token_id": tok.convert_tokens_to_ids("<|image_pad|>"),
            "video_token_id": tok.convert_tokens_to_ids("<|video_pad|>"),
            "vision_start_token_id": tok.convert_tokens_to_ids("<|vision_start|>"),
            "vision_end_token_id": tok.convert_tokens_to_ids("<|vision_end|>")}


def build_qwen2_5_vl(d: Path):
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor,
                              Qwen2VLImageProcessor, Qwen2VLVideoProcessor)

    tok = _qwen_tokenizer()
    px = 28 * 28
    ip = Qwen2VLImageProcessor(min_pixels=px, max_pixels=4 * px, patch_size=14, merge_size=2, temporal_patch_size=2)
    vp = Qwen2VLVideoProcessor(min_pixels=px, max_pixels=4 * px, patch_size=14, merge_size=2, temporal_patch_size=2)
    proc = Qwen2_5_VLProcessor(image_processor=ip, tokenizer=tok, video_processor=vp, chat_template=QWEN_TEMPLATE)
    cfg = Qwen2_5_VLConfig(
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[0], initializer_range=0.3),
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}, initializer_range=0.3,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **_qwen_ids(tok))
    return _save(d, _seeded(lambda: Qwen2_5_VLForConditionalGeneration(cfg)), proc)


def build_qwen3_vl(d: Path):
    from transformers import (Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor,
                              Qwen3VLVideoProcessor)

    tok = _qwen_tokenizer()
    px = 32 * 32
    ip = Qwen2VLImageProcessor(min_pixels=px, max_pixels=4 * px, patch_size=16, merge_size=2, temporal_patch_size=2)
    vp = Qwen3VLVideoProcessor(size={"shortest_edge": px, "longest_edge": 4 * px}, patch_size=16, merge_size=2,
                               temporal_patch_size=2)
    proc = Qwen3VLProcessor(image_processor=ip, tokenizer=tok, video_processor=vp, chat_template=QWEN_TEMPLATE)
    cfg = Qwen3VLConfig(
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
                           deepstack_visual_indexes=[0], initializer_range=0.3),
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, head_dim=16,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512, initializer_range=0.3,
                         rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True},
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **_qwen_ids(tok))
    return _save(d, _seeded(lambda: Qwen3VLForConditionalGeneration(cfg)), proc)


# ---------------------------------------------------------------------------------------------- Idefics3 / SmolVLM
IDEFICS_EXTRA = (["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>", "<|im_start|>"] + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)])
IDEFICS_TEMPLATE = (
    "<|im_start|>{% for m in messages %}{{ m['role'] | capitalize }}:{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>{% elif c['type'] == 'text' %} {{ c['text'] }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}")


def _idefics_parts(image_cls: str):
    """(tokenizer, image processor, vision config, text config) of an Idefics3-style tiny model: 56 px crops of
    16 patches, pixel shuffle by 2 -> 4 image tokens per crop."""
    import transformers

    tok = word_tokenizer("PreTrainedTokenizerFast", dict(LLAMA_SPECIALS, eos_token="<end_of_utterance>"), IDEFICS_EXTRA)
    ip = getattr(transformers, image_cls)(size={"longest_edge": 112}, max_image_size={"longest_edge": 56},
                                          do_image_splitting=True)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=56,
                  patch_size=14, initializer_range=0.3)
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, max_position_embeddings=1024, initializer_range=0.3,
                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    return tok, ip, vision, text


def build_idefics3(d: Path):
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor

    tok, ip, vision, text = _idefics_parts("Idefics3ImageProcessor")
    proc = Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=4, chat_template=IDEFICS_TEMPLATE)
    cfg = Idefics3Config(vision_config=vision, text_config=text, scale_factor=2, image_token_id=proc.image_token_id,
                         pad_token_id=tok.pad_token_id)
    return _save(d, _seeded(lambda: Idefics3ForConditionalGeneration(cfg)), proc)


# ---------------------------------------------------------------------------------------------- PaliGemma
GEMMA_SPECIALS = {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"}


def build_paligemma(d: Path):
    """PaliGemma: no chat template (as its checkpoints), the processor puts the image tokens first."""
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration, PaliGemmaProcessor, SiglipImageProcessor

    tok = word_tokenizer("GemmaTokenizerFast", GEMMA_SPECIALS, ["<image>"])
    ip = SiglipImageProcessor(size={"height": 28, "width": 28}, image_seq_length=4)
    proc = PaliGemmaProcessor(image_processor=ip, tokenizer=tok)  # adds the <loc> / <seg> tokens
    cfg = PaliGemmaConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=28, patch_size=14, projection_dim=32, vision_use_head=False),
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                         initializer_range=0.3, tie_word_embeddings=False),
        image_token_index=proc.image_token_id, vocab_size=len(tok), projection_dim=32, hidden_size=32,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
        initializer_range=0.3, tie_word_embeddings=False)
    return _save(d, _seeded(lambda: PaliGemmaForConditionalGeneration(cfg)), proc)


# ---------------------------------------------------------------------------------------------- Gemma 3
GEMMA3_IMAGE = {"image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"}
GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<start_of_image>{% elif c['type'] == 'text' %}"
    "{{ c['text'] }}{% endif %}{% endfor %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def build_gemma3(d: Path):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor

    tok = word_tokenizer("GemmaTokenizerFast", GEMMA_SPECIALS,
                         list(GEMMA3_IMAGE.values()) + ["<start_of_turn>", "<end_of_turn>"],
                         extra_special_tokens=GEMMA3_IMAGE)
    ip = Gemma3ImageProcessor(size={"height": 28, "width": 28}, do_pan_and_scan=False)
    proc = Gemma3Processor(image_processor=ip, tokenizer=tok, chat_template=GEMMA3_TEMPLATE, image_seq_length=4)
    ids = {k: tok.convert_tokens_to_ids(v) for k, v in GEMMA3_IMAGE.items()}
    cfg = Gemma3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=28, patch_size=14, vision_use_head=False),
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
                         sliding_window=16, query_pre_attn_scalar=16, initializer_range=0.3, tie_word_embeddings=False,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id),
        mm_tokens_per_image=4, image_token_index=ids["image_token"], boi_token_index=ids["boi_token"],
        eoi_token_index=ids["eoi_token"], initializer_range=0.3, tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids("<end_of_turn>")])
    import torch

    model = _seeded(lambda: Gemma3ForConditionalGeneration(cfg))
    with torch.no_grad():  # transformers initialises the image projection to zeros (trained checkpoints are not)
        model.model.multi_modal_projector.mm_input_projection_weight.normal_(0.0, 0.3)
    return _save(d, model, proc)


# ---------------------------------------------------------------------------------------------- LLaVA-OneVision
LLAVA_OV_TEMPLATE = QWEN_TEMPLATE.replace("<|vision_start|><|image_pad|><|vision_end|>", "<image>\n")


def build_llava_onevision(d: Path):
    """LLaVA-OneVision: SigLIP + Qwen2, any-resolution tiling over 28 px tiles (grid pinpoints up to 56 x 56)."""
    from transformers import (LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration,
                              LlavaOnevisionImageProcessor, LlavaOnevisionProcessor, LlavaOnevisionVideoProcessor)

    tok = word_tokenizer("Qwen2TokenizerFast", {k: v for k, v in QWEN_SPECIALS.items() if v is not None},
                         ["<|im_start|>", "<|im_end|>", "<image>", "<video>"])
    pinpoints = [[28, 28], [28, 56], [56, 28], [56, 56]]
    ip = LlavaOnevisionImageProcessor(size={"height": 28, "width": 28}, image_grid_pinpoints=pinpoints)
    vp = LlavaOnevisionVideoProcessor(size={"height": 28, "width": 28})
    proc = LlavaOnevisionProcessor(image_processor=ip, tokenizer=tok, video_processor=vp, num_image_tokens=4,
                                   vision_feature_select_strategy="full", chat_template=LLAVA_OV_TEMPLATE)
    cfg = LlavaOnevisionConfig(
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=28, patch_size=14, vision_use_head=False),
        text_config=dict(model_type="qwen2", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                         initializer_range=0.3, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id),
        image_token_index=tok.convert_tokens_to_ids("<image>"), video_token_index=tok.convert_tokens_to_ids("<video>"),
        vision_feature_select_strategy="full", vision_feature_layer=-1, image_grid_pinpoints=pinpoints,
        initializer_range=0.3, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return _save(d, _seeded(lambda: LlavaOnevisionForConditionalGeneration(cfg)), proc)


# ---------------------------------------------------------------------------------------------- InternVL (HF format)
INTERNVL_IMAGE = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
                  "video_token": "<video>"}
INTERNVL_TEMPLATE = QWEN_TEMPLATE.replace("<|vision_start|><|image_pad|><|vision_end|>", "<IMG_CONTEXT>\n")


def build_internvl(d: Path):
    """InternVL (the -hf checkpoints): InternViT + Qwen2, 56 px tiles (up to 4 and a thumbnail), pixel shuffle by 2
    -> 4 context tokens per tile."""
    from transformers import (GotOcr2ImageProcessor, InternVLConfig, InternVLForConditionalGeneration,
                              InternVLProcessor, InternVLVideoProcessor)

    tok = word_tokenizer("Qwen2TokenizerFast", {k: v for k, v in QWEN_SPECIALS.items() if v is not None},
                         ["<|im_start|>", "<|im_end|>"] + list(INTERNVL_IMAGE.values()),
                         extra_special_tokens=INTERNVL_IMAGE)
    ip = GotOcr2ImageProcessor(size={"height": 56, "width": 56}, crop_to_patches=True, max_patches=4)
    vp = InternVLVideoProcessor(size={"height": 56, "width": 56})
    proc = InternVLProcessor(image_processor=ip, tokenizer=tok, video_processor=vp, image_seq_length=4,
                             chat_template=INTERNVL_TEMPLATE)
    cfg = InternVLConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=[56, 56], patch_size=[14, 14], initializer_range=0.3),
        text_config=dict(model_type="qwen2", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                         initializer_range=0.3, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id),
        image_token_id=proc.image_token_id, image_seq_length=4, downsample_ratio=0.5, initializer_range=0.3,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return _save(d, _seeded(lambda: InternVLForConditionalGeneration(cfg)), proc)


def smolvlm_processor_available() -> bool:
    """Whether SmolVLMProcessor can be constructed here (it needs the PyPI package num2words)."""
    import importlib.util

    return importlib.util.find_spec("num2words") is not None


def build_smolvlm(d: Path):
    """SmolVLM (SmolVLM2 checkpoints): Idefics3's layout with SmolVLM classes. Its processor needs num2words; where
    that is missing the processor's files are written one by one, as ``save_pretrained`` writes them (the processor
    returned is then None)."""
    import json

    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMVideoProcessor

    tok, ip, vision, text = _idefics_parts("SmolVLMImageProcessor")
    vp = SmolVLMVideoProcessor(size={"longest_edge": 56}, max_image_size={"longest_edge": 56})
    cfg = SmolVLMConfig(vision_config=vision, text_config=text, scale_factor=2,
                        image_token_id=tok.convert_tokens_to_ids("<image>"), pad_token_id=tok.pad_token_id)
    model = _seeded(lambda: SmolVLMForConditionalGeneration(cfg))
    if smolvlm_processor_available():
        from transformers import SmolVLMProcessor

        proc = SmolVLMProcessor(image_processor=ip, tokenizer=tok, video_processor=vp, image_seq_len=4,
                                chat_template=IDEFICS_TEMPLATE)
        return _save(d, model, proc)
    model.save_pretrained(d)
    for part in (ip, vp, tok):
        part.save_pretrained(d)
    (d / "processor_config.json").write_text(json.dumps({"image_seq_len": 4, "processor_class": "SmolVLMProcessor"}))
    (d / "chat_template.jinja").write_text(IDEFICS_TEMPLATE)
    keep_tokenizer_as_saved(d)
    return model, None


FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", "Qwen/Qwen2.5-VL-3B-Instruct", build_qwen2_5_vl, 56),
    Family("qwen3_vl", "Qwen3VLForConditionalGeneration", "Qwen/Qwen3-VL-2B-Instruct", build_qwen3_vl, 64),
    Family("idefics3", "Idefics3ForConditionalGeneration", "HuggingFaceTB/SmolVLM-Instruct", build_idefics3, 56),
    Family("smolvlm", "SmolVLMForConditionalGeneration", "HuggingFaceTB/SmolVLM2-2.2B-Instruct", build_smolvlm, 56),
    Family("paligemma", "PaliGemmaForConditionalGeneration", "google/paligemma2-3b-mix-224", build_paligemma, 28),
    Family("gemma3", "Gemma3ForConditionalGeneration", "google/gemma-3-4b-it", build_gemma3, 28),
    Family("llava_onevision", "LlavaOnevisionForConditionalGeneration", "llava-hf/llava-onevision-qwen2-0.5b-ov-hf",
           build_llava_onevision, 28),
    Family("internvl", "InternVLForConditionalGeneration", "OpenGVLab/InternVL3-1B-hf", build_internvl, 56),
]}


def build_family(name: str, d: str | Path):
    """Build family ``name`` (a key of :data:`FAMILIES`) into folder ``d``; returns (model, processor)."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    return FAMILIES[name].build(d)
