"""A2Eval core: pools and schema check, procedural ground truth, scorers, voting, kappa, sampling, Data Agent."""
from __future__ import annotations

import json

import numpy as np
import pytest

from embeval.errors import ConfigError, InvalidInputError, MissingFileError
from embeval_analysis.a2eval.assigner import Dimension, LLMVoter, assign, fleiss_kappa, majority
from embeval_analysis.a2eval.data_agent import DataAgent, DataAgentConfig, Memory
from embeval_analysis.a2eval.llm import PROPOSAL_SCHEMA, RulesLLM, ask_json
from embeval_analysis.a2eval.pool import PoolItem, load_pool, write_jsonl
from embeval_analysis.a2eval.procedural import procedural_pool
from embeval_analysis.a2eval.sampling import diversity_sample
from embeval_analysis.a2eval.scorers import reference_score
from embeval_analysis.a2eval.subjects import default_prompt, solve


@pytest.fixture(scope="module")
def small_pool():
    return procedural_pool(n_items=120, seed=3)


def test_procedural_pool_ground_truth_matches_pixels(small_pool):
    dims = {it.dimension for it in small_pool}
    assert dims == {"counting", "spatial", "affordance", "physics", "planning", "dynamics"}
    counts = {d: sum(it.dimension == d for it in small_pool) for d in dims}
    assert counts["counting"] > 3 * counts["dynamics"]  # deliberately unbalanced
    for it in small_pool:  # the answer is re-derived from the rendered pixels by an independent solver
        sol = solve(it.load_images(), default_prompt(it))
        assert sol is not None and sol.dimension == it.dimension
        assert reference_score(it, sol.answer) == 1.0, (it.id, it.question, it.answer, sol.answer)
    assert [it.id for it in procedural_pool(n_items=120, seed=3)] == [it.id for it in small_pool]


def test_jsonl_parquet_roundtrip_and_schema_errors(tmp_path, small_pool):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = write_jsonl(small_pool[:10], tmp_path / "p.jsonl")
    back = load_pool(path)
    assert [b.id for b in back] == [a.id for a in small_pool[:10]]
    assert np.array_equal(back[0].load_images()[0], small_pool[0].load_images()[0])
    recs = [json.loads(l) for l in path.read_text().splitlines()]
    for r in recs:  # parquet with embedded image bytes, as Hugging Face datasets write them
        r["images"] = [{"bytes": (tmp_path / p).read_bytes()} for p in r["images"]]
        r["answer"] = json.dumps(r["answer"]) if isinstance(r["answer"], list) else str(r["answer"])
        r.pop("meta", None)
    pq.write_table(pa.Table.from_pylist([r for r in recs if r["answer_type"] != "point"]), tmp_path / "p.parquet")
    pq_items = load_pool(tmp_path / "p.parquet")
    assert len(pq_items) == sum(r["answer_type"] != "point" for r in recs)
    assert pq_items[0].load_images()[0].shape == (96, 96, 3)

    bad = tmp_path / "bad.jsonl"
    cases = [  # (file text, error, message)
        ('{"id": "a", "question": "q?"}\n', ConfigError, "'answer'"),
        ('{"id": "a", "question": "q?", "answer": "C", "options": ["A. x", "B. y"]}\n', ConfigError, "matches no option"),
        ('{"id": "a", "question": "q?", "answer": 1, "images": ["missing.png"]}\n', MissingFileError, "missing.png"),
        ('{"id": "a", "question": "q?", "answer": 1}\n{"id": "a", "question": "r?", "answer": 2}\n', ConfigError,
         "duplicate item id"),
        ("not json\n", ConfigError, "line 1 is not valid JSON"),
    ]
    for text, error, message in cases:
        bad.write_text(text)
        with pytest.raises(error, match=message):
            load_pool(bad)


def test_reference_scorers():
    mc = PoolItem("m", "q", "B", "mc", ["A. yes", "B. no"])
    assert [reference_score(mc, p) for p in ("B", "(B)", "The answer is B.", "no", "A", "yes", "")] == [1, 1, 1, 1, 0, 0, 0]
    num = PoolItem("n", "q", 3.0, "numeric")
    assert [reference_score(num, p) for p in ("3", "three", "There are 3 cubes", "4", "none")] == [1, 1, 1, 0, 0]
    num.tolerance = 1.0
    assert reference_score(num, "4") == 1.0 and reference_score(num, "4.5") == 0.0
    pt = PoolItem("p", "q", [10, 10], "point", mask=[5, 5, 15, 15])
    assert [reference_score(pt, p) for p in ("10, 10", "(15, 5)", "16, 10", "10")] == [1, 1, 0, 0]
    mask = np.zeros((20, 20), bool)
    mask[2:4, 6:9] = True
    pt2 = PoolItem("p2", "q", [7, 3], "point", mask=mask)
    assert reference_score(pt2, "7, 3") == 1.0 and reference_score(pt2, "3, 7") == 0.0
    ex = PoolItem("e", "q", "red, blue", "exact")
    assert [reference_score(ex, p) for p in ("Red,blue.", "red , blue", "blue, red")] == [1, 1, 0]


def test_fleiss_kappa_hand_case_and_statsmodels():
    # Fleiss (1971) / the standard worked example: 10 items, 14 raters, 5 categories -> kappa 0.210
    table = np.array([[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
                      [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]])
    assert fleiss_kappa(table) == pytest.approx(0.210, abs=5e-4)
    assert fleiss_kappa(np.array([[3, 0], [0, 3]])) == pytest.approx(1.0)
    sm = pytest.importorskip("statsmodels.stats.inter_rater")
    rng = np.random.default_rng(0)
    t = rng.multinomial(5, [0.5, 0.3, 0.2], size=40)
    assert fleiss_kappa(t) == pytest.approx(sm.fleiss_kappa(t, method="fleiss"), abs=1e-12)


def test_majority_vote_tie_rule():
    assert majority(["a", "b", "a", None, "c"]) == ("a", pytest.approx(0.5), False)
    lab, agree, tie = majority(["b", "a", "a", "b", "c"])
    assert (lab, tie) == ("b", True) and agree == pytest.approx(0.4)  # earliest voter among tied wins
    assert majority([None, None]) == ("other", 0.0, False)


def test_assigner_with_rules_voters_labels_procedural_items(small_pool):
    dims = [Dimension(d, RulesLLM()._propose("<samples>\n" + "\n---\n".join(i.text() for i in small_pool) +
                                           "\n</samples>")["dimensions"][0]["description"])
            for d in ("counting", "spatial")]
    voters = [LLMVoter(RulesLLM(variant=v), v) for v in range(3)] + [LLMVoter(RulesLLM(), 0, max_calls=5, beyond_cap="abstain")]
    texts = [it.text() for it in small_pool[:30]]
    a = assign(texts, dims, voters)
    for it, lab in zip(small_pool[:30], a.labels):
        assert lab == (it.dimension if it.dimension in ("counting", "spatial") else "other")
    assert a.kappa_all_items == 5 and a.kappa_items == 30 and len(a.kappa_voters) == 3 and sum(v is None for row in a.votes for v in row) == 25  # budgeted voter abstains


def test_diversity_sample_keeps_all_below_k_and_weights_sum_to_pool():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 1, (40, 5)), rng.normal(5, 1, (3, 5))])
    labels = ["a"] * 40 + ["b"] * 3
    sel = diversity_sample(X, labels, k=6, seed=1)
    assert sorted(i for i, d in zip(sel.indices, sel.dimensions) if d == "b") == [40, 41, 42]
    assert sum(d == "a" for d in sel.dimensions) == 6
    assert sum(sel.weights) == 43 and all(c >= 0 for c in sel.cluster_of)
    s = rng.random(43)
    assert sel.estimate(s) == pytest.approx(sum(s[sel.indices[c]] for c in sel.cluster_of) / 43)
    assert diversity_sample(X, labels, k=6, seed=1).indices == sel.indices  # seeded


class _BadThenGood:
    id = "bad-then-good"

    def __init__(self):
        self.n = 0

    def chat(self, messages, json_schema=None, **gen):
        self.n += 1
        if self.n == 1:
            return "not json"
        if self.n == 2:
            return json.dumps({"dimensions": [{"name": "x", "description": "too few dims"}], "rationale": ""})
        return json.dumps({"dimensions": [{"name": "aa", "description": "first dimension"},
                                          {"name": "bb", "description": "second dimension"}], "rationale": "ok"})

    def choose(self, prompt, options):
        return options[0]


def test_ask_json_reasks_with_the_error():
    llm, log = _BadThenGood(), []
    out = ask_json(llm, "proposer", "go", PROPOSAL_SCHEMA, max_retries=2, log=log)
    assert [d["name"] for d in out["dimensions"]] == ["aa", "bb"] and len(log) == 3
    assert "not JSON" in log[0]["error"] and "schema" in log[1]["error"]
    with pytest.raises(InvalidInputError, match="after 2 attempts"):
        ask_json(_BadThenGood(), "proposer", "go", PROPOSAL_SCHEMA, max_retries=1)


def test_data_agent_loop_stops_and_persists_memory(tmp_path, small_pool):
    cfg = DataAgentConfig(voters=[], max_rounds=6, sample_size=60, probe_size=120)
    agent = DataAgent(cfg, memory_path=tmp_path / "memory.jsonl", voters=[LLMVoter(RulesLLM(), 0)])
    res = agent.induce([it.text() for it in small_pool])
    assert {d.name for d in res.dimensions} == {"counting", "spatial", "affordance", "physics", "planning", "dynamics"}
    assert res.stop_reason == "unchanged" and len(res.rounds) < 6
    mem = Memory(tmp_path / "memory.jsonl")
    assert [r["kind"] for r in mem.records[:3]] == ["proposal", "critique", "balance"]
    assert len(mem.records) == 3 * len(res.rounds)
    capped = DataAgent(DataAgentConfig(voters=[], max_rounds=1), voters=[LLMVoter(RulesLLM(), 0)])
    assert capped.induce([it.text() for it in small_pool]).stop_reason == "round cap"
    with pytest.raises(ConfigError, match="unknown field"):
        DataAgentConfig.from_dict({"k": 3})


def test_video_items_yield_frames(tmp_path):
    import cv2

    path = tmp_path / "clip.avi"
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (32, 24))
    for k in range(10):
        frame = np.zeros((24, 32, 3), np.uint8)
        frame[:, :, 2] = 25 * k  # red rises over time (BGR)
        vw.write(frame)
    vw.release()
    (tmp_path / "v.jsonl").write_text(json.dumps({"id": "v1", "question": "Is it getting redder?", "answer": "yes",
                                                  "video": "clip.avi"}) + "\n")
    it = load_pool(tmp_path / "v.jsonl")[0]
    frames = it.load_images(video_frames=3)
    assert len(frames) == 3 and frames[0].shape == (24, 32, 3)
    assert frames[0][..., 0].mean() < frames[1][..., 0].mean() < frames[2][..., 0].mean()


def test_cli_pool_and_config_errors(tmp_path, capsys):
    from embeval_cli import main
    from embeval_analysis.a2eval import pipeline as P

    assert main(["a2eval", "pool", "--procedural", "30", "--out", str(tmp_path / "p.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "30 items OK" in out and "counting" in out
    assert main(["a2eval", "pool", str(tmp_path / "p.jsonl")]) == 0
    assert main(["a2eval", "pool"]) == 2  # neither files nor --procedural: a clear error, no traceback
    assert "--procedural" in capsys.readouterr().err
    assert main(["a2eval", "evaluate", "--config", str(P.CONFIG_DIR / "ci.yaml"), "--out", str(tmp_path / "none")]) == 2
    assert "run `embeval a2eval curate" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("data_agnt: {}\n")
    with pytest.raises(ConfigError, match="unknown section"):
        P.load_config(bad)
    with pytest.raises(ConfigError, match="pool.procedural"):
        P.make_pool({"pool": {"procedural": {"items": 3}}})
    for name in ("default.yaml", "ci.yaml"):  # shipped configs parse into valid agent configs
        cfg = P.load_config(P.CONFIG_DIR / name)
        assert len(P.data_agent_config(cfg).voters) == 5 and P.eval_agent_config(cfg).max_attempts >= 1


def test_roles_over_an_openai_compatible_endpoint_with_call_cache(tmp_path, small_pool):
    """Proposer and reviewer point at an OpenAI-compatible server (127.0.0.1) serving the rule-based
    roles; every call goes through HTTP the first time and comes from the SQLite cache the second."""
    from embeval.serving.openai_server import create_app
    from embeval.serving.runner import serve_in_thread

    class Counting(RulesLLM):
        n = 0

        def chat(self, messages, json_schema=None, **gen):
            Counting.n += 1
            return super().chat(messages, json_schema, **gen)

    texts = [it.text() for it in small_pool]
    with serve_in_thread(create_app(Counting(id="served-rules"), model_name="rules")) as srv:
        role = {"kind": "llm", "adapter": "openai", "url": f"{srv.url}/v1", "params": {"model": "rules"}}
        cfg = DataAgentConfig(proposer=role, reviewer=role, voters=[], max_rounds=4, probe_size=120,
                              cache=str(tmp_path / "cache.sqlite"))
        first = DataAgent(cfg, voters=[LLMVoter(RulesLLM(), 0)]).induce(texts)
        calls = Counting.n
        again = DataAgent(cfg, voters=[LLMVoter(RulesLLM(), 0)]).induce(texts)
    assert calls == 2 * len(first.rounds) and Counting.n == calls  # second run: all from the cache
    assert [d.name for d in again.dimensions] == [d.name for d in first.dimensions]
    assert {d.name for d in first.dimensions} >= {"counting", "spatial", "affordance"}


def test_rank_agreement_float_noise_is_a_tie():
    """Two models both at 4/9, one summed item by item (0.4444444444444445), are tied: the rank agreement with a
    reference that ties them is perfect, as scipy gives on the exact fractions."""
    from scipy import stats

    from embeval_analysis.a2eval.fidelity import rank_agreement

    summed = 0.0
    for _ in range(8):  # item by item, as a loop sums (Python >= 3.12's sum() compensates and would give 4/9 exactly)
        summed += 1 / 9
    summed /= 2
    assert summed != 4 / 9  # the float noise this is about (0.44444444444444453)
    ref = [0.2, 4 / 9, 4 / 9, 0.9]
    got = rank_agreement(ref, [0.2, 4 / 9, summed, 0.9], n_boot=50)
    assert got.spearman.value == pytest.approx(stats.spearmanr(ref, ref)[0]) == pytest.approx(1.0)
    assert got.kendall.value == pytest.approx(1.0) and got.discordant == []
