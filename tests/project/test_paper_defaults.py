"""Each paper's definition is the default, computed here independently
(numpy / scipy / nltk / pycocoevalcap by hand) on small cases, and the earlier definition stays a named
option that still gives the earlier number (numbers marked "before the paper defaults" were printed by the code
of commit 51bc547 on the same inputs)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.transform import Rotation
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------------ Decision rotation (Embodied-IQA 3.4)

# five one-task images: (reference action, distorted action), [dx dy dz droll dpitch dyaw gripper]
PAIRS = [
    ([0.02, 0.0, -0.01, 0.0, 0.0, 0.3, 1.0], [0.015, 0.005, -0.01, 0.0, 0.1, 0.25, 1.0]),
    ([0.00, 0.03, 0.00, 0.2, 0.0, 0.0, 0.0], [0.01, 0.02, 0.00, 0.0, 0.2, 0.0, 0.0]),  # orthogonal axes: cos 0
    ([0.01, 0.01, 0.02, 0.0, 0.0, -0.4, 1.0], [0.01, 0.01, 0.02, 0.0, 0.0, 0.4, 0.0]),  # opposite: cos -1
    ([0.03, 0.0, 0.0, 0.0, 0.15, 0.0, 1.0], [0.0, 0.0, 0.03, 0.0, 0.3, 0.0, 1.0]),  # same axis, twice the angle: cos 1
    ([0.0, -0.02, 0.01, 0.0, 0.3, 0.0, 0.5], [0.0, -0.02, 0.0, 0.05, 0.3, 0.05, 0.7]),
]
#: decision_corpus(PAIRS) before the paper defaults (the relative rotation angle)
ANGLE_TOTALS = [0.9208399595935974, 0.7884097900961878, 0.3333333333333333, 0.625867508853459, 0.8547659132014948]


def _pairs():
    return [(np.array([a]), np.array([b])) for a, b in PAIRS]


def _minmax_agreement(d):
    d = np.asarray(d, float)
    return 1.0 - (d - d.min()) / (d.max() - d.min())


def test_decision_default_rotation_is_the_cosine_of_the_direction_vectors():
    """Paper: position from the Euclidean distance, "the rotation score is based on the cosine similarity of
    directional vectors", state from the absolute difference, each normalised to 0..1 over the data."""
    from embeval.scoring.decision import DecisionConfig, decision_corpus

    A, B = np.array([a for a, _ in PAIRS]), np.array([b for _, b in PAIRS])
    ua, ub = Rotation.from_euler("xyz", A[:, 3:6]).as_rotvec(), Rotation.from_euler("xyz", B[:, 3:6]).as_rotvec()
    cos = np.array([u @ v / np.linalg.norm(u) / np.linalg.norm(v) for u, v in zip(ua, ub)])
    assert cos[1] == pytest.approx(0.0, abs=1e-12) and cos[2] == pytest.approx(-1.0) and cos[3] == pytest.approx(1.0)
    rotation = (cos - cos.min()) / (cos.max() - cos.min())  # similarity min-max normalised over the corpus
    position = _minmax_agreement(np.linalg.norm(A[:, :3] - B[:, :3], axis=1))
    state = 1.0 - np.abs(A[:, 6] - B[:, 6])
    expect = (position + rotation + state) / 3.0

    assert DecisionConfig().normalisation == "corpus" and DecisionConfig().rotation == "cosine"
    got = decision_corpus(_pairs())
    assert [s.rotation for s in got] == pytest.approx(rotation, abs=1e-12)
    assert [s.position for s in got] == pytest.approx(position, abs=1e-12)
    assert [s.total for s in got] == pytest.approx(expect, abs=1e-12)
    assert sum(s.total for s in got) == pytest.approx(3.5062706836994955, abs=1e-12)  # 3.5232 with the angle
    # the same axis turned twice as far agrees fully in direction; the angle option counts the 0.17 rad between
    assert got[3].rotation == pytest.approx(1.0) and got[3].total > ANGLE_TOTALS[3]


def test_decision_cosine_without_rotation():
    """A rotation shorter than zero_rotation has no direction: both none -> cos 1, one none -> cos 0."""
    from embeval.scoring.decision import decision_corpus

    ref = [0.01, 0, 0, 0, 0, 0, 1.0]
    imgs = [(np.array([ref]), np.array([[0.01, 0, 0, 0, 0, 0, 1.0]])),  # neither rotates: cos 1
            (np.array([ref]), np.array([[0.01, 0, 0, 0, 0, 0.3, 1.0]])),  # one rotates: cos 0
            (np.array([[0.01, 0, 0, 0, 0, 0.2, 1.0]]), np.array([[0.01, 0, 0, 0, 0, -0.2, 1.0]]))]  # cos -1
    assert [s.rotation for s in decision_corpus(imgs)] == pytest.approx([1.0, 0.5, 0.0])


def test_decision_angle_option_gives_the_earlier_numbers():
    from embeval.scoring.decision import DecisionConfig, decision_corpus

    A, B = np.array([a for a, _ in PAIRS]), np.array([b for _, b in PAIRS])
    ang = (Rotation.from_euler("xyz", A[:, 3:6]).inv() * Rotation.from_euler("xyz", B[:, 3:6])).magnitude()
    got = decision_corpus(_pairs(), DecisionConfig(rotation="angle"))
    assert [s.rotation for s in got] == pytest.approx(_minmax_agreement(ang), abs=1e-12)
    assert [s.total for s in got] == pytest.approx(ANGLE_TOTALS, abs=1e-12)


def test_decision_unknown_rotation_is_refused():
    from embeval.errors import ConfigError
    from embeval.scoring.decision import DecisionConfig, decision_corpus

    with pytest.raises(ConfigError, match="rotation 'quaternion'; choose one of cosine, angle"):
        decision_corpus(_pairs(), DecisionConfig(rotation="quaternion"))


# ------------------------------------------------------------------------ Cognition (weighted average 1 : 1 : 0.1)

#: cognition totals of the two 5-task images of test_scoring_text before the paper defaults (the weighted sum)
SUM_TOTALS = [6.890496758109995, 5.7021942256127165]


def _lcs(a, b):
    m = np.zeros((len(a) + 1, len(b) + 1), int)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            m[i + 1, j + 1] = m[i, j] + 1 if x == y else max(m[i, j + 1], m[i + 1, j])
    return int(m[-1, -1])


def _answers():
    from test_scoring_text import HYPS, REFS

    return {i: (REFS[5 * i:5 * i + 5], HYPS[5 * i:5 * i + 5]) for i in range(2)}


def test_cognition_default_is_the_papers_weighted_average():
    """Per task (1 BLEU + 1 ROUGE-L + 0.1 CIDEr-D) / 2.1 (BLEU-4 smoothed as NLTK's method2, ROUGE-L the LCS
    F-measure with beta 1.2, CIDEr-D pycocoevalcap's over the corpus); the image's score is the sum over tasks."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
    from pycocoevalcap.cider.cider import Cider

    from embeval.scoring import text
    from embeval.scoring.cognition import CognitionConfig, cognition_scores

    ans = _answers()
    refs = [r for i in ans for r in ans[i][0]]
    hyps = [h for i in ans for h in ans[i][1]]
    tok_h, tok_r = [text.tokenize(h) for h in hyps], [text.tokenize(r) for r in refs]
    bleu = [sentence_bleu([r], h, smoothing_function=SmoothingFunction().method2) if h else 0.0 for h, r in zip(tok_h, tok_r)]
    rouge = []
    for h, r in zip(tok_h, tok_r):
        lcs = _lcs(h, r)
        p, rc = (lcs / len(h) if h else 0.0), (lcs / len(r) if r else 0.0)
        rouge.append((1 + 1.2 ** 2) * p * rc / (rc + 1.2 ** 2 * p) if lcs else 0.0)
    _, cider = Cider().compute_score({i: [" ".join(r)] for i, r in enumerate(tok_r)}, {i: [" ".join(h)] for i, h in enumerate(tok_h)})
    task = (np.array(bleu) + np.array(rouge) + 0.1 * np.asarray(cider)) / 2.1

    cfg = CognitionConfig()
    assert (cfg.combine, cfg.bleu_n, cfg.bleu_variant) == ("average", 4, "smooth")
    got = cognition_scores(ans)
    assert [p.combined for i in ans for p in got[i].tasks] == pytest.approx(task, abs=1e-9)
    assert [got[i].total for i in ans] == pytest.approx([task[:5].sum(), task[5:].sum()], abs=1e-9)


def test_cognition_sum_option_gives_the_earlier_numbers():
    from embeval.scoring.cognition import CognitionConfig, cognition_scores

    ans = _answers()
    summed = cognition_scores(ans, CognitionConfig(combine="sum"))
    assert [summed[i].total for i in ans] == pytest.approx(SUM_TOTALS, abs=1e-12)
    avg = cognition_scores(ans)
    assert [avg[i].total * 2.1 for i in ans] == pytest.approx(SUM_TOTALS, abs=1e-12)
    from embeval.errors import ConfigError

    with pytest.raises(ConfigError, match="combine 'max'"):
        cognition_scores(ans, CognitionConfig(combine="max"))


# ------------------------------------------------------------------------ Execution floor, CNR below chance

def _outcome(z, success=False, stopped=False):
    from embeval.scoring.execution import ExecutionOutcome

    return ExecutionOutcome((0.5, 0.1, z, math.pi, 0.0, 0.0), success, stopped)


def test_execution_failure_is_100_minus_distance_unfloored_and_floor_option():
    from embeval.scoring.execution import execution_score, execution_score_from_poses

    ref = _outcome(0.2, success=True)
    for z in (0.25, 1.5, 2.0):  # 5, 130, 180 cm
        d = 100 * abs(z - 0.2)
        assert execution_score(ref, _outcome(z)).score == pytest.approx(100 - d)  # the paper: 100 - d
        assert execution_score(ref, _outcome(z), floor=True).score == pytest.approx(max(0.0, 100 - d))  # earlier default
    assert execution_score(ref, _outcome(1.5)).score == pytest.approx(-30.0)
    assert execution_score_from_poses([0, 0, 0, 0, 0, 0], [0, 0, 1.2, 0, 0, 0]).score == pytest.approx(-20.0)
    assert execution_score_from_poses([0, 0, 0, 0, 0, 0], [0, 0, 1.2, 0, 0, 0], floor=True).score == 0.0
    assert execution_score(ref, _outcome(1.5, stopped=True)).score == 0.0  # an e-stop stays 0


def test_cnr_is_the_papers_formula_also_below_chance():
    """Act2Answer: CNR = max_n(s_exp_n - c) / (max_n(s_bb_n - c) + eps), evaluated as written."""
    from embeval_analysis.probing import LayerProbe, ProbeReport, chance_normalized_retention, retention

    c, eps = 0.5, 1e-6
    for exp, bb in (([0.62, 0.7], [0.8, 0.9]), ([0.6], [0.45, 0.5]), ([0.55], [0.4])):
        by_hand = (max(exp) - c) / (max(bb) - c + eps)
        assert chance_normalized_retention(exp, bb) == pytest.approx(by_hand, rel=1e-12)
    assert chance_normalized_retention([0.6], [0.4]) == pytest.approx(0.1 / (-0.1 + 1e-6))
    # the option: NaN when no backbone layer beats chance (the earlier default); unchanged above chance
    assert math.isnan(chance_normalized_retention([0.6], [0.45, 0.5], below_chance="nan"))
    assert chance_normalized_retention([0.62, 0.7], [0.8, 0.9], below_chance="nan") == pytest.approx(0.2 / (0.4 + eps))
    rep = ProbeReport("s", 10, 2, 0.5, [LayerProbe("backbone.0", 0.48, 0, 0.5), LayerProbe("action_expert.0", 0.6, 0, 0.5)])
    retention(rep)
    assert rep.cnr == pytest.approx(0.1 / (-0.02 + eps)) and not rep.backbone_above_chance
    assert "no backbone layer beats chance" in rep.table()
    assert math.isnan(retention(rep, below_chance="nan").cnr)


# ------------------------------------------------------------------------------- IQA splits and JND thirds

SCENE_TYPES = ["darken", "mean_shift", "white_noise", "gaussian_blur"]


@pytest.fixture(scope="module")
def scene_db(tmp_path_factory):
    """8 folder images in 4 scenes (2 each) x 4 types x levels 2, 4, 5 = 96 images, two image-statistics VLAs."""
    import yaml
    from PIL import Image

    from embeval.distortion.samples import synthetic_tabletop
    from embeval_analysis.iqa.database import BuildConfig, build_database

    imgs = tmp_path_factory.mktemp("imgs")
    for i in range(8):
        Image.fromarray(synthetic_tabletop(48, 32, seed=40 + i)).save(imgs / f"im{i}.png")
    (imgs / "tasks.yaml").write_text(yaml.safe_dump({"tasks": {"*": ["pick up the cube"]},
                                                      "scenes": {f"im{i}.png": f"scene{i // 2}" for i in range(8)}}))
    out = tmp_path_factory.mktemp("db")
    subjects = [{"id": f"stats-{i}", "kind": "policy", "adapter": "image_stats", "params": {"scale": s}}
                for i, s in enumerate((0.05, 0.2))]
    scores = build_database(BuildConfig(source="folder", source_params={"path": str(imgs)}, distortions=SCENE_TYPES,
                                        levels=[2, 4, 5], subjects=subjects, seed=0), out, log=None)
    return out, scores


@pytest.fixture(scope="module")
def both(scene_db):
    """The benchmark with its defaults (random splits, the scene splits beside), PSNR only."""
    from embeval_analysis.iqa.bench import BenchConfig, run_bench

    return run_bench(scene_db[0], BenchConfig(targets=["decision"], zero_shot=["psnr"], trained=[], min_group=3), log=None)


def _jnd_thirds_by_hand(y):
    """Mild / medium / severe by position p = 0..n-1 in the descending order, cut where the sample's middle
    (p + 1/2) / n passes 1/3 and 2/3 (no ties in these scores)."""
    n = len(y)
    pos = np.empty(n, int)
    pos[np.argsort(-np.asarray(y), kind="stable")] = np.arange(n)
    return np.array(["mild", "medium", "severe"])[np.minimum((3 * (2 * pos + 1)) // (2 * n), 2)]


def _srcc_rows(res, protocol, breakdown="all", group="all"):
    ps = res.per_split
    return ps[(ps.metric == "psnr") & (ps.protocol == protocol) & (ps.breakdown == breakdown) & (ps.group == group)] \
        .set_index("split")


def test_bench_default_splits_are_the_papers_random_8_2_over_image_pairs(scene_db, both):
    """Paper: the image pairs are partitioned at random 8:2, ten times: 20 % of the images (not of the scenes)
    in each test part, a scene's images on both sides; every statistic on the held-out images."""
    from embeval_analysis.iqa.bench import BenchConfig

    _, scores = scene_db
    cfg = BenchConfig()
    assert (cfg.split_by, cfg.n_splits, cfg.test_size, cfg.compare_splits) == ("random", 10, 0.2, True)
    n = len(scores)
    y, psnr, scene = scores["decision"].to_numpy(float), both.metric_values["psnr"], scores["scene_id"].to_numpy()
    assert both.protocol == "random" and both.protocols == ["random", "scene"] and len(both.splits) == 10
    shared = 0
    for tr, te in both.splits:
        assert len(te) == math.ceil(0.2 * n) and len(tr) + len(te) == n and not set(tr) & set(te)
        shared += bool(set(scene[tr]) & set(scene[te]))
    assert shared == 10  # random over images: every split shares scenes between its parts
    assert len({tuple(te) for _, te in both.splits}) == 10
    rows = _srcc_rows(both, "random")
    for k, (_, te) in enumerate(both.splits):
        assert rows.loc[k, "srcc"] == pytest.approx(spearmanr(psnr[te], y[te]).statistic, abs=1e-12)
    s = both.summary
    row = s[(s.metric == "psnr") & (s.protocol == "random") & (s.breakdown == "all")].iloc[0]
    assert row.srcc_mean == pytest.approx(rows["srcc"].mean()) and row.srcc == pytest.approx(rows["srcc"].median())


def test_bench_scene_option_gives_the_earlier_scene_disjoint_splits(scene_db, both):
    """The option (and the protocol printed beside): GroupShuffleSplit by scene, the earlier default."""
    from sklearn.model_selection import GroupShuffleSplit

    from embeval_analysis.iqa.bench import BenchConfig, run_bench

    _, scores = scene_db
    y, psnr, scene = scores["decision"].to_numpy(float), both.metric_values["psnr"], scores["scene_id"].to_numpy()
    gss = GroupShuffleSplit(n_splits=10, test_size=0.2, random_state=0).split(np.zeros(len(y)), groups=scene)
    rows = _srcc_rows(both, "scene")
    for k, (tr, te) in enumerate(gss):
        assert not set(scene[tr]) & set(scene[te])
        assert list(both.view("scene").splits[k][1]) == sorted(te)
        assert rows.loc[k, "srcc"] == pytest.approx(spearmanr(psnr[np.sort(te)], y[np.sort(te)]).statistic, abs=1e-12)
    only = run_bench(scene_db[0], BenchConfig(targets=["decision"], zero_shot=["psnr"], trained=[], min_group=3,
                                              split_by="scene", compare_splits=False, jnd_scope="split"), log=None)
    assert set(only.per_split["protocol"]) == {"scene"} and only.protocols == ["scene"]
    assert only.per_split[only.per_split.breakdown == "all"]["srcc"].tolist() == pytest.approx(rows["srcc"].tolist(), abs=1e-15)


def test_bench_table_prints_both_protocols_side_by_side(both):
    from embeval_analysis.iqa.bench import main_table, print_table

    lines = []
    print_table(both, lines.append)
    text = "\n".join(lines)
    psnr = [ln for ln in lines if ln.startswith("psnr")]
    assert len(psnr) == 2 and " random " in psnr[0] and " scene " in psnr[1]
    assert "random 8:2 over images (the paper's)" in text and "disjoint by scene" in text
    t = main_table(both)
    assert sorted(t["protocol"]) == ["random", "scene"]


def test_jnd_thirds_over_all_images_by_default_per_split_as_option(scene_db, both):
    """Paper: the JND thirds (mild / medium / severe) split all samples; the breakdown of a test part keeps
    each image's third. Option jnd_scope='split': thirds of each test part (the earlier default)."""
    from embeval_analysis.iqa.bench import BenchConfig, run_bench

    _, scores = scene_db
    y, psnr = scores["decision"].to_numpy(float), both.metric_values["psnr"]
    assert len(np.unique(y)) == len(y)  # no ties: the thirds by position are unambiguous
    labels = _jnd_thirds_by_hand(y)
    checked = 0
    for g in ("mild", "medium", "severe"):
        rows = _srcc_rows(both, "random", "jnd", g)
        for k, (_, te) in enumerate(both.splits):
            idx = te[labels[te] == g]
            if len(idx) >= 3:
                assert rows.loc[k, "n"] == len(idx)
                assert rows.loc[k, "srcc"] == pytest.approx(spearmanr(psnr[idx], y[idx]).statistic, abs=1e-12)
                checked += 1
    assert checked >= 20
    per = run_bench(scene_db[0], BenchConfig(targets=["decision"], zero_shot=["psnr"], trained=[], min_group=3,
                                             compare_splits=False, jnd_scope="split"), log=None)
    for g in ("mild", "medium", "severe"):
        rows = _srcc_rows(per, "random", "jnd", g)
        for k, (_, te) in enumerate(per.splits):
            idx = te[_jnd_thirds_by_hand(y[te]) == g]
            assert rows.loc[k, "srcc"] == pytest.approx(spearmanr(psnr[idx], y[idx]).statistic, abs=1e-12)
    from embeval.errors import ConfigError

    with pytest.raises(ConfigError, match="jnd_scope"):
        BenchConfig.from_dict({"jnd_scope": "test"})
    with pytest.raises(ConfigError, match="split protocol"):
        BenchConfig.from_dict({"split_by": "video"})


def test_export_writes_the_papers_random_splits_and_the_scene_splits(scene_db, tmp_path):
    import pickle

    from embeval_cli import main

    out, scores = scene_db
    assert main(["iqa", "export", "--db", str(out), "--out", str(tmp_path / "x"), "--splits", "3"]) == 0
    scene = scores["scene_id"].to_numpy()
    with open(tmp_path / "x" / "splits_8x2_3.pkl", "rb") as fh:
        rnd = pickle.load(fh)
    with open(tmp_path / "x" / "splits_scene_8x2_3.pkl", "rb") as fh:
        sc = pickle.load(fh)
    assert all(len(s["test"]) == math.ceil(0.2 * len(scores)) for s in rnd.values())
    assert any(set(scene[s["train"]]) & set(scene[s["test"]]) for s in rnd.values())
    assert all(not set(scene[s["train"]]) & set(scene[s["test"]]) for s in sc.values())
    assert main(["iqa", "export", "--db", str(out), "--out", str(tmp_path / "y"), "--splits", "3", "--split-by", "scene"]) == 0
    with open(tmp_path / "y" / "splits_scene_8x2_3.pkl", "rb") as fh:
        assert pickle.load(fh) == sc


def test_gate_stays_on_held_out_scenes(scene_db, both, tmp_path):
    """The quality gate is ours, not the paper's: it is trained and calibrated on the scene-disjoint splits."""
    import json

    from embeval_analysis.iqa.bench import BenchConfig, gate_over_splits, run_bench, save_gate

    res = run_bench(scene_db[0], BenchConfig(targets=["decision"], zero_shot=["psnr"], trained=["nr-fusion"], n_splits=3,
                                             min_group=3), log=None)
    assert res.protocol == "random"
    summary, per = gate_over_splits(res, scene_db[1], "nr-fusion", rates=(0.2,), n_boot=20)
    scene_tests = [len(te) for _, te in res.view("scene").splits]
    assert per["n"].tolist() == scene_tests
    p = save_gate(res, tmp_path / "g")
    assert json.loads((p / "gate.json").read_text())["splits"] == "scene"


# ------------------------------------------------------------------------ Execution in the IQA database

@pytest.fixture(scope="module")
def sim_db(tmp_path_factory):
    from embeval_analysis.iqa.database import BuildConfig, build_database

    out = tmp_path_factory.mktemp("simdb")
    cfg = BuildConfig(source="sim", source_params={"n": 2, "size": [64, 48]}, distortions=["darken"], levels=[5],
                      subjects=[{"id": "stats-b", "kind": "policy", "adapter": "image_stats", "params": {"scale": 0.2}}],
                      execution_images=1, execution_max_steps=12)
    return out, cfg, build_database(cfg, out, log=None)


def test_database_execution_runs_the_easiest_task_closed_loop(sim_db):
    """Paper: only the task with the lowest difficulty of the 5 is executed, the VLA acting over multiple steps
    (closed loop here, every frame distorted for the distorted run), success 100, e-stop 0, else 100 - cm."""
    from embeval.action import Observation
    from embeval.distortion import FrameDistorter
    from embeval.provenance import derive_seed
    from embeval.sim import SimConfig, SimEnv
    from embeval.sim.references import reference_scene
    from embeval.subjects.scripted import ImageStatsPolicy
    from embeval_analysis.iqa.database import BuildConfig, load_manifest

    assert BuildConfig().execution_protocol == "closed_loop"
    out, _, scores = sim_db
    ex = pd.read_csv(out / "execution.csv")
    assert len(ex) == 1
    r = ex.iloc[0]
    im = next(i for i in load_manifest(out)["images"] if i["image_id"] == r["image_id"])
    ref = next(x for x in load_manifest(out)["references"] if x["ref_id"] == im["ref_id"])
    scene, tasks = reference_scene(int(ref["sim_seed"]))
    easiest = min((t for t in tasks if t.implemented), key=lambda t: t.difficulty)
    assert easiest.difficulty == min(t.difficulty for t in tasks) and r["task"] == tasks.index(easiest)
    cam = {"first_person": "wrist", "third_person": "third_person"}[ref["view"]]

    def run(distortion):
        env = SimEnv(SimConfig(obs_cameras=(cam,), obs_width=64, obs_height=48))
        pol, obs, n = ImageStatsPolicy(scale=0.2), env.reset(int(ref["sim_seed"]), easiest, scene), 0
        pol.reset(easiest.instruction)
        fd = FrameDistorter("darken", 5, seed=derive_seed("iqa-execution-frames", 0, r["image_id"]) % 2**32,
                            stream=cam) if distortion else None
        while not env.done and n < 12:
            img = fd(obs.images[cam]) if fd else obs.images[cam]
            obs = env.step(pol.act(Observation({"third_person": img, "wrist": img}, easiest.instruction, obs.state))).observation
            n += 1
        if env.cell.safety.ok:
            env.cell.idle(0.3)
        st = env.cell.safety.status
        res = (np.asarray(env.cell.tcp_pose()[:3]), env.success(), st.stopped, n)
        env.close()
        return res

    (pa, _, _, na), (pb, ok, stopped, nb) = run(False), run(True)
    d = 100 * np.linalg.norm(pa - pb)
    expect = 0.0 if stopped else 100.0 if ok else 100.0 - d
    assert r["execution"] == pytest.approx(expect, abs=1e-9) and r["distance_cm"] == pytest.approx(d, abs=1e-9)
    assert (r["reference_steps"], r["distorted_steps"]) == (na, nb) and max(na, nb) > 1  # more than one action
    assert scores.loc[scores["image_id"] == r["image_id"], "execution"].item() == pytest.approx(r["execution"])


def test_database_execution_option_all_tasks_one_action(sim_db):
    """The option: every implemented task's stored single action, open loop, mean over tasks (the earlier default)."""
    from embeval.runs.runner import load_run_spec
    from embeval.runs.store import ResultsStore
    from embeval.sim.env import SimEnv
    from embeval.sim.execute import run_actions
    from embeval.sim.references import reference_scene
    from embeval_analysis.iqa.database import execution_scores, load_manifest

    out, _, _ = sim_db
    scores = execution_scores(out, 1, protocol="all_tasks_one_action", log=None)
    ex = pd.read_csv(out / "execution.csv")
    image_id = ex["image_id"].iloc[0]
    im = next(i for i in load_manifest(out)["images"] if i["image_id"] == image_id)
    ref = next(x for x in load_manifest(out)["references"] if x["ref_id"] == im["ref_id"])
    with ResultsStore(out / "run" / "results.sqlite") as st:
        o = next(v for k, v in st.results(load_run_spec(out / "run").hash).items() if k[1] == im["ref_id"])
    scene, tasks = reference_scene(int(ref["sim_seed"]))
    expect = []
    with SimEnv() as env:
        for t, task in enumerate(tasks):
            if not task.implemented:
                continue
            a = run_actions(env, scene, task, [o["reference_actions"][t]], seed=int(ref["sim_seed"]))
            b = run_actions(env, scene, task, [o["distorted_actions"][t]], seed=int(ref["sim_seed"]))
            d = 100 * np.linalg.norm(np.subtract(a.final_tcp_pose[:3], b.final_tcp_pose[:3]))
            expect.append(0.0 if b.stopped else 100.0 if b.success else 100.0 - d)
    assert len(ex) == len(expect) and ex["execution"].tolist() == pytest.approx(expect, abs=1e-9)
    assert scores.loc[scores["image_id"] == image_id, "execution"].item() == pytest.approx(np.mean(expect))
    from embeval.errors import ConfigError
    from embeval_analysis.iqa.database import BuildConfig

    with pytest.raises(ConfigError, match="execution_protocol"):
        BuildConfig(execution_protocol="open_loop").validate()
    with pytest.raises(ConfigError, match="execution_max_steps"):
        BuildConfig(execution_max_steps=0).validate()


# ---------------------------------------------------------------- the deviations tables

@pytest.mark.parametrize("doc, needles", [
    ("docs/iqa.md", ["random 8:2", "scene-disjoint", "JND thirds", "lowest difficulty", "closed loop",
                     "cosine", "floored", "What changed in the numbers"]),
    ("docs/scoring.md", ["weighted average", "smoothing", "n = 4", "rotation=\"angle\"", "floor=True"]),
    ("docs/act2answer.md", ["0.8702", "0.8958", "0.3602", "eps", "delta = 0.1", "0.08 m", "probe classifier",
                            "below_chance"]),
])
def test_deviation_tables_name_the_choices(doc, needles):
    text = (ROOT / doc).read_text()
    dev = text[text.index("## Deviations"):]
    for n in needles:
        assert n in dev or n in text, (doc, n)


def test_new_options_refuse_bad_values_in_one_line(tmp_path, capsys):
    from embeval_cli import main

    out = tmp_path / "db"
    assert main(["iqa", "build", "--out", str(out), "--execution-max-steps", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("embeval: error: build.execution_max_steps: a whole number of actions >= 1") and not out.exists()
    with pytest.raises(SystemExit) as e:
        main(["iqa", "bench", "--db", str(out), "--out", str(tmp_path / "b"), "--split-by", "video"])
    assert e.value.code == 2 and "invalid choice: 'video'" in capsys.readouterr().err


def test_decision_distances_stay_physical_corpus_distances_follow_the_rotation():
    """decision_distances (what a policy-decision run stores as position_distance_m / rotation_distance_rad)
    stays metres and radians; corpus_distances is what the corpus form normalises (1 - cos by default)."""
    from embeval.scoring.decision import DecisionConfig, corpus_distances, decision_distances

    A, B = np.array([a for a, _ in PAIRS]), np.array([b for _, b in PAIRS])
    ang = (Rotation.from_euler("xyz", A[:, 3:6]).inv() * Rotation.from_euler("xyz", B[:, 3:6])).magnitude()
    ua, ub = Rotation.from_euler("xyz", A[:, 3:6]).as_rotvec(), Rotation.from_euler("xyz", B[:, 3:6]).as_rotvec()
    cos = np.einsum("ij,ij->i", ua, ub) / np.linalg.norm(ua, axis=1) / np.linalg.norm(ub, axis=1)
    dt, dr = decision_distances(A, B)
    assert dt == pytest.approx(np.linalg.norm(A[:, :3] - B[:, :3], axis=1)) and dr == pytest.approx(ang, abs=1e-12)
    assert corpus_distances(A, B)[1] == pytest.approx(1 - cos, abs=1e-12)
    assert corpus_distances(A, B, DecisionConfig(rotation="angle"))[1] == pytest.approx(ang, abs=1e-12)


def test_one_scene_database_gets_the_random_splits_only(scene_db, tmp_path):
    """A database of one scene has no scene-disjoint split: the paper's random splits run alone."""
    import shutil

    from embeval.errors import ConfigError
    from embeval_analysis.iqa.bench import BenchConfig, run_bench

    out = tmp_path / "one"
    shutil.copytree(scene_db[0], out)
    s = pd.read_csv(out / "scores.csv").assign(scene_id="same")
    s.to_csv(out / "scores.csv", index=False)
    res = run_bench(out, BenchConfig(targets=["decision"], zero_shot=["psnr"], trained=[], n_splits=3, min_group=3), log=None)
    assert res.protocols == ["random"] and set(res.per_split["protocol"]) == {"random"}
    with pytest.raises(ConfigError, match="at least 2 scenes"):
        run_bench(out, BenchConfig(targets=["decision"], zero_shot=["psnr"], trained=[], split_by="scene"), log=None)
