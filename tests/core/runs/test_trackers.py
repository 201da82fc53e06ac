"""Experiment trackers of a run (embeval.runs.trackers): TensorBoard event files and an offline W&B run, read back
with each tool's own reader, hold exactly the numbers in the results store; nothing reaches the network; a spec
without trackers writes no tracker file; a bad `trackers` entry is one line at --check; a failing tracker is one
warning and the run goes on."""
from __future__ import annotations

import glob
import json
import math
import socket
import threading
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from embeval.runs import ResultsStore, load_spec, plan_run, run
from embeval.runs.trackers import TRACKERS, Tracker
from test_cli_hostile import _error_line, _run

SPEC = {"name": "trk", "evaluator": "synthetic",
        "subjects": [{"id": "a", "kind": "synthetic"}, {"id": "bb", "kind": "synthetic", "params": {"offset": 0.5}}],
        "items": {"source": "synthetic", "count": 3}, "distortions": ["none", "blur"], "levels": [1, 2],
        "backend": {"progress": False}}
VIDEO_HW = (24, 32)


def _spec(tmp_path: Path, **changes) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump({**SPEC, **changes}))
    return p


class _Listener:
    """A TCP server on 127.0.0.1 that counts connections: every network route of the test points here."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._accept, daemon=True)
        self._t.start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop.set()
        self._t.join(2)
        self.sock.close()


@pytest.fixture()
def no_network(monkeypatch):
    """W&B's API, every HTTP(S) proxy and the W&B settings all point at a local counting listener; no key, no
    login. The test asserts afterwards that nothing connected."""
    lst = _Listener()
    for k in ("WANDB_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(k, lst.url)
    for k in ("WANDB_API_KEY", "WANDB_MODE", "NO_PROXY", "no_proxy", "WANDB_DIR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("WANDB_MODE", "online")  # the tracker forces offline whatever the environment says
    yield lst
    lst.close()


def _write_video(path: Path, frames: int = 3) -> np.ndarray:
    """A tiny H.264 mp4 (PyAV); returns its first frame as written."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = VIDEO_HW
    first = None
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=5)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        for i in range(frames):
            img = np.full((h, w, 3), 40 * i, np.uint8)
            img[:, : w // 2, 0] = 200
            first = img if first is None else first
            for pkt in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(pkt)
        for pkt in s.encode():
            c.mux(pkt)
    return first


def _store_results(run_dir: Path) -> tuple[dict, dict]:
    with ResultsStore(run_dir / "results.sqlite", create=False) as st:
        res = st.results(st.run_info()["run_id"])
    means = defaultdict(list)
    for (subject, _item, dist, level, _seed), out in res.items():
        for k in ("score", "unit_seed"):
            means[(subject, dist, level, k)].append(float(out[k]))
    return res, {k: math.fsum(v) / len(v) for k, v in means.items()}


def _wandb_records(run_dir: Path):
    """(history rows, summary) of the offline W&B run, read from its .wandb transaction log with wandb's reader."""
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.internal import datastore

    files = glob.glob(str(run_dir / "trackers" / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1, files
    ds = datastore.DataStore()
    ds.open_for_scan(files[0])
    history, summary = [], {}
    while (data := ds.scan_data()) is not None:
        rec = pb.Record()
        rec.ParseFromString(data)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({it.key or "/".join(it.nested_key): json.loads(it.value_json) for it in rec.history.item})
        elif kind == "summary":
            for it in rec.summary.update:
                summary[it.key or "/".join(it.nested_key)] = json.loads(it.value_json)
    return history, summary


def test_tensorboard_and_wandb_hold_the_run_results_offline(tmp_path, monkeypatch, no_network, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg_cache"))  # where wandb-core would log by default
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg_config"))
    out = tmp_path / "run"
    first = _write_video(out / "videos" / "ep0.mp4")  # an episode video another stage left in the run folder
    spec = load_spec(_spec(tmp_path, trackers=["tensorboard", "wandb"]))
    s = run(spec, out)
    assert s.done == 24 and s.failed == 0
    res, means = _store_results(out)
    step_of = {u.key: i for i, u in enumerate(plan_run(spec).units)}

    # TensorBoard, read back with its own reader
    logdirs = list((out / "trackers" / "tensorboard").iterdir())
    assert [d.name for d in logdirs] == [f"trk-{spec.hash[:8]}"]
    ea = EventAccumulator(str(logdirs[0]), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    ea.Reload()
    tb = {tag: {e.step: e.value for e in ea.Scalars(tag)} for tag in ea.Tags()["scalars"]}
    for key, outputs in res.items():
        for k in ("score", "unit_seed"):
            assert tb[f"unit/{key[0]}/{k}"][step_of[key]] == float(np.float32(outputs[k])), (key, k)  # float32 in TB
    assert sum(len(tb[f"unit/{s}/score"]) for s in ("a", "bb")) == 24
    for (subject, dist, level, k), m in means.items():
        assert tb[f"mean/{subject}/{dist}/{k}"][level] == float(np.float32(m))
    assert tb["units/done"] == {0: 24.0} and tb["units/failed"] == {0: 0.0} and tb["units/total"] == {0: 24.0}
    img = ea.Images("video/videos/ep0.mp4")[0]  # TensorBoard gets the video's first frame as an image
    assert (img.height, img.width) == VIDEO_HW
    from PIL import Image
    import io

    thumb = np.asarray(Image.open(io.BytesIO(img.encoded_image_string)).convert("RGB")).astype(int)
    assert np.abs(thumb - first).mean() < 12  # H.264 in yuv420p is lossy

    # W&B offline run, read back from its transaction log with wandb's own reader
    history, summary = _wandb_records(out)
    units = [h for h in history if "unit/index" in h]
    assert len(units) == 24
    key_of = {i: k for k, i in step_of.items()}
    for h in units:
        key = key_of[h["unit/index"]]
        assert h[f"unit/{key[0]}/score"] == res[key]["score"] and h[f"unit/{key[0]}/unit_seed"] == res[key]["unit_seed"]
    for (subject, dist, level, k), m in means.items():
        assert summary[f"mean/{subject}/{dist}/L{level}/{k}"] == m
    assert (summary["units/done"], summary["units/failed"], summary["units/total"]) == (24, 0, 24)
    vid = [h for h in history if "video/videos/ep0.mp4/_type" in h or "video/videos/ep0.mp4" in h]
    assert vid, history[-3:]
    copied = glob.glob(str(out / "trackers" / "wandb" / "offline-run-*" / "files" / "media" / "videos" / "**" / "*.mp4"),
                       recursive=True)
    assert len(copied) == 1 and Path(copied[0]).read_bytes() == (out / "videos" / "ep0.mp4").read_bytes()
    table = [h for h in history if "summary/_type" in h]
    assert table and table[0]["summary/_type"] == "table-file"
    assert no_network.connections == 0
    # the trackers' own copies of the video are not logged again on resume; a resume logs a new tracker run
    run(spec, out)
    assert len(glob.glob(str(out / "trackers" / "wandb" / "offline-run-*"))) == 2
    ea = EventAccumulator(str(logdirs[0]), size_guidance={"images": 0})
    ea.Reload()
    assert ea.Tags()["images"] == ["video/videos/ep0.mp4"]
    assert "warning" not in capsys.readouterr().err
    assert no_network.connections == 0
    # wandb's logs, cache and settings stay in the run's tracker folder, never in the user's cache or config
    assert not (tmp_path / "xdg_cache" / "wandb").exists() and not (tmp_path / "xdg_config" / "wandb").exists()


def test_a_spec_without_trackers_writes_no_tracker_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_video(tmp_path / "run" / "ep.mp4")
    assert run(load_spec(_spec(tmp_path)), tmp_path / "run").done == 24
    files = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert not (tmp_path / "run" / "trackers").exists()
    assert not [f for f in files if "tfevents" in f or "wandb" in f], files


def test_trackers_are_cosmetic_and_kept_in_the_run_folder(tmp_path):
    plain = load_spec(_spec(tmp_path))
    tracked = load_spec(_spec(tmp_path, trackers="tensorboard"))  # a bare name is a one-entry list
    assert plain.hash == tracked.hash and [t.name for t in tracked.trackers] == ["tensorboard"]
    custom = load_spec(_spec(tmp_path, trackers=[{"name": "wandb", "dir": "logs/wb", "project": "study"}]))
    assert (custom.trackers[0].dir, custom.trackers[0].project, custom.trackers[0].mode) == ("logs/wb", "study", "offline")
    from embeval.runs.runner import load_run_spec, prepare_run_dir

    d = prepare_run_dir(custom, tmp_path / "r")
    assert load_run_spec(d).trackers == custom.trackers


@pytest.mark.parametrize(("trackers", "problem"), [
    (["tensorbord"], "spec.trackers[0]: unknown tracker 'tensorbord' (did you mean 'tensorboard'?); choose from "
                     "tensorboard, wandb"),
    ([{"name": "mlflow"}], "spec.trackers[0].name: unknown tracker 'mlflow'; choose from tensorboard, wandb"),
    ([{"name": "wandb", "mode": "online"}], "spec.trackers[0].mode: 'online' is refused: embeval logs to trackers "
                                            "offline only, so a run never sends anything over the network; upload a W&B "
                                            "run afterwards with `wandb sync RUN/trackers/wandb/offline-run-*` (or your "
                                            "tracker dir)"),
    ([{"name": "wandb", "mode": "shared"}], "spec.trackers[0].mode: unknown tracker mode 'shared'; the only mode is 'offline'"),
    ([{"name": "tensorboard", "dir": "/tmp/tb"}], "spec.trackers[0].dir: is an absolute path, got '/tmp/tb'; a spec's "
                                                  "tracker dir must be a relative folder inside the current folder, such "
                                                  "as runs/tensorboard (default: the run folder's trackers/)"),
    ([{"name": "tensorboard", "dir": "../tb"}], "spec.trackers[0].dir: leaves the current folder through '..'"),
    (["wandb", "wandb"], "spec.trackers[1]: duplicate tracker 'wandb'; list each tracker once"),
    ([{"name": "wandb", "url": "x"}], "spec.trackers[0].url: unknown field; allowed: dir, mode, name, project"),
    ([3], "spec.trackers[0]: must be a tracker name (tensorboard, wandb) or a mapping with 'name', got int"),
])
def test_a_bad_trackers_entry_is_one_line_at_check(tmp_path, capsys, trackers, problem):
    rc, out, err = _run(capsys, "run", _spec(tmp_path, trackers=trackers), "--check")
    assert rc == 2 and out == ""
    line = _error_line(err)
    assert line.startswith(f"embeval: error: {tmp_path / 'spec.yaml'}: {problem}"), line
    assert not (tmp_path / "runs").exists()


def test_check_names_the_trackers(tmp_path, capsys):
    rc, out, _ = _run(capsys, "run", _spec(tmp_path, trackers=["tensorboard", "wandb"]), "--check")
    assert rc == 0 and "trackers: tensorboard, wandb (offline)" in out


class _Broken(Tracker):
    name = "broken"

    def __init__(self, cfg, root, label, config):
        super().__init__(cfg, root, label, config)
        self.calls = 0

    def log_scalars(self, values, step):
        self.calls += 1
        if self.calls == 3:
            raise OSError("disk full")

    def close(self):
        pass


def test_a_failing_tracker_is_one_warning_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.chdir(tmp_path)
    TRACKERS.register("broken", _Broken)
    try:
        spec = load_spec(_spec(tmp_path, trackers=["broken", "tensorboard"]))
        s = run(spec, tmp_path / "run")
    finally:
        TRACKERS.unregister("broken")
    assert s.done == 24 and s.failed == 0
    err = capsys.readouterr().err
    warnings = [ln for ln in err.splitlines() if "warning" in ln]
    assert warnings == [f"embeval: warning: tracker broken failed to log a unit (OSError: disk full); it is off for the "
                        f"rest of this run, the results are safe in {tmp_path / 'run' / 'results.sqlite'}"]
    ea = EventAccumulator(str(next((tmp_path / "run" / "trackers" / "tensorboard").iterdir())), size_guidance={"scalars": 0})
    ea.Reload()
    assert sum(len(ea.Scalars(f"unit/{s}/score")) for s in ("a", "bb")) == 24
