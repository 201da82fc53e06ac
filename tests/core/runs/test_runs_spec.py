"""Run specs: parsing, the stable hash, and validation before any work starts."""
from __future__ import annotations

import copy

import pytest
import yaml

from embeval.errors import ConfigError, MissingFileError
from embeval.runs.plan import plan_run
from embeval.runs.runner import load_run_spec, prepare_run_dir, run
from embeval.runs.spec import load_spec, parse_spec

BASE = {
    "name": "t",
    "evaluator": "synthetic",
    "subjects": [{"id": "a", "kind": "synthetic"}, {"id": "b", "kind": "synthetic"}],
    "items": {"source": "synthetic", "count": 3},
    "levels": [0, 1],
    "seeds": [0],
    "backend": {"progress": False},
}


def spec_of(**changes):
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def test_hash_ignores_cosmetic_fields_and_key_order():
    h = parse_spec(BASE).hash
    assert parse_spec(spec_of(name="other", description="words", output_dir="x/y",
                              backend={"name": "ray", "num_workers": 7, "progress": True})).hash == h
    reordered = dict(reversed(list(copy.deepcopy(BASE).items())))
    assert parse_spec(reordered).hash == h
    described = spec_of(subjects=[{"id": "a", "kind": "synthetic", "description": "words"}, {"id": "b", "kind": "synthetic"}])
    assert parse_spec(described).hash == h
    assert parse_spec(spec_of(seeds=[1])).hash != h
    assert parse_spec(spec_of(levels=[0, 2])).hash != h
    assert parse_spec(spec_of(params={"work_ms": 1})).hash != h
    assert len(h) == 16 and int(h, 16) >= 0


def test_round_trip_through_run_folder_keeps_hash(tmp_path):
    spec = parse_spec(BASE, base_dir=tmp_path)
    d = prepare_run_dir(spec, tmp_path / "run")
    again = load_run_spec(d)
    assert again.hash == spec.hash and again == spec
    # a different spec into the same folder is refused, naming both hashes
    other = parse_spec(spec_of(seeds=[5]), base_dir=tmp_path)
    with pytest.raises(ConfigError, match=f"{spec.hash}.*{other.hash}"):
        prepare_run_dir(other, d)


@pytest.mark.parametrize("changes, field", [
    ({"evaluator": "nope"}, "spec.evaluator: unknown evaluator 'nope'"),
    ({"evaluater": "synthetic"}, "spec.evaluater: unknown field; did you mean 'evaluator'"),
    ({"subjects": [{"id": "a", "kind": "synthetic"}, {"id": "b", "kind": "vlm", "adapter": "x"}]},
     r"spec.subjects\[1\].kind: evaluator 'synthetic' takes subjects of kind synthetic"),
    ({"subjects": [{"id": "a", "kind": "synthetic"}, {"id": "a", "kind": "synthetic"}]}, r"spec.subjects\[1\].id: duplicate"),
    ({"subjects": [{"kind": "synthetic"}]}, r"spec.subjects\[0\].id: must be a non-empty string"),
    ({"levels": [0, "high"]}, r"spec.levels\[1\]: must be an integer"),
    ({"seeds": [0, 0]}, "spec.seeds: duplicate entry 0"),
    ({"items": {"source": "synthetic"}}, "spec.items.count: is required"),
    ({"items": {"source": "web", "count": 2}}, "spec.items.source: unknown item source 'web'"),
    ({"backend": {"name": "slurm"}}, "spec.backend.name: unknown backend 'slurm'"),
    ({"backend": {"batch_size": 0}}, "spec.backend.batch_size: must lie in 1..10000"),
    ({"params": {"wrk_ms": 1}}, "spec.params.wrk_ms: unknown parameter"),
    ({"plugins": ["no_such_module_xyz"]}, r"spec.plugins\[0\]: cannot import module 'no_such_module_xyz'"),
])
def test_malformed_spec_names_the_field(tmp_path, changes, field):
    with pytest.raises(ConfigError, match=field):
        plan_run(parse_spec(spec_of(**changes), base_dir=tmp_path))


def test_unknown_subject_adapter_names_the_field(tmp_path):
    from embeval.runs.registry import EVALUATORS, Evaluator

    class VLMEval(Evaluator):  # an evaluator that takes registry subjects, as the IQA one will
        def run_unit(self, spec, state, unit, unit_seed):
            return {}

    EVALUATORS.register("_test-vlm", VLMEval)
    try:
        d = spec_of(evaluator="_test-vlm", subjects=[{"id": "ok", "kind": "vlm", "adapter": "scripted"},
                                                     {"id": "bad", "kind": "vlm", "adapter": "no-such-adapter"}])
        with pytest.raises(ConfigError, match=r"spec.subjects\[1\]: .*unknown adapter 'no-such-adapter'"):
            plan_run(parse_spec(d, base_dir=tmp_path))
        d["subjects"][1] = {"id": "w", "kind": "policy", "adapter": "scripted", "path": "weights/model.safetensors"}
        with pytest.raises(MissingFileError, match=r"spec.subjects\[1\].path: file not found: .*weights/model.safetensors"):
            plan_run(parse_spec(d, base_dir=tmp_path))
    finally:
        EVALUATORS.unregister("_test-vlm")


def test_missing_files_fail_before_any_work(tmp_path):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec_of(items={"source": "folder", "path": "imgs"})))
    with pytest.raises(MissingFileError, match="spec.items.path: folder not found: .*imgs"):
        run(spec_file, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing was started
    spec_file.write_text(yaml.safe_dump(spec_of(subjects=["subjects/missing.yaml"])))
    with pytest.raises(MissingFileError, match=r"spec.subjects\[0\]: subject file not found"):
        load_spec(spec_file)
    with pytest.raises(MissingFileError, match="run spec not found"):
        load_spec(tmp_path / "nope.yaml")
    spec_file.write_text("evaluator: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_spec(spec_file)


def test_subject_from_yaml_file_and_items_from_files(tmp_path):
    (tmp_path / "subj").mkdir()
    (tmp_path / "subj" / "model-c.yaml").write_text("kind: synthetic\nparams: {offset: 1.0}\n")
    (tmp_path / "items.jsonl").write_text('{"id": "q1"}\n{"id": "q2"}\n\n{"id": "q3"}\n')
    spec = parse_spec(spec_of(subjects=["subj/model-c.yaml"], items={"source": "file", "path": "items.jsonl", "limit": 2}),
                      base_dir=tmp_path)
    assert spec.subjects[0].id == "model-c" and spec.subjects[0].params == {"offset": 1.0}
    plan = plan_run(spec)
    assert sorted({u.item for u in plan.units}) == ["q1", "q2"]
    assert len(plan.units) == 1 * 2 * 1 * 2 * 1


def test_unreachable_ray_address_fails_fast(tmp_path):
    from embeval.errors import ServerUnavailableError
    from embeval.runs.backends.ray_backend import _check_reachable

    with pytest.raises(ServerUnavailableError, match="backend.address: nothing answers at '127.0.0.1:1'"):
        _check_reachable("127.0.0.1:1")
    _check_reachable("auto")  # resolved by Ray itself


def test_shipped_example_specs_validate():
    from pathlib import Path

    specs = sorted((Path(__file__).resolve().parents[3] / "config" / "runs").glob("*.yaml"))
    assert len(specs) >= 4
    for p in specs:
        spec = load_spec(p)
        if spec.items.source == "folder":  # needs the user's images
            with pytest.raises(MissingFileError, match="spec.items.path: folder not found"):
                plan_run(spec)
        else:
            assert len(plan_run(spec).units) > 0, p


def test_every_shipped_subject_file_can_be_a_run_subject(tmp_path):
    """config/subjects/*.yaml are the files users name in runs and `iqa build --subjects`; their `serve:` block
    (how `embeval serve` exposes them) does not stop a run from reading them."""
    from pathlib import Path

    subjects = sorted((Path(__file__).resolve().parents[3] / "config" / "subjects").glob("*.yaml"))
    assert any("serve" in yaml.safe_load(p.read_text()) for p in subjects)  # the case this test is about
    for p in subjects:
        spec = parse_spec(spec_of(subjects=[str(p)]), base_dir=tmp_path)
        assert spec.subjects[0].id == (yaml.safe_load(p.read_text()).get("id") or p.stem), p
