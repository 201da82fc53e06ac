"""The transformers VLM adapter (``adapter: hf``) on every family users bring, offline: a tiny random-weight
checkpoint of each (:mod:`hf_families`: the library's own config, model and processor classes, saved as the hub
lays it out) is loaded BY PATH through ``load_subject`` and runs what the evaluations ask of a VLM: a Cognition
unit (the ``iqa`` evaluator's VLM path), an Act2Answer item through the text baseline (three images per prompt),
batched generation equal to batch-1, and hidden states per layer for probing. A VLM cannot act, so Decision and
Act2Answer episodes refuse it (asserted once). Checkpoints that cannot load here fail with a one-line error
naming the file or package they need (asserted)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_families import FAMILIES, build_family, smolvlm_processor_available  # noqa: E402

from embeval.errors import ConfigError, MissingWeightsError  # noqa: E402
from embeval.subjects.registry import load_subject  # noqa: E402

NEW = 4  # tokens per answer


def _img(seed, h=40, w=50):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """family name -> its saved tiny checkpoint folder (built once per module, on first use)."""
    root, done = tmp_path_factory.mktemp("families"), {}

    def get(name):
        if name not in done:
            build_family(name, root / name)
            done[name] = root / name
        return done[name]
    return get


def _runnable(name):
    if name == "smolvlm" and not smolvlm_processor_available():
        pytest.skip("SmolVLMProcessor needs the PyPI package num2words, not installed here; "
                    "test_smolvlm_without_num2words_names_the_package asserts the adapter's error")


@pytest.fixture(scope="module")
def subjects(folders):
    """family name -> the adapter loaded by path, as a subject spec names it."""
    done = {}

    def get(name):
        _runnable(name)
        if name not in done:
            done[name] = load_subject({"kind": "vlm", "adapter": "hf", "path": str(folders(name)),
                                       "params": {"max_new_tokens": NEW}})
        return done[name]
    return get


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_loads_by_path_and_answers_as_transformers_does(name, subjects):
    """The adapter's answer equals the family's own processor + generate on the same prompt; the image reaches
    the model (another image changes the first step's logits)."""
    from PIL import Image

    vlm, fam = subjects(name), FAMILIES[name]
    assert type(vlm.model).__name__ == fam.model_class
    prompt = "pick up the red cube"
    text = vlm.prompt_text(1, prompt)
    proc = vlm.processor
    if proc.chat_template:
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        assert text == proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    else:  # PaliGemma: no chat template, the image tokens first
        assert text == proc.image_token + prompt
    inputs = proc(text=[text], images=[[Image.fromarray(_img(0))]], return_tensors="pt")
    with torch.no_grad():
        out = vlm.model.generate(**inputs, max_new_tokens=NEW, do_sample=False)
    want = proc.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True).strip()
    assert vlm.generate([_img(0)], prompt) == want
    a, b = (vlm.generate_ids([[_img(s)]], [prompt], logits=True)[0].logits[0] for s in (0, 1))
    assert np.abs(a - b).max() > 1e-3, "the image does not change the answer's logits"


BATCH = [([_img(0)], "pick up the red cube"), ([_img(1), _img(2, 32, 60)], "which picture answers the question"),
         ([_img(3)], "push it to the left and place it on the blue cube")]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_generate_batch_equals_batch1(name, subjects):
    """Three left-padded items, one with two images of different sizes: ids equal batch-1's, logits within 1e-4."""
    vlm = subjects(name)
    ims, prompts = [i for i, _ in BATCH], [p for _, p in BATCH]
    batch = vlm.generate_ids(ims, prompts, logits=True)
    assert len(set(vlm.batch_inputs(ims, prompts)["attention_mask"].sum(dim=1).tolist())) == 3  # rows are padded
    for k, (im, p) in enumerate(BATCH):
        one = vlm.generate_ids([im], [p], logits=True)[0]
        assert batch[k].ids == one.ids and batch[k].text == one.text, k
        np.testing.assert_allclose(batch[k].logits, one.logits, atol=1e-4)
    assert vlm.generate_batch(ims, prompts) == [g.text for g in batch]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_hidden_states(name, subjects):
    """Vision and language layers are listed; each item's states from one batched forward equal its own (same
    shapes, within 1e-4); language layers give (1, 32), vision layers (rows, 32) per image / crop / patch set."""
    vlm = subjects(name)
    layers = vlm.hidden_layers()
    lm = vlm._language_prefixes()
    lang = [n for n in layers if any(n.startswith(p + ".") for p in lm)]
    vision = [n for n in layers if n not in lang]
    assert len(lang) == 2 and vision, layers  # the tiny models have two language layers
    batch = vlm.hidden_states_batch(BATCH, pool="mean")
    for k, item in enumerate(BATCH):
        one = vlm.hidden_states(item)
        assert set(one) == set(batch[k]) == set(layers)
        for n in layers:
            assert one[n].ndim == 2 and one[n].shape[1] == 32 and one[n].shape == batch[k][n].shape, (n, one[n].shape)
            np.testing.assert_allclose(batch[k][n], one[n], atol=1e-4, err_msg=n)
        assert all(one[n].shape == (1, 32) for n in lang)
    last = vlm.hidden_states(BATCH[0], layers=[lang[-1]], pool="none")[lang[-1]]
    assert last.shape == (1, int(vlm.inputs(*BATCH[0])["input_ids"].shape[1]), 32)


@pytest.fixture(scope="module")
def iqa_db(tmp_path_factory):
    """A one-reference Embodied-IQA database (5 tasks, one distorted image), as `embeval iqa build` writes it."""
    from PIL import Image

    from embeval_analysis.iqa.database import BuildConfig, materialise

    db, src = tmp_path_factory.mktemp("iqa_db"), tmp_path_factory.mktemp("iqa_src")
    Image.fromarray(_img(7, 48, 64)).save(src / "r0.png")
    materialise(BuildConfig(source="folder", source_params={"path": str(src)}, distortions=["darken"], levels=[3]),
                db, log=None)
    return db


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_cognition_unit(name, folders, iqa_db):
    """One unit of the `iqa` evaluator (the Cognition evaluation's entry point) with the family as its subject:
    5 answers on the reference and 5 on the distorted image, each the adapter's own answer, scored by Cognition."""
    from embeval_analysis.iqa.database import BuildConfig, run_spec
    from embeval_analysis.iqa.evaluator import IQAEvaluator, _read
    from embeval.runs.spec import parse_spec
    from embeval.scoring.cognition import cognition_scores

    _runnable(name)
    subject = {"id": name, "kind": "vlm", "adapter": "hf", "path": str(folders(name)), "params": {"max_new_tokens": NEW}}
    spec = parse_spec(run_spec(BuildConfig(subjects=[subject]), iqa_db), base_dir=iqa_db)
    ev = IQAEvaluator()
    ev.validate(spec)
    units = ev.units(spec)
    assert len(units) == 1
    state = ev.setup(spec, spec.subjects[0])  # loads the subject by path, as the run does
    try:
        out = ev.run_batch(spec, state, units, [0])[0]
    finally:
        ev.teardown(state)
    assert set(out) == {"kind", "reference_answers", "distorted_answers"}  # a VLM gets no Decision
    ref, dist = _read(iqa_db / "references" / "r0.png"), _read(iqa_db / "distorted" / "r0__darken__3.png")
    tasks = json.loads((iqa_db / "manifest.json").read_text())["references"][0]["tasks"]
    vlm = state["model"]
    own = vlm.generate_batch([[ref]] * len(tasks) + [[dist]] * len(tasks), tasks * 2)  # == batch-1 (tested above)
    assert out["reference_answers"] == own[:len(tasks)] and out["distorted_answers"] == own[len(tasks):]
    score = cognition_scores({(name, "r0__darken__3"): (out["reference_answers"], out["distorted_answers"])})
    s = score[(name, "r0__darken__3")]
    assert len(s.tasks) == 5 and s.total == pytest.approx(sum(t.combined for t in s.tasks))
    assert 0.0 <= s.total <= 5 * 3 / 2.1  # 5 tasks, each 0..1.43 (the paper's weighted average)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_act2answer_text_item(name, subjects, tmp_path):
    """Act2Answer's VLM baseline (composite + both cards: three images in one prompt) in both layouts."""
    from PIL import Image

    from embeval.act2answer.baseline import PROMPT, answer_item, composite
    from embeval.act2answer.items import BinaryItem

    vlm = subjects(name)
    for side, seed in (("l", 20), ("r", 21)):
        Image.fromarray(_img(seed, 32, 32)).save(tmp_path / f"{side}.png")
    item = BinaryItem(id="q0", question="Which picture is red?", left_image=str(tmp_path / "l.png"),
                      right_image=str(tmp_path / "r.png"), correct_side="left", category="color")
    left, right = _img(20, 32, 32), _img(21, 32, 32)
    for layout, cards in (("original", (left, right)), ("swapped", (right, left))):
        rec = answer_item(vlm, item, layout)
        assert rec["layout"] == layout and rec["zone"] in ("correct", "incorrect", "out_of_bounds")
        assert rec["answer"] == vlm.generate([composite(*cards), *cards], PROMPT.format(question=item.question))


def test_a_vlm_cannot_be_the_subject_of_decision_or_act2answer_episodes(tmp_path):
    """Decision and Act2Answer episodes need actions: their evaluators refuse a `vlm` subject in one line."""
    from embeval.runs.plan import plan_run
    from embeval.runs.spec import parse_spec

    (tmp_path / "items.jsonl").write_text("")
    vlm = {"id": "v", "kind": "vlm", "adapter": "hf", "path": str(tmp_path)}
    for evaluator, extra in (("act2answer", {"plugins": ["embeval.act2answer.evaluator"],
                                             "items": {"source": "file", "path": "items.jsonl"}}),
                             ("policy-decision", {"items": {"source": "synthetic", "count": 1}})):
        spec = parse_spec({"name": "x", "evaluator": evaluator, "subjects": [vlm], **extra}, base_dir=tmp_path)
        with pytest.raises(ConfigError, match=f"evaluator '{evaluator}' takes subjects of kind policy; got 'vlm'"):
            plan_run(spec)


# ------------------------------------------------------------------------------------ what cannot load, said so
def test_smolvlm_without_num2words_names_the_package(folders, monkeypatch):
    """Where num2words is missing (here: hidden from transformers' SmolVLM processor, which looks it up at import),
    loading a SmolVLM checkpoint names the package and the fix."""
    d = folders("smolvlm")
    if smolvlm_processor_available():
        import transformers.models.smolvlm.processing_smolvlm as proc

        monkeypatch.setattr(proc, "num2words", None)
    with pytest.raises(ConfigError, match=r"smolvlm: its processor cannot be loaded here: .*num2words.*pip install num2words"):
        load_subject({"kind": "vlm", "adapter": "hf", "path": str(d)})


def _copy(folders, name, tmp_path):
    d = tmp_path / name
    shutil.copytree(folders(name), d)
    return d


def _drop_image_processor(d):
    """Remove the image processor's settings from a saved folder, in either layout: their own
    preprocessor_config.json (transformers < 5) or the ``image_processor`` key of processor_config.json (>= 5)."""
    (d / "preprocessor_config.json").unlink(missing_ok=True)
    if (d / "processor_config.json").is_file():
        doc = json.loads((d / "processor_config.json").read_text())
        doc.pop("image_processor", None)
        (d / "processor_config.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("missing", ["preprocessor_config.json", "tokenizer.json"])
def test_missing_processor_file_is_named(folders, tmp_path, missing):
    d = _copy(folders, "gemma3", tmp_path)
    if missing == "preprocessor_config.json":
        _drop_image_processor(d)
    else:
        (d / missing).unlink()
    with pytest.raises(MissingWeightsError, match=f"has no {missing}.*huggingface-cli download"):
        load_subject({"kind": "vlm", "adapter": "hf", "path": str(d)})


def test_transformers5_processor_layout_passes_the_file_check(folders, tmp_path):
    """transformers >= 5 saves the image processor's settings inside processor_config.json (key image_processor):
    that folder passes the file check; a processor_config.json without them is still refused in one line."""
    from embeval.subjects.adapters.hf_vlm import check_checkpoint

    d = _copy(folders, "gemma3", tmp_path)
    config = json.loads((d / "config.json").read_text())
    if (d / "preprocessor_config.json").is_file():  # saved by transformers < 5
        pre = json.loads((d / "preprocessor_config.json").read_text())
    else:
        pre = json.loads((d / "processor_config.json").read_text())["image_processor"]
    _drop_image_processor(d)
    (d / "processor_config.json").write_text(json.dumps({"processor_class": "Gemma3Processor"}))
    with pytest.raises(MissingWeightsError, match="has no preprocessor_config.json or processor_config.json"):
        check_checkpoint(d, config, trust_remote_code=False)
    (d / "processor_config.json").write_text(json.dumps({"processor_class": "Gemma3Processor", "image_processor": pre}))
    check_checkpoint(d, config, trust_remote_code=False)


def test_missing_chat_template_is_named(folders, tmp_path):
    d = _copy(folders, "qwen2_5_vl", tmp_path)
    (d / "chat_template.jinja").unlink()
    with pytest.raises(ConfigError, match="has no chat template \\(chat_template.jinja"):
        load_subject({"kind": "vlm", "adapter": "hf", "path": str(d)})
    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(d),  # or a template with {images}
                        "params": {"prompt_template": "<|im_start|>user\n{images}{prompt}<|im_end|>\n<|im_start|>assistant\n",
                                   "max_new_tokens": NEW}})
    assert vlm.prompt_text(2, "a") == ("<|im_start|>user\n" + "<|vision_start|><|image_pad|><|vision_end|>" * 2
                                       + "a<|im_end|>\n<|im_start|>assistant\n")
    assert vlm.generate([_img(0), _img(1)], "a")
    with pytest.raises(ConfigError, match="field 'params.prompt_template'.*fields \\{prompt\\} and \\{images\\}"):
        load_subject({"kind": "vlm", "adapter": "hf", "path": str(d), "params": {"prompt_template": "{image} {prompt}"}})


def test_remote_code_and_unknown_model_types_are_named(folders, tmp_path):
    """InternVL's original (remote-code) checkpoints: without trust_remote_code the error says so and points at the
    -hf conversion; with it, the missing .py files are named. An unknown model type asks for a newer transformers."""
    d = _copy(folders, "internvl", tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    remote = {**cfg, "model_type": "internvl_chat", "auto_map": {
        "AutoConfig": "configuration_internvl_chat.InternVLChatConfig",
        "AutoModel": "modeling_internvl_chat.InternVLChatModel"}}
    (d / "config.json").write_text(json.dumps(remote))
    spec = {"kind": "vlm", "adapter": "hf", "path": str(d)}
    with pytest.raises(ConfigError, match=r"ships its own model code .*named by auto_map.*params.trust_remote_code: true"):
        load_subject(spec)
    with pytest.raises(MissingWeightsError, match="lacks configuration_internvl_chat.py, modeling_internvl_chat.py"):
        load_subject({**spec, "params": {"trust_remote_code": True}})
    (d / "config.json").write_text(json.dumps({**cfg, "model_type": "future_vlm"}))
    with pytest.raises(ConfigError, match="model_type 'future_vlm' is not known to transformers .*upgrade transformers"):
        load_subject(spec)


def test_gpu_settings_attention_and_processor_kwargs(folders):
    """params.attn_implementation (eager answers as the default sdpa does; flash_attention_2 without flash-attn and
    an unknown name are one-line errors naming the field) and params.processor_kwargs (Qwen-VL's max_pixels lowers
    the image's patch grid; a key no part of the processor has is named)."""
    d = str(folders("qwen2_5_vl"))
    spec = {"kind": "vlm", "adapter": "hf", "path": d}
    base = load_subject({**spec, "params": {"max_new_tokens": NEW}})
    eager = load_subject({**spec, "params": {"max_new_tokens": NEW, "attn_implementation": "eager"}})
    assert eager.model.config._attn_implementation == "eager"
    for k, (ims, p) in enumerate(BATCH):
        assert eager.generate(ims, p) == base.generate(ims, p), k
    with pytest.raises(ConfigError, match="field 'params.attn_implementation': 'flash'; choose from eager, sdpa"):
        load_subject({**spec, "params": {"attn_implementation": "flash"}})
    import importlib.util

    if importlib.util.find_spec("flash_attn") is None:
        with pytest.raises(ConfigError, match="field 'params.attn_implementation': 'flash_attention_2' cannot be used "
                                              "here: .*FlashAttention2.*pip install flash-attn"):
            load_subject({**spec, "params": {"attn_implementation": "flash_attention_2"}})
    small = load_subject({**spec, "params": {"processor_kwargs": {"max_pixels": 28 * 28}}})
    assert base.inputs([_img(0)], "a")["image_grid_thw"].tolist() == [[1, 2, 4]]  # 40 x 50 px -> 28 x 56 px
    assert small.inputs([_img(0)], "a")["image_grid_thw"].tolist() == [[1, 2, 2]]  # capped at 28 x 28 px
    with pytest.raises(ConfigError, match="field 'params.processor_kwargs.max_pixel': Qwen2_5_VLProcessor has no "
                                          "setting 'max_pixel'; its image processor's settings: .*max_pixels"):
        load_subject({**spec, "params": {"processor_kwargs": {"max_pixel": 784}}})


def test_docs_family_table_names_every_family():
    """docs/subjects.md's family table names each family's test and the hub checkpoint to download."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "subjects.md").read_text()
    table = doc[doc.index("#### Families, tested offline"):]
    for name, fam in FAMILIES.items():
        assert f"*[{name}]" in table and f"huggingface-cli download {fam.hub} --local-dir" in table, name
        assert f"`{fam.model_class}`" in table, name
