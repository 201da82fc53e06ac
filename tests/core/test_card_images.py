"""Card images the simulators cannot texture (WebP, 16-bit grey), decompression bombs and unreadable files: one
reader (embeval.image_io.read_image) for the VLM path, pybullet and ManiSkill, one-line errors naming item and file."""
import json
import struct
import zlib

import cv2
import numpy as np
import pytest
from PIL import Image

from embeval.act2answer.items import BinaryItem, card_textures, load_image, read_items
from embeval.errors import ConfigError, InvalidInputError
from embeval.image_io import read_image
from embeval.sim.textures import loadable


def _png_header_only(path, w, h):
    """A PNG whose IHDR claims w x h (no real pixel data): what a decompression bomb looks like to a reader."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16))
                     + chunk(b"IEND", b""))
    return path


def _items_file(tmp_path, left, right, **fields):
    d = {"id": "it-1", "question": "Which is red?", "left_image": str(left), "right_image": str(right),
         "correct_side": "left", "category": "color", **fields}
    p = tmp_path / "items.jsonl"
    p.write_text(json.dumps(d) + "\n")
    return p


def test_webp_and_16bit_cards_decode_to_the_same_8bit_pixels(tmp_path):
    rgb = np.zeros((16, 16, 3), np.uint8)
    rgb[:, :8] = (200, 30, 40)
    Image.fromarray(rgb).save(tmp_path / "c.webp", lossless=True)
    g16 = (np.arange(256).reshape(16, 16) * 257).astype(np.uint16)  # 0..65535 in steps of 257
    Image.fromarray(g16).save(tmp_path / "g16.png")
    Image.fromarray(rgb).save(tmp_path / "rgb.png")
    assert np.array_equal(read_image(tmp_path / "c.webp"), rgb)
    g = read_image(tmp_path / "g16.png")
    assert g.dtype == np.uint8 and np.array_equal(g[..., 0], np.arange(256).reshape(16, 16))  # scaled, not clipped
    # the simulators get 8-bit RGB PNGs of exactly those pixels; an 8-bit RGB PNG is used as is
    cv2.imwrite(str(tmp_path / "rgb16.png"), (rgb[..., ::-1].astype(np.uint16) * 257))  # 16 bits per channel
    for name in ("c.webp", "g16.png", "rgb16.png"):
        out = loadable(tmp_path / name)
        assert out != str(tmp_path / name)  # converted, not handed to the simulator as is
        with Image.open(out) as im:
            assert im.format == "PNG" and im.mode == "RGB"
            assert np.array_equal(np.asarray(im), read_image(tmp_path / name))
    assert loadable(tmp_path / "rgb.png") == str(tmp_path / "rgb.png")
    it = BinaryItem("a", "q?", str(tmp_path / "c.webp"), str(tmp_path / "g16.png"), "left", "color")
    tex = card_textures(it, "swapped")
    assert np.array_equal(load_image(tex["card_right"]), load_image(it.left_image))


def test_pybullet_draws_a_webp_card_not_blank(tmp_path):
    import pybullet
    from pybullet_utils import bullet_client

    from embeval.sim.objects import PB, build
    from embeval.sim.scene import ObjectSpec

    Image.fromarray(np.full((32, 32, 3), (220, 20, 20), np.uint8)).save(tmp_path / "red.webp")
    bc = bullet_client.BulletClient(connection_mode=pybullet.DIRECT)
    try:
        build(PB(bc, bc._client), ObjectSpec("card", "card", position=(0.0, 0.0), size=(0.2, 0.2, 0.003),
                                             texture=str(tmp_path / "red.webp"), fixed=True))
        view = bc.computeViewMatrix([0, 0, 0.3], [0, 0, 0], [1, 0, 0])
        proj = bc.computeProjectionMatrixFOV(30, 1.0, 0.01, 1.0)
        _, _, px, _, _ = bc.getCameraImage(16, 16, view, proj, renderer=pybullet.ER_TINY_RENDERER)
        centre = np.asarray(px, np.uint8).reshape(16, 16, 4)[6:10, 6:10, :3].reshape(-1, 3).mean(0)
    finally:
        bc.disconnect()
    assert centre[0] > 120 and centre[1] < 80 and centre[2] < 80, centre  # red, not the blank white/grey card


def test_bomb_garbage_and_oversize_cards_name_line_item_and_file(tmp_path, monkeypatch):
    from PIL import ImageFile

    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)  # as pyiqa leaves it once imported
    ok = tmp_path / "ok.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(ok)
    bomb = _png_header_only(tmp_path / "bomb.png", 60000, 60000)
    big = _png_header_only(tmp_path / "big.png", 5000, 100)
    junk = tmp_path / "passwd.png"
    junk.write_text("root:x:0:0:root:/root:/bin/bash\n")
    for bad, word in ((bomb, "decompression bomb"), (big, "5000x100"), (junk, "not a readable image")):
        with pytest.raises(InvalidInputError) as e:
            read_items(_items_file(tmp_path, ok, bad), check_images=True)
        msg = str(e.value)
        assert "line 1" in msg and "'it-1'" in msg and str(bad) in msg and word in msg and "\n" not in msg
        with pytest.raises(InvalidInputError, match=word):
            load_image(str(bad))  # the VLM path, unchecked items
    trunc = tmp_path / "trunc.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(trunc)
    trunc.write_bytes(trunc.read_bytes()[:200])
    with pytest.raises(InvalidInputError, match="trunc.png is not a readable image"):
        card_textures(BinaryItem("t", "q?", str(ok), str(trunc), "left", "color"), "original")
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True  # the reader restores the process-wide flag


@pytest.mark.parametrize("field,value,word", [("question", 123, "question must be a string"),
                                              ("category", ["x"], "category must be a string"),
                                              ("left_image", 7, "left_image must be a string"),
                                              ("options", "ab", "options must be a list"),
                                              ("meta", [1], "meta must be a JSON object"),
                                              ("id", {"a": 1}, "item id must be a non-empty string")])
def test_item_field_types_are_checked_with_the_field_named(tmp_path, field, value, word):
    ok = tmp_path / "ok.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(ok)
    with pytest.raises(ConfigError, match=word) as e:
        read_items(_items_file(tmp_path, ok, ok, **{field: value}))
    assert "items.jsonl line 1" in str(e.value)
    read_items(_items_file(tmp_path, ok, ok, id=5))  # a numeric id (converted data sets) is fine
