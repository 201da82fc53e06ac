"""Every transformers VLM family of the tests through ``adapter: hf`` on one device: batched ``generate`` equal to batch 1.

    .venv/bin/python -m bench.gpu_families --device cuda --json families.json
    .venv/bin/python -m bench.gpu_families --device cpu                       # the same check on a CPU (~1 min)

Each family's tiny random-weight checkpoint (``tests/hf_families.py``: the family's own config, model and
processor classes, saved as the hub lays it out; nothing downloaded) is loaded by path as a subject spec names
it (``params.device``, ``params.dtype``). One row per family: whether three left-padded items (one with two
images of different sizes) give the same token ids as each item alone, the largest logit difference
(float32), and items/s of one batched call of ``--batch`` items beside the same items one at a time. A family
that cannot be built or loaded under the installed transformers is a row with its error, not a stop.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

NEW = 4  # new tokens per answer


def _img(seed: int, h: int = 40, w: int = 50) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


ITEMS = [([_img(0)], "pick up the red cube"), ([_img(1), _img(2, 32, 60)], "which picture answers the question"),
         ([_img(3)], "push it to the left and place it on the blue cube")]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def family_row(name: str, root: Path, device: str, dtype: str, batch: int) -> dict:
    """The row of family ``name`` (see the module docstring)."""
    from hf_families import build_family

    from embeval.subjects.registry import load_subject

    d = root / name
    build_family(name, d)
    vlm = load_subject({"kind": "vlm", "adapter": "hf", "path": str(d),
                        "params": {"max_new_tokens": NEW, "device": device, "dtype": dtype}})
    ims, prompts = [i for i, _ in ITEMS], [p for _, p in ITEMS]
    many = vlm.generate_ids(ims, prompts, logits=True)
    same, diff = True, 0.0
    for k, (im, p) in enumerate(ITEMS):
        one = vlm.generate_ids([im], [p], logits=True)[0]
        same &= many[k].ids == one.ids
        n = min(len(many[k].logits), len(one.logits))
        diff = max(diff, float(np.abs(np.asarray(many[k].logits[:n]) - np.asarray(one.logits[:n])).max()))
    b_ims = [[_img(10 + i)] for i in range(batch)]
    b_prompts = [ITEMS[i % len(ITEMS)][1] for i in range(batch)]
    vlm.generate_ids(b_ims[:2], b_prompts[:2])  # warm-up
    _sync(device)
    t0 = time.perf_counter()
    vlm.generate_ids(b_ims, b_prompts)
    _sync(device)
    t_batch = time.perf_counter() - t0
    t0 = time.perf_counter()
    for im, p in zip(b_ims, b_prompts):
        vlm.generate_ids([im], [p])
    _sync(device)
    t_one = time.perf_counter() - t0
    return {"family": name, "model_class": type(vlm.model).__name__, "ids_equal_batch1": bool(same),
            "max_logit_diff": diff, f"items_per_s_batch{batch}": batch / t_batch, "items_per_s_batch1": batch / t_one,
            "speedup": t_one / t_batch}


def run(device: str = "cpu", dtype: str = "float32", batch: int = 16, only=None) -> list[dict]:
    """One row per family (errors included)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from hf_families import FAMILIES

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in only or FAMILIES:
            t0 = time.perf_counter()
            try:
                row = family_row(name, Path(tmp), device, dtype, batch)
            except Exception as exc:  # a family this transformers cannot build or load: reported, the rest go on
                row = {"family": name, "error": f"{type(exc).__name__}: {exc}"[:500],
                       "where": traceback.format_exc(limit=-2)[-800:]}
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
    return rows


def main(argv=None) -> int:
    from embeval.env import configure

    configure()
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_families", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--batch", type=int, default=16, help="items in the timed batched call (1..256, default 16)")
    ap.add_argument("--family", nargs="+", help="only these families (default: all)")
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    args = ap.parse_args(argv)
    if not 1 <= args.batch <= 256:
        ap.error("--batch takes 1..256")
    import torch
    import transformers

    rows = run(args.device, args.dtype, args.batch, args.family)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {args.device}, {args.dtype}")
    for r in rows:
        print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items() if k != "where"))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 1 if any("error" in r or not r["ids_equal_batch1"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
