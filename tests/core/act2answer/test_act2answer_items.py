"""Act2Answer items: JSONL round trip, procedural generator, converters from VQA layouts, LLM rewrite."""
import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from embeval.act2answer.convert import CONVERTERS, convert_file, rewrite_instructions
from embeval.act2answer.generator import (
    CATEGORIES,
    FULL_SUITE_PER_CATEGORY,
    draw_item,
    generate_items,
)
from embeval.act2answer.items import BinaryItem, load_image, read_items, write_items
from embeval.act2answer.scene import EpisodeSpec, build_scene, instruction_for
from embeval.errors import ConfigError, MissingFileError


def png(path, color):
    Image.fromarray(np.full((16, 16, 3), color, np.uint8)).save(path)
    return path


def test_item_layouts_and_jsonl_round_trip(tmp_path):
    a, b = png(tmp_path / "a.png", 10), png(tmp_path / "b.png", 200)
    it = BinaryItem("x1", "Which is dark?", str(a), str(b), "left", "color", "test", options=("dark", "light"))
    assert it.correct_side_in("original") == "left" and it.correct_side_in("swapped") == "right"
    assert it.images_in("swapped") == (str(b), str(a))
    assert it.swapped().correct_side == "right" and it.swapped().options == ("light", "dark")
    p = write_items([it], tmp_path / "items.jsonl")
    line = json.loads(p.read_text())
    assert line["left_image"] == "a.png"  # relative to the file
    back = read_items(p, check_images=True)[0]
    assert back == it
    with pytest.raises(ConfigError):
        BinaryItem("x", "q", "a", "b", "middle", "c")
    with pytest.raises(ConfigError):
        write_items([it, it], tmp_path / "dup.jsonl")
    with pytest.raises(MissingFileError):
        read_items(tmp_path / "none.jsonl")


def test_generator_deterministic_and_balanced(tmp_path):
    assert len(CATEGORIES) >= 6 and FULL_SUITE_PER_CATEGORY * len(CATEGORIES) * 2 == 3440
    items = generate_items(tmp_path / "s", per_category=6, seed=3)
    assert len(items) == 6 * len(CATEGORIES)
    again = generate_items(tmp_path / "t", per_category=6, seed=3)
    for x, y in zip(items, again):
        assert x.question == y.question and x.correct_side == y.correct_side
        assert np.array_equal(load_image(x.left_image), load_image(y.left_image))
    sides = [it.correct_side for it in items]
    assert 0.25 < sides.count("left") / len(sides) < 0.75
    assert read_items(tmp_path / "s" / "items.jsonl")[0].source == "procedural"


def test_generator_ground_truth():
    # colour: the correct card contains the named colour, the distractor does not
    from embeval.act2answer.generator import PALETTE

    d, _ = draw_item("color", 5)
    rgb = np.array(PALETTE[d.meta["answer"]])
    has = lambda im: np.any(np.all(np.abs(im.astype(int) - rgb) < 3, axis=-1))
    assert has(d.correct) and not has(d.distractor)
    # counting: connected dark blobs equal the stated count
    from scipy import ndimage

    for seed in range(5):
        d, _ = draw_item("counting", seed)
        for img, n in ((d.correct, d.meta["answer"]), (d.distractor, d.meta["distractor"])):
            mask = img.min(axis=-1) < 200
            assert ndimage.label(mask)[1] == n
    # symmetry: the correct card is mirror symmetric about the vertical axis, the distractor is not
    d, _ = draw_item("symmetry", 1)
    sym = lambda im: np.mean(np.abs(im.astype(int) - im[:, ::-1].astype(int)) > 30)
    assert sym(d.correct) < 0.03 < sym(d.distractor)


def _b64_png(color):
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), color, np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_converters_on_fixture_layouts(tmp_path):
    png(tmp_path / "l.png", 30)
    png(tmp_path / "r.png", 90)
    for k in range(3):
        png(tmp_path / f"c{k}.png", 50 * k)
    # MLLM-CompBench (JSON list)
    (tmp_path / "cb.json").write_text(json.dumps([
        {"data_id": 7, "image_1": "l.png", "image_2": "r.png", "question": "Which dog is bigger?", "answer": "Right", "type": "size"}]))
    cb = convert_file(tmp_path / "cb.json", "mllm-compbench", tmp_path / "out_cb", seed=0)[0]
    correct = cb.left_image if cb.correct_side == "left" else cb.right_image
    assert correct.endswith("r.png") and cb.category == "size" and cb.id == "compbench-7"
    # IconQA choose_img (JSONL), with a choose_txt record that is skipped
    (tmp_path / "icon.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"pid": "11", "question": "Which is a circle?", "choices": ["c0.png", "c1.png", "c2.png"], "answer": 2, "ques_type": "choose_img"},
        {"pid": "12", "question": "How many?", "choices": ["3", "4"], "answer": 0, "ques_type": "choose_txt"}]))
    ic = convert_file(tmp_path / "icon.jsonl", "iconqa", tmp_path / "out_ic")
    assert len(ic) == 1
    correct = ic[0].left_image if ic[0].correct_side == "left" else ic[0].right_image
    assert correct.endswith("c2.png")
    # MMBench (TSV, base64 image, text options become cards, the image the question card)
    import pandas as pd

    pd.DataFrame([{"index": 5, "question": "Who is shown?", "hint": "", "A": "a cat", "B": "a dog", "C": "a bird",
                   "D": "", "answer": "B", "category": "celebrity", "image": _b64_png(120)}]).to_csv(tmp_path / "mm.tsv", sep="\t", index=False)
    mm = convert_file(tmp_path / "mm.tsv", "mmbench", tmp_path / "out_mm")[0]
    assert mm.options[0 if mm.correct_side == "left" else 1] == "a dog"
    assert load_image(mm.context_image).shape == (8, 8, 3)
    assert load_image(mm.left_image).shape == (96, 96, 3)
    # OK-VQA style (Parquet): most frequent answer vs another record's answer
    pd.DataFrame([
        {"question_id": 1, "question": "What sport?", "image": "l.png", "answers": ["tennis", "tennis", "squash"]},
        {"question_id": 2, "question": "What animal?", "image": "r.png", "answers": ["horse", "horse", "pony"]}]
    ).to_parquet(tmp_path / "ok.parquet")
    ok = convert_file(tmp_path / "ok.parquet", "okvqa", tmp_path / "out_ok")
    assert ok[0].options[0 if ok[0].correct_side == "left" else 1] == "tennis"
    assert ok[0].options[1 if ok[0].correct_side == "left" else 0] == "horse"
    # VL-Think style (two images, label index)
    (tmp_path / "vt.jsonl").write_text(json.dumps({"id": "v1", "question": "Which light means stop?",
                                                   "images": ["l.png", "r.png"], "label": 0, "category": "traffic"}))
    vt = convert_file(tmp_path / "vt.jsonl", "vl-think", tmp_path / "out_vt")[0]
    assert (vt.left_image if vt.correct_side == "left" else vt.right_image).endswith("l.png")
    assert set(CONVERTERS) == {"mllm-compbench", "iconqa", "mmbench", "okvqa", "vl-think"}
    # round trip of a converted file, and clear errors
    assert read_items(tmp_path / "out_mm" / "items.jsonl", check_images=True)[0].id == "mmbench-5"
    (tmp_path / "bad.json").write_text(json.dumps([{"question": "q"}]))
    with pytest.raises(ConfigError, match="missing field"):
        convert_file(tmp_path / "bad.json", "mllm-compbench", tmp_path / "o")
    with pytest.raises(ConfigError, match="unknown VQA layout"):
        convert_file(tmp_path / "cb.json", "vqa-v9", tmp_path / "o")


def test_sides_balanced_by_seed(tmp_path):
    png(tmp_path / "l.png", 30)
    png(tmp_path / "r.png", 90)
    recs = [{"data_id": i, "image_1": "l.png", "image_2": "r.png", "question": "q?", "answer": "left"} for i in range(40)]
    (tmp_path / "cb.jsonl").write_text("\n".join(json.dumps(r) for r in recs))
    items = convert_file(tmp_path / "cb.jsonl", "mllm-compbench", tmp_path / "o", seed=1)
    n_left = sum(it.correct_side == "left" for it in items)
    assert 10 < n_left < 30


def test_llm_rewrite_cached_and_guarded(tmp_path):
    from embeval.subjects.scripted import ScriptedLLM

    a, b = str(png(tmp_path / "a.png", 1)), str(png(tmp_path / "b.png", 2))
    items = [BinaryItem("q1", "Which face is sad?", a, b, "left", "emotion"),
             BinaryItem("q2", "Which light means stop?", a, b, "right", "traffic"),
             BinaryItem("q3", "Which is red?", a, b, "left", "color", instruction="put the cube on the red one")]
    llm = ScriptedLLM(rules=[{"match": "sad", "response": '{"instruction": "place the cube on the sad face"}'},
                             {"match": "stop", "response": '{"instruction": "put the cube on the right picture"}'}])
    out = rewrite_instructions(items, llm, cache=tmp_path / "cache.sqlite")
    assert out[0].instruction == "place the cube on the sad face"
    assert out[1].instruction == "" and "rewrite_rejected" in out[1].meta  # "right" would leak a side
    assert out[2].instruction == "put the cube on the red one"
    assert instruction_for(out[1]) == "Which light means stop? Put the cube on the correct picture."
    n_calls = len(llm.calls)
    rewrite_instructions(items, llm, cache=tmp_path / "cache.sqlite")  # answered from the disk cache
    assert len(llm.calls) == n_calls


def test_episode_spec_yaml_and_scene(tmp_path):
    spec = EpisodeSpec(eps=0.07, max_steps=30)
    spec.to_yaml(tmp_path / "e.yaml")
    assert EpisodeSpec.from_yaml(tmp_path / "e.yaml") == spec
    with pytest.raises(ConfigError):
        EpisodeSpec(termination="whenever")
    with pytest.raises(ConfigError):
        EpisodeSpec.from_dict({"eps": 0.1, "radius": 2})
    a, b = str(png(tmp_path / "a.png", 1)), str(png(tmp_path / "b.png", 2))
    it = BinaryItem("q1", "Which?", a, b, "left", "c", context_image=a)
    scene, task = build_scene(it, "swapped", spec)
    assert scene.object("card_left").texture == b and scene.object("card_right").texture == a
    assert tuple(task.goal) == spec.right_card_xy  # correct image moved right
    assert scene.object("card_context").position[:2] == spec.context_card_xy
    assert scene.object("card_left").fixed
