"""The one contact-sheet layout (:mod:`embeval.contact_sheet`): cells where they belong, small frames
enlarged by a whole factor, titles and notes drawn, malformed grids refused."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.contact_sheet import SheetStyle, labelled_grid, save_labelled_grid
from embeval.errors import ConfigError

COLOURS = [[(200, 30, 30), (30, 200, 30)], [(30, 30, 200), (200, 200, 30)]]


def _solid(rgb, w=16, h=12):
    return np.tile(np.array(rgb, np.uint8), (h, w, 1))


def _count(sheet, rgb):
    return int(np.all(sheet == np.array(rgb, np.uint8), axis=2).sum())


def test_cells_titles_and_notes():
    cells = [[_solid(c) for c in row] for row in COLOURS]
    sheet = labelled_grid(cells, ["episode seed 0\nwhite_noise, level 4", "episode seed 1\njpeg, level 5"],
                          ["clean, step 0", "distorted, step 0"], title="PickCube-v1 16x12 px",
                          notes={(1, 1): "D 0.97"})
    assert sheet.dtype == np.uint8 and sheet.ndim == 3
    # 16 px wide frames are enlarged 8x to 128 x 96; every cell keeps its colour, the note covers part of one
    for r, row in enumerate(COLOURS):
        for c, rgb in enumerate(row):
            n = _count(sheet, rgb)
            assert (n == 128 * 96) if (r, c) != (1, 1) else (128 * 96 * 0.7 < n < 128 * 96), (r, c, n)
    ys, xs = np.nonzero(np.all(sheet == np.array(COLOURS[0][0], np.uint8), axis=2))
    top, left = ys.min(), xs.min()
    assert top > 20 and left > 60  # room for the title, the column titles and the row titles
    assert (sheet[top:top + 96, :left - 4] < 100).any()  # the row title is drawn left of the first cell
    assert (sheet[:top - 2, left:left + 128] < 100).any()  # the column title above it
    bottom_right = sheet[top + 96 + 4: top + 2 * 96 + 4, left + 128 + 4: left + 2 * 128 + 4]
    assert _count(bottom_right, (0, 0, 0)) > 50 and (bottom_right.min(axis=2) > 150).sum() > 5  # the note, white on black


def test_small_frames_are_enlarged_nearest_neighbour_and_the_title_says_so():
    checker = (np.indices((8, 8)).sum(0) % 2 * 255).astype(np.uint8)  # grey 8x8 checkerboard
    sheet = labelled_grid([[checker]], [""], [""], style=SheetStyle(min_cell_width=64))  # no ink but the cell
    ys, xs = np.nonzero(sheet[:, :, 0] == 0)
    block = sheet[ys.min():ys.min() + 64, xs.min():xs.min() + 64, 0]
    np.testing.assert_array_equal(block, np.kron(checker, np.ones((8, 8), np.uint8)))  # 8x8 pixel blocks, no blur
    assert (sheet[:, :, 0] == 0).sum() == 32 * 64  # half of the 64 x 64 cell, nothing more
    wide = labelled_grid([[checker]], ["row"], ["col"], style=SheetStyle(cell_width=32, min_cell_width=1))
    assert wide.shape[1] < 120  # 32 px cells: no enlargement below min_cell_width=1
    enlarged = labelled_grid([[checker]], ["r"], ["c"], title="t")  # 8 px -> 128 px (min_cell_width)
    as_given = labelled_grid([[np.kron(checker, np.ones((16, 16), np.uint8))]], ["r"], ["c"], title="t, shown 16x")
    np.testing.assert_array_equal(enlarged, as_given)  # the same pixels, and the title names the enlargement


def test_malformed_grids_are_refused(tmp_path):
    img = _solid((1, 2, 3))
    with pytest.raises(ConfigError, match=r"2 rows x 1 columns of images but 1 row and 1 column labels"):
        labelled_grid([[img], [img]], ["a"], ["b"])
    with pytest.raises(ConfigError, match="no images to lay out"):
        labelled_grid([[None]], ["a"], ["b"])
    with pytest.raises(ConfigError, match=r"a note for cell \(0, 3\) outside the 1 x 1 grid"):
        labelled_grid([[img]], ["a"], ["b"], notes={(0, 3): "x"})
    with pytest.raises(ConfigError, match=r"SheetStyle.pad: must be a whole number in 0..4096 \(pixels\), got -1"):
        SheetStyle(pad=-1)
    with pytest.raises(ConfigError, match="is a folder"):
        save_labelled_grid(tmp_path, [[img]], ["a"], ["b"])
    out = save_labelled_grid(tmp_path / "sheet.png", [[img, None]], ["a"], ["b", "c"])
    assert out.stat().st_size > 100


def test_distortion_contact_sheet_uses_the_shared_layout():
    from embeval.distortion.grid import contact_sheet
    from embeval.distortion.samples import synthetic_tabletop

    img = synthetic_tabletop(96, 72, seed=0)
    stats = {}
    sheet = contact_sheet(img, names=["jpeg", "white_noise"], thumb_width=48, stats=stats)
    assert set(stats) == {"jpeg", "white_noise"} and all(len(s["psnr"]) == 5 for s in stats.values())
    assert sheet.shape[1] > 6 * 48 and sheet.shape[0] > 2 * 36
    assert _count(sheet, (0, 0, 0)) > 10 * 20  # PSNR notes, white on black, on the 10 distorted cells
