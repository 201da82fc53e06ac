"""embeval.config.from_mapping: the one reader of plain-data configs."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from embeval.config import from_mapping
from embeval.errors import ConfigError


@dataclass
class Inner:
    a: int = 1
    b: tuple = (0.0, 0.0)


@dataclass
class Outer:
    name: str
    inner: Inner = field(default_factory=Inner)
    many: list[Inner] = field(default_factory=list)
    maybe: Inner | None = None


def test_nested_and_defaults():
    o = from_mapping(Outer, {"name": "x", "inner": {"a": 3}, "many": [{"a": 4}, {"b": [1, 2]}], "maybe": {"a": 5}}, "spec")
    assert o.inner == Inner(3) and o.many == [Inner(4), Inner(1, [1, 2])] and o.maybe == Inner(5)
    assert from_mapping(Outer, {"name": "y"}, "spec") == Outer("y")


def test_unknown_key_names_it_suggests_and_lists():
    with pytest.raises(ConfigError) as e:
        from_mapping(Outer, {"name": "x", "inner": {"aa": 1}}, "spec")
    assert str(e.value) == "spec.inner: unknown field(s) ['aa'] ('aa' -> did you mean 'a'?); known: ['a', 'b']"


def test_not_a_mapping_and_missing_field():
    with pytest.raises(ConfigError, match="spec must be a mapping, got list"):
        from_mapping(Outer, [1], "spec")
    with pytest.raises(ConfigError, match="spec: .*missing 1 required positional argument: 'name'"):
        from_mapping(Outer, {}, "spec")


def test_used_by_the_config_dataclasses():
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.robot.safety import SafetyLimits
    from embeval.sim.scene import SceneSpec
    from embeval.sim.tasks import TaskSpec

    for cls, bad in ((SafetyLimits, {"max_tcp_sped": 1}), (EpisodeSpec, {"epss": 1}), (TaskSpec, {"verbb": "Pick"}),
                     (SceneSpec, {"objectz": []})):
        with pytest.raises(ConfigError, match="unknown field.*did you mean"):
            cls.from_dict(bad)
