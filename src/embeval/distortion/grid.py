"""Contact sheet: every distortion type (rows) at every level (columns) on one image."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import cv2
import numpy as np

from embeval.action import check_image
from embeval.distortion.measures import psnr
from embeval.distortion.registry import N_LEVELS, distort, list_distortions


def contact_sheet(img: np.ndarray, names: Sequence[str] | None = None, seed: int = 0, thumb_width: int = 160,
                  label_width: int = 150, show_psnr: bool = True, stats: dict | None = None) -> np.ndarray:
    """RGB uint8 sheet: one row per type (reference first), columns level 1..5, labelled with the
    type, its category and (``show_psnr``) each cell's PSNR in dB against the reference.

    ``stats``: a dict to fill with ``name -> {"psnr": [dB per level], "ms": [milliseconds per call]}``."""
    from PIL import Image, ImageDraw

    from embeval.distortion.registry import get

    check_image(img)
    names = list(names or list_distortions())
    h, w = img.shape[:2]
    tw = int(thumb_width)
    th = max(8, int(round(h * tw / w)))
    pad, head = 4, 22
    cols = N_LEVELS + 1
    sheet = np.full((head + len(names) * (th + pad) + pad, label_width + cols * (tw + pad) + pad, 3), 255, np.uint8)
    ref_small = cv2.resize(img, (tw, th), interpolation=cv2.INTER_AREA)
    cells = []
    for r, name in enumerate(names):
        y = head + pad + r * (th + pad)
        row, ms = [ref_small], []
        for lv in range(1, N_LEVELS + 1):
            t0 = time.perf_counter()
            row.append(distort(img, name, lv, seed))
            ms.append(1000 * (time.perf_counter() - t0))
        if stats is not None:
            stats[name] = {"psnr": [psnr(img, im) for im in row[1:]], "ms": ms}
        for c, im in enumerate(row):
            x = label_width + pad + c * (tw + pad)
            small = im if im.shape[:2] == (th, tw) else cv2.resize(im, (tw, th), interpolation=cv2.INTER_AREA)
            sheet[y:y + th, x:x + tw] = small
            if c and show_psnr:
                cells.append((x, y, f"{psnr(img, im):.1f} dB"))
    pil = Image.fromarray(sheet)
    draw = ImageDraw.Draw(pil)
    for c, title in enumerate(["reference"] + [f"level {lv}" for lv in range(1, N_LEVELS + 1)]):
        draw.text((label_width + pad + c * (tw + pad) + 4, 5), title, fill=(0, 0, 0))
    for r, name in enumerate(names):
        y = head + pad + r * (th + pad)
        draw.text((6, y + th // 2 - 12), name, fill=(0, 0, 0))
        draw.text((6, y + th // 2 + 2), f"[{get(name).category}]", fill=(90, 90, 90))
    for x, y, label in cells:
        draw.rectangle((x, y + th - 13, x + 58, y + th), fill=(0, 0, 0))
        draw.text((x + 3, y + th - 12), label, fill=(255, 255, 255))
    return np.asarray(pil)


def save_contact_sheet(path: str | Path, img: np.ndarray, **kw) -> Path:
    """Render :func:`contact_sheet` and write it (PNG, or the image format of ``path``'s extension, see
    :func:`embeval.image_io.save_image`); returns the path. A folder or a non-image extension is refused first."""
    from embeval.image_io import check_image_path, save_image

    check_image_path(path)
    return save_image(path, contact_sheet(img, **kw))
