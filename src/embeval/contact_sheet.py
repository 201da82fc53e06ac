"""Contact sheets: a grid of images with row and column titles, an optional title line and short
notes on cells (e.g. each cell's PSNR). One home for every sheet embeval writes: distortion types x
levels (:mod:`embeval.distortion.grid`), first frames of simulated episodes (demo stage ``maniskill``,
``embeval sim --sheet``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from embeval.resize import resize

#: colours (RGB)
_INK, _GREY, _PAPER, _NOTE_BG = (0, 0, 0), (90, 90, 90), (255, 255, 255), (0, 0, 0)


@dataclass(frozen=True)
class SheetStyle:
    """Sizes in pixels of the sheet's parts."""

    cell_width: int | None = None  # every cell is scaled to this width (None: the widest image's width)
    min_cell_width: int = 128  # a narrower cell is scaled up by a whole factor (nearest neighbour) to at least this
    pad: int = 4  # between cells
    font_px: int = 13  # titles and labels
    note_px: int = 11  # notes on cells

    def __post_init__(self):
        from embeval.errors import ConfigError

        for k in ("cell_width", "min_cell_width", "pad", "font_px", "note_px"):
            v = getattr(self, k)
            if v is None and k == "cell_width":
                continue
            lo = 0 if k == "pad" else 1
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= 4096:
                raise ConfigError(f"SheetStyle.{k}: must be a whole number in {lo}..4096 (pixels), got {v!r}")


def _font(px: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=px)  # Pillow >= 10.1 with FreeType: a scalable font
    except (TypeError, OSError, ImportError):  # older Pillow or no FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _text_size(draw, text: str, font) -> tuple[int, int]:
    x0, y0, x1, y1 = draw.multiline_textbbox((0, 0), text, font=font, spacing=2)
    return x1 - x0, y1 - y0


def _fit(img: np.ndarray, w: int, h: int) -> np.ndarray:
    """``img`` as RGB uint8 of ``w`` x ``h``: nearest neighbour when enlarged (pixels stay visible), area when shrunk."""
    img = np.asarray(img)
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    img = img[:, :, :3]
    return resize(img, h, w, "cv2_area_nearest")


def labelled_grid(cells: Sequence[Sequence[np.ndarray | None]], row_labels: Sequence[str], col_labels: Sequence[str],
                  *, title: str = "", notes: Mapping[tuple[int, int], str] | None = None,
                  style: SheetStyle | None = None) -> np.ndarray:
    """An RGB uint8 sheet: ``cells[r][c]`` (H x W x 3 or H x W uint8; None leaves the cell blank) under the
    column titles ``col_labels``, right of the row titles ``row_labels`` (a label may have several lines),
    below ``title`` (lines; ", shown 2x" is added to its first when small cells are enlarged). ``notes[(r, c)]``: short white-on-black text at the cell's lower left. Every cell gets the
    size of the widest image (or ``style.cell_width``), at least ``style.min_cell_width`` wide, aspect kept."""
    from PIL import Image, ImageDraw

    from embeval.errors import ConfigError

    style = style or SheetStyle()
    rows = [list(r) for r in cells]
    if not rows or not any(im is not None for r in rows for im in r):
        raise ConfigError("contact sheet: no images to lay out")
    n_cols = max(len(r) for r in rows)
    if len(row_labels) != len(rows) or len(col_labels) != n_cols:
        raise ConfigError(f"contact sheet: {len(rows)} rows x {n_cols} columns of images but {len(row_labels)} row "
                          f"and {len(col_labels)} column labels")
    first = next(np.asarray(im) for r in rows for im in r if im is not None)
    src_w = max(np.asarray(im).shape[1] for r in rows for im in r if im is not None)
    cw = style.cell_width or src_w
    if cw < style.min_cell_width:
        k = -(-style.min_cell_width // cw)  # a whole factor: every source pixel becomes k x k
        cw *= k
        if title:
            lines = title.split("\n")
            title = "\n".join([f"{lines[0]}, shown {k}x"] + lines[1:])
    ch = max(1, round(first.shape[0] * cw / first.shape[1]))
    pad = style.pad
    font, note_font = _font(style.font_px), _font(style.note_px)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_w = max([_text_size(probe, str(t), font)[0] for t in row_labels] + [0]) + 2 * pad + 4
    col_h = max([_text_size(probe, str(t), font)[1] for t in col_labels] + [0]) + 2 * pad
    title_h = _text_size(probe, title, font)[1] + 2 * pad if title else 0
    # a column title wider than the cell widens the column (cells are centred in it)
    col_w = [max(cw, _text_size(probe, str(t), font)[0] + 2 * pad) for t in col_labels]
    x0 = [label_w + pad + sum(col_w[:c]) + c * pad for c in range(n_cols)]
    width = x0[-1] + col_w[-1] + pad
    height = title_h + col_h + len(rows) * (ch + pad) + pad
    sheet = np.full((height, max(width, _text_size(probe, title, font)[0] + 2 * pad if title else 0), 3), 255, np.uint8)
    for r, row in enumerate(rows):
        y = title_h + col_h + pad + r * (ch + pad)
        for c, im in enumerate(row):
            if im is not None:
                x = x0[c] + (col_w[c] - cw) // 2
                sheet[y:y + ch, x:x + cw] = _fit(im, cw, ch)
    pil = Image.fromarray(sheet)
    draw = ImageDraw.Draw(pil)
    if title:
        draw.multiline_text((pad, pad), title, fill=_INK, font=font, spacing=2)
    for c, t in enumerate(col_labels):
        tw, th = _text_size(draw, str(t), font)
        draw.multiline_text((x0[c] + (col_w[c] - tw) // 2, title_h + col_h - pad - th), str(t), fill=_INK, font=font,
                            spacing=2, align="center")
    for r, t in enumerate(row_labels):
        lines = str(t).split("\n")
        th = _text_size(draw, str(t), font)[1]
        y = title_h + col_h + pad + r * (ch + pad) + max(0, (ch - th) // 2)
        draw.text((pad + 2, y), lines[0], fill=_INK, font=font)  # the first line black, the rest grey
        if len(lines) > 1:
            first_h = _text_size(draw, lines[0], font)[1]
            draw.multiline_text((pad + 2, y + first_h + 2), "\n".join(lines[1:]), fill=_GREY, font=font, spacing=2)
    for (r, c), note in (notes or {}).items():
        if not (0 <= r < len(rows) and 0 <= c < n_cols):
            raise ConfigError(f"contact sheet: a note for cell ({r}, {c}) outside the {len(rows)} x {n_cols} grid")
        nw, nh = _text_size(draw, note, note_font)
        x = x0[c] + (col_w[c] - cw) // 2
        y = title_h + col_h + pad + r * (ch + pad) + ch
        draw.rectangle((x, y - nh - 5, x + min(nw + 6, cw), y), fill=_NOTE_BG)
        draw.multiline_text((x + 3, y - nh - 4), note, fill=_PAPER, font=note_font, spacing=2)  # as measured
    return np.asarray(pil)


def save_labelled_grid(path, *args, **kwargs):
    """Render :func:`labelled_grid` and write it (PNG, or the format of ``path``'s extension); returns the path.
    A folder or a non-image extension is refused before anything is drawn."""
    from embeval.image_io import check_image_path, save_image

    check_image_path(path)
    return save_image(path, labelled_grid(*args, **kwargs))
