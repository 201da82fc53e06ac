"""The run folder's lock (one process per shard, the holder named, stale locks taken over) and the weights check
on resume (units carry their subject's checkpoint fingerprint; changed weights are refused or re-run on request)."""
from __future__ import annotations

import errno
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from embeval_cli import main
from embeval.provenance import weights_fingerprint
from embeval.runs.lock import RunLock, RunLockedError, process_start, shards_overlap
from embeval.runs.runner import run
from embeval.runs.store import ResultsStore
from embeval.runs.units import assign_shards

ROOT = Path(__file__).resolve().parents[3]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))


def _spec(tmp_path: Path, **params) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump({
        "evaluator": "synthetic", "subjects": [{"id": "a", "kind": "synthetic"}],
        "items": {"source": "synthetic", "count": 6}, "levels": [0, 1], "params": params,
        "backend": {"progress": False}}))
    return p


def _error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("embeval: error:")]
    assert len(lines) == 1, err
    return lines[0]


def _holder(run_dir: Path, shard: str = "0 1") -> subprocess.Popen:
    """A second process that holds a shard of ``run_dir`` until killed (prints 'held' once it does)."""
    code = ("import sys, time; from embeval.runs.lock import RunLock; "
            f"RunLock(sys.argv[1], {shard.split()[0]}, {shard.split()[1]}).acquire(); print('held', flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True, env=ENV)
    assert p.stdout.readline().strip() == "held"
    return p


def _locked_message(run_dir: Path, pid: int, what: str = "shard 0/1") -> re.Pattern:
    return re.compile(
        rf"embeval: error: run folder {re.escape(str(run_dir))} is in use: {re.escape(what)} is being run by pid {pid} on "
        rf"{re.escape(socket.gethostname())} since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(.+\); wait for it to finish or "
        rf"stop it \(kill {pid}\), run a shard it does not cover \(--shard-index/--num-shards\), or choose another --out$")


# ------------------------------------------------------------------ overlap arithmetic
def test_shard_overlap_rule_matches_the_real_assignment():
    """I of N and J of M share groups exactly when I = J mod gcd(N, M); judged by assign_shards on 840 groups."""
    groups = [f"g{i}" for i in range(840)]
    for n in range(1, 7):
        a = assign_shards(groups, n)
        for m in range(1, 7):
            b = assign_shards(groups, m)
            for i in range(n):
                for j in range(m):
                    shared = any(a[g] == i and b[g] == j for g in groups)
                    assert shards_overlap((i, n), (j, m)) == shared, (i, n, j, m)


def test_overlapping_shards_are_refused_disjoint_ones_run_side_by_side(tmp_path):
    d = tmp_path / "run"
    with RunLock(d, 0, 2):
        with pytest.raises(RunLockedError, match=r"shard 0/2 is being run by pid"):
            RunLock(d, 0, 2).acquire()
        with pytest.raises(RunLockedError, match=r"shard 0/2, which overlaps shard 2/4,"):
            RunLock(d, 2, 4).acquire()
        with pytest.raises(RunLockedError, match=r"shard 0/2, which overlaps shard 0/1,"):
            RunLock(d, 0, 1).acquire()
        with RunLock(d, 1, 2):  # the other half
            pass
        with RunLock(d, 1, 4), RunLock(d, 3, 4):  # disjoint from 0/2 and from each other
            pass
    with RunLock(d, 0, 1):  # all released: the whole run is free again
        pass


def test_two_overlapping_shards_1_of_2_and_3_of_4_are_refused(tmp_path):
    d = tmp_path / "run"
    with RunLock(d, 1, 2), pytest.raises(RunLockedError, match="overlaps shard 3/4"):
        RunLock(d, 3, 4).acquire()


# ------------------------------------------------------------------ the CLI against a second process
def test_a_second_process_on_the_same_out_is_refused_naming_the_holder(tmp_path, capsys):
    spec = _spec(tmp_path)
    d = tmp_path / "run"
    holder = _holder(d)
    try:
        for argv in (["run", str(spec), "--out", str(d), "--no-progress"],
                     ["run", str(spec), "--out", str(d), "--num-shards", "3", "--shard-index", "2", "--no-progress"]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            what = "shard 0/1" if "--num-shards" not in argv else "shard 0/1, which overlaps shard 2/3,"
            assert _locked_message(d, holder.pid, what).match(_error_line(err)), err
        assert not (d / "results.sqlite").exists()  # refused before anything was recorded
        from embeval.runs.lock import live_holders

        ((shard, who),) = live_holders(d)
        assert shard == (0, 1) and who["pid"] == holder.pid and who["host"] == socket.gethostname()
        holder.send_signal(signal.SIGKILL)  # dies holding the lock: a stale lock file stays behind
        holder.wait()
        assert (d / "locks" / "shard-0-of-1.lock").read_text().startswith("{")
        assert main(["run", str(spec), "--out", str(d), "--no-progress"]) == 0
        assert "12/12 done" in capsys.readouterr().out
        assert main(["resume", str(d), "--no-progress"]) == 0  # the lock was released at the end of the run
        assert live_holders(d) == []  # the dead holder's file is still there, but free
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def _has_session(d: Path) -> bool:
    try:
        con = sqlite3.connect(f"file:{d / 'results.sqlite'}?mode=ro", uri=True)
        try:
            return con.execute("SELECT count(*) FROM sessions").fetchone()[0] > 0
        finally:
            con.close()
    except sqlite3.Error:
        return False


def test_two_real_embeval_runs_on_one_folder(tmp_path, capsys):
    spec = _spec(tmp_path, sleep_ms=300)  # 3.6 s of units: time enough for the second process to be refused
    d = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-m", "embeval_cli", "run", str(spec), "--out", str(d), "--no-progress"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        lock = d / "locks" / "shard-0-of-1.lock"
        t0 = time.monotonic()
        while not (lock.exists() and lock.read_text().startswith("{")) and time.monotonic() - t0 < 60:
            assert child.poll() is None, child.communicate()
            time.sleep(0.05)
        assert main(["resume", str(d), "--no-progress"]) == 2
        line = _error_line(capsys.readouterr().err)
        assert _locked_message(d, child.pid).match(line) and "embeval run " in line, line  # the holder's command
        while not _has_session(d) and time.monotonic() - t0 < 60:  # the run registers itself right after the lock
            time.sleep(0.05)
        assert main(["status", str(d)]) == 0  # status names the running process too
        running = [x for x in capsys.readouterr().out.splitlines() if x.startswith("running now:")]
        assert len(running) == 1 and running[0].startswith(f"running now: shard 0/1 by pid {child.pid} on "), running
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        assert "12/12 done (12 now, 0 before)" in out  # the refused process did not take any unit
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# ------------------------------------------------------------------ no flock (network file systems): pid checks
@pytest.fixture()
def no_flock(monkeypatch):
    import fcntl

    def flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", flock)


def _write_holder(d: Path, **holder) -> Path:
    import json

    p = d / "locks" / "shard-0-of-1.lock"
    p.parent.mkdir(parents=True, exist_ok=True)
    base = {"host": socket.gethostname(), "started": time.time(), "command": "embeval run x.yaml", "shard_index": 0,
            "num_shards": 1}
    p.write_text(json.dumps({**base, **holder}))
    return p


def test_without_flock_a_dead_holder_is_taken_over_and_a_live_one_refused(tmp_path, no_flock):
    d = tmp_path / "run"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _write_holder(d, pid=dead.pid)
    with RunLock(d):  # stale: its pid is gone
        pass
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        time.sleep(0.2)
        _write_holder(d, pid=live.pid, proc_start=process_start(live.pid))
        with pytest.raises(RunLockedError, match=f"is being run by pid {live.pid} on "):
            RunLock(d).acquire()
        _write_holder(d, pid=live.pid, proc_start=(process_start(live.pid) or 0) + 1)  # the pid was reused since
        with RunLock(d):
            pass
        _write_holder(d, pid=live.pid, host="other-machine")  # another host: its pid cannot be checked from here
        with pytest.raises(RunLockedError, match=r"on other-machine .*; if that process is gone, delete .*shard-0-of-1\.lock"):
            RunLock(d).acquire()
    finally:
        live.kill()
        live.wait()


# ------------------------------------------------------------------ weights fingerprints and resume
def _weights_spec(tmp_path: Path, weights: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump({
        "evaluator": "synthetic",
        "subjects": [{"id": "a", "kind": "synthetic", "path": weights}, {"id": "b", "kind": "synthetic"}],
        "items": {"source": "synthetic", "count": 3}, "levels": [0, 1], "backend": {"progress": False}}))
    return p


def _weights_column(d: Path) -> dict[str, set]:
    with ResultsStore(d / "results.sqlite") as st:
        out: dict[str, set] = {}
        for subject, w in st.conn.execute("SELECT subject, weights FROM results WHERE status='done'"):
            out.setdefault(subject, set()).add(w)
        return out


def test_units_carry_the_checkpoint_fingerprint_and_changed_weights_are_refused(tmp_path, capsys):
    ck = tmp_path / "ckpt"
    ck.mkdir()
    (ck / "config.json").write_text('{"type": "x"}')
    (ck / "model.safetensors").write_bytes(b"\x01" * 1000)
    spec, d = _weights_spec(tmp_path, "ckpt"), tmp_path / "run"
    first = weights_fingerprint(ck)
    assert main(["run", str(spec), "--out", str(d), "--no-progress"]) == 0
    assert _weights_column(d) == {"a": {first}, "b": {None}}  # b has no local weights
    capsys.readouterr()

    # the same bytes copied again (new mtime and inode): still the same weights, nothing re-run
    data = (ck / "model.safetensors").read_bytes()
    (ck / "model.safetensors").unlink()
    (ck / "model.safetensors").write_bytes(data)
    assert main(["resume", str(d), "--no-progress"]) == 0
    assert "12/12 done (0 now, 12 before)" in capsys.readouterr().out

    (ck / "model.safetensors").write_bytes(b"\x02" * 1000)  # retrained
    second = weights_fingerprint(ck)
    assert second != first
    for argv in (["resume", str(d), "--no-progress"], ["run", str(spec), "--out", str(d), "--no-progress"]):
        assert main(argv) == 2
        assert _error_line(capsys.readouterr().err) == (
            f"embeval: error: the weights of subject 'a' changed since 6 of its stored results ({ck}: {second} now, "
            f"{first} then); run again with --rerun-changed to recompute those units with the new weights, or start a "
            "new run folder (--out) to keep both")
    assert _weights_column(d) == {"a": {first}, "b": {None}}  # nothing touched

    assert main(["resume", str(d), "--no-progress", "--rerun-changed"]) == 0
    cap = capsys.readouterr()
    assert "weights changed: 6 stored unit(s) of this shard run again with the new weights (--rerun-changed)" in cap.err
    assert "12/12 done (6 now, 6 before)" in cap.out  # only subject a's units ran again
    assert _weights_column(d) == {"a": {second}, "b": {None}}
    with ResultsStore(d / "results.sqlite") as st:
        attempts = dict(st.conn.execute("SELECT subject, max(attempts) FROM results GROUP BY subject").fetchall())
    assert attempts == {"a": 2, "b": 1}
    assert main(["resume", str(d), "--no-progress"]) == 0  # consistent again

    (ck / "extra.bin").write_bytes(b"x")  # a file added to the checkpoint folder changes it too
    assert main(["resume", str(d), "--no-progress"]) == 2
    assert "the weights of subject 'a' changed" in _error_line(capsys.readouterr().err)


def test_the_rerun_is_per_shard(tmp_path, capsys):
    w = tmp_path / "w.bin"
    w.write_bytes(b"1")
    spec, d = _weights_spec(tmp_path, "w.bin"), tmp_path / "run"
    for k in (0, 1):
        assert run(spec, d, shard_index=k, num_shards=2).failed == 0
    w.write_bytes(b"2")
    s = run(spec, d, shard_index=0, num_shards=2, rerun_changed=True)
    capsys.readouterr()
    n0 = s.done
    assert 0 < n0 < 6
    with pytest.raises(Exception, match=f"changed since {6 - n0} of its stored results"):  # shard 1 still holds old ones
        run(spec, d, shard_index=1, num_shards=2)


def test_fingerprint_of_a_shipped_embedded_model_and_the_hash_cache(tmp_path):
    from embeval.runs.spec import parse_spec
    from embeval.runs.weights import fingerprints, subject_checkpoint
    from embeval.subjects.embedded.zoo import MODELS_DIR

    spec = parse_spec({"evaluator": "policy-decision", "subjects": [
        {"id": "v", "kind": "policy", "adapter": "embedded", "path": "tiny-vla-wide"},
        {"id": "d", "kind": "policy", "adapter": "embedded"}], "items": {"source": "synthetic", "count": 1}})
    assert subject_checkpoint(spec, spec.subjects[0]) == MODELS_DIR / "tiny-vla-wide"
    assert subject_checkpoint(spec, spec.subjects[1]) == MODELS_DIR / "tiny-vla"  # the adapter's default
    with ResultsStore(tmp_path / "r.sqlite") as st:
        fps = fingerprints(spec, spec.subjects, st)
        assert fps == {"v": weights_fingerprint(MODELS_DIR / "tiny-vla-wide"), "d": weights_fingerprint(MODELS_DIR / "tiny-vla")}
        n = st.conn.execute("SELECT count(*) FROM file_hashes").fetchone()[0]
        assert n == len([p for p in (MODELS_DIR / "tiny-vla-wide").iterdir()]) + len(list((MODELS_DIR / "tiny-vla").iterdir()))
        assert fingerprints(spec, spec.subjects, st) == fps


def test_a_schema_1_store_is_upgraded_and_its_rows_are_not_checked(tmp_path, capsys):
    """A run folder from before the fingerprints: opened for writing it gains the column; its rows carry none,
    so a resume runs (nothing to compare), and merging a schema-1 store into a new one works."""
    w = tmp_path / "w.bin"
    w.write_bytes(b"1")
    spec, d = _weights_spec(tmp_path, "w.bin"), tmp_path / "run"
    assert run(spec, d).failed == 0
    db = d / "results.sqlite"
    con = sqlite3.connect(db)  # make it what schema 1 was: no weights column, no file_hashes
    con.execute("ALTER TABLE results DROP COLUMN weights")
    con.execute("DROP TABLE file_hashes")
    con.execute("PRAGMA user_version=1")
    con.commit()
    con.close()
    w.write_bytes(b"2")
    assert main(["resume", str(d), "--no-progress"]) == 0
    with ResultsStore(db) as st:
        assert st.conn.execute("PRAGMA user_version").fetchone()[0] == 2
        assert {r["weights"] for r in st.rows(st.run_ids()[0])} == {None}
    capsys.readouterr()
    # merge: a schema-1 source into a fresh folder
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE results DROP COLUMN weights")
    con.commit()
    con.close()
    assert main(["merge", str(tmp_path / "merged"), str(d)]) == 0
    assert "12 done in all" in capsys.readouterr().out


def test_hashing_a_large_uncached_checkpoint_is_announced(tmp_path, capsys):
    from embeval.runs.weights import _announce_hashing

    ck = tmp_path / "big"
    ck.mkdir()
    with open(ck / "model.safetensors", "wb") as f:
        f.truncate(3 << 20)  # sparse
    cache: dict = {}
    _announce_hashing("v", ck, cache, min_bytes=2 << 20)
    assert capsys.readouterr().err == (f"fingerprinting 3 MiB of weights of subject 'v' ({ck}); once per change, the "
                                       "hashes are kept in the run's store\n")
    weights_fingerprint(ck, cache)  # now cached: nothing to announce
    _announce_hashing("v", ck, cache, min_bytes=2 << 20)
    assert capsys.readouterr().err == ""
