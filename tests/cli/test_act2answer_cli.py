"""``embeval act2answer``: generate, convert, scenes, run (scripted policy YAML), report."""
import json

import yaml

from embeval_cli import main


def test_cli_end_to_end(tmp_path, capsys):
    suite = tmp_path / "suite"
    assert main(["act2answer", "items", "generate", "--out", str(suite), "--categories", "color", "state",
                 "--per-category", "2"]) == 0
    assert len((suite / "items.jsonl").read_text().splitlines()) == 4
    pol = tmp_path / "hold.yaml"
    pol.write_text(yaml.safe_dump({"id": "hold", "kind": "policy", "adapter": "scripted",
                                   "params": {"vector": [0, 0, 0, 0, 0, 0, 1]}}))
    ep = tmp_path / "ep.yaml"
    ep.write_text(yaml.safe_dump({"episode": {"max_steps": 2}}))
    vlm = tmp_path / "vlm.yaml"
    vlm.write_text(yaml.safe_dump({"id": "says-left", "kind": "vlm", "adapter": "scripted", "params": {"default": "Left."}}))
    res = tmp_path / "res"
    assert main(["act2answer", "run", "--items", str(suite / "items.jsonl"), "--policy", str(pol), "--vlm", str(vlm),
                 "--episode", str(ep), "--out", str(res)]) == 0
    out = capsys.readouterr().out
    assert "hold" in out and "says-left (text)" in out
    answers = [json.loads(x) for x in (res / "answers_says-left.jsonl").read_text().splitlines()]
    assert {a["choice"] for a in answers} == {"left"} and sum(a["success"] for a in answers) == 4  # 8 answers, half right
    assert main(["act2answer", "report", str(res / "answers_says-left.jsonl"), "--csv", str(tmp_path / "t.csv")]) == 0
    out = capsys.readouterr().out
    assert "position bias +1.000" in out and "consistency 0.000" in out
    assert main(["act2answer", "scenes", "--items", str(suite / "items.jsonl"), "--out", str(tmp_path / "sc"), "--limit", "1"]) == 0
    cond = yaml.safe_load((tmp_path / "sc" / "conductor.yaml").read_text())["embeval_conductor"]["ros__parameters"]
    assert cond["items"] == ["color-0000@original", "color-0000@swapped"]
    from embeval.sim.scene import SceneSpec

    sc = SceneSpec.from_yaml(tmp_path / "sc" / "color-0000@swapped.yaml")
    assert {o.name for o in sc.objects} == {"card_left", "card_right", "cube"}
    # errors are reported, not raised
    assert main(["act2answer", "items", "convert", "--layout", "nope", "--input", str(suite / "items.jsonl"),
                 "--out", str(tmp_path / "x")]) == 2


def test_cli_expert_on_default_backend(tmp_path, capsys):
    """`--policy expert` without --backend: the pybullet cell's privileged expert answers every episode."""
    suite = tmp_path / "suite"
    assert main(["act2answer", "items", "generate", "--out", str(suite), "--categories", "color", "--per-category", "1"]) == 0
    assert main(["act2answer", "run", "--items", str(suite / "items.jsonl"), "--policy", "expert", "--out", str(tmp_path / "r")]) == 0
    recs = [json.loads(x) for x in (tmp_path / "r" / "episodes_expert-answer.jsonl").read_text().splitlines()]
    assert [(r["layout"], r["zone"]) for r in recs] == [("original", "correct"), ("swapped", "correct")]
    assert recs[0]["correct_side"] != recs[1]["correct_side"]
