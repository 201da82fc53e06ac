"""The ``act2answer`` evaluator through the runs infrastructure: swap pairs share a shard,
sharded run + resume covers every unit once, outputs aggregate into the category table."""
import pytest

from embeval.act2answer.evaluator import split_unit_item
from embeval.errors import ConfigError


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    from embeval.act2answer.generator import generate_items

    d = tmp_path_factory.mktemp("suite")
    generate_items(d, ["color", "shape"], per_category=2, seed=0)
    return d


def spec_dict(suite, **kw):
    d = {
        "name": "a2a-test", "evaluator": "act2answer", "plugins": ["embeval.act2answer.evaluator"],
        "subjects": [{"id": "hold", "kind": "policy", "adapter": "scripted", "params": {"vector": [0, 0, 0, 0, 0, 0, 1]}}],
        "items": {"source": "file", "path": str(suite / "items.jsonl")},
        "params": {"episode": {"max_steps": 3}, "obs_size": [32, 24], "keep_actions": True},
        "backend": {"progress": False},
    }
    d.update(kw)
    return d


def test_units_pairs_and_sharding(suite):
    from embeval.runs.plan import plan_run
    from embeval.runs.spec import parse_spec
    from embeval.runs.units import select_shard

    plan = plan_run(parse_spec(spec_dict(suite)))
    assert len(plan.units) == 8 and {split_unit_item(u.item)[1] for u in plan.units} == {"original", "swapped"}
    for n in (2, 3):
        where = {}
        for k in range(n):
            for u in select_shard(plan.units, k, n):
                where.setdefault(split_unit_item(u.item)[0], set()).add(k)
        assert all(len(s) == 1 for s in where.values())  # an item's two layouts never split
    with pytest.raises(ConfigError):
        split_unit_item("color-0000")
    with pytest.raises(ConfigError, match="unknown parameter"):
        plan_run(parse_spec(spec_dict(suite, params={"radius": 1})))
    with pytest.raises(ConfigError, match="termination"):
        plan_run(parse_spec(spec_dict(suite, params={"episode": {"termination": "never"}})))


def test_sharded_run_resume_and_table(suite, tmp_path):
    import pandas as pd

    from embeval.act2answer.aggregate import category_rates
    from embeval.runs.export import export_parquet
    from embeval.runs.runner import resume, run
    from embeval.runs.spec import parse_spec

    spec = parse_spec(spec_dict(suite))
    first = run(spec, tmp_path / "r", shard_index=0, num_shards=2)
    assert first.done > 0 and first.failed == 0
    rest = resume(tmp_path / "r")
    assert rest.skipped == first.done and rest.done == 8 - first.done and rest.failed == 0
    df = pd.read_parquet(export_parquet(tmp_path / "r", tmp_path / "r.parquet"))
    assert len(df) == 8
    assert set(df["out.zone"]) == {"out_of_bounds"} and set(df["out.end_reason"]) == {"max_steps"}
    assert set(df["out.termination"]) == {"release_after_lift"}
    recs = [{"item": r["out.item"], "category": r["out.category"], "layout": r["out.layout"], "success": r["out.success"],
             "choice": None} for _, r in df.iterrows()]
    assert category_rates(recs)[-1].n_episodes == 8 and category_rates(recs)[-1].rate == 0.0
    from embeval.act2answer.evaluator import frame_records
    from embeval_cli import main

    assert list(frame_records(df)) == ["hold"] and len(frame_records(df)["hold"]) == 8
    assert main(["act2answer", "report", str(tmp_path / "r.parquet")]) == 0


def test_distorted_observations_seed_each_camera_frame_by_the_episode_rule():
    """Frame n of camera k in an episode with seed s: distort(img, type, level, frame_seed(s, k, n, type, level))
    (embeval.distortion.EpisodeFrames, which the ROS distortion node uses too)."""
    import numpy as np

    from embeval.act2answer.evaluator import _DistortedObservations
    from embeval.action import Observation
    from embeval.distortion import distort, frame_seed
    from embeval.distortion.samples import synthetic_tabletop

    seen = []

    class Recorder:
        id, action_spec = "rec", None

        def reset(self, instruction):
            seen.clear()

        def act(self, obs):
            seen.append(dict(obs.images))

    frames = [{"third_person": synthetic_tabletop(40, 30, seed=i), "wrist": synthetic_tabletop(40, 30, seed=10 + i)}
              for i in range(3)]
    runner = _DistortedObservations(Recorder(), "white_noise", 3, 77)
    for _ in range(2):  # a second episode starts the numbering over
        runner.reset("x")
        for f in frames:
            runner.act(Observation(f, "x", {}, 0.0))
        for n, f in enumerate(frames):
            for k, img in f.items():
                np.testing.assert_array_equal(seen[n][k], distort(img, "white_noise", 3, frame_seed(77, k, n, "white_noise", 3)))
                assert not np.array_equal(seen[n][k], img)
