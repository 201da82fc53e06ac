"""`embeval act2answer items convert --layout act2answer` reads a task set in the reference harness's
format (pairs.json + model_db.json + shapes/<board>/textured.glb), here a small made-up one whose boards'
pictures are embedded in binary glTF files written by hand from the glTF 2.0 layout."""
import json
import struct

import numpy as np
import pytest
from PIL import Image

from embeval.errors import ConfigError


def _png(path, rgb):
    Image.fromarray(np.full((8, 8, 3), rgb, np.uint8)).save(path)
    return path.read_bytes()


def _glb(png: bytes) -> bytes:
    doc = {"asset": {"version": "2.0"}, "buffers": [{"byteLength": len(png)}],
           "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": len(png)}],
           "images": [{"bufferView": 0, "mimeType": "image/png"}]}
    js = json.dumps(doc).encode()
    js += b" " * (-len(js) % 4)
    binary = png + b"\0" * (-len(png) % 4)
    body = struct.pack("<I4s", len(js), b"JSON") + js + struct.pack("<I4s", len(binary), b"BIN\x00") + binary
    return struct.pack("<4sII", b"glTF", 2, 12 + len(body)) + body


@pytest.fixture()
def task_set(tmp_path):
    root = tmp_path / "made_up_set"
    colours = {"tile_red": (255, 0, 0), "tile_blue": (0, 0, 255), "tile_green": (0, 255, 0)}
    for name, rgb in colours.items():
        d = root / "shapes" / name
        d.mkdir(parents=True)
        (d / "textured.glb").write_bytes(_glb(_png(tmp_path / f"{name}.png", rgb)))
    (root / "model_db.json").write_text(json.dumps({n: {"bbox": {"min": [-0.1, -0.1, 0], "max": [0.1, 0.1, 0.02]}}
                                                     for n in colours}))
    pairs = [{"left": "tile_red", "right": "tile_blue", "question": "put cube on red", "answer": "left", "index": 7},
             {"left": "tile_green", "right": "tile_red", "question": "put cube on red", "answer": "Right", "index": 8},
             {"left": "tile_blue", "right": "tile_green", "question": "put cube on green", "answer": "tile_green"}]
    (root / "pairs.json").write_text(json.dumps(pairs))
    return root


def test_reference_task_set_becomes_items_with_the_boards_pictures(task_set, tmp_path, capsys):
    from embeval.act2answer.items import read_items
    from embeval_cli import main

    out = tmp_path / "items"
    assert main(["act2answer", "items", "convert", "--layout", "act2answer", "--input", str(task_set),
                 "--out", str(out)]) == 0
    assert "3 items" in capsys.readouterr().out
    items = read_items(out / "items.jsonl")
    assert [i.id for i in items] == ["made_up_set-7", "made_up_set-8", "made_up_set-2"]
    assert [i.correct_side for i in items] == ["left", "right", "right"]
    assert items[0].instruction == items[0].question == "put cube on red"
    red = np.asarray(Image.open(items[0].left_image).convert("RGB"))
    assert (red == (255, 0, 0)).all() and items[0].left_image == items[1].right_image  # one picture per board
    assert (np.asarray(Image.open(items[0].right_image).convert("RGB")) == (0, 0, 255)).all()
    assert items[2].meta["boards"] == ["tile_blue", "tile_green"]


def test_bad_task_sets_are_one_line_errors(task_set, tmp_path):
    from embeval.act2answer.reference_set import convert_reference_set

    (task_set / "shapes" / "tile_blue" / "textured.glb").write_bytes(b"not a glb at all, just text")
    with pytest.raises(ConfigError, match="tile_blue.*not a binary glTF"):
        convert_reference_set(task_set, tmp_path / "o1")
    (task_set / "model_db.json").write_text(json.dumps({"tile_red": {}}))
    with pytest.raises(ConfigError, match="board 'tile_blue' is not in model_db.json"):
        convert_reference_set(task_set, tmp_path / "o2")
    (task_set / "pairs.json").write_text("[{")
    with pytest.raises(ConfigError, match="pairs.json: not valid JSON"):
        convert_reference_set(task_set, tmp_path / "o3")
