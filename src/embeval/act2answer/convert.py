"""Converters: multiple-choice VQA records -> binary Act2Answer items.

Each source layout has a converter in :data:`CONVERTERS` (``record -> list of BinaryItem``):

==================  ========================================================================
layout              record fields read (JSONL / JSON list / Parquet / TSV rows)
==================  ========================================================================
``mllm-compbench``  ``image_1``, ``image_2`` (paths), ``question``, ``answer`` (left/right,
                    first/second, 1/2 or image_1/image_2), ``type`` (category), ``id``/``data_id``
``iconqa``          ``question``, ``choices`` (image paths; ``ques_type: choose_img``), ``answer``
                    (index), optional ``image`` (question image), ``pid``/``id``, ``category``/``skill``
``mmbench``         ``index``, ``question``, optional ``hint``, option columns ``A``..``D``, ``answer``
                    (letter), ``category``, ``image`` (base64 or path): options become text cards,
                    the image the question card
``okvqa``           ``question_id``, ``question``, ``image``/``image_path``, ``answers`` (strings
                    or ``{"answer": ...}``), optional ``question_type``: the most frequent answer vs
                    the most frequent answer of another record, as text cards
``vl-think``        ``id``, ``question``/``instruction``, ``images`` (two paths) or ``options``
                    (two texts), ``label``/``answer`` (0/1 or left/right), ``category``
``act2answer``      the reference harness's task set folder: ``pairs.json`` + ``model_db.json`` +
                    ``shapes/`` (:mod:`embeval.act2answer.reference_set`)
==================  ========================================================================

Multiple choices with more than two options keep the correct one and one distractor drawn with
a seed per record. Correct sides are balanced by a seeded coin per item. Images may be paths
(relative to ``image_root``), base64 strings, or ``{"bytes": ...}`` cells (Hugging Face
Parquet); decoded and text-card images are written under ``out_dir/images``.
"""
from __future__ import annotations

import base64
import io
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embeval.act2answer.items import BinaryItem, write_items
from embeval.errors import ConfigError, InvalidInputError, MissingFileError
from embeval.image_io import check_decoded_pixels
from embeval.provenance import derive_seed, stable_hash


@dataclass
class ConvertContext:
    """Where images come from and go, and the seed for distractors and sides."""

    image_root: Path
    out_dir: Path
    seed: int = 0
    source: str = ""
    records: list[Mapping[str, Any]] | None = None  # the whole file (OK-VQA distractors)

    def image(self, value: Any, name: str) -> str:
        """A usable image file path for a cell value (path, base64 text or bytes)."""
        if value is None or (isinstance(value, float) and np.isnan(value)):
            raise InvalidInputError(f"{self.source}: record has no image in {name!r}")
        if isinstance(value, Mapping):
            if value.get("bytes"):
                return self._save_bytes(value["bytes"], name)
            value = value.get("path")
        if isinstance(value, (bytes, bytearray)):
            return self._save_bytes(bytes(value), name)
        s = str(value)
        p = Path(s) if Path(s).is_absolute() else self.image_root / s
        if len(s) < 1024 and p.is_file():
            return str(p)
        if len(s) >= 16 and len(s) % 4 == 0 and "." not in s[-6:]:  # base64 (MMBench TSV)
            try:
                data = base64.b64decode(s, validate=True)
            except (ValueError, TypeError):
                data = b""
            if data:
                return self._save_bytes(data, name)
        raise MissingFileError(f"{self.source}: image {s[:80]!r} not found under {self.image_root}; pass --image-root")

    def _save_bytes(self, data: bytes, name: str) -> str:
        from PIL import Image, UnidentifiedImageError

        try:
            im = check_decoded_pixels(Image.open(io.BytesIO(data)), f"{self.source}: {name}").convert("RGB")
        except (UnidentifiedImageError, OSError) as exc:
            raise InvalidInputError(f"{self.source}: {name} is not a decodable image ({exc})") from None
        p = self._image_path(name)
        im.save(p)
        return str(p)

    def _image_path(self, name: str) -> Path:
        """``out_dir/images/<name>.png``, ``name`` one file-name component (a record id went into it)."""
        from embeval import checks

        p = self.out_dir / "images" / f"{checks.file_component(name, f'{self.source}: image name')}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def text_card(self, text: str, name: str) -> str:
        p = self._image_path(name)
        from PIL import Image

        Image.fromarray(render_text_card(text)).save(p)
        return str(p)


def render_text_card(text: str, px: int = 96) -> np.ndarray:
    """A white card with ``text`` in black, word-wrapped and centred (RGB uint8)."""
    import textwrap

    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", (px, px), (255, 255, 255))
    d = ImageDraw.Draw(im)
    font = ImageFont.load_default()
    lines = textwrap.wrap(str(text), width=max(6, px // 7))[:6] or [""]
    h = 12 * len(lines)
    for i, line in enumerate(lines):
        w = d.textlength(line, font=font)
        d.text(((px - w) / 2, (px - h) / 2 + 12 * i), line, fill=(0, 0, 0), font=font)
    d.rectangle([0, 0, px - 1, px - 1], outline=(0, 0, 0), width=2)
    return np.asarray(im, dtype=np.uint8).copy()


def _rid(rec: Mapping[str, Any], keys: tuple[str, ...], n: int) -> str:
    """The record's id (the first of ``keys`` it has, else its number): one safe file-name component, since the
    images made from the record are named after it."""
    from embeval import checks

    for k in keys:
        if k in rec and rec[k] is not None and str(rec[k]) != "":
            return checks.file_component(rec[k], f"record {n} field {k!r}")
    return f"{n:06d}"


def _need(rec: Mapping[str, Any], keys: Iterable[str], source: str, n: int) -> None:
    missing = [k for k in keys if k not in rec]
    if missing:
        raise ConfigError(f"{source} record {n}: missing field(s) {missing}; fields present: {sorted(rec)[:12]}")


def _side_index(answer: Any, source: str, n: int) -> int:
    """0 (first/left) or 1 (second/right) from the many spellings sources use."""
    a = str(answer).strip().lower().strip("().")
    table = {"left": 0, "right": 1, "first": 0, "second": 1, "1": 0, "2": 1, "a": 0, "b": 1,
             "image_1": 0, "image_2": 1, "image 1": 0, "image 2": 1, "0": 0}
    if a in table:
        return table[a]
    raise ConfigError(f"{source} record {n}: cannot read the answer {answer!r} as one of two images (left/right, 1/2, A/B)")


def _place(ctx: ConvertContext, rid: str, correct: tuple[str, str], distractor: tuple[str, str]):
    """(left image, right image, correct side, options) with a seeded side for the correct card."""
    side = "left" if derive_seed(ctx.seed, ctx.source, rid, "side") % 2 == 0 else "right"
    if side == "left":
        return correct[0], distractor[0], side, (correct[1], distractor[1])
    return distractor[0], correct[0], side, (distractor[1], correct[1])


def conv_compbench(rec, n, ctx) -> list[BinaryItem]:
    _need(rec, ("image_1", "image_2", "question", "answer"), ctx.source, n)
    rid = _rid(rec, ("id", "data_id", "index"), n)
    imgs = (ctx.image(rec["image_1"], f"{rid}_1"), ctx.image(rec["image_2"], f"{rid}_2"))
    k = _side_index(rec["answer"], ctx.source, n)
    left, right, side, _ = _place(ctx, rid, (imgs[k], "correct"), (imgs[1 - k], "distractor"))
    return [BinaryItem(f"compbench-{rid}", str(rec["question"]), left, right, side, str(rec.get("type") or "compbench"),
                       "mllm-compbench", meta={"source_answer": str(rec["answer"])})]


def conv_iconqa(rec, n, ctx) -> list[BinaryItem]:
    _need(rec, ("question", "choices", "answer"), ctx.source, n)
    if rec.get("ques_type", "choose_img") != "choose_img":
        return []  # choose_txt / fill_in_blank problems have no image choices
    rid = _rid(rec, ("pid", "id", "question_id"), n)
    choices = list(rec["choices"])
    ans = int(rec["answer"])
    if not 0 <= ans < len(choices) or len(choices) < 2:
        raise ConfigError(f"{ctx.source} record {n}: answer index {ans} outside its {len(choices)} choices")
    rng = np.random.default_rng(derive_seed(ctx.seed, ctx.source, rid, "distractor"))
    dis = int(rng.choice([i for i in range(len(choices)) if i != ans]))
    c = ctx.image(choices[ans], f"iconqa-{rid}_c{ans}")
    d = ctx.image(choices[dis], f"iconqa-{rid}_c{dis}")
    left, right, side, _ = _place(ctx, rid, (c, "correct"), (d, "distractor"))
    context = ctx.image(rec["image"], f"iconqa-{rid}_q") if rec.get("image") else None
    return [BinaryItem(f"iconqa-{rid}", str(rec["question"]), left, right, side,
                       str(rec.get("category") or rec.get("skill") or "iconqa"), "iconqa", context_image=context,
                       meta={"choices": len(choices), "distractor_index": dis})]


def conv_mmbench(rec, n, ctx) -> list[BinaryItem]:
    _need(rec, ("question", "answer", "A", "B"), ctx.source, n)
    rid = _rid(rec, ("index", "id"), n)
    opts = {k: str(rec[k]) for k in "ABCDEF" if k in rec and rec[k] is not None and str(rec[k]) not in ("", "nan")}
    ans = str(rec["answer"]).strip().upper()
    if ans not in opts:
        raise ConfigError(f"{ctx.source} record {n}: answer {ans!r} is not one of the options {sorted(opts)}")
    rng = np.random.default_rng(derive_seed(ctx.seed, ctx.source, rid, "distractor"))
    dis = str(rng.choice(sorted(k for k in opts if k != ans)))
    c = ctx.text_card(opts[ans], f"mmbench-{rid}_{ans}")
    d = ctx.text_card(opts[dis], f"mmbench-{rid}_{dis}")
    left, right, side, names = _place(ctx, rid, (c, opts[ans]), (d, opts[dis]))
    q = str(rec["question"])
    hint = rec.get("hint")
    if hint is not None and str(hint) not in ("", "nan"):
        q = f"{hint} {q}"
    context = ctx.image(rec["image"], f"mmbench-{rid}_q") if rec.get("image") is not None else None
    return [BinaryItem(f"mmbench-{rid}", q, left, right, side, str(rec.get("category") or "mmbench"), "mmbench",
                       context_image=context, options=names, meta={"answer": ans, "distractor": dis})]


def _answers(rec) -> list[str]:
    out = []
    for a in rec.get("answers") or []:
        out.append(str(a.get("answer") if isinstance(a, Mapping) else a).strip().lower())
    return [a for a in out if a]


def conv_okvqa(rec, n, ctx) -> list[BinaryItem]:
    _need(rec, ("question", "answers"), ctx.source, n)
    rid = _rid(rec, ("question_id", "id"), n)
    ans = _answers(rec)
    if not ans:
        raise ConfigError(f"{ctx.source} record {n}: no answers")
    best = Counter(ans).most_common(1)[0][0]
    pool = sorted({Counter(_answers(r)).most_common(1)[0][0] for r in (ctx.records or []) if _answers(r)} - set(ans))
    if not pool:
        raise ConfigError(f"{ctx.source}: OK-VQA conversion needs at least two records with different answers (distractors)")
    rng = np.random.default_rng(derive_seed(ctx.seed, ctx.source, rid, "distractor"))
    dis = str(rng.choice(pool))
    c = ctx.text_card(best, f"okvqa-{rid}_c")
    d = ctx.text_card(dis, f"okvqa-{rid}_d")
    left, right, side, names = _place(ctx, rid, (c, best), (d, dis))
    img = rec.get("image", rec.get("image_path"))
    context = ctx.image(img, f"okvqa-{rid}_q") if img is not None else None
    return [BinaryItem(f"okvqa-{rid}", str(rec["question"]), left, right, side,
                       str(rec.get("question_type") or rec.get("category") or "okvqa"), "okvqa", context_image=context,
                       options=names, meta={"answer": best, "distractor": dis})]


def conv_vlthink(rec, n, ctx) -> list[BinaryItem]:
    q = rec.get("question", rec.get("instruction"))
    if q is None:
        raise ConfigError(f"{ctx.source} record {n}: needs 'question' or 'instruction'")
    rid = _rid(rec, ("id", "uid", "index"), n)
    label = rec.get("label", rec.get("answer"))
    if label is None:
        raise ConfigError(f"{ctx.source} record {n}: needs 'label' or 'answer' (0/1 or left/right)")
    k = _side_index(label, ctx.source, n)
    if rec.get("images") is not None:
        imgs = list(rec["images"])
        if len(imgs) != 2:
            raise ConfigError(f"{ctx.source} record {n}: 'images' must hold two images, got {len(imgs)}")
        cards = [ctx.image(imgs[i], f"vlthink-{rid}_{i}") for i in range(2)]
        names = ("", "")
    elif rec.get("options") is not None and len(list(rec["options"])) == 2:
        names = tuple(str(o) for o in rec["options"])
        cards = [ctx.text_card(names[i], f"vlthink-{rid}_{i}") for i in range(2)]
    else:
        raise ConfigError(f"{ctx.source} record {n}: needs 'images' (two) or 'options' (two texts)")
    left, right, side, opts = _place(ctx, rid, (cards[k], names[k]), (cards[1 - k], names[1 - k]))
    instr = str(rec["instruction"]) if "instruction" in rec and "question" in rec else ""
    return [BinaryItem(f"vlthink-{rid}", str(q), left, right, side, str(rec.get("category") or "vl-think"), "vl-think",
                       instruction=instr, options=opts)]


#: layout name -> converter (record, index, context) -> items. Add one by adding a line.
CONVERTERS: dict[str, Callable[[Mapping[str, Any], int, ConvertContext], list[BinaryItem]]] = {
    "mllm-compbench": conv_compbench, "iconqa": conv_iconqa, "mmbench": conv_mmbench, "okvqa": conv_okvqa,
    "vl-think": conv_vlthink,
}


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Records of a JSONL, JSON (list or {"data": [...]}/{id: record}), Parquet or TSV file."""
    p = Path(path)
    if not p.is_file():
        raise MissingFileError(f"VQA file {p} not found")
    suf = p.suffix.lower()
    if suf in (".parquet", ".tsv", ".csv"):
        import pandas as pd

        df = pd.read_parquet(p) if suf == ".parquet" else pd.read_csv(p, sep="\t" if suf == ".tsv" else ",")
        recs = df.to_dict(orient="records")
        for r in recs:  # numpy arrays (Parquet lists) -> lists
            for k, v in r.items():
                if isinstance(v, np.ndarray):
                    r[k] = v.tolist()
        return recs
    text = p.read_text()
    if suf == ".jsonl":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{p} line {n}: not valid JSON ({exc})") from None
        return out
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not valid JSON ({exc})") from None
    if isinstance(data, Mapping):
        data = data.get("data", data.get("questions", [dict(v, id=k) if isinstance(v, Mapping) else v for k, v in data.items()]))
    if not isinstance(data, list):
        raise ConfigError(f"{p}: expected a list of records")
    return data


def convert_file(path: str | Path, layout: str, out_dir: str | Path, image_root: str | Path | None = None, seed: int = 0,
                 limit: int | None = None) -> list[BinaryItem]:
    """Convert a VQA file in ``layout`` into items; writes ``out_dir/items.jsonl`` (+ images). Layout
    ``act2answer``: ``path`` is a reference task set (:mod:`embeval.act2answer.reference_set`)."""
    from embeval.act2answer import reference_set

    if layout == reference_set.LAYOUT:
        return reference_set.convert_reference_set(path, out_dir, limit)
    if layout not in CONVERTERS:
        raise ConfigError(f"unknown VQA layout {layout!r}; choose from {', '.join([*CONVERTERS, reference_set.LAYOUT])}")
    recs = read_records(path)
    if limit:
        recs = recs[:limit]
    ctx = ConvertContext(Path(image_root) if image_root else Path(path).parent, Path(out_dir), seed, layout, recs)
    items: list[BinaryItem] = []
    for n, rec in enumerate(recs):
        if not isinstance(rec, Mapping):
            raise ConfigError(f"{path} record {n}: a {type(rec).__name__}, not a record (an object of fields); fix the file")
        items.extend(CONVERTERS[layout](rec, n, ctx))
    if not items:
        raise ConfigError(f"{path}: no convertible records for layout {layout!r}")
    write_items(items, Path(out_dir) / "items.jsonl")
    return items


# --------------------------------------------------------------------------- optional LLM rewrite
REWRITE_SCHEMA = {"type": "object", "properties": {"instruction": {"type": "string", "minLength": 3}},
                  "required": ["instruction"]}
REWRITE_PROMPT = ("Rewrite this question about two pictures as one short robot instruction that says to put the cube "
                  "on the picture that answers it. Do not reveal which picture is correct.\nQuestion: {question}\n"
                  "Options: {options}\nReply as JSON: {{\"instruction\": \"...\"}}")


def rewrite_instructions(items: Iterable[BinaryItem], llm, cache: str | Path | None = None) -> list[BinaryItem]:
    """Items with ``instruction`` rewritten by ``llm`` (an LLM subject), calls cached on disk (``cache``
    path; None: in memory). Items that already have an instruction keep it. An answer that is not
    valid JSON or mentions "left"/"right" falls back to the template (recorded in ``meta``)."""
    from dataclasses import replace

    from embeval.subjects.cache import CachedLLM

    wrapped = llm if hasattr(llm, "cache") else CachedLLM(llm, str(cache) if cache else None)
    out = []
    for it in items:
        if it.instruction.strip():
            out.append(it)
            continue
        opts = " / ".join(o for o in it.options if o) or "two pictures"
        msg = [{"role": "user", "content": REWRITE_PROMPT.format(question=it.question, options=opts)}]
        raw = wrapped.chat(msg, json_schema=REWRITE_SCHEMA)
        try:
            instr = str(json.loads(raw)["instruction"]).strip()
        except (ValueError, KeyError, TypeError):
            instr = ""
        leaks = any(w in instr.lower().split() for w in ("left", "right"))
        if instr and not leaks:
            out.append(replace(it, instruction=instr, meta={**it.meta, "rewrite": getattr(llm, "id", ""),
                                                           "rewrite_hash": stable_hash(raw, 8)}))
        else:
            out.append(replace(it, meta={**it.meta, "rewrite_rejected": raw[:200]}))
    return out
