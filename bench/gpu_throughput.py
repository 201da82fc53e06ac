"""GPU throughput of an OpenVLA-shaped model through embeval's own batching path.

    .venv/bin/python -m bench.gpu_throughput                       # 7B on CUDA: batches 1, 8, 32; episodes at 32
    .venv/bin/python -m bench.gpu_throughput --size tiny --device cpu --batch 1 4 --episodes 4   # the CPU check

The model is built from a config with random weights (nothing downloaded): the LLaVA layout OpenVLA uses,
CLIP ViT-L/14 at 224 px + Llama-2-7B (7.06 B parameters, bf16 on CUDA), or a tiny one of the same shape for
the CPU. It is wrapped by embeval's OpenVLA adapter (:class:`~embeval.subjects.adapters.openvla_hf.OpenVLAHFPolicy`,
7 action tokens decoded OpenVLA's way) without a 14 GB ``save_pretrained``. One run prints:

* ``bare generate``: observations/s of the model's own batched ``generate`` on inputs prepared once (7 new
  tokens, greedy): what the model can do at that batch size;
* ``embeval act_slots``: observations/s of the adapter's ``act_slots`` on the same rendered observations
  (preprocessing, left padding, ``generate``, de-tokenisation, gripper conversion), and its share of the
  bare number (target on a GPU at batch 32: >= 0.8); the actions equal the bare path's tokens decoded;
* ``act2answer episodes``: Act2Answer episodes/s with vectorised pybullet environments in worker processes
  and one batched ``act_slots`` per step (``num_envs`` = the batch size, continuous batching);
* ``policy node batch 1``: milliseconds per action of ``act`` (what a ROS policy node pays per control
  step on a real arm), with the dynamic cache and with the static cache (compiled decode on CUDA, warmed up
  at load). Target for the 7B on an H100: <= 70 ms (2.3x the memory-bandwidth floor of ~30 ms).

``--json FILE`` writes the rows; ``--profile DIR`` adds torch.profiler tables of those calls (operators by
self device time). Without CUDA, ``--size 7b`` is refused (it would take hours on a CPU).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: word-level vocabulary of the prompts used here (OpenVLA's template + the Act2Answer instructions)
WORDS = ["<pad>", "<s>", "</s>", "<unk>", "In:", "What", "action", "should", "the", "robot", "take", "to", "Out:",
         "pick", "up", "red", "cube", "and", "place", "it", "on", "card", "that", "shows", "left", "right", "put",
         "picture", "of", "a", "an", "which", "is", "?", "push", "green", "blue", "plate"]
#: OpenVLA's BridgeData statistics shape (q01/q99 per dimension; gripper un-normalised)
STATS = {"q01": [-0.03, -0.04, -0.03, -0.1, -0.1, -0.15, 0.0], "q99": [0.03, 0.04, 0.03, 0.1, 0.1, 0.15, 1.0],
         "mask": [True] * 6 + [False]}
#: (vision, text) config fields per size
SIZES = {
    "7b": (dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16, image_size=224,
                patch_size=14, projection_dim=768),
           dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096)),
    "tiny": (dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=224,
                  patch_size=14, projection_dim=32),
             dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=2, vocab_size=32064, max_position_embeddings=4096)),
}
PAD_TO = 64  # OpenVLA pads its 32000-token vocabulary to 32064; the last 256 real ids are the action bins


def build_openvla_shaped(size: str, device: str, dtype: str):
    """(processor, model): the LLaVA layout of OpenVLA with random weights (seeded), on ``device`` in ``dtype``."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaProcessor, PreTrainedTokenizerFast)

    vocab = {w: i for i, w in enumerate(WORDS)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="<pad>", model_input_names=["input_ids", "attention_mask"])
    tok.add_tokens(["<image>"], special_tokens=True)
    vis, txt = SIZES[size]
    vc = CLIPVisionConfig(**vis)
    tc = LlamaConfig(**txt, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg = LlavaConfig(vision_config=vc, text_config=tc, image_token_index=tok.convert_tokens_to_ids("<image>"),
                      vision_feature_select_strategy="default", vision_feature_layer=-2)
    cfg.pad_to_multiple_of = PAD_TO
    cfg.norm_stats = {"bridge_orig": {"action": STATS}}
    torch.manual_seed(0)
    torch_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)  # build in the target dtype: a 7B model never exists in float32
    try:
        with torch.device(device):
            model = LlavaForConditionalGeneration(cfg).eval()
    finally:
        torch.set_default_dtype(prev)
    proc = LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": vis["image_size"]},
                                                             crop_size={"height": vis["image_size"], "width": vis["image_size"]}),
                          tokenizer=tok, patch_size=vis["patch_size"], vision_feature_select_strategy="default",
                          image_token="<image>", num_additional_image_tokens=1)
    return proc, model


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _timed(fn, device: str, reps: int) -> float:
    """Median seconds of ``fn()`` over ``reps`` calls (after one untimed call)."""
    fn()
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


#: OpenVLA's prompt; the LLaVA processor puts the image patches where ``<image>`` stands (OpenVLA's own processor
#: puts them after the BOS token: the same number of tokens)
PROMPT = "<image> In: What action should the robot take to {instruction}?\nOut:"
INSTRUCTIONS = ["pick up the red cube", "place it on the left card", "push the green cube", "put it on the plate"]


def _profile(fn, device: str, path: Path) -> None:
    """torch.profiler's table of one ``fn()`` (after one untimed call), operators by self device time (CPU time
    without CUDA), written to ``path``: where a call's time goes."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        fn()
        _sync(device)
    key = "self_cuda_time_total" if device.startswith("cuda") else "self_cpu_time_total"
    path.write_text(prof.key_averages().table(sort_by=key, row_limit=25))


def run(size: str = "7b", device: str = "auto", dtype: str = "auto", batches=(1, 8, 32), episodes: int = 32,
        reps: int = 5, profile_dir: Path | None = None) -> list[dict]:
    """The rows (see module docstring); ``profile_dir``: also write profiler tables there (``act_slots`` at the
    largest batch up to 32, ``act`` at batch 1 on the dynamic and the static cache)."""
    import torch

    from embeval.subjects.adapters.openvla_hf import decode_action_tokens
    from embeval.subjects.adapters.openvla_hf import OpenVLAHFPolicy

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    if size == "7b" and not device.startswith("cuda"):
        raise SystemExit("--size 7b needs CUDA (a 7B model at batch 32 would take hours on a CPU); use --size tiny")
    t0 = time.perf_counter()
    proc, model = build_openvla_shaped(size, device, dtype)
    params = sum(p.numel() for p in model.parameters())
    built_s = time.perf_counter() - t0
    common = dict(id=f"openvla-shaped-{size}", unnorm_key="bridge_orig", image_size=SIZES[size][0]["image_size"],
                  prompt_template=PROMPT)
    policy = OpenVLAHFPolicy.from_loaded(proc, model, device=device, **common)
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    count = f"{params / 1e9:.2f} B" if params >= 1e9 else f"{params / 1e6:.2f} M"
    head = {"model": f"{size} ({count} parameters, {dtype})", "device": gpu}
    rows: list[dict] = []
    obs, source = _observations(max(batches))
    head["observations"] = source
    for b in batches:
        slots = list(range(b))
        batch_obs = obs[:b]
        instructions = [INSTRUCTIONS[i % len(INSTRUCTIONS)] for i in slots]
        inputs = policy.batch_inputs(batch_obs, instructions)
        gen = dict(max_new_tokens=7, min_new_tokens=7, do_sample=False, pad_token_id=proc.tokenizer.pad_token_id)
        holder = {}

        def bare():
            with torch.no_grad():
                holder["out"] = model.generate(**inputs, **gen)

        t_bare = _timed(bare, device, reps)
        policy.reset_slots(slots, instructions)
        t_ours = _timed(lambda: holder.__setitem__("acts", policy.act_slots(slots, batch_obs)), device, reps)
        policy.end_slots(slots)
        tokens = holder["out"][:, inputs["input_ids"].shape[1]:].cpu().numpy()
        want = np.stack([decode_action_tokens(r, policy.vocab_size, STATS) for r in tokens])
        got = np.stack([a.vector for a in holder["acts"]])
        diff = float(np.abs(want[:, :6] - got[:, :6]).max())
        rows.append({**head, "case": f"bare generate, batch {b}", "obs_per_s": b / t_bare, "ms_per_call": 1e3 * t_bare})
        rows.append({**head, "case": f"embeval act_slots, batch {b}", "obs_per_s": b / t_ours, "ms_per_call": 1e3 * t_ours,
                     "share_of_bare": t_bare / t_ours, "max_abs_diff_vs_bare": diff})
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        b = max([x for x in batches if x <= 32] or [min(batches)])
        policy.reset_slots(list(range(b)), [INSTRUCTIONS[0]] * b)
        _profile(lambda: policy.act_slots(list(range(b)), obs[:b]), device, profile_dir / f"profile_act_slots_b{b}.txt")
        policy.end_slots(list(range(b)))
    if episodes:
        rows.append({**head, **_episodes(policy, max(batches), episodes)})
    one = obs[0]
    policy.reset(INSTRUCTIONS[0])
    t_dyn = _timed(lambda: policy.act(one), device, max(reps, 10))
    if profile_dir is not None:
        _profile(lambda: policy.act(one), device, profile_dir / "profile_act_b1_dynamic.txt")
    rows.append({**head, "case": "policy node batch 1, dynamic cache", "ms_per_action": 1e3 * t_dyn})
    case = "policy node batch 1, static cache" + (" + compile" if device.startswith("cuda") else "")
    t0 = time.perf_counter()
    try:
        fast = OpenVLAHFPolicy.from_loaded(proc, model, device=device, cache="static", **common)  # warms up (compiles)
        warm_s = time.perf_counter() - t0
        fast.reset(INSTRUCTIONS[0])
        t_static = _timed(lambda: fast.act(one), device, max(reps, 10))
        same = bool(np.allclose(fast.act(one).vector, policy.act(one).vector, atol=1e-5))
        if profile_dir is not None:
            _profile(lambda: fast.act(one), device, profile_dir / "profile_act_b1_static.txt")
        rows.append({**head, "case": case, "ms_per_action": 1e3 * t_static, "ratio_vs_dynamic": t_static / t_dyn,
                     "warmup_s": warm_s, "same_action": same})
    except Exception as exc:  # noqa: BLE001 -- a compiler failure on one GPU stack is a row, the numbers above stay
        rows.append({**head, "case": case, "error": f"{type(exc).__name__}: {exc}"[:600]})
    rows.append({**head, "case": "model built from config", "seconds": built_s})
    return rows


def _observations(n: int) -> tuple[list, str]:
    """``n`` observations of the pybullet cell and ``"rendered"``; where pybullet is not installed (a GPU image
    without it), random frames of the cell's camera shape (96 x 128 px, the same preprocessing cost) and ``"random"``."""
    import importlib.util

    from bench.bench_batching import _random_observations, _rendered_observations

    if importlib.util.find_spec("pybullet") is not None:
        return _rendered_observations(n), "rendered"
    return _random_observations(n, (96, 128)), "random"


def _episodes(policy, num_envs: int, episodes: int) -> dict:
    """Act2Answer episodes/s: ``episodes`` episodes on ``num_envs`` vectorised pybullet environments."""
    from embeval.act2answer.generator import CATEGORIES, generate_items
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.act2answer.vector import run_items_vector

    spec = EpisodeSpec(max_steps=8)
    with tempfile.TemporaryDirectory() as tmp:
        cats = list(CATEGORIES)
        items = generate_items(Path(tmp), cats, max(1, -(-episodes // (2 * len(cats)))))[: max(1, episodes // 2)]
        t0 = time.perf_counter()
        recs = list(run_items_vector(policy, items, spec, num_envs=min(num_envs, 64), obs_size=(224, 224)))
        wall = time.perf_counter() - t0
    steps = sum(int(r.steps) for r in recs)
    return {"case": f"act2answer episodes, num_envs {min(num_envs, 64)}", "episodes": len(recs), "steps": steps,
            "episodes_per_s": len(recs) / wall, "obs_per_s": steps / wall, "seconds": wall}


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def main(argv=None) -> int:
    from embeval.env import configure

    configure()
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_throughput", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="7b", help="model size (default 7b: needs CUDA)")
    ap.add_argument("--device", default="auto", help="auto (cuda if present), cpu, cuda, cuda:N")
    ap.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"],
                    help="auto: bfloat16 on CUDA, float32 on the CPU")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32], help="batch sizes (1..256)")
    ap.add_argument("--episodes", type=int, default=32, help="Act2Answer episodes at the largest batch (0: none)")
    ap.add_argument("--reps", type=int, default=5, help="timed calls per measurement (median)")
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    ap.add_argument("--profile", type=Path, metavar="DIR", help="also write torch.profiler tables into DIR")
    args = ap.parse_args(argv)
    if any(not 1 <= b <= 256 for b in args.batch) or not 0 <= args.episodes <= 10_000 or not 1 <= args.reps <= 1000:
        ap.error("--batch takes 1..256, --episodes 0..10000, --reps 1..1000")
    if args.episodes and importlib.util.find_spec("pybullet") is None:
        ap.error("--episodes needs pybullet (the Act2Answer cell); install it or pass --episodes 0")
    rows = run(args.size, args.device, args.dtype, tuple(args.batch), args.episodes, args.reps, args.profile)
    print(f"{rows[0]['model']} on {rows[0]['device']}, {rows[0]['observations']} observations")
    cols = ["case", "obs_per_s", "ms_per_call", "share_of_bare", "max_abs_diff_vs_bare", "episodes_per_s", "ms_per_action",
            "ratio_vs_dynamic", "warmup_s", "same_action", "seconds", "error"]
    for r in rows:
        print("  ".join(f"{c}={_fmt(r[c])}" for c in cols if c in r))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
