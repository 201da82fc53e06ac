"""scripts/background.sh: the install's background jobs (the llama-cpp-python compile, LIBERO's interpreter) run at
nice 19 and can be waited for by a later run of scripts/install.sh than the one that started them (scripts/test.sh
runs the real-time tests between the two)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]


def _bash(script: str, venv: Path, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", f"source scripts/background.sh\n{script}"], cwd=ROOT,
                          env={**os.environ, "VENV": str(venv)}, capture_output=True, text=True, timeout=timeout)


def test_a_job_outlives_the_shell_that_started_it_and_a_later_shell_waits_for_its_status(tmp_path):
    out, go = tmp_path / "out", tmp_path / "go"
    job = f"nice > {out}; while [ ! -e {go} ]; do sleep 0.05; done; echo done >> {out}; exit 3"
    p = _bash(f"bg_start job {tmp_path / 'job.log'} bash -c '{job}'", tmp_path)
    assert p.returncode == 0, p.stderr  # returned while the job still waits for `go` (else: the 30 s timeout)
    wait_for(lambda: out.exists() and out.read_text().strip(), 30, "the background job to start")
    assert out.read_text().split() == ["19"]  # the job runs, at nice 19, and has not ended
    w = subprocess.Popen(["bash", "-euo", "pipefail", "-c", "source scripts/background.sh; bg_running job && echo running;"
                          " set +e; bg_wait job; echo status=$?; bg_running job || echo gone"], cwd=ROOT,
                         env={**os.environ, "VENV": str(tmp_path)}, stdout=subprocess.PIPE, text=True)
    go.touch()  # the job may end now; bg_wait reports its status only once it has
    assert w.communicate(timeout=30)[0].split() == ["running", "status=3", "gone"]
    assert out.read_text().split() == ["19", "done"]


def test_a_job_never_started_is_no_failure_and_a_killed_one_is(tmp_path):
    assert _bash("bg_wait never", tmp_path).returncode == 0
    (tmp_path / ".bg-killed.lock").touch()  # started, then its holder died before it left an exit status
    assert _bash("bg_wait killed", tmp_path).returncode == 1
    assert not (tmp_path / ".bg-killed.lock").exists()  # the next install starts it again


def test_install_refuses_an_unknown_argument():
    p = subprocess.run(["bash", str(ROOT / "scripts" / "install.sh"), "--leave-bg"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "unknown argument '--leave-bg'" in p.stderr and "--leave-background" in p.stderr
