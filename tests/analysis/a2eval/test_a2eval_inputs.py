"""Hostile inputs to `embeval a2eval`: the whole config is validated before any work (one line, exit 2, the file
named), run files read back from --out are bounded and shape-checked, population n = 0 means no synthetic
population. Every test runs in seconds (tiny pools, no curation)."""
from __future__ import annotations

import json

import pytest

from embeval_cli import main
from embeval.errors import ConfigError, MissingWeightsError
from embeval_analysis.a2eval import pipeline as P

BASE = {"seed": 0, "pool": {"procedural": {"n_items": 30, "seed": 0}}, "subjects": {"population": {"n": 3}},
        "report": {"n_random": 20, "n_boot": 20, "n_kcenter": 2}}


def _write(tmp_path, cfg, name="c.yaml"):
    import yaml

    p = tmp_path / name
    p.write_text(yaml.safe_dump(cfg))
    return p


def _no_work(monkeypatch):
    """Building the pool or curating is work: a config error must come before either."""
    def boom(*a, **k):
        raise AssertionError("work started before the config was validated")

    monkeypatch.setattr(P, "make_pool", boom)
    monkeypatch.setattr("embeval_analysis.a2eval.data_agent.curate", boom)


def _err_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("section,value,expect", [
    ("pool", {"procedural": {"n_items": 0}}, "pool.procedural.n_items: must lie in 1..100000, got 0"),
    ("pool", {"procedural": {"n_items": -10}}, "pool.procedural.n_items: must lie in 1..100000, got -10"),
    ("pool", {"procedural": {"n_items": 10 ** 12}}, "pool.procedural.n_items: must lie in 1..100000"),
    ("pool", {"procedural": {"n_items": "many"}}, "pool.procedural.n_items: must be an integer"),
    ("pool", {"procedural": {"shares": {"countng": 1}}}, "did you mean 'counting'"),
    ("data_agent", {"k_per_dim": "lots"}, "data_agent.k_per_dim must be an integer in 1..100000"),
    ("data_agent", {"k_per_dim": 0}, "got 0"),
    ("data_agent", {"k_per_dim": -3}, "got -3"),
    ("data_agent", {"k_per_dim": {"counting": 0}}, "data_agent.k_per_dim.counting must be an integer"),
    ("data_agent", {"max_rounds": 0}, "data_agent.max_rounds: must lie in 1..100"),
    ("data_agent", {"voters": [{"kind": "llm", "variant": -1}]}, "data_agent.voters[0].variant: must be >= 0"),
    ("subjects", {"population": {"n": -1}}, "subjects.population.n: must lie in 0..1000, got -1"),
    ("subjects", {"specs": "notalist"}, "subjects.specs: must be a list, got str"),
    ("subjects", {"specs": [3]}, "subjects.specs[0]: a subject spec is a YAML path or a mapping"),
    ("report", {"bogus": 1}, "report.bogus: unknown field"),
    ("report", {"n_random": 3}, "report.n_random: must lie in 20..10000"),
    ("eval_agent", {"memory_mb": "x"}, "eval_agent.memory_mb: must be an integer"),
    ("embedding", {"text_weight": 2}, "embedding.text_weight: must lie in 0..1"),
    ("data_agnt", {}, "data_agnt: unknown section; did you mean 'data_agent'?"),
])
@pytest.mark.parametrize("command", ["curate", "evaluate"])
def test_bad_config_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, section, value, expect, command):
    _no_work(monkeypatch)
    cfg = _write(tmp_path, {**BASE, section: value})
    assert main(["a2eval", command, "--config", str(cfg), "--out", str(tmp_path / "run")]) == 2
    err = _err_line(capsys)
    assert expect in err and str(cfg) in err, err


def test_config_file_problems_name_the_file(tmp_path, capsys, monkeypatch):
    _no_work(monkeypatch)
    raw = tmp_path / "latin1.yaml"
    raw.write_bytes(b"seed: \xff0\n")
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    for f, expect in ((raw, "is not UTF-8 text (byte 0xff at line 1, column 7)"),
                      (lst, "must be a mapping of sections (cache, data_agent")):
        assert main(["a2eval", "curate", "--config", str(f), "--out", str(tmp_path / "run")]) == 2
        err = _err_line(capsys)
        assert expect in err and str(f) in err, err
    assert main(["a2eval", "curate", "--config", str(_write(tmp_path, BASE)), "--k", "0",
                 "--out", str(tmp_path / "run")]) == 2
    assert "--k must be an integer in 1..100000" in _err_line(capsys)


def test_population_zero_means_no_synthetic_subjects():
    from embeval_analysis.a2eval.subjects import embedded_population

    assert embedded_population(0) == []
    assert [s.id for s in embedded_population(1)] == ["blind-prior"]
    assert len(embedded_population(4)) == 4
    with pytest.raises(ConfigError, match="n: must lie in 0..1000"):
        embedded_population(-1)
    specs = [{"kind": "vlm", "adapter": "embedded", "path": f"a2eval/a2eval-{m}"} for m in ("wide", "base", "motion")]
    subs = P.make_subjects({"subjects": {"population": {"n": 0}, "specs": specs}})
    assert [s.id for s in subs] == ["embedded:a2eval-wide", "embedded:a2eval-base", "embedded:a2eval-motion"]
    assert len(P.make_subjects({"subjects": {"population": None, "specs": specs}})) == 3
    with pytest.raises(ConfigError, match="at least 3 subjects.*got 2"):
        P.make_subjects({"subjects": {"population": {"n": 0}, "specs": specs[:2]}})


def test_procedural_pool_bounds_in_the_api():
    from embeval_analysis.a2eval.procedural import procedural_pool

    with pytest.raises(ConfigError, match="n_items: must lie in 1..100000, got 0"):
        procedural_pool(n_items=0)
    assert len(procedural_pool(n_items=1, seed=0)) == 1


def test_misspelt_group_model_suggests_the_group_members():
    from embeval.subjects.embedded.zoo import resolve_model

    with pytest.raises(MissingWeightsError) as exc:
        resolve_model("a2eval/a2eval-bse", "vlm")
    msg = str(exc.value)
    assert "did you mean 'a2eval/a2eval-base'?" in msg and "a2eval/a2eval-wide" in msg and "tiny-vlm," not in msg
    with pytest.raises(MissingWeightsError, match="shipped: tiny-vlm"):
        resolve_model("../../etc", "vlm")


def _run_folder(tmp_path):
    """A run folder consistent with BASE's pool, as curate writes it (selection, pool, assignments)."""
    from embeval_analysis.a2eval.procedural import procedural_pool

    items = procedural_pool(n_items=30, seed=0)
    out = tmp_path / "run"
    out.mkdir()
    sel = {"indices": [0, 1, 2], "weights": [1.0, 2.0, 1.0], "dimensions": ["a", "b", "c"], "cluster_of": [],
           "k_per_dim": {}, "k_rule": "", "pool_ids": [it.id for it in items]}
    (out / "selection.json").write_text(json.dumps(sel))
    (out / "pool.json").write_text(json.dumps(BASE["pool"]))
    (out / "assignments.jsonl").write_text("".join(json.dumps({"id": it.id, "label": "other"}) + "\n" for it in items))
    return out, sel


@pytest.mark.parametrize("name,content,expect", [
    ("selection.json", '{"indices": [1, 2', "is not valid JSON (line 1"),
    ("selection.json", "", "is empty"),
    ("selection.json", b"\x89PNG\r\n\x1a\n\x00\xff", "is not UTF-8 text"),
    ("selection.json", "[1, 2]", "is a JSON list, not an object"),
    ("selection.json", {"indices": ["x"]}, "'indices' must be a list of integers >= 0"),
    ("selection.json", {"weights": [1, "nan", 1]}, "'weights' must be a list of finite numbers"),
    ("selection.json", {"weights": [1.0]}, "must be non-empty and equally long, got 3, 1, 3"),
    ("selection.json", {"indices": [0, 1, 99]}, "indices point past the pool's 30 items"),
    ("selection.json", {"pool_ids": ["a"]}, "was curated from a different pool"),
    ("pool.json", '{"procedural": {"n_items": 1e99}}', "pool.procedural.n_items: must be an integer"),
    ("pool.json", '{"procedural": {"n_items": 30}, "oops": 1}', "pool.oops: unknown field"),
    ("assignments.jsonl", '{"id": "x", "label": "ot', "line 1 is not valid JSON"),
    ("assignments.jsonl", '{"id": "x", "label": 3}\n', "line 1 has no string 'label'"),
    ("assignments.jsonl", '{"id": "x", "label": "other"}\n', "1 labels for a pool of 30 items"),
])
def test_damaged_run_file_is_one_line_naming_it(tmp_path, capsys, name, content, expect):
    out, sel = _run_folder(tmp_path)
    if isinstance(content, dict):
        content = json.dumps({**sel, **content})
    (out / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    cfg = _write(tmp_path, BASE)
    assert main(["a2eval", "report", "--config", str(cfg), "--out", str(out)]) == 2
    err = _err_line(capsys)
    assert expect in err and str(out / name) in err and f"embeval a2eval curate --out {out}" in err, err


def test_damaged_memory_file_is_one_line(tmp_path):
    from embeval_analysis.a2eval.data_agent import Memory

    f = tmp_path / "memory.jsonl"
    f.write_text('{"kind": "proposal"}\n{"kind": "crit')
    with pytest.raises(ConfigError, match=r"memory.jsonl line 2 is not valid JSON .*delete it"):
        Memory(f)
    f.write_text('{"kind": "proposal"}\n')
    assert Memory(f).last("proposal") == {"kind": "proposal"}


@pytest.mark.parametrize("argv,expect", [(["--procedural", "0"], "--procedural: must lie in 1..100000, got 0"),
                                         (["--procedural", "1000000000000"], "--procedural: must lie in 1..100000"),
                                         (["--procedural", "5", "--seed", "-1"], "--seed: must be >= 0")])
def test_pool_command_bounds(capsys, argv, expect):
    assert main(["a2eval", "pool", *argv]) == 2
    assert expect in _err_line(capsys)
