"""`embeval train vla` memory: peak resident memory of loading a demonstration set of the
real recipe's size (24,000 frames, 2 cameras at 128x96, PNG in LeRobot parquet) and training on it,
with the streaming loader against the previous one (every image decoded at full size, stacked, then
resized), each in its own process. Both train the same few steps: the weights must be bit-identical
and the step time the same (target: peak <= 2 GiB; time within 10 %)."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

FRAMES, QUICK_FRAMES, EPISODE = 24_000, 2_400, 40
PEAK_TARGET_MB = 2048.0
STEPS = 30


def old_demo_arrays(root, image_size, cameras, episodes=None):
    """The earlier loader (reference): every column read, every image decoded at full size and
    stacked, then the kept frames resized to the model size."""
    import pyarrow.parquet as pq
    from PIL import Image

    from embeval.datasets import validate_layout
    from embeval.subjects.embedded.preprocess import resize_image
    from embeval.subjects.embedded.training import DemoArrays

    root = Path(root)
    info = validate_layout(root)
    table = pq.read_table(sorted((root / "data").glob("chunk-*/file-*.parquet"))[0])
    frames = {}
    for k, f in info["features"].items():
        if k in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
            continue
        col = table.column(k).to_pylist()
        if f["dtype"] == "image":
            frames[k] = np.stack([np.asarray(Image.open(io.BytesIO(c["bytes"])).convert("RGB")) for c in col])
        else:
            frames[k] = np.asarray(col, dtype=f["dtype"]).reshape(len(col), *f["shape"])
    ep, ti = np.asarray(table.column("episode_index")), np.asarray(table.column("task_index"))
    tasks_df = pq.read_table(root / "meta" / "tasks.parquet").to_pandas()
    tasks = [t for t, _ in sorted(zip(tasks_df.index, tasks_df["task_index"]), key=lambda x: x[1])]
    keep = np.ones(len(ep), bool) if episodes is None else np.isin(ep, episodes)
    images = {cam: np.stack([resize_image(im, image_size) for im in frames[f"observation.images.{cam}"][keep]]) for cam in cameras}
    st = frames["observation.state"][keep]
    get = lambda k, dt: None if k not in frames else frames[k][keep].astype(dt)  # noqa: E731
    ph = frames.get("expert.phase")
    return DemoArrays(images, np.concatenate([st[:, :3], st[:, 7:8]], axis=1).astype(np.float32),
                      frames["action"][keep].astype(np.float64), ti[keep], tasks, ep[keep],
                      get("privileged.task_geometry", np.float64) if "privileged.task_geometry" in frames
                      else get("observation.environment_state", np.float64), get("expert.waypoint", np.float64),
                      None if ph is None else ph[keep, 0].astype(np.int64))


def write_dataset(root: Path, frames: int) -> Path:
    """A LeRobot dataset shaped like the recipe's demonstrations (features of embeval train demos),
    images from rendered-looking tabletops shifted per frame (so PNG sizes are realistic)."""
    from embeval.datasets import Feature, LeRobotWriter
    from embeval.distortion.samples import synthetic_tabletop

    if (root / "meta" / "info.json").exists() and json.loads((root / "meta" / "info.json").read_text())["total_frames"] == frames:
        return root
    cams = ("third_person", "wrist")
    feats = {f"observation.images.{c}": Feature("image", (96, 128, 3), ["height", "width", "channels"]) for c in cams}
    feats["observation.state"] = Feature("float32", (8,), [f"s{i}" for i in range(8)])
    feats["action"] = Feature("float32", (7,), [f"a{i}" for i in range(7)])
    feats["privileged.task_geometry"] = Feature("float32", (6,), [f"e{i}" for i in range(6)])
    feats["expert.waypoint"] = Feature("float32", (6,), [f"w{i}" for i in range(6)])
    feats["expert.phase"] = Feature("float32", (1,), ["phase"])
    w = LeRobotWriter(root, fps=10, features=feats, overwrite=True)
    rng = np.random.default_rng(0)
    bases = [synthetic_tabletop(128, 96, seed=i) for i in range(16)]
    for e in range(frames // EPISODE):
        base = bases[e % len(bases)]
        ep = {f"observation.images.{c}": np.stack([np.roll(base, (k + j) % 7, axis=1) for k in range(EPISODE)])
              for j, c in enumerate(cams)}
        for k, f in feats.items():
            if f.dtype != "image":
                ep[k] = rng.normal(size=(EPISODE,) + tuple(f.shape)).astype(np.float32)
        ep["expert.phase"] = rng.integers(0, 5, (EPISODE, 1)).astype(np.float32)
        w.add_episode(ep, task=("pick up the red cube", "place the red cube on the plate")[e % 2])
    w.finalize()
    return root


_CHILD = r"""
import hashlib, json, resource, sys, time
import torch
from embeval.subjects.embedded.nets import VLAConfig
from embeval.subjects.embedded.training import TrainConfig, train_vla
root, which, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
if which == "streaming":
    from embeval.subjects.embedded.recipes import demo_arrays
    data = demo_arrays(root, [48, 64], ("third_person", "wrist"))
else:
    from bench.bench_train_memory import old_demo_arrays
    data = old_demo_arrays(root, [48, 64], ("third_person", "wrist"))
load = time.perf_counter() - t0
cpu = time.process_time()
pol, res = train_vla(data, VLAConfig(), TrainConfig(steps=steps, log_every=steps), seed=0)
cpu = time.process_time() - cpu
h = hashlib.sha256()
for k, v in sorted(pol.net.state_dict().items()):
    h.update(k.encode()); h.update(v.numpy().tobytes())
try:  # the high-water mark of this program's memory (VmHWM starts afresh at exec; ru_maxrss can carry the parent's)
    peak = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0] / 1024
except (OSError, IndexError):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"peak_mb": peak, "load_s": load, "train_cpu_s_per_step": cpu / steps, "weights": h.hexdigest()[:16],
                  "frames": len(data)}))
"""


def _child(root: Path, which: str, steps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent)] + sys.path))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(root), which, str(steps)], capture_output=True, text=True,
                         env=env, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"{which} training child failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool) -> list[dict]:
    n = QUICK_FRAMES if quick else FRAMES
    root = write_dataset(Path("build/bench/train_memory_ds") / str(n), n)
    steps = 5 if quick else STEPS
    new = _child(root, "streaming", steps)
    old = _child(root, "previous", steps)
    same = new["weights"] == old["weights"]
    ratio = new["train_cpu_s_per_step"] / old["train_cpu_s_per_step"]
    return [
        {"case": f"train vla, {new['frames']} frames: peak memory (streaming loader)", "value": new["peak_mb"], "unit": "MB",
         "baseline": old["peak_mb"], "target": f"<= {PEAK_TARGET_MB:g} MB", "met": "yes" if new["peak_mb"] <= PEAK_TARGET_MB else "NO"},
        {"case": f"train vla: {steps} steps, weights identical (sha256 {new['weights']})", "value": float(same), "unit": "bool",
         "baseline": 1.0, "target": "identical", "met": "yes" if same else "NO"},
        {"case": "train vla: CPU seconds per step (one thread), streaming / previous", "value": ratio, "unit": "ratio",
         "baseline": 1.0, "target": "0.9 .. 1.1", "met": "yes" if 0.9 <= ratio <= 1.1 else "NO"},
        {"case": "train vla: load seconds (streaming vs previous)", "value": new["load_s"], "unit": "s", "baseline": old["load_s"]},
    ]
