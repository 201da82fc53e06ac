"""The resumable sensitivity study: --seeds ranges, several subjects in one table, resume after an
interruption, Holm-corrected findings, and the CLI's one-line refusals."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from embeval.errors import ConfigError
from embeval.sim.perturb.score import MANIFEST_FILE, ROWS_FILE, StudyConfig, parse_seeds, read_study, run_study

REPO = Path(__file__).resolve().parents[2]


def test_parse_seeds_ranges_lists_and_refusals():
    assert parse_seeds("0-99") == tuple(range(100))
    assert parse_seeds("0,3,7") == (0, 3, 7)
    assert parse_seeds("0-2,10-11, 2") == (0, 1, 2, 10, 11)  # each once, in order
    for bad, msg in [("5-2", "up to one >= it"), ("a-b", "write seeds as"), ("-3", "write seeds as|>= 0"),
                     ("0-200000", "at most 100,000 seeds"), ("", "write seeds as")]:
        with pytest.raises(ConfigError, match=msg):
            parse_seeds(bad)


def test_study_config_refuses_empty_or_repeated_subjects():
    with pytest.raises(ConfigError, match="at least one subject"):
        StudyConfig((), (0,), axes=("fov",))
    with pytest.raises(ConfigError, match="given twice"):
        StudyConfig(("expert", "expert"), (0,), axes=("fov",))
    with pytest.raises(ConfigError, match="an axis or a distortion"):
        StudyConfig(("expert",), (0,))
    assert StudyConfig(("expert",), (0,), axes=("fov", "light_intensity"), levels=(1, 5),
                       distortions=("jpeg",)).episodes_per_seed == 1 + 4 + 2


class Counting:
    """The scripted expert, counting its episodes (one reset each)."""

    def __init__(self, env):
        from embeval.runs.evaluators.sim_iqa import _Expert

        self.inner, self.resets = _Expert(env), 0
        self.id = "counting"

    def reset(self, instruction):
        self.resets += 1
        self.inner.reset(instruction)

    def act(self, obs):
        return self.inner.act(obs)


def test_run_study_writes_resumes_extends_and_refuses_other_settings(tmp_path):
    made: list[Counting] = []

    def load(subject, env):
        made.append(Counting(env))
        return made[-1]

    cfg = StudyConfig(("expert",), (0, 1), "Pick", ("initial_state",), (5,), width=32, height=32)
    rows = run_study(cfg, tmp_path, load, progress_mode="off")
    assert [(r["subject"], r["family"], r["seed"], r["axis"], r["level"]) for r in rows] == \
        [("expert", "embeval", 0, "initial_state", 5), ("expert", "embeval", 1, "initial_state", 5)]
    assert made[0].resets == 4  # 2 seeds x (reference + 1 cell)
    assert all(r["success"] and r["reference_success"] for r in rows)  # the expert solves initial_state:5
    assert json.loads((tmp_path / MANIFEST_FILE).read_text())["levels"] == [5]
    assert len((tmp_path / ROWS_FILE).read_text().splitlines()) == 2

    # an interruption mid-write leaves a cut line: ignored, and the finished seeds are not run again
    with (tmp_path / ROWS_FILE).open("a") as f:
        f.write('{"subject": "expert", "seed": 2, "rows": [{"ax')
    more = StudyConfig(("expert",), (0, 1, 2), "Pick", ("initial_state",), (5,), width=32, height=32)
    assert sorted(read_study(tmp_path, more)[1]) == [("expert", 0), ("expert", 1)]
    rows2 = run_study(more, tmp_path, load, progress_mode="off")
    assert made[1].resets == 2 and [r["seed"] for r in rows2] == [0, 1, 2]  # only seed 2 ran
    assert rows2[:2] == rows  # the stored rows come back as they were

    made.clear()
    assert run_study(more, tmp_path, load, progress_mode="off") == rows2 and made == []  # all done: no policy built
    with pytest.raises(ConfigError, match=r"other settings \(levels differ\).*new --out"):
        run_study(StudyConfig(("expert",), (0,), "Pick", ("initial_state",), (3,), width=32, height=32), tmp_path, load)


def test_run_study_progress_counts_every_episode(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EMBEVAL_PROGRESS_INTERVAL_S", "0.001")
    cfg = StudyConfig(("expert",), (4,), "Pick", ("fov",), (1, 5), width=32, height=32)
    from embeval_cli.perturb import load_policy

    run_study(cfg, tmp_path, load_policy, progress_mode="lines")
    err = capsys.readouterr().err
    assert "perturb study: 3/3 episodes, done in" in err and "subject expert" in err


# --------------------------------------------------------------------------- statistics
def test_holm_matches_the_hand_computed_step_down():
    from embeval_analysis.perturb import holm

    # sorted 0.01, 0.03, 0.04 -> 3 * 0.01, max(0.03, 2 * 0.03), max(0.06, 1 * 0.04)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    out = holm([float("nan"), 0.02])
    assert np.isnan(out[0]) and out[1] == pytest.approx(0.02)


def _rows(subject, axis, level, n, fail, family="embeval"):
    """n paired seeds, all references succeed; the first ``fail`` perturbed episodes fail (Execution 0)."""
    return [dict(subject=subject, family=family, kind="scene", axis=axis, level=level, seed=i, decision=0.9,
                 execution=0.0 if i < fail else 100.0, success=i >= fail, reference_success=True) for i in range(n)]


def test_findings_keep_only_what_survives_holm():
    from scipy.stats import binomtest

    from embeval_analysis.perturb import findings, sensitivity

    sens = sensitivity(_rows("tiny-vla", "initial_state", 5, 40, 20) + _rows("tiny-vla", "fov", 5, 40, 2)
                       + _rows("other", "initial_state", 5, 40, 0), n_resamples=300)
    assert [(r.subject, r.axis) for r in sens] == [("tiny-vla", "initial_state"), ("tiny-vla", "fov"),
                                                  ("other", "initial_state")]
    big = sens[0]
    assert big.success_change == -0.5 and big.success_p == pytest.approx(binomtest(0, 20, 0.5).pvalue)
    found = findings(sens)
    assert len(found) == 2 and all(f.startswith("tiny-vla: initial_state:5") for f in found)
    assert "changes success by -0.50 (100% -> 50%, n 40" in found[0]
    assert "lowers Execution by 50.0 points" in found[1]
    # fov:5 (2 of 40 fail, McNemar p 0.5) and the unaffected subject give nothing
    assert findings(sensitivity(_rows("a", "fov", 5, 40, 2), n_resamples=100)) == []


def test_markdown_gets_subject_and_family_columns_only_when_needed():
    from embeval_analysis.perturb import sensitivity, sensitivity_markdown

    plain = sensitivity_markdown(sensitivity([{k: v for k, v in r.items() if k not in ("subject", "family")}
                                              for r in _rows("", "fov", 1, 3, 0)], n_resamples=50))
    assert plain.splitlines()[0].startswith("| kind | axis | level |")
    mixed = sensitivity(_rows("tiny-vla", "fov", 1, 3, 0)
                        + _rows("tiny-vla", "libero_goal_swap", 0, 3, 3, family="LIBERO-PRO"), n_resamples=50)
    md = sensitivity_markdown(mixed).splitlines()
    assert md[0].startswith("| subject | family | kind | axis | level |")
    assert md[3].startswith("| tiny-vla | LIBERO-PRO | scene | libero_goal_swap | - | 3 |")  # no level: "-"


# --------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("argv, msg", [
    (["--seeds", "9-1"], "up to one >= it"),
    (["--subjects", "tiny-vla", "tiny-vla", "--seeds", "0", "--out", "{out}"], "given twice"),
    (["--subjects", "tiny-vla-wid"], "did you mean 'tiny-vla-wide'"),
    (["--subjects", "nope.yaml"], "no such subject YAML"),
    (["--subject", "x.yaml", "--subjects", "tiny-vla"], "not allowed with"),
])
def test_cli_refuses_bad_study_arguments_in_one_line(argv, msg, tmp_path, capsys):
    from embeval_cli import main

    argv = [a.replace("{out}", str(tmp_path / "o")) for a in argv]
    try:
        rc = main(["perturb", "score", "--axes", "fov", "--levels", "1", *argv])
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any(msg in line for line in err), err


def test_cli_study_two_subjects_resumes_and_writes_findings(tmp_path, capsys):
    from embeval_cli import main

    out = tmp_path / "study"
    stats = str(REPO / "config" / "subjects" / "image_stats_policy.yaml")  # cheap, image-dependent
    argv = ["perturb", "score", "--subjects", "expert", stats, "--seeds", "0-1", "--axes", "light_intensity",
            "--levels", "5", "--width", "32", "--height", "32", "--out", str(out)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "| subject | kind | axis |" in first and "| expert | scene | light_intensity | 5 | 2 | 1.00 | 100.0 |" in first
    assert f"| {stats} | scene | light_intensity | 5 | 2 |" in first
    assert (out / "findings.md").read_text().startswith("- nothing is significant")  # 2 seeds support no claim
    assert len((out / ROWS_FILE).read_text().splitlines()) == 4
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert "resuming" in again and "4 of 4 (subject, seed) pairs already scored" in again
    assert again.split("\n", 1)[1] == first  # the same table from the stored rows, no episode run


def test_docs_study_commands_parse():
    """docs/sim.md's study and LIBERO-PRO commands are valid `embeval perturb score` command lines."""
    import shlex

    from embeval_cli import build_parser

    doc = (REPO / "docs" / "sim.md").read_text()
    start = doc.index("### Sensitivity study")
    cmds = []
    for block in doc[start:doc.index("### IQA vs scene")].split("```bash")[1:2] + \
            doc[doc.index("**LIBERO-PRO as a family"):].split("```bash")[1:2]:
        text = block.split("```")[0].replace("\\\n", " ")
        cmds += [ln.split("embeval ", 1)[1] for ln in text.splitlines() if "embeval perturb score" in ln]
    assert len(cmds) == 3
    for c in cmds:
        args = build_parser().parse_args(shlex.split(c))
        assert args.func.__name__ == "_score" and (args.seeds or args.episodes)
    assert build_parser().parse_args(shlex.split(cmds[0])).subjects == ["tiny-vla", "tiny-vla-wrist"]


def test_a_shrunk_study_reports_only_its_own_pairs_and_a_bad_manifest_is_refused(tmp_path):
    from embeval_cli.perturb import load_policy

    cfg = StudyConfig(("expert",), (0, 1), "Pick", ("fov",), (1,), width=32, height=32)
    run_study(cfg, tmp_path, load_policy, progress_mode="off")
    said: list[str] = []
    rows = run_study(StudyConfig(("expert",), (1,), "Pick", ("fov",), (1,), width=32, height=32), tmp_path,
                     load_policy, progress_mode="off", log=said.append)
    assert [r["seed"] for r in rows] == [1] and said == [f"resuming {tmp_path}: 1 of 1 (subject, seed) pairs already scored"]
    (tmp_path / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="not a study's settings.*another --out"):
        run_study(cfg, tmp_path, load_policy)


def test_a_cell_the_scene_cannot_take_is_skipped_kept_and_reported_on_resume(tmp_path, capsys):
    """A NotApplicableError cell (here a floor scene's table texture) is not scored; the study goes on, keeps the
    skip beside the rows in rows.jsonl, reports it again when resumed, and the CLI lists it and writes it."""
    from types import SimpleNamespace

    from test_perturb_study_libero import Bright, FakeLibero

    from embeval_cli.perturb import _report_skipped

    envs = []

    def make_env(_cfg):
        envs.append(FakeLibero(SimpleNamespace(env="libero_object:0")))
        return envs[-1]

    cfg = StudyConfig(("bright",), (0, 1), "Pick", ("table_texture", "light_intensity"), (5,), width=32, height=32)
    skipped: list = []
    rows = run_study(cfg, tmp_path, lambda s, env: Bright(), make_env=make_env, progress_mode="off", skipped=skipped)
    assert [(r["axis"], r["seed"]) for r in rows] == [("light_intensity", 0), ("light_intensity", 1)]
    assert [(s["subject"], s["axis"], s["level"], s["seed"]) for s in skipped] == [
        ("bright", "table_texture", 5, 0), ("bright", "table_texture", 5, 1)]
    recs = [json.loads(line) for line in (tmp_path / ROWS_FILE).read_text().splitlines()]
    assert [len(r["skipped"]) for r in recs] == [1, 1] and len(envs) == 1
    again: list = []
    assert run_study(cfg, tmp_path, lambda s, env: Bright(), make_env=make_env, progress_mode="off",
                     skipped=again) == rows
    assert again == skipped and len(envs) == 1  # all done: nothing run, the skips still reported
    # a record whose skipped cells are not cells (a hand-edited or damaged file) counts as cut short: run again
    lines = (tmp_path / ROWS_FILE).read_text().splitlines()
    bad = json.loads(lines[1])
    bad["skipped"] = "table_texture"
    (tmp_path / ROWS_FILE).write_text(lines[0] + "\n" + json.dumps(bad) + "\n")
    assert sorted(read_study(tmp_path, cfg)[1]) == [("bright", 0)]
    third: list = []
    assert run_study(cfg, tmp_path, lambda s, env: Bright(), make_env=make_env, progress_mode="off",
                     skipped=third) == rows
    assert third == skipped and len(envs) == 2  # seed 1 ran again, with the same rows and skip
    _report_skipped(skipped, tmp_path / "out")
    text = capsys.readouterr().out
    assert "- table_texture:5: not scored in 2 episode(s): perturb table_texture: this LIBERO scene has no textured " \
           "table surface to retexture" in text
    assert json.loads((tmp_path / "out" / "not_applicable.json").read_text()) == skipped
    assert _report_skipped([], tmp_path / "none") is None and not (tmp_path / "none").exists()
