"""Results store, sharding, reseeding, watchdog, retry on resume, export, status, report, CLI."""
from __future__ import annotations

import copy
import json
import sqlite3

import numpy as np
import pandas as pd
import pytest
import yaml

from embeval.provenance import code_version, derive_seed
from embeval.runs.plan import plan_run
from embeval.runs.runner import resume, run, status
from embeval.runs.spec import parse_spec
from embeval.runs.store import ResultsStore
from embeval.runs.units import Unit, UnitResult, assign_shards, select_shard

BASE = {
    "name": "store-test",
    "evaluator": "synthetic",
    "subjects": [{"id": "a", "kind": "synthetic"}, {"id": "b", "kind": "synthetic", "params": {"offset": 0.3}}],
    "items": {"source": "synthetic", "count": 12},
    "levels": [0, 1, 2],
    "seeds": [0, 1],
    "backend": {"progress": False, "unit_timeout_s": 20},
}


def write_spec(tmp_path, **changes):
    d = copy.deepcopy(BASE)
    d.update(changes)
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_sharding_is_deterministic_balanced_and_never_splits_groups():
    groups = [f"g{i}" for i in range(103)]
    a = assign_shards(groups, 4)
    assert a == assign_shards(list(reversed(groups)) + groups[:5], 4)  # order and repeats do not matter
    sizes = np.bincount(list(a.values()), minlength=4)
    assert sizes.max() - sizes.min() <= 1
    units = [Unit("s", f"i{i}", "d", lvl, 0, group=f"i{i}") for i in range(40) for lvl in range(3)]
    shards = [select_shard(units, k, 3) for k in range(3)]
    assert sorted(u.key for s in shards for u in s) == sorted(u.key for u in units)  # a partition
    for s in shards:
        items = {u.item for u in s}
        assert all(sum(u.item == it for u in s) == 3 for it in items)  # whole groups only
    with pytest.raises(Exception, match="shard-index must lie in 0..2"):
        select_shard(units, 3, 3)


def test_unit_seed_depends_on_key_only():
    u = Unit("a", "x", "blur", 2, 7, group="x")
    assert u.unit_seed("synthetic") == derive_seed("synthetic", "a", "x", "blur", 2, 7)
    assert Unit("a", "x", "blur", 2, 7, group="other").unit_seed("synthetic") == u.unit_seed("synthetic")
    assert Unit("a", "x", "blur", 2, 8).unit_seed("synthetic") != u.unit_seed("synthetic")


def test_store_upsert_keeps_done_rows_and_replaces_failed(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as st:
        assert st.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        u = Unit("a", "x", "none", 0, 0, group="x")
        kw = {"spec_hash": "h" * 16, "code_version": "cv", "unit_seed": 5}
        st.record("run", u, UnitResult("failed", error="boom", started=1, finished=2), **kw)
        st.record("run", u, UnitResult("done", outputs={"v": 1}, started=3, finished=4), **kw)
        st.record("run", u, UnitResult("done", outputs={"v": 2}, started=5, finished=6), **kw)  # a racing duplicate
        st.record("run", u, UnitResult("failed", error="late", started=7, finished=8), **kw)
        rows = st.rows("run")
        assert len(rows) == 1
        r = rows[0]
        assert (r["status"], r["outputs"], r["attempts"], r["error"]) == ("done", {"v": 1}, 2, None)
        assert st.conn.execute("PRAGMA user_version").fetchone()[0] == 2
        with pytest.raises(sqlite3.IntegrityError):
            st.conn.execute("INSERT INTO results(run_id, subject, item, distortion, level, seed, status, spec_hash, code_version)"
                            " VALUES('run', 'a', 'x', 'none', 0, 0, 'done', 'h', 'c')")


def test_records_carry_provenance_and_shards_add_up(tmp_path):
    spec_file = write_spec(tmp_path)
    spec = parse_spec(yaml.safe_load(spec_file.read_text()), base_dir=tmp_path)
    total = len(plan_run(spec).units)
    assert total == 2 * 12 * 3 * 2
    sums = [run(spec_file, tmp_path / "sharded", shard_index=k, num_shards=3) for k in range(3)]
    assert sum(s.total for s in sums) == total and all(s.failed == 0 for s in sums)
    whole = run(spec_file, tmp_path / "whole")
    with ResultsStore(tmp_path / "sharded" / "results.sqlite") as a, ResultsStore(tmp_path / "whole" / "results.sqlite") as b:
        assert a.results(spec.run_id) == b.results(spec.run_id)
        row = a.rows(spec.run_id)[0]
        assert row["spec_hash"] == spec.hash and row["code_version"] == code_version()
        assert row["unit_seed"] == derive_seed("synthetic", row["subject"], row["item"], row["distortion"], row["level"], row["seed"])
        assert set(row["outputs"]) == {"score", "u", "unit_seed"}
    st = status(tmp_path / "sharded")
    assert [s["done"] for s in st["shards"]] == [s.total for s in sums]
    assert st["done"] == total and st["sessions"] == 3
    assert whole.skipped == 0 and run(spec_file, tmp_path / "whole").skipped == total  # rerun skips everything


def test_watchdog_records_hung_unit_and_failed_units_are_retried_on_resume(tmp_path):
    flag = tmp_path / "failing"
    flag.write_text("")
    spec_file = write_spec(tmp_path, subjects=[{"id": "a", "kind": "synthetic"}], levels=[0], seeds=[0],
                           params={"hang_items": ["item00002"], "hang_s": 2.0, "fail_items": ["item00005"], "fail_flag": "failing"},
                           backend={"progress": False, "unit_timeout_s": 0.3})
    s = run(spec_file, tmp_path / "run")
    assert (s.total, s.done, s.failed) == (12, 10, 2)
    with ResultsStore(tmp_path / "run" / "results.sqlite") as st:
        failed = {r["item"]: r["error"] for r in st.rows(s.run_id, "failed")}
    assert "timeout" in failed["item00002"] and "unit_timeout_s=0.3" in failed["item00002"]
    assert "RuntimeError: synthetic failure on item item00005" in failed["item00005"]
    flag.unlink()  # fix the cause; the hang stays: a longer timeout lets it finish
    s2 = resume(tmp_path / "run", unit_timeout_s=10)
    assert (s2.skipped, s2.done, s2.failed) == (10, 2, 0)
    with ResultsStore(tmp_path / "run" / "results.sqlite") as st:
        rows = {r["item"]: r for r in st.rows(s.run_id)}
    assert rows["item00002"]["attempts"] == 2 and rows["item00002"]["status"] == "done"
    # results equal a clean run's
    clean = run(write_spec(tmp_path, subjects=[{"id": "a", "kind": "synthetic"}], levels=[0], seeds=[0],
                           params={"hang_items": ["item00002"], "hang_s": 2.0, "fail_items": ["item00005"], "fail_flag": "failing"}),
                tmp_path / "clean", unit_timeout_s=10)
    with ResultsStore(tmp_path / "clean" / "results.sqlite") as a, ResultsStore(tmp_path / "run" / "results.sqlite") as b:
        assert a.results(clean.run_id) == b.results(clean.run_id)


def test_in_run_retries_and_setup_failure_recorded(tmp_path):
    from embeval.runs.registry import EVALUATORS
    from embeval.runs.evaluators.synthetic import SyntheticEvaluator

    seen: set = set()

    class Flaky(SyntheticEvaluator):  # fails the first attempt of one unit
        def run_unit(self, spec, state, unit, unit_seed):
            if unit.item == "item00001" and unit.item not in seen:
                seen.add(unit.item)
                raise ValueError("transient")
            return super().run_unit(spec, state, unit, unit_seed)

    class BrokenSetup(SyntheticEvaluator):
        def setup(self, spec, subject):
            raise OSError("weights corrupt")

    EVALUATORS.register("_flaky", Flaky)
    EVALUATORS.register("_broken", BrokenSetup)
    try:
        s = run(write_spec(tmp_path, evaluator="_flaky", subjects=[{"id": "a", "kind": "synthetic"}], levels=[0], seeds=[0],
                           backend={"progress": False, "retries": 1}), tmp_path / "flaky")
        assert (s.done, s.failed) == (12, 0)
        b = run(write_spec(tmp_path, evaluator="_broken", levels=[0], seeds=[0]), tmp_path / "broken")
        assert (b.done, b.failed) == (0, 24)
        assert "setup failed: OSError: weights corrupt" in b.errors[0]
    finally:
        EVALUATORS.unregister("_flaky")
        EVALUATORS.unregister("_broken")


def test_export_parquet_and_report(tmp_path):
    spec_file = write_spec(tmp_path, params={"fail_items": ["item00003"]})
    s = run(spec_file, tmp_path / "run")
    from embeval.runs.export import export_parquet
    from embeval.runs.report import build_report

    out = export_parquet(tmp_path / "run", tmp_path / "r.parquet")
    df = pd.read_parquet(out)
    assert len(df) == s.total and (df["status"] == "failed").sum() == s.failed == 12
    done = df[df["status"] == "done"]
    assert np.allclose(done["out.score"], [json.loads(o)["score"] for o in done["outputs"]])
    assert set(df["spec_hash"]) == {s.run_id}
    html = build_report(tmp_path / "run").read_text()
    assert s.run_id in html and code_version() in html
    assert html.count("data:image/png;base64,") >= 2  # evaluator figure + timing histogram
    assert "synthetic failure on item item00003" in html and "Synthetic scores" in html


def test_cli_run_status_resume_export_report(tmp_path, capsys):
    from embeval_cli import main

    spec_file = write_spec(tmp_path, params={"fail_items": ["item00000"], "fail_flag": "flag"})
    (tmp_path / "flag").write_text("")
    rd = tmp_path / "run"
    assert main(["run", str(spec_file), "--out", str(rd), "--no-progress", "--num-shards", "2", "--shard-index", "0"]) in (0, 1)
    assert main(["status", str(rd)]) == 0
    out = capsys.readouterr().out
    assert "0/2" in out and "1/2" in out
    (tmp_path / "flag").unlink()
    assert main(["resume", str(rd), "--no-progress"]) == 0
    assert main(["export", str(rd), "--parquet", str(tmp_path / "x.parquet")]) == 0
    assert len(pd.read_parquet(tmp_path / "x.parquet")) == 144
    assert main(["report", str(rd), "--out", str(tmp_path / "r.html")]) == 0
    assert main(["merge", str(tmp_path / "copy"), str(rd)]) == 0 and "144 new done units" in capsys.readouterr().out
    assert main(["run", str(write_spec(tmp_path, evaluator="bogus")), "--check"]) == 2
    assert "spec.evaluator: unknown evaluator 'bogus'" in capsys.readouterr().err
    assert main(["status", str(tmp_path / "nowhere")]) == 2


def test_parallel_shards_share_one_store_and_separate_stores_merge(tmp_path):
    import subprocess
    import sys

    from embeval.runs.runner import merge

    spec_file = write_spec(tmp_path, params={"work_ms": 1})
    child = "import sys; from embeval.runs import run; run(sys.argv[1], sys.argv[2], shard_index=int(sys.argv[3]), num_shards=3, progress=False)"
    procs = [subprocess.Popen([sys.executable, "-c", child, str(spec_file), str(tmp_path / "shared"), str(k)]) for k in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]  # three writers on one SQLite store
    for k in range(3):
        run(spec_file, tmp_path / f"machine{k}", shard_index=k, num_shards=3)
    r = merge(tmp_path / "merged", [tmp_path / f"machine{k}" for k in range(3)])
    assert r == {"new_done": 144, "done": 144}
    assert merge(tmp_path / "merged", [tmp_path / "machine0"])["new_done"] == 0  # merging again adds nothing
    whole = run(spec_file, tmp_path / "whole")
    with ResultsStore(tmp_path / "shared" / "results.sqlite") as a, ResultsStore(tmp_path / "merged" / "results.sqlite") as b, \
            ResultsStore(tmp_path / "whole" / "results.sqlite") as c:
        assert a.results(whole.run_id) == b.results(whole.run_id) == c.results(whole.run_id)
        assert b.conn.execute("SELECT count(*) FROM results").fetchone()[0] == 144
        assert len(b.sessions(whole.run_id)) == 3
    assert run(spec_file, tmp_path / "merged").skipped == 144  # the merged folder is a complete run
    other = write_spec(tmp_path, seeds=[9])
    run(other, tmp_path / "other")
    with pytest.raises(Exception, match="different run spec"):
        merge(tmp_path / "merged", [tmp_path / "other"])


def test_global_generators_are_seeded_per_unit(tmp_path):
    """A subject that samples from numpy's global generator still gives order-independent results."""
    from embeval.runs.evaluators.synthetic import SyntheticEvaluator
    from embeval.runs.registry import EVALUATORS

    class GlobalRng(SyntheticEvaluator):
        def run_unit(self, spec, state, unit, unit_seed):
            import random

            return {"np": float(np.random.random()), "py": random.random()}

    EVALUATORS.register("_global", GlobalRng)
    try:
        spec_file = write_spec(tmp_path, evaluator="_global", levels=[0], seeds=[0])
        whole = run(spec_file, tmp_path / "whole")
        for k in (1, 0):  # shards in the other order: each unit sees a different history
            run(spec_file, tmp_path / "sharded", shard_index=k, num_shards=2)
        with ResultsStore(tmp_path / "whole" / "results.sqlite") as a, ResultsStore(tmp_path / "sharded" / "results.sqlite") as b:
            ra = a.results(whole.run_id)
            assert ra == b.results(whole.run_id) and len({o["np"] for o in ra.values()}) == len(ra)
    finally:
        EVALUATORS.unregister("_global")


def test_store_from_a_newer_schema_is_refused(tmp_path):
    from embeval.errors import ConfigError

    con = sqlite3.connect(tmp_path / "r.sqlite")
    con.execute("PRAGMA user_version=99")
    con.close()
    with pytest.raises(ConfigError, match="newer embeval"):
        ResultsStore(tmp_path / "r.sqlite")


def test_a_down_server_fails_the_rest_of_its_units_at_once_and_resume_runs_them(tmp_path):
    from embeval.errors import ServerUnavailableError
    from embeval.runs.evaluators.synthetic import SyntheticEvaluator
    from embeval.runs.execute import SERVER_DOWN_AFTER
    from embeval.runs.registry import EVALUATORS

    down = tmp_path / "server_down"
    down.write_text("")
    calls: list[str] = []

    class Remote(SyntheticEvaluator):  # a subject behind a model server
        def run_unit(self, spec, state, unit, unit_seed):
            calls.append(unit.item)
            if down.exists():
                raise ServerUnavailableError("server at http://127.0.0.1:1 is not reachable; start it")
            return super().run_unit(spec, state, unit, unit_seed)

    EVALUATORS.register("_remote", Remote)
    try:
        spec = write_spec(tmp_path, evaluator="_remote", subjects=[{"id": "a", "kind": "synthetic"}], levels=[0], seeds=[0])
        s = run(spec, tmp_path / "run")
        assert (s.done, s.failed) == (0, 12)
        assert len(calls) == SERVER_DOWN_AFTER  # the others did not wait through the client's retries
        with ResultsStore(tmp_path / "run" / "results.sqlite") as st:
            errors = [r["error"] for r in st.rows(s.run_id, "failed")]
        assert sum("not tried: the subject's server failed 3 units in a row" in e for e in errors) == 12 - SERVER_DOWN_AFTER
        down.unlink()  # the server is up again
        s2 = resume(tmp_path / "run")
        assert (s2.done, s2.failed) == (12, 0)
    finally:
        EVALUATORS.unregister("_remote")
