"""Every built-in evaluator's ``spec.params`` is one typed dataclass (:class:`embeval.runs.registry.EvaluatorParams`),
checked when a run is planned: hostile values are refused with one line naming the parameter, before any unit runs;
good values arrive typed."""
from __future__ import annotations

import pytest

from embeval.errors import ConfigError
from embeval.runs.plan import plan_run
from embeval.runs.registry import EVALUATORS, EvaluatorParams, get_evaluator
from embeval.runs.spec import parse_spec


def _spec(tmp_path, evaluator: str, params: dict, **more):
    d = {"evaluator": evaluator, "items": {"source": "synthetic", "count": 2}, "params": params,
         "backend": {"progress": False}, **more}
    return parse_spec(d, base_dir=tmp_path)


def test_every_built_in_evaluator_declares_its_params_type():
    import embeval.act2answer.evaluator  # noqa: F401 - registers act2answer
    import embeval_analysis.iqa.evaluator  # noqa: F401 - registers iqa

    for name in ("synthetic", "distortion-quality", "policy-decision", "sim-iqa", "act2answer", "iqa"):
        ev = get_evaluator(name)
        assert ev.params_type is not None and issubclass(ev.params_type, EvaluatorParams), name
    assert set(EVALUATORS.names()) >= {"synthetic", "distortion-quality", "policy-decision", "sim-iqa"}


@pytest.mark.parametrize("params, message", [
    ({"fail_items": "item00001"}, "spec.params.fail_items: must be a list of non-empty strings, got 'item00001'; item "
                                  "ids such as [item00001]"),
    ({"work_ms": -1}, "spec.params.work_ms: must lie in 0..3600000, got -1 (milliseconds, at most an hour)"),
    ({"hang_s": float("nan")}, "spec.params.hang_s:"),
    ({"group_by": "shard"}, "spec.params.group_by: must be 'item'"),
    ({"hang_holds_gil": "yes"}, "spec.params.hang_holds_gil: must be true or false, got 'yes'"),
    ({"fail_flag": 3}, "spec.params.fail_flag: must be a non-empty string, got 3; a file path"),
    ({"work": 1}, "spec.params.work: unknown parameter of evaluator 'synthetic'; allowed: work_ms, sleep_ms,"),
])
def test_synthetic_refuses_hostile_params_when_planned(tmp_path, params, message):
    with pytest.raises(ConfigError) as e:
        plan_run(_spec(tmp_path, "synthetic", params))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_synthetic_params_arrive_typed_and_a_substring_is_not_an_item(tmp_path):
    """``fail_items: [item0000]`` fails no unit (a list of ids, not substrings); ``[item00001]`` fails that one."""
    from embeval.runs.runner import run

    ev = get_evaluator("synthetic")
    p = ev.params(_spec(tmp_path, "synthetic", {"fail_items": ["item00001"], "work_ms": 2}))
    assert p.fail_items == ("item00001",) and p.work_ms == 2.0 and isinstance(p.work_ms, float) and p.group_by == "item"
    clean = run(_spec(tmp_path, "synthetic", {"fail_items": ["item0000"]}), tmp_path / "a")
    assert clean.failed == 0 and clean.done == clean.total > 0
    one = run(_spec(tmp_path, "synthetic", {"fail_items": ["item00001"]}), tmp_path / "b")
    assert one.failed == one.total // 2 > 0 and one.done == one.total - one.failed


def test_distortion_quality_takes_no_params(tmp_path):
    with pytest.raises(ConfigError, match=r"^spec.params.metrics: unknown parameter of evaluator 'distortion-quality'; "
                                          r"it takes none: remove it$"):
        plan_run(_spec(tmp_path, "distortion-quality", {"metrics": ["psnr"]}))


@pytest.mark.parametrize("params, message", [
    ({"obs_size": [32, "a"]}, "spec.params.obs_size[1]: must be an integer in 8..4096 pixels, got 'a'"),
    ({"obs_size": 32}, "spec.params.obs_size: [width, height] in pixels"),
    ({"keep_actions": "no"}, "spec.params.keep_actions: must be true or false, got 'no'"),
    ({"layouts": "original"}, "spec.params.layouts: a non-empty list of 'original' / 'swapped'"),
    ({"backend": "gazebo"}, "spec.params.backend: unknown act2answer backend 'gazebo'"),
    ({"backend": ["pybullet"]}, "spec.params.backend: must be a non-empty string, got ['pybullet']"),
    ({"episode": {"max_steps": 0}}, "spec.params.episode: episode spec max_steps"),
])
def test_act2answer_params_are_checked_before_any_episode(params, message):
    from embeval.act2answer.evaluator import Act2AnswerParams

    with pytest.raises(ConfigError) as e:
        Act2AnswerParams.from_params(params, "act2answer")
    assert str(e.value).startswith(message), str(e.value)
    good = Act2AnswerParams.from_params({"obs_size": [32, 24], "layouts": ["swapped"]}, "act2answer")
    assert good.obs_size == (32, 24) and good.layouts == ("swapped",) and good.episode.max_steps == 80


def test_iqa_and_sim_iqa_params(tmp_path):
    from embeval.runs.evaluators.sim_iqa import SimIQAParams
    from embeval_analysis.iqa.evaluator import IQAParams

    with pytest.raises(ConfigError, match=r"^spec.params.database: the database folder .* is required$"):
        IQAParams.from_params({"cameras": ["wrist"]}, "iqa")
    with pytest.raises(ConfigError, match=r"^spec.params.cameras: must be a non-empty list of non-empty strings, "
                                          r"got 'wrist'; image keys such as"):
        IQAParams.from_params({"database": "db", "cameras": "wrist"}, "iqa")
    assert IQAParams.from_params({"database": "db"}, "iqa").cameras == ("third_person", "wrist")
    with pytest.raises(ConfigError, match=r"^spec.params.keep_actions: must be true or false, got 'yes'$"):
        SimIQAParams.from_params({"keep_actions": "yes"}, "sim-iqa")
    assert SimIQAParams.from_params(None, "sim-iqa") == SimIQAParams(keep_actions=False)
