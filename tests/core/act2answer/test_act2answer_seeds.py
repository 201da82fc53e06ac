"""embeval train seeds: the seed table, knowledge apart from control, and what holds on every
seed. The arithmetic is checked on hand-made reports; training itself is outside make test."""
from __future__ import annotations

from pathlib import Path

import pytest

from embeval.act2answer.seeds import format_seed_table, holds_on_every_seed, on_card_rate, seed_table, train_or_reuse
from embeval.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def rep(cats: dict[str, tuple[float, float]], demo=("color",)) -> dict:
    """A report as train_choice_vla_recipe writes it: {category: (rate, out_of_bounds)}."""
    return {"recipe": {"demo_categories": list(demo)},
            "eval": {"categories": {c: {"rate": r, "out_of_bounds": o} for c, (r, o) in cats.items()}}}


REPORTS = {
    "frozen": {0: rep({"color": (0.95, 0.0), "time": (0.30, 0.60), "all": (0.79, 0.1)}),
               1: rep({"color": (0.90, 0.05), "time": (0.10, 0.90), "all": (0.66, 0.2)}),
               2: rep({"color": (1.00, 0.0), "time": (0.20, 0.80), "all": (0.70, 0.15)})},
    "full": {0: rep({"color": (0.80, 0.0), "time": (0.00, 1.00), "all": (0.61, 0.3)}),
             1: rep({"color": (0.85, 0.0), "time": (0.05, 0.95), "all": (0.71, 0.2)}),
             2: rep({"color": (0.90, 0.0), "time": (0.10, 0.85), "all": (0.60, 0.25)})},
}


def test_on_card_rate_separates_knowledge_from_control():
    assert on_card_rate(0.30, 0.60) == pytest.approx(0.75)  # 30 % of all episodes = 75 % of those on a card
    assert on_card_rate(0.0, 1.0) is None
    assert on_card_rate(0.5, 0.0) == 0.5


def test_seed_table_means_ranges_and_the_verdict_per_category():
    t = seed_table(REPORTS)
    row = t["frozen"]["categories"]["time"]
    assert row["mean"] == pytest.approx((0.30 + 0.10 + 0.20) / 3) and (row["min"], row["max"]) == (0.10, 0.30)
    assert row["seeds"][1]["on_card"] == pytest.approx(0.10 / 0.10)
    holds = holds_on_every_seed(t, "frozen", "full")
    assert holds["color"] == "frozen > full"  # 0.95>0.80, 0.90>0.85, 1.00>0.90
    assert holds["time"] == "frozen > full"
    assert holds["all"] == "differs by seed"  # seed 1 reverses the order (0.66 < 0.71)
    md = format_seed_table(t, "frozen", "full")
    assert md.splitlines()[0].startswith("| category | frozen s0 | frozen s1 | frozen s2 | full s0")
    assert "| color* | 95.0 (95.0) | 90.0 (94.7) |" in md and "differs by seed" in md
    assert "| time | 30.0 (75.0) |" in md and "| 0.0 (-) |" in md


def test_a_report_of_the_same_recipe_is_reused_and_a_table_start_report_is_not(tmp_path, monkeypatch):
    """The shipped seed-0 reports were made on the grasped start (the reference protocol): reused for seed 0 with
    nothing trained. A report without ``start`` (made on the table start) is not reused: that seed is trained;
    the same report marked grasped is reused."""
    import json

    import embeval.act2answer.choice_vla_training as training
    from embeval.subjects.embedded.zoo import MODELS_DIR

    class Trained(Exception):
        pass

    def refuse(*a, **k):
        raise Trained

    monkeypatch.setattr(training, "train_choice_vla_recipe", refuse)
    for name in ("tiny-vla-a2a-frozen", "tiny-vla-a2a-full"):
        shipped = json.loads((MODELS_DIR / name / "report.json").read_text())
        assert shipped["recipe"]["start"] == "grasped" and shipped["recipe"]["seed"] == 0
        r = train_or_reuse(name, 0, tmp_path, log=None)  # the shipped report: refuse() is not called
        assert r["recipe"] == shipped["recipe"] and "all" in r["eval"]["categories"]
        table = {**shipped, "recipe": {k: v for k, v in shipped["recipe"].items() if k != "start"} | {"seed": 1}}
        (tmp_path / name / "seed1").mkdir(parents=True)
        (tmp_path / name / "seed1" / "report.json").write_text(json.dumps(table))
        with pytest.raises(Trained):  # a table-start report does not stand for the grasped recipe
            train_or_reuse(name, 1, tmp_path, log=None)
        (tmp_path / name / "seed1" / "report.json").write_text(
            json.dumps({**table, "recipe": {**table["recipe"], "start": "grasped"}}))
        r = train_or_reuse(name, 1, tmp_path, log=None)  # the same recipe: reused
        assert r["recipe"]["seed"] == 1 and r["recipe"]["start"] == "grasped"


def test_the_command_refuses_fewer_than_three_seeds_and_unknown_recipes(tmp_path, capsys):
    from embeval_cli import main

    for args, msg in ((["--seeds", "0", "1"], "at least 3 distinct seeds"),
                      (["--seeds", "0", "0", "1"], "at least 3 distinct seeds"),
                      (["--recipes", "tiny-vla-a2a-frozen", "tiny-vla"], "is not a VLM -> VLA recipe")):
        assert main(["train", "seeds", *args, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(ConfigError):
        holds_on_every_seed({"a": {"seeds": [0], "categories": {}}, "b": {"seeds": [1], "categories": {}}}, "a", "b")


def test_probe_table_says_whether_the_transfer_order_holds_on_every_seed():
    from embeval_analysis.probing.seed_probes import format_probe_table

    def row(w, t):
        return {"within": {"cnr": w, "backbone_best": 0.9, "expert_best": 0.8},
                "transfer": {"cnr": t, "backbone_best": 0.8, "expert_best": 0.7}}

    res = {"frozen": {0: row(1.0, 1.04), 1: row(1.0, 0.9), 2: row(1.0, 1.1)},
           "full": {0: row(1.0, 0.70), 1: row(1.0, 0.95), 2: row(1.0, 0.8)}}
    md = format_probe_table(res, "frozen", "full")
    assert "| 0 | 1.000 (0.900 / 0.800) | 1.040 (0.800 / 0.700) | 1.000 (0.900 / 0.800) | 0.700" in md
    assert md.endswith("transfer CNR: the order differs by seed (not a property of the recipes)")
    res["frozen"][1] = row(1.0, 0.99)
    assert format_probe_table(res, "frozen", "full").endswith("transfer CNR on every seed: frozen > full")
    # the other way round is an order that holds too (the verdict once only looked for frozen above full)
    for s, t in ((0, 1.1), (1, 1.2), (2, 0.9)):
        res["full"][s] = row(1.0, t)
    res["frozen"][2] = row(1.0, 0.85)
    assert format_probe_table(res, "frozen", "full").endswith("transfer CNR on every seed: frozen < full")
    res["full"][1] = {"within": res["full"][1]["within"]}  # a seed without a transfer probe decides nothing
    assert format_probe_table(res, "frozen", "full").endswith("the order differs by seed (not a property of the recipes)")


def test_a_half_written_report_is_not_reused(tmp_path, monkeypatch):
    """A study killed while a report was written: that seed is trained again, not read as a result."""
    import embeval.act2answer.choice_vla_training as T

    bad = tmp_path / "tiny-vla-a2a-full" / "seed7" / "report.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"recipe": {"seed": 7}, "eval": {"categ')
    trained = []
    monkeypatch.setattr(T, "train_choice_vla_recipe", lambda r, path, work, log: trained.append((r.seed, path)) or {"ok": 1})
    assert train_or_reuse("tiny-vla-a2a-full", 7, tmp_path, log=None) == {"ok": 1}
    assert trained == [(7, bad.parent)]


def test_the_shipped_seed_study_is_the_docs_table_and_a_foreign_report_is_refused(tmp_path, monkeypatch):
    """The demo prints the 3-seed table from the checkpoints' shipped training reports: it is the table
    docs/act2answer.md shows; a seed report of another recipe, or a torn one, is refused by name."""
    import json
    import shutil

    import embeval.subjects.embedded.zoo as zoo
    from embeval.act2answer.seeds import shipped_seed_reports

    names = ["tiny-vla-a2a-frozen", "tiny-vla-a2a-full"]
    reports = shipped_seed_reports(names)
    assert {n: sorted(r) for n, r in reports.items()} == {n: [0, 1, 2] for n in names}
    table = format_seed_table(seed_table(reports), *names)
    assert table in (ROOT / "docs" / "act2answer.md").read_text()
    assert "| time | 100.0 (100.0) | 100.0 (100.0) | 100.0 (100.0) | 52.5 (52.5) |" in table
    for n in names:
        shutil.copytree(zoo.MODELS_DIR / n, tmp_path / n)
    monkeypatch.setattr(zoo, "MODELS_DIR", tmp_path)
    f = tmp_path / names[1] / "seed_reports" / "seed1.json"
    rep = json.loads(f.read_text())
    f.write_text(json.dumps({**rep, "recipe": {**rep["recipe"], "start": "table"}}))
    with pytest.raises(ConfigError, match="seed1.json: its recipe is not tiny-vla-a2a-full's shipped one"):
        shipped_seed_reports(names)
    f.write_text('{"recipe": {')
    with pytest.raises(ConfigError, match="seed1.json is not a complete training report"):
        shipped_seed_reports(names)
