"""Contact sheet: every distortion type (rows) at every level (columns) on one image, laid out by
:func:`embeval.contact_sheet.labelled_grid`."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np

from embeval.action import check_image
from embeval.contact_sheet import SheetStyle, labelled_grid
from embeval.distortion.measures import psnr
from embeval.distortion.registry import N_LEVELS, distort, list_distortions


def contact_sheet(img: np.ndarray, names: Sequence[str] | None = None, seed: int = 0, thumb_width: int = 160,
                  show_psnr: bool = True, stats: dict | None = None) -> np.ndarray:
    """RGB uint8 sheet: one row per type (reference first), columns level 1..5 of ``thumb_width`` px each,
    labelled with the type, its category and (``show_psnr``) each cell's PSNR in dB against the reference.

    ``stats``: a dict to fill with ``name -> {"psnr": [dB per level], "ms": [milliseconds per call]}``."""
    from embeval.distortion.registry import get

    check_image(img)
    h, w = img.shape[:2]
    names = list(names or list_distortions())
    cells, labels, notes = [], [], {}
    for r, name in enumerate(names):
        row, ms = [img], []
        for lv in range(1, N_LEVELS + 1):
            t0 = time.perf_counter()
            row.append(distort(img, name, lv, seed))
            ms.append(1000 * (time.perf_counter() - t0))
        db = [psnr(img, im) for im in row[1:]]
        if stats is not None:
            stats[name] = {"psnr": db, "ms": ms}
        if show_psnr:
            notes.update({(r, lv): f"{d:.1f} dB" for lv, d in enumerate(db, start=1)})
        cells.append(row)
        labels.append(f"{name}\n[{get(name).category}]")
    return labelled_grid(cells, labels, ["reference"] + [f"level {lv}" for lv in range(1, N_LEVELS + 1)],
                         title=f"distortion type x level, {w}x{h} px, seed {seed}"
                               + ("; PSNR against the reference" if show_psnr else ""),
                         notes=notes, style=SheetStyle(cell_width=int(thumb_width), min_cell_width=1))


def save_contact_sheet(path: str | Path, img: np.ndarray, **kw) -> Path:
    """Render :func:`contact_sheet` and write it (PNG, or the image format of ``path``'s extension, see
    :func:`embeval.image_io.save_image`); returns the path. A folder or a non-image extension is refused first."""
    from embeval.image_io import check_image_path, save_image

    check_image_path(path)
    return save_image(path, contact_sheet(img, **kw))
