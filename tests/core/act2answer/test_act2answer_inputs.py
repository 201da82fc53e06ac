"""Hostile inputs to `embeval act2answer`: policy cameras vs backend (checked before any episode, --alias),
swap statistics denominators, spec and generator arguments."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from embeval.act2answer.episode import check_cameras
from embeval_cli import main
from embeval.errors import ConfigError


def _policy(*cams):
    return SimpleNamespace(id="cam-policy", cfg=SimpleNamespace(cameras=list(cams)))


def test_policy_cameras_are_checked_against_the_backend():
    with pytest.raises(ConfigError) as e:
        check_cameras(_policy("third_person"), "maniskill")
    msg = str(e.value)
    assert "reads camera(s) third_person" in msg and "gives base_camera" in msg
    assert "--alias third_person=base_camera" in msg and "pybullet" in msg and "\n" not in msg
    check_cameras(_policy("third_person"), "maniskill", {"third_person": "base_camera"})
    check_cameras(_policy("third_person", "wrist"), "pybullet")
    check_cameras(_policy(), "maniskill")  # a policy that declares no cameras is not checked
    with pytest.raises(ConfigError, match="backend pybullet takes no camera aliases"):
        check_cameras(_policy("third_person"), "pybullet", {"third_person": "wrist"})
    with pytest.raises(ConfigError, match="has camera\\(s\\) base_camera"):
        check_cameras(_policy("third_person"), "maniskill", {"third_person": "hand_camera"})


def test_cli_refuses_a_policy_whose_camera_the_backend_lacks_before_any_episode(tmp_path, capsys):
    from embeval.act2answer.generator import generate_items

    generate_items(tmp_path / "suite", ["color"], per_category=1, seed=0)
    t0 = time.perf_counter()
    rc = main(["act2answer", "run", "--items", str(tmp_path / "suite" / "items.jsonl"), "--policy", "tiny-vla-a2a-frozen",
               "--backend", "maniskill", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--alias third_person=base_camera" in err and err.count("\n") == 0, err
    assert time.perf_counter() - t0 < 15 and not (tmp_path / "r").exists()  # no env built, no episode run
    assert main(["act2answer", "run", "--items", str(tmp_path / "suite" / "items.jsonl"), "--policy", "expert",
                 "--alias", "nonsense", "--out", str(tmp_path / "r")]) == 2
    assert "write KEY=CAMERA" in capsys.readouterr().err


def test_report_shows_how_many_pairs_consistency_counts(tmp_path, capsys):
    import json

    from embeval.act2answer.aggregate import swap_stats

    recs = []
    for i in range(5):  # items 0-1 chose a card in both layouts; 2-4 ended off both cards in the swapped one
        for layout, choice in (("original", "left"), ("swapped", "right" if i < 2 else None)):
            recs.append({"item": f"i{i}", "category": "color", "layout": layout, "correct_side": "left" if layout ==
                         "original" else "right", "choice": choice, "success": float(choice is not None), "subject": "s"})
    ss = swap_stats(recs)
    assert (ss.n_pairs, ss.n_chosen, ss.consistency) == (5, 2, 1.0)
    p = tmp_path / "episodes_s.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["act2answer", "report", str(p)]) == 0
    assert "s: swap pairs 5, consistency 1.000 over 2 of 5 pairs (3 with an episode off both cards), same side 0.000" \
        in capsys.readouterr().out


@pytest.mark.parametrize("field,value,word", [("max_steps", "lots", "max_steps must be a whole number in 1..10000"),
                                              ("max_steps", 100000000000, "max_steps must be a whole number"),
                                              ("max_steps", True, "max_steps must be a whole number"),
                                              ("eps", "wide", "eps must be a number"),
                                              ("settle_s", float("nan"), "settle_s must be a number"),
                                              ("cube_xy", "ab", "cube_xy must be \\(x, y\\)"),
                                              ("cube_color", 3, "cube_color must be a string"),
                                              ("instruction_template", "{nope}", "only \\{question\\}")])
def test_episode_spec_errors_name_the_field_and_file(tmp_path, field, value, word):
    import yaml

    from embeval.act2answer.scene import EpisodeSpec

    p = tmp_path / "ep.yaml"
    p.write_text(yaml.safe_dump({"episode": {field: value}}))
    with pytest.raises(ConfigError, match=word) as e:
        EpisodeSpec.from_yaml(p)
    assert str(e.value).startswith(f"{p}: episode spec {field}") and "\n" not in str(e.value)
    assert EpisodeSpec.from_dict({"settle_s": 0, "max_steps": 45, "eps": 0.05}).max_steps == 45  # valid ones pass


def test_generate_names_a_repeated_category_and_vlm_names_a_policy(tmp_path, capsys):
    assert main(["act2answer", "items", "generate", "--out", str(tmp_path / "s"), "--categories", "color", "color",
                 "--per-category", "1"]) == 2
    err = capsys.readouterr().err
    assert "categories color named more than once" in err and not (tmp_path / "s" / "items.jsonl").exists()
    from embeval.subjects.embedded.zoo import load_vlm

    with pytest.raises(ConfigError, match="'tiny-vla-a2a-frozen' is a policy \\(VLA\\), not a VLM; give it to --policy"):
        load_vlm("tiny-vla-a2a-frozen")
