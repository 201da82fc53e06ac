"""The one image writer (embeval.image_io) and the image-size bound: every command that writes an image refuses a
folder or a non-image extension up front (one line, exit 2, nothing rendered), and a render larger than
MAX_IMAGE_SIDE per side (or 0 / negative) is refused before pybullet allocates it."""
from __future__ import annotations

import time

import numpy as np
import pytest
from PIL import Image

from conftest import one_error_line
from embeval_cli import main
from embeval.errors import ConfigError
from embeval.image_io import IMAGE_EXTENSIONS, MAX_IMAGE_SIDE, check_image_path, save_image


@pytest.mark.parametrize("ext", IMAGE_EXTENSIONS + (".PNG", ".Jpg"))
def test_every_listed_extension_round_trips_through_pillow(tmp_path, ext):
    img = np.random.default_rng(0).integers(0, 255, (12, 16, 3), dtype=np.uint8)
    p = save_image(tmp_path / "sub" / f"x{ext}", img)
    with Image.open(p) as back:  # Pillow, an independent reader, is the judge
        assert back.size == (16, 12)


@pytest.mark.parametrize("name, problem", [("noext", "has no extension"), ("x.jpg2", "has extension '.jpg2'"),
                                           ("x.gif", "has extension '.gif'")])
def test_a_name_without_an_image_extension_is_refused_with_the_list(tmp_path, name, problem):
    with pytest.raises(ConfigError, match=problem) as e:
        check_image_path(tmp_path / name, "--out")
    assert ".png, .jpg, .jpeg, .bmp, .tif, .tiff, .webp" in str(e.value)
    assert str(e.value).startswith("--out ")
    with pytest.raises(ConfigError):
        save_image(tmp_path / name, np.zeros((8, 8, 3), np.uint8))
    assert not (tmp_path / name).exists()


def test_a_folder_is_refused_even_when_named_like_an_image(tmp_path):
    d = tmp_path / "looks.png"
    d.mkdir()
    with pytest.raises(ConfigError, match="is a folder; give an image file name such as"):
        check_image_path(d)


@pytest.mark.parametrize("argv", [
    ["sim", "render", "--task", "Place", "--out", "{tmp}"],
    ["sim", "render", "--task", "Place", "--out", "{tmp}/noext"],
    ["sim", "render", "--task", "Place", "--out", "{tmp}/x.jpg2"],
    ["sim", "render", "--backend", "maniskill", "--out", "{tmp}/x.jpg2"],
    ["sim", "episodes", "--backend", "pybullet", "--episodes", "1", "--sheet", "{tmp}/sheet"],
    ["distort", "grid", "--out", "{tmp}/gridnoext"],
    ["distort", "grid", "--out", "{tmp}"],
])
def test_commands_that_write_an_image_refuse_a_bad_out_before_working(tmp_path, capsys, argv):
    t0 = time.perf_counter()
    rc = main([a.format(tmp=tmp_path) for a in argv])
    line = one_error_line(capsys)
    assert rc == 2
    assert "give" in line and ".png" in line
    assert time.perf_counter() - t0 < 5  # refused up front: no scene rendered, no env built, no sheet computed
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("value, problem", [("100000", f"must lie in 1..{MAX_IMAGE_SIDE}, got 100000 (pixels per side)"),
                                            ("0", f"must lie in 1..{MAX_IMAGE_SIDE}, got 0 (pixels per side)"),
                                            ("-3", f"must lie in 1..{MAX_IMAGE_SIDE}, got -3 (pixels per side)")])
@pytest.mark.parametrize("command", [["sim", "render"], ["sim", "references"], ["sim", "episodes"]])
def test_render_sizes_are_bounded_on_the_command_line(tmp_path, capsys, command, value, problem):
    with pytest.raises(SystemExit) as e:
        main(command + ["--width", value, "--out", str(tmp_path / "w.png")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --width: {problem}" in err and "Traceback" not in err


def test_camera_spec_refuses_a_side_above_the_bound():
    from embeval.sim.scene import CameraSpec, d455_camera

    cam = d455_camera("third_person")
    assert cam.scaled(MAX_IMAGE_SIDE, 16).width == MAX_IMAGE_SIDE
    with pytest.raises(ConfigError, match=f"size 100000x100000 is too large; give at most {MAX_IMAGE_SIDE}"):
        cam.scaled(100000, 100000)
    with pytest.raises(ConfigError, match="too large"):
        CameraSpec(name="c", width=640, height=MAX_IMAGE_SIDE + 1)


def test_a_scene_yaml_with_a_huge_camera_is_one_line(tmp_path, capsys):
    import yaml

    from embeval.sim.tasks import make_task

    scene = make_task("Pick", 0)[0].to_dict()
    scene["cameras"][0]["width"] = 100000
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scene))
    assert main(["sim", "render", "--scene", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "x.png")]) == 2
    from embeval.image_io import MAX_IMAGE_SIDE

    assert f"is too large; give at most {MAX_IMAGE_SIDE} pixels per side" in one_error_line(capsys)


def test_bridge_config_bounds_its_observation_size():
    from embeval.sim.maniskill.bridge import BridgeConfig

    assert BridgeConfig(obs_size=(640, 480)).obs_size == (640, 480)
    for bad in [(100000, 100000), (0, 480), (640,), (640.0, 480)]:
        with pytest.raises(ConfigError, match="obs_size must be"):
            BridgeConfig(obs_size=bad)


def test_user_folder_readers_refuse_a_truncated_image_whatever_pyiqa_set(tmp_path, monkeypatch):
    """pyiqa sets Pillow's process-wide LOAD_TRUNCATED_IMAGES on import, after which a truncated file decodes as
    padded grey. Every reader of user image folders (camera folder, distort batch, the runs' image items, the IQA
    evaluator and benchmark) refuses it instead, and leaves the flag as it found it."""
    from PIL import Image, ImageFile

    from embeval.camera.folder import FolderSource
    from embeval.distortion.batch import read_rgb
    from embeval.errors import InvalidInputError
    from embeval_analysis.iqa.evaluator import _read

    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)  # as pyiqa leaves it once imported
    folder = tmp_path / "cam"
    folder.mkdir()
    trunc = folder / "a.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(trunc)
    whole = trunc.read_bytes()
    trunc.write_bytes(whole[: len(whole) // 2])
    with Image.open(trunc) as im:  # the silent decode the readers must not do
        assert np.asarray(im.convert("RGB")).shape == (64, 64, 3)
    with pytest.raises(InvalidInputError, match=r"cannot read image .*a\.png: image file is truncated"):
        FolderSource(folder)
    with pytest.raises(InvalidInputError, match=r"cannot read image .*a\.png: image file is truncated"):
        read_rgb(trunc)
    with pytest.raises(OSError, match="image file is truncated"):
        _read(trunc)
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True
    trunc.write_bytes(whole)  # the same file whole: read as before
    assert np.array_equal(read_rgb(trunc), _read(trunc))
