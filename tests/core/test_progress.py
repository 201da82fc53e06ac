"""Live progress (embeval.progress): the line format and ETA, throttling to one line per interval on a non-TTY,
the bar on a TTY, the environment switches; a run piped to a file prints progress lines; `embeval status --watch`
follows a run that another thread is running until it ends."""
from __future__ import annotations

import io
import re
import threading
import time
from pathlib import Path

import pytest
import yaml

from embeval_cli import main
from embeval.errors import ConfigError
from embeval.progress import Progress, format_duration, progress_line, resolve_mode, track
from test_cli_hostile import _run


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("s", "text"), [(0, "0s"), (59.9, "59s"), (72, "1m12s"), (3599, "59m59s"), (7500, "2h05m"),
                                         (-3, "0s")])
def test_format_duration(s, text):
    assert format_duration(s) == text


def test_the_line_says_count_elapsed_and_eta():
    assert progress_line("act2answer", 37, 120, "episodes", 72.0) == "act2answer: 37/120 episodes, 1m12s elapsed, ETA 2m41s"
    # steps done before start count in the total, not in the rate: 20 in 60 s -> 80 left take 240 s
    assert progress_line("run", 40, 120, "units", 60.0, initial=20, postfix={"failed": 2}) == \
        "run: 40/120 units, 1m00s elapsed, ETA 4m00s, failed 2"
    assert progress_line("run", 0, 120, "units", 5.0) == "run: 0/120 units, 5s elapsed, ETA ?"
    assert progress_line("run", 120, 120, "units", 95.0) == "run: 120/120 units, done in 1m35s"
    assert progress_line("train", 7, None, "steps", 3.0) == "train: 7 steps, 3s elapsed"
    assert progress_line("run", 10, 20, "units", 5.0, eta=100.0) == "run: 10/20 units, 5s elapsed, ETA 1m40s"
    assert progress_line("run", 10, 20, "units", 5.0, eta=None, postfix={"failed": 0}) == "run: 10/20 units, 5s elapsed, ETA ?"


def test_lines_mode_prints_at_most_one_line_per_interval():
    clock, out = Clock(), io.StringIO()
    p = Progress(120, "act2answer", "episodes", mode="lines", interval_s=10, file=out, heartbeat=False, clock=clock)
    for _ in range(30):  # 30 steps in 7.5 s: nothing yet
        clock.t += 0.25
        p.update(1)
    assert out.getvalue() == ""
    clock.t += 2.5
    p.update(1, failed=1)  # 10 s: one line
    clock.t += 5.0
    p.update(5)  # 15 s: too soon
    clock.t += 5.0
    p.set_postfix(failed=2)  # 20 s: a line without a new step
    p.close()
    p.close()  # idempotent
    assert out.getvalue().splitlines() == [
        "act2answer: 31/120 episodes, 10s elapsed, ETA 28s, failed 1",
        "act2answer: 36/120 episodes, 20s elapsed, ETA 46s, failed 2",
        "act2answer: 36/120 episodes, 20s elapsed, ETA 46s, failed 2",  # the last line, on close
    ]


def test_a_short_command_prints_nothing_and_a_slow_step_still_shows():
    out = io.StringIO()
    with Progress(3, "quick", mode="lines", interval_s=10, file=out) as p:
        p.update(3)
    assert out.getvalue() == ""
    out = io.StringIO()
    with Progress(2, "slow", "steps", mode="lines", interval_s=0.05, file=out):
        time.sleep(1.3)  # no step finishes: the heartbeat thread still says where it is
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2 and all(ln.startswith("slow: 0/2 steps, ") and ln.endswith("ETA ?") for ln in lines), lines


def test_bar_mode_on_a_tty_and_the_environment_switches(monkeypatch):
    monkeypatch.delenv("EMBEVAL_PROGRESS", raising=False)
    assert resolve_mode(None, Tty()) == "bar" and resolve_mode(None, io.StringIO()) == "lines"
    out = Tty()
    assert list(track(range(4), "bar", "items", file=out)) == [0, 1, 2, 3]
    assert "bar: 100%" in out.getvalue() and "4/4" in out.getvalue()
    monkeypatch.setenv("EMBEVAL_PROGRESS", "lines")
    assert resolve_mode(None, Tty()) == "lines"
    monkeypatch.setenv("EMBEVAL_PROGRESS", "off")
    out = io.StringIO()
    with Progress(5, "x", interval_s=0.0, file=out, heartbeat=False) as p:
        p.update(5)
    assert out.getvalue() == ""
    monkeypatch.setenv("EMBEVAL_PROGRESS", "fancy")
    with pytest.raises(ConfigError, match=r"EMBEVAL_PROGRESS='fancy': unknown progress mode; choose from bar, lines, off"):
        Progress(1, "x")
    monkeypatch.setenv("EMBEVAL_PROGRESS", "lines")
    monkeypatch.setenv("EMBEVAL_PROGRESS_INTERVAL_S", "-1")
    with pytest.raises(ConfigError, match=r"EMBEVAL_PROGRESS_INTERVAL_S='-1': must be a number of seconds > 0"):
        Progress(1, "x")


def _spec(tmp_path: Path, **changes) -> Path:
    d = {"name": "slowish", "evaluator": "synthetic", "items": {"source": "synthetic", "count": 20},
         "params": {"sleep_ms": 40}, "backend": {"unit_timeout_s": None}}
    d.update(changes)
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_a_piped_run_prints_progress_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("EMBEVAL_PROGRESS", raising=False)
    monkeypatch.setenv("EMBEVAL_PROGRESS_INTERVAL_S", "0.2")
    assert main(["run", str(_spec(tmp_path)), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err  # pytest's capture is not a TTY
    lines = [ln for ln in err.splitlines() if ln.startswith("slowish [")]
    assert len(lines) >= 3, err
    counts = [int(re.search(r": (\d+)/20 units", ln).group(1)) for ln in lines]
    assert counts == sorted(counts) and counts[-1] == 20 and re.fullmatch(r"slowish \[\w{8}\]: 20/20 units, done in \ds", lines[-1])
    assert "ETA" in lines[0] and "\r" not in err


def test_status_watch_follows_a_run_until_it_ends(tmp_path, capsys):
    from embeval.runs import run

    d = tmp_path / "run"
    spec = _spec(tmp_path, backend={"progress": False, "unit_timeout_s": None})
    t = threading.Thread(target=run, args=(spec, d), daemon=True)
    t.start()
    deadline = time.time() + 30
    while not (d / "results.sqlite").is_file():
        assert time.time() < deadline
        time.sleep(0.02)
    rc, out, err = _run(capsys, "status", d, "--watch", "--every", "0.15")
    t.join(30)
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) >= 3, out
    counts = [int(re.search(r"^slowish \[\w{8}\]: (\d+)/20 units, ", ln).group(1)) for ln in lines]
    assert counts == sorted(counts) and counts[0] < 20 and counts[-1] == 20
    assert any(re.search(r"ETA \d+s", ln) for ln in lines[:-1]) and "done in" in lines[-1]
    # a run that stopped with units left: one line saying how to continue, exit 1
    spec2 = _spec(tmp_path, params={"fail_items": ["item00003"]}, backend={"progress": False})
    d2 = tmp_path / "run2"
    assert main(["run", str(spec2), "--out", str(d2)]) == 1
    capsys.readouterr()
    rc, out, _ = _run(capsys, "status", d2, "--watch", "--every", "0.1")
    assert rc == 1 and out.splitlines() == [
        f"slowish [{out[9:17]}]: 19/20 units, " + out.split("units, ", 1)[1].split(", failed 1")[0] + ", failed 1; "
        f"no process runs it now: continue with `embeval resume {d2}`"]


@pytest.mark.parametrize(("every", "problem"), [("0", "must lie in 0.1..3600, got 0.0"),
                                               ("nan", "must be a finite number in 0.1..3600, got nan"),
                                               ("1e9", "must lie in 0.1..3600, got 1000000000.0"),
                                               ("x", "must be a finite number in 0.1..3600, got 'x'")])
def test_watch_interval_is_bounded(tmp_path, capsys, every, problem):
    with pytest.raises(SystemExit) as exc:
        main(["status", str(tmp_path), "--watch", "--every", every])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"embeval status: error: argument --every: {problem}"


def _train(log, steps: int = 40):
    import numpy as np
    import torch

    from embeval.subjects.embedded.training import TrainConfig, _loop

    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.zeros(3))
    x = torch.from_numpy(np.random.default_rng(1).normal(size=(50, 3)).astype(np.float32))

    def step_fn(idx):
        time.sleep(0.01)
        return ((x[torch.from_numpy(idx)] - w) ** 2).mean()

    return _loop([w], len(x), step_fn, TrainConfig(steps=steps, batch_size=8, log_every=10), np.random.default_rng(2),
                 log, desc="train tiny"), w.detach().numpy().copy()


def test_training_shows_progress_and_its_numbers_do_not_change(capsys, monkeypatch):
    monkeypatch.delenv("EMBEVAL_PROGRESS", raising=False)
    monkeypatch.setenv("EMBEVAL_PROGRESS_INTERVAL_S", "0.1")
    quiet, w_quiet = _train(None)
    assert capsys.readouterr().err == ""  # no log: no progress either (library use)
    logged, w_logged = _train(lambda m: None)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("train tiny: ")]
    assert len(lines) >= 2 and re.fullmatch(r"train tiny: 40/40 steps, done in \ds, loss \d\.\d{4}", lines[-1]), err
    assert any(re.search(r"\d+/40 steps, \ds elapsed, ETA \ds", ln) for ln in lines[:-1])
    assert logged.losses == quiet.losses and (w_logged == w_quiet).all()  # progress draws no random number


def test_iqa_build_shows_each_stage(tmp_path, capsys, monkeypatch):
    from PIL import Image

    from embeval.distortion.samples import synthetic_tabletop

    imgs = tmp_path / "imgs"
    imgs.mkdir()
    for i in range(3):
        Image.fromarray(synthetic_tabletop(40, 32, seed=i)).save(imgs / f"a{i}.png")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"kind": "policy", "adapter": "image_stats", "params": {"scale": 0.1}}))
    monkeypatch.delenv("EMBEVAL_PROGRESS", raising=False)
    monkeypatch.setenv("EMBEVAL_PROGRESS_INTERVAL_S", "0.000001")  # a line on every step
    argv = ["iqa", "build", "--source", "folder", "--path", str(imgs), "--distortions", "darken", "--levels", "1,5",
            "--subjects", str(tmp_path / "p.yaml")]
    assert main([*argv, "--out", str(tmp_path / "db")]) == 0
    err = capsys.readouterr().err
    assert re.search(r"^iqa build: distort: 3/3 references, done in \ds$", err, re.M), err
    assert re.search(r"^\S+ \[\w{8}\]: 6/6 units, done in \ds$", err, re.M), err  # the scoring run
    assert main([*argv, "--out", str(tmp_path / "db2"), "--no-progress"]) == 0
    assert "references" not in capsys.readouterr().err
