"""transformers adapters against a tiny randomly initialised LLaVA (CLIP vision + Llama text) built
here, saved to disk and reloaded: the HF VLM, OpenVLA's local-checkpoint path (action-token
decoding), hidden-state capture, and missing-weights errors."""
from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from embeval.action import Action, Observation  # noqa: E402
from embeval.errors import ConfigError, MissingWeightsError  # noqa: E402
from embeval.subjects import load_subject  # noqa: E402
from embeval.subjects.adapters.openvla_hf import decode_action_tokens  # noqa: E402

WORDS = ("<pad> <s> </s> <unk> <image> USER: ASSISTANT: pick up the red cube place move push a an on in to it is and "
         "left right").split()
TEMPLATE = ("{% for m in messages %}{{ m['role'].upper() }}: {% for c in m['content'] %}{% if c['type'] == 'image' %}"
            "<image> {% else %}{{ c['text'] }} {% endif %}{% endfor %}{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}")
STATS = {"q01": [-0.1, -0.2, -0.05, -0.3, -0.3, -0.3, 0.0], "q99": [0.1, 0.2, 0.05, 0.3, 0.3, 0.3, 1.0],
         "mask": [True] * 6 + [False]}


def build_tiny_llava(d):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    vocab = {w: i for i, w in enumerate(WORDS)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##")
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="<pad>", model_input_names=["input_ids", "attention_mask"])
    tok.add_tokens(["<image>"], special_tokens=True)
    vc = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                          image_size=32, patch_size=8, projection_dim=32)
    tc = LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg = LlavaConfig(vision_config=vc, text_config=tc, image_token_index=vocab["<image>"],
                      vision_feature_select_strategy="default", vision_feature_layer=-1)
    cfg.norm_stats = {"tiny_ds": {"action": STATS}}  # as OpenVLA checkpoints carry them
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(cfg).eval()
    proc = LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
                          tokenizer=tok, patch_size=8, vision_feature_select_strategy="default", image_token="<image>",
                          num_additional_image_tokens=1, chat_template=TEMPLATE)
    model.save_pretrained(d)
    proc.save_pretrained(d)
    from hf_families import keep_tokenizer_as_saved

    keep_tokenizer_as_saved(d)
    return model, proc


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_llava")
    model, proc = build_tiny_llava(d)
    return d, model, proc


def _img(seed):
    return np.random.default_rng(seed).integers(0, 256, (40, 50, 3), dtype=np.uint8)


def test_hf_vlm_reloaded_matches_original(tiny):
    from PIL import Image

    d, model, proc = tiny
    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(d), "params": {"max_new_tokens": 6}})
    prompt = "pick up the red cube"
    answer = vlm.generate([_img(0)], prompt)
    text = proc.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}],
                                    add_generation_prompt=True, tokenize=False)
    assert text == "USER: <image> pick up the red cube ASSISTANT:"
    inputs = proc(images=[Image.fromarray(_img(0))], text=text, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
    want = proc.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True).strip()
    assert answer == want
    assert answer == vlm.generate([_img(0)], prompt)  # deterministic
    assert all(w in WORDS for w in answer.split())


def test_hf_vlm_hidden_states(tiny):
    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(tiny[0])})
    layers = vlm.hidden_layers()
    assert "model.language_model.layers.1" in layers and "model.vision_tower.vision_model.encoder.layers.0" in layers
    a = vlm.hidden_states(([_img(0)], "pick up the cube"))
    b = vlm.hidden_states(([_img(1)], "pick up the cube"))
    assert a["model.language_model.layers.1"].shape == (1, 32)
    assert not np.allclose(a["model.vision_tower.vision_model.encoder.layers.0"], b["model.vision_tower.vision_model.encoder.layers.0"])
    # cross-check against transformers' own output_hidden_states (hidden_states[i + 1] = output of layer i)
    inputs = vlm.inputs([_img(0)], "pick up the cube")
    with torch.no_grad():
        ref = vlm.model(**inputs, output_hidden_states=True).hidden_states
    raw = vlm.hidden_states(([_img(0)], "pick up the cube"), layers=["model.language_model.layers.0"], pool="none")
    np.testing.assert_allclose(raw["model.language_model.layers.0"], ref[1].numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError, match="unknown"):
        vlm.hidden_states(([_img(0)], "x"), layers=["no.such.layer"])


def test_decode_action_tokens_matches_openvla_binning():
    vocab = 32000
    ids = np.array([31999, 31744, 31872, 31900, 31800, 31850, 31999])
    k = np.clip(vocab - ids - 1, 0, 254)
    centers = -1 + (2 * k + 1) / 255.0  # bin centres of 256 uniform bins over [-1, 1]
    np.testing.assert_allclose(decode_action_tokens(ids, vocab), centers)
    out = decode_action_tokens(ids, vocab, STATS)
    lo, hi = np.array(STATS["q01"]), np.array(STATS["q99"])
    np.testing.assert_allclose(out[:6], ((centers + 1) / 2 * (hi - lo) + lo)[:6])
    assert out[6] == pytest.approx(centers[6])  # masked (gripper) dims stay as decoded
    assert decode_action_tokens([vocab - 1], vocab)[0] == pytest.approx(-1 + 1 / 255)
    assert decode_action_tokens([vocab - 256], vocab)[0] == pytest.approx(1 - 1 / 255)  # top bin is clipped to 254


def test_openvla_hf_generic_path(tiny):
    d, model, proc = tiny
    from PIL import Image

    spec = {"kind": "policy", "adapter": "openvla_hf", "path": str(d),
            "params": {"unnorm_key": "tiny_ds", "prompt_template": "USER: <image> {instruction} ASSISTANT:", "image_size": 32}}
    policy = load_subject(spec)
    policy.reset("Pick up the red cube")
    obs = Observation(images={"third_person": _img(0)}, instruction="Pick up the red cube")
    a = policy.act(obs)
    assert isinstance(a, Action)
    inputs = proc(images=[Image.fromarray(_img(0)).resize((32, 32), Image.LANCZOS)],
                  text="USER: <image> pick up the red cube ASSISTANT:", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=7, min_new_tokens=7, do_sample=False)
    want = decode_action_tokens(out[0, inputs["input_ids"].shape[1]:].numpy(), len(WORDS), STATS)
    np.testing.assert_allclose(a.vector[:6], want[:6])
    assert a.gripper == pytest.approx(np.clip(want[6], 0, 1))
    assert np.all(a.vector[:6] >= np.array(STATS["q01"][:6]) - 1e-9) and np.all(a.vector[:6] <= np.array(STATS["q99"][:6]) + 1e-9)
    with pytest.raises(ConfigError, match="unnorm_key"):
        load_subject({**spec, "params": {**spec["params"], "unnorm_key": "bridge_orig"}})


def test_missing_weights(tmp_path, tiny):
    for adapter, kind in [("hf", "vlm"), ("openvla_hf", "policy")]:
        with pytest.raises(MissingWeightsError, match="does not exist"):
            load_subject({"kind": kind, "adapter": adapter, "path": str(tmp_path / "nope")})
        with pytest.raises(MissingWeightsError, match="required"):
            load_subject({"kind": kind, "adapter": adapter})
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text((tiny[0] / "config.json").read_text())
    with pytest.raises(MissingWeightsError, match="no weights"):
        load_subject({"kind": "vlm", "adapter": "hf", "path": str(tmp_path / "half")})


def test_hf_vlm_served_over_openai_protocol(tiny):
    """The tiny LLaVA behind embeval's OpenAI-compatible server answers the OpenAI VLM client exactly as in-process."""
    from embeval.serving.openai_server import create_app
    from embeval.serving.runner import serve_in_thread
    from embeval.subjects.adapters.openai_chat import OpenAIChatVLM

    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(tiny[0]), "params": {"max_new_tokens": 5}})
    with serve_in_thread(create_app(vlm)) as srv:
        client = OpenAIChatVLM(url=srv.url + "/v1", max_tokens=5)
        for seed in (0, 1):
            assert client.generate([_img(seed)], "pick up the red cube") == vlm.generate([_img(seed)], "pick up the red cube", max_new_tokens=5)


def test_hf_vlm_prompt_over_its_context_window_is_a_400(tiny):
    """The tiny LLaVA holds 128 tokens: a longer prompt is refused before generation (ContextLengthError in
    process, HTTP 400 ``context_length_exceeded`` through the OpenAI server and the official client)."""
    import openai
    from embeval.errors import ContextLengthError
    from embeval.serving.openai_server import create_app
    from embeval.serving.runner import serve_in_thread
    from embeval.subjects.adapters.openai_chat import image_data_url

    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(tiny[0]), "params": {"max_new_tokens": 5}})
    assert vlm.context_window == 128
    long_prompt = "pick up the red cube " * 40  # 200 words, one token each
    with pytest.raises(ContextLengthError, match="context window of 128"):
        vlm.generate([_img(0)], long_prompt)
    with serve_in_thread(create_app(vlm)) as srv, \
            openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0) as client:
        def ask(prompt):
            return client.chat.completions.create(model="m", max_tokens=5, messages=[{"role": "user", "content": [
                {"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": image_data_url(_img(0))}}]}])

        with pytest.raises(openai.BadRequestError) as ei:
            ask(long_prompt)
        assert ei.value.status_code == 400 and ei.value.code == "context_length_exceeded"
        assert ask("pick up the red cube").choices[0].message.content == vlm.generate([_img(0)], "pick up the red cube")


# --------------------------------------------------------------------------- batched calls
BATCH_PROMPTS = ["pick up the red cube", "move it", "push the cube to the left and place it on the red cube", "a"]
BATCH_IMAGES = [[_img(0)], [_img(1), _img(2)], [_img(3)], [_img(4)]]  # item 1 has two images


def test_hf_vlm_generate_batch_equals_batch1(tiny):
    """Left-padded batches (prompts of 5 to 16 words, one item with two images): every item's token ids and text
    equal its batch-1 generation exactly and its per-step logits within 1e-4; a too-long item is named."""
    from embeval.errors import ContextLengthError
    from embeval.subjects.protocols import generate_batch

    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(tiny[0]), "params": {"max_new_tokens": 6}})
    batch = vlm.generate_ids(BATCH_IMAGES, BATCH_PROMPTS, logits=True)
    lengths = vlm.batch_inputs(BATCH_IMAGES, BATCH_PROMPTS)["attention_mask"].sum(dim=1).tolist()
    assert len(set(lengths)) == 4  # four prompt lengths: three rows are padded
    for k, (ims, prompt) in enumerate(zip(BATCH_IMAGES, BATCH_PROMPTS)):
        one = vlm.generate_ids([ims], [prompt], logits=True)[0]
        assert batch[k].ids == one.ids and batch[k].text == one.text
        assert batch[k].logits.shape == one.logits.shape == (len(one.ids), len(WORDS))
        np.testing.assert_allclose(batch[k].logits, one.logits, atol=1e-4)
        assert vlm.generate(ims, prompt) == one.text
    assert any(len(g.ids) < 6 and g.ids[-1] == 2 for g in batch)  # an item ended early (EOS) while others went on
    assert any(len(g.ids) == 6 for g in batch)
    assert vlm.generate_batch(BATCH_IMAGES, BATCH_PROMPTS) == [g.text for g in batch]
    assert generate_batch(vlm, BATCH_IMAGES, BATCH_PROMPTS) == [g.text for g in batch]
    assert vlm.generate_batch([], []) == []
    with pytest.raises(ContextLengthError, match="item 1: .*context window of 128"):
        vlm.generate_batch([[_img(0)], [_img(1)]], ["a", "pick up the red cube " * 40])
    from embeval.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="2 image lists for 1 prompts"):
        vlm.generate_batch([[_img(0)], [_img(1)]], ["a"])


@pytest.mark.parametrize("pool", ["none", "mean", "last"])
def test_hf_vlm_hidden_states_batch_equals_batch1(tiny, pool):
    """One forward for four items: each item's language-model states without its padding and the vision states
    of its own images equal hidden_states of the item alone within 1e-4."""
    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(tiny[0])})
    items = list(zip(BATCH_IMAGES, BATCH_PROMPTS))
    layers = ["model.vision_tower.vision_model.encoder.layers.1", "model.multi_modal_projector",
              "model.language_model.layers.0", "model.language_model.layers.1"]
    batch = vlm.hidden_states_batch(items, layers=layers, pool=pool)
    for k, item in enumerate(items):
        one = vlm.hidden_states(item, layers=layers, pool=pool)
        assert set(batch[k]) == set(one) == set(layers)
        for name in layers:
            assert batch[k][name].shape == one[name].shape, name
            np.testing.assert_allclose(batch[k][name], one[name], atol=1e-4, err_msg=name)
    assert batch[1]["model.vision_tower.vision_model.encoder.layers.1"].shape[0] == 2  # item 1's two images


def test_openvla_hf_act_slots_equal_batch1(tiny):
    """Slots start, restart and end at different steps; each slot's action equals a batch-1 policy's for the same
    episode within 1e-5 (instructions of different lengths, so rows are left-padded)."""
    from embeval.errors import InvalidInputError
    from embeval.subjects.protocols import batched

    d = tiny[0]
    spec = {"kind": "policy", "adapter": "openvla_hf", "path": str(d),
            "params": {"unnorm_key": "tiny_ds", "prompt_template": "USER: <image> {instruction} ASSISTANT:", "image_size": 32}}
    policy, ref = load_subject(spec), load_subject(spec)
    assert batched(policy) is policy
    obs = [Observation(images={"third_person": _img(10 + i)}, instruction="") for i in range(6)]

    def want(instruction, ob):
        ref.reset(instruction)
        return ref.act(ob).vector

    policy.reset_slots([0, 1], ["Pick up the red cube", "push it"])
    got = policy.act_slots([0, 1], obs[:2])
    np.testing.assert_allclose(got[0].vector, want("Pick up the red cube", obs[0]), atol=1e-5)
    np.testing.assert_allclose(got[1].vector, want("push it", obs[1]), atol=1e-5)
    policy.reset_slots(["c", 0], ["move the cube to the left and place it on the red cube", "place it"])  # 0 restarts
    policy.end_slots([1, "never-started"])
    got = policy.act_slots([0, "c"], obs[2:4])
    np.testing.assert_allclose(got[0].vector, want("place it", obs[2]), atol=1e-5)
    np.testing.assert_allclose(got[1].vector, want("move the cube to the left and place it on the red cube", obs[3]), atol=1e-5)
    assert not np.allclose(got[0].vector, got[1].vector)
    with pytest.raises(InvalidInputError, match="slot 1 has no episode"):
        policy.act_slots([0, 1], obs[:2])
    with pytest.raises(InvalidInputError, match="appears twice"):
        policy.act_slots([0, 0], obs[:2])
    assert policy.act_slots([], []) == []


def test_hf_vlm_batch_without_a_pad_token(tiny):
    """A tokenizer without a pad token pads with its end-of-sequence token (answers still equal batch-1); one with
    neither cannot batch prompts of different lengths and says so in one line."""
    from embeval.subjects.adapters.hf_vlm import ensure_pad_token

    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(tiny[0]), "params": {"max_new_tokens": 6}})
    want = vlm.generate_batch(BATCH_IMAGES, BATCH_PROMPTS)
    tok = vlm.processor.tokenizer
    tok.pad_token = None
    ensure_pad_token(vlm.processor)
    assert tok.pad_token == "</s>"
    assert vlm.generate_batch(BATCH_IMAGES, BATCH_PROMPTS) == want
    tok.pad_token, tok.eos_token = None, None
    ensure_pad_token(vlm.processor)
    with pytest.raises(ConfigError, match="no pad or end-of-sequence token"):
        vlm.generate_batch(BATCH_IMAGES, BATCH_PROMPTS)
    assert vlm.generate(*BATCH_IMAGES[0:1], BATCH_PROMPTS[0]) == want[0]  # one item needs no padding


def test_openvla_hf_static_cache_same_actions(tiny):
    """The fast batch-1 path (params.cache: static, warmed up at load) gives the dynamic cache's actions; a bad
    cache name or warm-up count is a ConfigError naming the field."""
    from embeval.errors import ConfigError

    d = tiny[0]
    base = {"unnorm_key": "tiny_ds", "prompt_template": "USER: <image> {instruction} ASSISTANT:", "image_size": 32}
    dyn = load_subject({"kind": "policy", "adapter": "openvla_hf", "path": str(d), "params": base})
    fast = load_subject({"kind": "policy", "adapter": "openvla_hf", "path": str(d), "params": {**base, "cache": "static"}})
    assert fast.generate_options() == {"cache_implementation": "static"} and dyn.generate_options() == {}
    for i in range(3):
        ob = Observation(images={"third_person": _img(30 + i)}, instruction="")
        dyn.reset("pick up the red cube")
        fast.reset("pick up the red cube")
        np.testing.assert_allclose(fast.act(ob).vector, dyn.act(ob).vector, atol=1e-6)
    for params, msg in [({"cache": "paged"}, "field 'params.cache': 'paged' is not a cache; choose from dynamic, static"),
                        ({"warmup": 99}, "field 'params.warmup': must lie in 0..16, got 99 (calls)"),
                        ({"compile": "yes"}, "field 'params.compile': must be true, false or null")]:
        with pytest.raises(ConfigError, match=re.escape(msg)):
            load_subject({"kind": "policy", "adapter": "openvla_hf", "path": str(d), "params": {**base, **params}})


def test_openvla_hf_reads_the_conventions_image_fields(tiny):
    """The convention's cameras, crop and image_size choose and shape the image; params.camera / image_size override."""
    from PIL import Image

    from embeval.resize import resize

    d, model, proc = tiny
    base = {"unnorm_key": "tiny_ds", "prompt_template": "USER: <image> {instruction} ASSISTANT:"}
    conv = {"cameras": ["wrist"], "image_size": 32, "crop": 0.64}
    obs = Observation(images={"third_person": _img(0), "wrist": _img(1)}, instruction="pick up the red cube")
    text = ["USER: <image> pick up the red cube ASSISTANT:"]

    def pixels(policy):
        return policy.batch_inputs([obs], [""])["pixel_values"].numpy()

    def want(img, side):  # 40 x 50 -> centre 32 x 40 (0.64 of the area) -> side x side, Lanczos
        return proc(images=[Image.fromarray(resize(img[4:36, 5:45], side, side, "pil_lanczos"))], text=text,
                    return_tensors="pt")["pixel_values"].numpy()

    policy = load_subject({"kind": "policy", "adapter": "openvla_hf", "path": str(d), "params": {**base, "convention": conv}})
    assert policy.image_size == (32, 32) and policy.camera == "wrist"
    np.testing.assert_array_equal(pixels(policy), want(obs.images["wrist"], 32))
    over = load_subject({"kind": "policy", "adapter": "openvla_hf", "path": str(d),
                         "params": {**base, "convention": conv, "camera": "third_person", "image_size": 16}})
    np.testing.assert_array_equal(pixels(over), want(obs.images["third_person"], 16))
    plain = load_subject({"kind": "policy", "adapter": "openvla_hf", "path": str(d), "params": base})
    assert plain.image_size == (224, 224) and plain.camera is None  # OpenVLA's input size, the first camera
