"""Done-when: a run killed with SIGKILL at random moments resumes to exactly the results of an
uninterrupted run, with no unit lost and none duplicated."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import yaml

from embeval.runs.runner import run
from embeval.runs.store import ResultsStore

SPEC = {
    "name": "kill-test",
    "evaluator": "synthetic",
    "subjects": [{"id": "a", "kind": "synthetic"}, {"id": "b", "kind": "synthetic", "params": {"offset": 0.25}}],
    "items": {"source": "synthetic", "count": 150},
    "levels": [0, 1],
    "seeds": [3],
    "params": {"work_ms": 3},
    "backend": {"progress": False, "unit_timeout_s": 30},
}
N_UNITS = 2 * 150 * 2
CHILD = "import sys; from embeval.runs.runner import run; run(sys.argv[1], sys.argv[2], progress=False)"


def _done_count(db: str) -> int:
    if not os.path.exists(db):
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("SELECT count(*) FROM results WHERE status='done'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:  # schema not created yet
        return 0


def test_sigkill_at_random_moments_resumes_to_identical_results(tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC))
    run_dir = tmp_path / "killed"
    db = str(run_dir / "results.sqlite")
    rng = np.random.default_rng(20240607)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    kills, rounds, finished = 0, 0, False
    progress_at_kill = []
    while not finished and kills < 24 and rounds < 120:
        rounds += 1
        before = _done_count(db)
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(spec_path), str(run_dir)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.0, 0.5))  # anywhere: start-up, store creation, planning, first units
        else:
            t0 = time.monotonic()
            while _done_count(db) <= before and proc.poll() is None and time.monotonic() - t0 < 30:
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.04))  # mid-run, often mid-unit or mid-commit
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            progress_at_kill.append(_done_count(db))
        else:
            err = proc.stderr.read().decode()
            assert proc.returncode == 0, err
            finished = _done_count(db) == N_UNITS
        proc.stderr.close()
    if not finished:  # enough kills: finish the run uninterrupted
        run(spec_path, run_dir, progress=False)
    assert kills >= 20, f"only {kills} kills landed; make the units slower"
    assert len(set(progress_at_kill)) > 10  # the kills landed at many different moments

    ref_dir = tmp_path / "reference"
    summary = run(spec_path, ref_dir, progress=False)
    assert summary.done == N_UNITS and summary.failed == 0
    with ResultsStore(ref_dir / "results.sqlite") as a, ResultsStore(db) as b:
        ref, got = a.results(summary.run_id), b.results(summary.run_id)
        assert len(ref) == N_UNITS
        assert got == ref  # same keys, identical raw outputs
        n, distinct = b.conn.execute(
            "SELECT count(*), count(DISTINCT run_id||subject||item||distortion||level||seed) FROM results").fetchone()
        assert n == distinct == N_UNITS  # none duplicated, none lost
        assert b.counts(summary.run_id) == {"done": N_UNITS, "failed": 0}
        # kills during start-up leave no session; most landed after the run had started
        assert len(b.sessions(summary.run_id)) >= 20
